package render_test

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/trainyard/trainyard/pkg/render"
)

// TestRenderRunPolicy: render shows the TrainJob's effective deadline and TTL, each
// with where it comes from — the runtime's runPolicy unless the TrainJob sets its own
// (KEP-2899, docs/compatibility.md#ttl-and-run-policy) — and nothing for a TrainJob
// that has neither.
func TestRenderRunPolicy(t *testing.T) {
	runtime := strings.Replace(optimizationRuntime, "spec:\n  mlPolicy:", "spec:\n  runPolicy: {activeDeadlineSeconds: 3600, ttlSecondsAfterFinished: 600}\n  mlPolicy:", 1)
	plain := optimizationRuntime
	trainJob := func(name, extra string) string {
		return "---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: " + name + "}\nspec:\n  runtimeRef: {name: torch, kind: TrainingRuntime}\n" + extra
	}
	for _, tc := range []struct {
		name, runtime, trainJob, want string
	}{
		{"the runtime's", runtime, trainJob("a", ""), "# RunPolicy: activeDeadlineSeconds=3600 (runtime), ttlSecondsAfterFinished=600 (runtime)\n"},
		{"the TrainJob's TTL overrides", runtime, trainJob("a", "  ttlSecondsAfterFinished: 5\n"), "# RunPolicy: activeDeadlineSeconds=3600 (runtime), ttlSecondsAfterFinished=5 (TrainJob)\n"},
		{"the TrainJob's only", plain, trainJob("a", "  activeDeadlineSeconds: 60\n"), "# RunPolicy: activeDeadlineSeconds=60 (TrainJob)\n"},
		{"none", plain, trainJob("a", ""), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			in, err := render.Load([]render.Source{{Name: "in.yaml", Data: []byte(tc.runtime + tc.trainJob)}}, "team-a")
			if err != nil {
				t.Fatal(err)
			}
			results, err := render.Render(ctx, in, render.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := render.WriteYAML(&buf, results); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			got := ""
			for _, line := range strings.SplitAfter(out, "\n") {
				if strings.HasPrefix(line, "# RunPolicy: ") {
					got += line
				}
			}
			if got != tc.want {
				t.Errorf("run policy lines = %q, want %q; output:\n%s", got, tc.want, out)
			}
		})
	}
}
