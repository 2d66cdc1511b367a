package admission

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

func TestValidateRuntime(t *testing.T) {
	bad := func() *trainer.TrainingRuntimeSpec {
		spec := skeleton(torchPolicy)
		rjob(spec, "node").Replicas = 3
		return spec
	}
	good := skeleton(torchPolicy)
	meta := func(labels map[string]string) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Namespace: "default", Name: "rt", Labels: labels}
	}
	t.Run("TrainingRuntime update is validated (upstream never does)", func(t *testing.T) {
		_, errs := fixture{}.deps(t).ValidateRuntime(trainer.TrainingRuntimeKind, meta(nil), good, bad())
		if diff := cmp.Diff([]string{"FieldValueInvalid: spec.template.spec.replicatedJobs[name=node].replicas"}, fields(errs)); diff != "" {
			t.Errorf("errors (-want +got):\n%s", diff)
		}
	})
	t.Run("an update that leaves spec unchanged is not re-validated", func(t *testing.T) {
		if _, errs := (fixture{}).deps(t).ValidateRuntime(trainer.TrainingRuntimeKind, meta(nil), bad(), bad()); len(errs) != 0 {
			t.Errorf("errors = %v, want none", errs)
		}
	})
	t.Run("a deadline or TTL in the JobSet or Job templates (KEP-2899)", func(t *testing.T) {
		spec := skeleton(torchPolicy)
		spec.Template.Spec.TTLSecondsAfterFinished = ptr.To[int32](60)
		rjob(spec, "node").Template.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
		rjob(spec, "node").Template.Spec.TTLSecondsAfterFinished = ptr.To[int32](0)
		_, errs := fixture{}.deps(t).ValidateRuntime(trainer.TrainingRuntimeKind, meta(nil), nil, spec)
		want := []string{
			"FieldValueForbidden: spec.template.spec.replicatedJobs[name=node].template.spec.activeDeadlineSeconds",
			"FieldValueForbidden: spec.template.spec.replicatedJobs[name=node].template.spec.ttlSecondsAfterFinished",
			"FieldValueForbidden: spec.template.spec.ttlSecondsAfterFinished",
		}
		if diff := cmp.Diff(want, fields(errs)); diff != "" {
			t.Errorf("errors (-want +got):\n%s", diff)
		}
		for _, e := range errs {
			if !strings.Contains(e.Detail, "set spec.runPolicy.") {
				t.Errorf("%s: %q does not name the fix (spec.runPolicy)", e.Field, e.Detail)
			}
		}
	})
	t.Run("webhook-validation disabled", func(t *testing.T) {
		if _, errs := (fixture{}).deps(t).ValidateRuntime(trainer.TrainingRuntimeKind,
			meta(map[string]string{LabelWebhookValidation: "disabled"}), nil, bad()); len(errs) != 0 {
			t.Errorf("errors = %v, want none", errs)
		}
	})

	// TrainJobs of the runtime: one started (it has its JobSet), one waiting whose
	// patch names a replicatedJob the runtime lacks, one finished.
	started := utiltesting.MakeTrainJob("default", "started").Obj()
	started.Spec.RuntimeRef = trainer.RuntimeRef{Name: "rt", Kind: ptr.To(trainer.TrainingRuntimeKind)}
	waiting := started.DeepCopy()
	waiting.Name, waiting.UID = "waiting", "waiting-uid"
	waiting.Spec.RuntimePatches = []trainer.RuntimePatch{podPatch("example.io/x", "worker", trainer.PodSpecPatch{})}
	finished := waiting.DeepCopy()
	finished.Name, finished.UID = "finished", "finished-uid"
	finished.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue}}
	f := fixture{
		trainJobs: []*trainer.TrainJob{started, waiting, finished},
		jobSets:   []*jobsetv1alpha2.JobSet{utiltesting.MakeJobSet("default", "started").ControlledBy(started).Obj()},
	}
	edited := skeleton(torchPolicy)
	rjob(edited, "node").Template.Spec.Template.Spec.Containers[0].Image = "new"
	t.Run("edit: started TrainJobs keep their snapshot, misfit patches", func(t *testing.T) {
		warnings, errs := f.deps(t).ValidateRuntime(trainer.TrainingRuntimeKind, meta(nil), good, edited)
		if len(errs) != 0 {
			t.Fatalf("errors = %v", errs)
		}
		want := []string{
			"1 started TrainJob(s) keep the runtime they were built from and will not see this edit (runtime snapshot): default/started",
			"the runtimePatches of 1 TrainJob(s) name a replicatedJob or container this runtime lacks; they get JobSetReady=False until fixed: default/waiting",
		}
		if diff := cmp.Diff(want, warnings); diff != "" {
			t.Errorf("warnings (-want +got):\n%s", diff)
		}
	})
	t.Run("create: only the misfit patches", func(t *testing.T) {
		warnings, _ := f.deps(t).ValidateRuntime(trainer.TrainingRuntimeKind, meta(nil), nil, edited)
		if len(warnings) != 1 || !strings.Contains(warnings[0], "default/waiting") {
			t.Errorf("warnings = %q, want the misfit patch of default/waiting", warnings)
		}
	})
}

// The rules and the deprecation warning of a CREATE are proven by the shared rule
// table (TestRuleTable); these are UPDATEs.
func TestValidateClusterTrainingRuntime(t *testing.T) {
	deprecated := map[string]string{trainer.LabelSupport: trainer.SupportDeprecated}
	t.Run("deprecated: not on update (upstream)", func(t *testing.T) {
		old := ctr("rt", skeleton(torchPolicy), deprecated)
		obj := ctr("rt", skeleton(jaxPolicy), deprecated)
		if warnings, errs := (fixture{}).deps(t).ValidateClusterTrainingRuntime(old, obj); len(errs)+len(warnings) != 0 {
			t.Errorf("warnings, errors = %q, %v; want none", warnings, errs)
		}
	})
	t.Run("update validated", func(t *testing.T) {
		spec := skeleton(torchPolicy)
		rjob(spec, "model-initializer").Replicas = 0
		_, errs := fixture{}.deps(t).ValidateClusterTrainingRuntime(ctr("rt", skeleton(torchPolicy), nil), ctr("rt", spec, nil))
		if diff := cmp.Diff([]string{"FieldValueInvalid: spec.template.spec.replicatedJobs[name=model-initializer].replicas"}, fields(errs)); diff != "" {
			t.Errorf("errors (-want +got):\n%s", diff)
		}
	})
}
