package render_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/search"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
	"github.com/trainyard/trainyard/pkg/render"
)

const optimizationRuntime = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: torch}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                containers: [{name: node, image: torch:1}]
`

const optimizationJob = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: OptimizationJob
metadata: {name: digits}
spec:
  objectives: [{metric: loss}]
  searchAlgorithm: {random: {seed: 7}}
  numTrials: 8
  parallelTrials: 2
  parameters:
  - {name: lr, searchSpace: {logUniform: {min: "0.0001", max: "0.1"}}}
  - {name: hidden_size, searchSpace: {categorical: {choices: ["32", "64"]}}}
  trainJobTemplate:
    spec:
      runtimeRef: {name: torch, kind: TrainingRuntime, apiGroup: trainer.kubeflow.org}
`

// TestRenderOptimizationJob (issue 26): render turns an OptimizationJob into the
// trials the controller creates first (parallelTrials of them), each rendered to its
// JobSet with the parameters in the trainer's environment, exactly as the search
// assigns them for a seeded random search.
func TestRenderOptimizationJob(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	in, err := render.Load([]render.Source{{Name: "runtime.yaml", Data: []byte(optimizationRuntime)}, {Name: "search.yaml", Data: []byte(optimizationJob)}}, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	results, err := render.Render(ctx, in, render.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d TrainJobs rendered, want the 2 trials run first (parallelTrials)", len(results))
	}
	job := &trainer.OptimizationJob{}
	if err := yaml.UnmarshalStrict([]byte(optimizationJob), job); err != nil {
		t.Fatal(err)
	}
	srch, err := search.New(&job.Spec, 0) // the spec's seed, 7
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if r.TrainJob.Name != trial.Name("digits", i) || !strings.Contains(r.Origin, "search.yaml (OptimizationJob digits, trial") {
			t.Errorf("result %d: TrainJob %s from %q", i, r.TrainJob.Name, r.Origin)
		}
		env := map[string]string{}
		for _, c := range r.Desired.JobSet.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
		}
		rec, err := trial.Read(r.TrainJob)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := srch.Assignment(i); !slices.Equal(rec.Parameters, want) {
			t.Errorf("trial %d's parameters %v, want the search's %v", i, rec.Parameters, want)
		}
		for _, p := range rec.Parameters {
			if got := env[trial.EnvName(p.Name)]; got != p.Value {
				t.Errorf("trial %d: %s = %q in the JobSet's trainer, want %q", i, trial.EnvName(p.Name), got, p.Value)
			}
		}
	}
}
