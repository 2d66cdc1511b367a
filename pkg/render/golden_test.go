package render_test

import (
	"bytes"
	"context"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/trainyard/trainyard/pkg/render"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from the current output")

const goldenDir = "testdata/golden"

// renderCase renders c with every API served: the YAML on success, the error text
// otherwise.
func renderCase(t *testing.T, c upstreamCase) (out []byte, errText string) {
	t.Helper()
	in, err := render.Load(c.Sources, "default")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	results, err := render.Render(context.Background(), in, render.Options{})
	if err != nil {
		return nil, err.Error()
	}
	var buf bytes.Buffer
	if err := render.WriteYAML(&buf, results); err != nil {
		t.Fatalf("WriteYAML: %v", err)
	}
	return buf.Bytes(), ""
}

// TestGolden renders every upstream runtime with its example TrainJobs (upstreamCases)
// and compares the output with testdata/golden/<runtime>/<case>.yaml, or, for a TrainJob
// the controller would refuse (a runtime whose ML policy Trainyard does not implement
// yet), the error with <case>.err. `go test ./pkg/render -update` rewrites them and
// removes goldens no case produces; review the diff.
func TestGolden(t *testing.T) {
	cases := upstreamCases(t)
	want := map[string]bool{}
	for _, c := range cases {
		t.Run(c.ID(), func(t *testing.T) {
			out, errText := renderCase(t, c)
			base := filepath.Join(goldenDir, filepath.FromSlash(c.ID()))
			file, other := base+".yaml", base+".err"
			if errText != "" {
				file, other, out = other, file, []byte(errText+"\n")
			}
			want[file] = true
			if *update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			golden, err := os.ReadFile(file)
			if os.IsNotExist(err) {
				if _, err := os.Stat(other); err == nil {
					t.Fatalf("golden %s exists but the case now produces %s:\n%s\nrun go test ./pkg/render -update and review the diff", other, file, out)
				}
				t.Fatalf("no golden file %s: run go test ./pkg/render -update and review the diff", file)
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(golden), string(out)); diff != "" {
				t.Errorf("%s differs from the output (-golden +got); if the change is intended, run go test ./pkg/render -update:\n%s", file, diff)
			}
		})
	}

	// Goldens no case produces any more (a removed runtime, or an .err whose runtime now
	// renders) are stale.
	err := filepath.WalkDir(goldenDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || want[path] {
			return err
		}
		if *update {
			return os.Remove(path)
		}
		t.Errorf("stale golden file %s: no case produces it; run go test ./pkg/render -update", path)
		return nil
	})
	if err != nil && !(os.IsNotExist(err) && *update) {
		t.Fatal(err)
	}
}

// TestGoldenCoversEveryRuntime guards the case list: every runtime name appears.
func TestGoldenCoversEveryRuntime(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range upstreamCases(t) {
		seen[c.Runtime] = true
	}
	for _, name := range []string{
		"torch-distributed", "deepspeed-distributed", "mlx-distributed", "jax-distributed", "xgboost-distributed",
		"torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b", "torch-distributed-with-cache",
		"torch-distributed-volcano", "torch-with-dataset-init", "flux-distributed",
	} {
		if !seen[name] {
			t.Errorf("no golden case for runtime %s; cases cover %v", name, strings.Join(keys(seen), ", "))
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
