package main

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestCheckTree(t *testing.T) {
	docs := fstest.MapFS{
		"docs/compatibility.md":        {Data: []byte("# Compatibility\n\n## Env vars\n\n### MPI (`mlPolicy.mpi`)\n\n```\n# not a heading\n```\n\n## Env vars\n")},
		"docs/design/architecture.md":  {Data: []byte("# Architecture\n\n## Layers\n\nSee [the rules](../compatibility.md#env-vars) and [below](#layers).\n")},
		"docs/design/broken.md":        {Data: []byte("[gone](../missing.md) [no heading](architecture.md#nope) [code](../../pkg/x.go) [web](https://example.com/a.md#b)\n")},
		"pkg/a/a.go":                   {Data: []byte("// docs/compatibility.md#env-vars, docs/compatibility.md#env-vars-1 and docs/compatibility.md#mpi-mlpolicympi.\npackage a\n")},
		"pkg/b/b.go":                   {Data: []byte("// docs/compatibility.md#not-a-heading and docs/nope.md.\npackage b\n")},
		"pkg/c/c.go":                   {Data: []byte("// As trainer" + "-compat §3.4 says (architecture " + "invariant 5).\npackage c\n")},
		"pkg/d/d.go":                   {Data: []byte("// sigs.k8s.io/x/docs/api.md#resources is not ours.\npackage d\n")},
		"pkg/e/e.go":                   {Data: []byte("// The gate (\u00a7" + "2.5) of another document.\npackage e\n")},
		"_output/x.go":                 {Data: []byte("// docs/nope.md\n")},
		"hack/citations/fixture.go":    {Data: []byte("// docs/nope.md\n")},
		"charts/trainyard/values.yaml": {Data: []byte("# docs/compatibility.md#layers is in another document\n")},
	}
	got, err := checkTree(docs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"charts/trainyard/values.yaml:1: docs/compatibility.md#layers: no such heading",
		"docs/design/broken.md:1: docs/missing.md: no such document",
		"docs/design/broken.md:1: docs/design/architecture.md#nope: no such heading",
		"pkg/b/b.go:1: docs/compatibility.md#not-a-heading: no such heading",
		"pkg/b/b.go:1: docs/nope.md: no such document",
		`pkg/c/c.go:1: "trainer-` + `compat" cites a document outside the repository; cite docs/compatibility.md or docs/design/architecture.md#<section>`,
		`pkg/c/c.go:1: "invariant` + ` 5" cites a document outside the repository; cite docs/compatibility.md or docs/design/architecture.md#<section>`,
		"pkg/c/c.go:1: \"\u00a7" + "3\" cites a document outside the repository; cite docs/compatibility.md or docs/design/architecture.md#<section>",
		"pkg/e/e.go:1: \"\u00a7" + "2\" cites a document outside the repository; cite docs/compatibility.md or docs/design/architecture.md#<section>",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("checkTree() (-want +got):\n%s", diff)
	}
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Env vars":             "env-vars",
		"MPI (`mlPolicy.mpi`)": "mpi-mlpolicympi",
		"Training progress (KEP-2779, `trainerStatus`)":   "training-progress-kep-2779-trainerstatus",
		"Bad input becomes a condition, not a retry loop": "bad-input-becomes-a-condition-not-a-retry-loop",
		"snake_case stays": "snake_case-stays",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
	if strings.Contains(anchor("§2.1 Runtime"), "§") {
		t.Error("anchor keeps §")
	}
}
