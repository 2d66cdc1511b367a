package admission

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// Every upstream runtime and example TrainJob (shared/upstream, read in place; skipped
// when absent) is admitted: what upstream's webhooks accept, Trainyard's accept too.
// Warnings are allowed and logged. Each runtime is also in the caches, as a
// ClusterTrainingRuntime and as a TrainingRuntime of namespace default, for the
// TrainJobs that reference it.
func TestUpstreamObjectsAdmitted(t *testing.T) {
	var cached []runtime.Object
	for _, doc := range utiltesting.UpstreamDocuments(t, trainer.ClusterTrainingRuntimeKind, trainer.TrainingRuntimeKind) {
		var obj trainer.ClusterTrainingRuntime
		if err := yaml.UnmarshalStrict(doc.JSON, &obj); err != nil {
			t.Fatalf("%s: %v", doc.Name(), err)
		}
		// The API server applies the CRD's defaults before admission; the embedded
		// JobSet's replicatedJobs[].replicas defaults to 1.
		for i := range obj.Spec.Template.Spec.ReplicatedJobs {
			if obj.Spec.Template.Spec.ReplicatedJobs[i].Replicas == 0 {
				obj.Spec.Template.Spec.ReplicatedJobs[i].Replicas = 1
			}
		}
		t.Run(doc.Name(), func(t *testing.T) {
			deps := fixture{}.deps(t)
			var warnings []string
			var errs error
			if doc.Kind == trainer.ClusterTrainingRuntimeKind {
				w, e := deps.ValidateClusterTrainingRuntime(nil, &obj)
				warnings, errs = w, e.ToAggregate()
			} else {
				obj.Namespace = "default"
				w, e := deps.ValidateRuntime(trainer.TrainingRuntimeKind, &obj.ObjectMeta, nil, &obj.Spec)
				warnings, errs = w, e.ToAggregate()
			}
			if errs != nil {
				t.Errorf("denied: %v", errs)
			}
			for _, w := range warnings {
				t.Logf("warning: %s", w)
			}
		})
		tr := &trainer.TrainingRuntime{ObjectMeta: *obj.ObjectMeta.DeepCopy(), Spec: *obj.Spec.DeepCopy()}
		tr.Namespace = "default"
		cached = append(cached, obj.DeepCopy(), tr)
	}

	deps := fixture{runtimes: cached}.deps(t)
	for _, doc := range utiltesting.UpstreamDocuments(t, trainer.TrainJobKind) {
		t.Run(doc.Name(), func(t *testing.T) {
			tj := &trainer.TrainJob{}
			if err := yaml.UnmarshalStrict(doc.JSON, tj); err != nil {
				t.Fatalf("%v", err)
			}
			if tj.Namespace == "" {
				tj.Namespace = "default"
			}
			ops := DefaultRuntimePatchTimes(nil, tj, testNow)
			warnings, errs := deps.ValidateTrainJob(nil, tj)
			if len(errs) != 0 {
				t.Errorf("denied: %v", errs.ToAggregate())
			}
			for _, w := range warnings {
				t.Logf("warning: %s", w)
			}
			t.Logf("defaulting: %d patch operations", len(ops))
		})
	}
}
