// Package testing holds helpers shared by Trainyard's tests: access to the upstream
// Kubeflow Trainer runtimes and examples used as real input.
package testing

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// UpstreamDirEnv overrides where the upstream runtimes and examples are read from.
const UpstreamDirEnv = "TRAINYARD_UPSTREAM_DIR"

// UpstreamDir returns the absolute path of shared/upstream: upstream Kubeflow Trainer's
// runtimes and examples, kept beside the repository (never copied into it). It looks at
// $TRAINYARD_UPSTREAM_DIR, then for shared/upstream in the working directory and each
// parent. When none exists the test is skipped with a message saying how to provide it.
func UpstreamDir(t testing.TB) string {
	t.Helper()
	dir, why := LookupUpstreamDir(t)
	if dir == "" {
		t.Skip(why)
	}
	return dir
}

// LookupUpstreamDir is UpstreamDir without the skip: it returns "" and a message saying
// why and how to provide the folder when there is none, for tests that only draw extra
// inputs from it (fuzz seeds). A $TRAINYARD_UPSTREAM_DIR that does not exist fails the
// test.
func LookupUpstreamDir(t testing.TB) (dir, why string) {
	t.Helper()
	if dir := os.Getenv(UpstreamDirEnv); dir != "" {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("%s=%q: %v", UpstreamDirEnv, dir, err)
		}
		return dir, ""
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		candidate := filepath.Join(dir, "shared", "upstream")
		if st, err := os.Stat(candidate); err == nil && st.IsDir() {
			return candidate, ""
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", "upstream Kubeflow Trainer runtimes and examples not found: no shared/upstream above " + wd +
		"; check out shared/ beside the repository or set " + UpstreamDirEnv
}

// UpstreamDocument is one YAML document from a file under UpstreamDir.
type UpstreamDocument struct {
	// File is the path relative to UpstreamDir, e.g. "runtimes/torch_distributed.yaml".
	File string
	// Index is the document's position in its file, from 0.
	Index int
	// Kind is the document's kind, e.g. "ClusterTrainingRuntime".
	Kind string
	// JSON is the document converted to JSON.
	JSON []byte
}

// Name identifies the document in test output, e.g. "examples/yaml/05-multi-step.yaml#1".
func (d UpstreamDocument) Name() string {
	return d.File + "#" + strconv.Itoa(d.Index)
}

// UpstreamDocuments returns every YAML document under UpstreamDir whose kind is one of
// kinds (all kinds when none is given), sorted by file and index. Helm templates
// (runtimes/helm-chart-files) are rendered minimally first: lines holding only a
// template action are dropped and inline actions become the string "helm-rendered".
// It fails the test on unreadable files or malformed YAML and skips it when the
// upstream folder is absent.
func UpstreamDocuments(t testing.TB, kinds ...string) []UpstreamDocument {
	t.Helper()
	root := UpstreamDir(t)
	want := map[string]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	var docs []UpstreamDocument
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(raw, []byte("{{")) {
			raw = renderHelmMinimally(raw)
		}
		rel, _ := filepath.Rel(root, path)
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for i := 0; ; i++ {
			doc, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			js, err := yaml.YAMLToJSON(doc)
			if err != nil {
				t.Fatalf("%s#%d: %v", rel, i, err)
			}
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(js, &meta); err != nil || meta.Kind == "" {
				continue // comments-only document
			}
			if len(want) == 0 || want[meta.Kind] {
				docs = append(docs, UpstreamDocument{File: rel, Index: i, Kind: meta.Kind, JSON: js})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s: %v", root, err)
	}
	sort.SliceStable(docs, func(i, j int) bool {
		if docs[i].File != docs[j].File {
			return docs[i].File < docs[j].File
		}
		return docs[i].Index < docs[j].Index
	})
	return docs
}

var (
	helmDirectiveLine = regexp.MustCompile(`(?m)^\s*\{\{.*\}\}\s*\n`)
	helmInlineAction  = regexp.MustCompile(`\{\{[^}]*\}\}`)
)

func renderHelmMinimally(raw []byte) []byte {
	raw = helmDirectiveLine.ReplaceAll(raw, nil)
	return helmInlineAction.ReplaceAll(raw, []byte(`"helm-rendered"`))
}
