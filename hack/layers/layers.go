package main

import (
	"fmt"
	"sort"
	"strings"
)

// layers are the main module's packages, bottom up (docs/design/architecture.md#layers).
// A package imports packages of its own layer and of the layers below it, never of a
// layer above. Tests are exempt: a stage's test may build its input with a test kit that
// sits above the stages. A pattern names one package, or a package and everything under
// it when it ends in "/..."; the most specific pattern wins (layerOf).
var layers = []layer{
	{"api", []string{"pkg/apis/...", "pkg/clientset/...", "pkg/kubeclient", "pkg/version"}},
	{"foundation", []string{"pkg/httpserver", "pkg/metrics/...", "pkg/trainjob", "pkg/objectkeys", "pkg/informers/namespaces", "pkg/progress/wire", "pkg/optimization/search", "pkg/optimization/trial", "pkg/lease", "pkg/util/..."}},
	{"caches", []string{"pkg/informers"}},
	{"model and engine", []string{"pkg/stages/plan", "pkg/engine"}},
	{"stage kit", []string{"pkg/stages/statuswriter", "pkg/stages/step"}},
	{"stages", []string{"pkg/stages/..."}},
	{"stage table", []string{"pkg/stages"}},
	{"servers and tools", []string{"pkg/admission", "pkg/progress", "pkg/render", "pkg/certs", "pkg/optimization/controller"}},
	{"test kits", []string{"pkg/stages/plan/plantest", "pkg/stages/gang/gangtest", "pkg/admission/admissiontest", "pkg/httpserver/slowclient"}},
	{"commands", []string{"cmd/...", "hack/..."}},
}

// layer is a named set of package patterns, relative to the module path.
type layer struct {
	name     string
	patterns []string
}

// pkg is one package of the module and what it imports (tests excluded).
type pkg struct {
	ImportPath string
	Imports    []string
}

// check returns one message per import of a package of module from a higher layer,
// and per package in no layer, sorted. Imports from outside module are not checked.
func check(module string, ls []layer, pkgs []pkg) []string {
	var problems []string
	for _, p := range pkgs {
		rel, ok := relative(module, p.ImportPath)
		if !ok {
			continue
		}
		from := layerOf(ls, rel)
		if from < 0 {
			problems = append(problems, fmt.Sprintf("%s is in no layer: add it to the layers in hack/layers and docs/design/architecture.md#layers", rel))
			continue
		}
		for _, imp := range p.Imports {
			target, ok := relative(module, imp)
			if !ok {
				continue
			}
			if to := layerOf(ls, target); to > from {
				problems = append(problems, fmt.Sprintf("%s (layer %q) imports %s (layer %q, above it)", rel, ls[from].name, target, ls[to].name))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// relative returns path relative to module, and whether it is in module.
func relative(module, path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// layerOf returns the index of the layer whose patterns match rel most specifically, or
// -1 when none does: a pattern naming rel itself before any "/..." pattern, and a longer
// "/..." pattern before a shorter one. So "pkg/stages/plan" sits below the stages that
// "pkg/stages/..." places, and a new stage package needs no entry.
func layerOf(ls []layer, rel string) int {
	best, bestRank := -1, -1
	for i, l := range ls {
		for _, pattern := range l.patterns {
			if !matches(pattern, rel) {
				continue
			}
			rank := len(pattern)
			if pattern == rel {
				rank = 1 << 30
			}
			if rank > bestRank {
				best, bestRank = i, rank
			}
		}
	}
	return best
}

func matches(pattern, rel string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == prefix || strings.HasPrefix(rel, prefix+"/")
	}
	return rel == pattern
}
