package trial_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

func job() *trainer.OptimizationJob {
	return &trainer.OptimizationJob{
		ObjectMeta: metav1.ObjectMeta{Name: "digits", Namespace: "team-a", UID: types.UID("job-uid")},
		Spec: trainer.OptimizationJobSpec{TrainJobTemplate: trainer.TrainJobTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "x"}},
			Spec: trainer.TrainJobSpec{
				RuntimeRef: trainer.RuntimeRef{Name: "torch-distributed"},
				Trainer: &trainer.Trainer{Env: []corev1.EnvVar{
					{Name: "EPOCHS", Value: "3"},
					{Name: "KUBEFLOW_TRAINER_OPT_LR", Value: "template's"},
				}},
			},
		}},
	}
}

// TestName: deterministic, a valid TrainJob name, and distinct for long names that
// share their first 63 characters.
func TestName(t *testing.T) {
	if got := trial.Name("digits", 7); got != "digits-7" {
		t.Errorf("Name(digits, 7) = %q, want digits-7", got)
	}
	long := strings.Repeat("a", 70)
	a, b := trial.Name(long+"x", 12), trial.Name(long+"y", 12)
	for _, n := range []string{a, b} {
		if errs := validation.IsDNS1035Label(n); len(errs) > 0 {
			t.Errorf("Name = %q: not a TrainJob name: %v", n, errs)
		}
	}
	if a == b {
		t.Errorf("two long names gave the same trial name %q", a)
	}
	if trial.Name(long+"x", 12) != a {
		t.Error("Name is not deterministic")
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"learning_rate": "KUBEFLOW_TRAINER_OPT_LEARNING_RATE",
		"hidden-size":   "KUBEFLOW_TRAINER_OPT_HIDDEN_SIZE",
		"lr":            "KUBEFLOW_TRAINER_OPT_LR",
		"beta.1":        "KUBEFLOW_TRAINER_OPT_BETA_1",
	} {
		if got := trial.EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNewAndRead: a trial carries the template, its owner, its labels and annotation
// and the parameters' variables (a template variable of the same name replaced), the
// template stays as it was, and Read gives back index and assignment.
func TestNewAndRead(t *testing.T) {
	j := job()
	before := j.DeepCopy()
	assignment := []trainer.ParameterAssignment{{Name: "lr", Value: "0.001"}, {Name: "hidden_size", Value: "64"}}
	tj, err := trial.New(j, 3, assignment)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, j); diff != "" {
		t.Errorf("New changed the OptimizationJob:\n%s", diff)
	}
	if tj.Name != "digits-3" || tj.Namespace != "team-a" {
		t.Errorf("trial %s/%s, want team-a/digits-3", tj.Namespace, tj.Name)
	}
	if !trial.IsTrialOf(tj, j) {
		t.Errorf("owner references %+v: not controlled by the OptimizationJob", tj.OwnerReferences)
	}
	wantEnv := []corev1.EnvVar{
		{Name: "EPOCHS", Value: "3"},
		{Name: "KUBEFLOW_TRAINER_OPT_LR", Value: "0.001"},
		{Name: "KUBEFLOW_TRAINER_OPT_HIDDEN_SIZE", Value: "64"},
	}
	if diff := cmp.Diff(wantEnv, tj.Spec.Trainer.Env); diff != "" {
		t.Errorf("spec.trainer.env (-want +got):\n%s", diff)
	}
	if tj.Labels["team"] != "a" || tj.Annotations["note"] != "x" || tj.Labels[trial.LabelOptimizationJob] != "digits" {
		t.Errorf("labels %v annotations %v: the template's and the trial's expected", tj.Labels, tj.Annotations)
	}
	rec, err := trial.Read(tj)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(trial.Record{Index: 3, Parameters: assignment}, rec); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}

	other := job()
	other.UID = "another"
	if trial.IsTrialOf(tj, other) {
		t.Error("a trial counts as another OptimizationJob's (same name, other uid)")
	}
}

func TestNewRefusesCollidingVariables(t *testing.T) {
	_, err := trial.New(job(), 0, []trainer.ParameterAssignment{{Name: "hidden-size", Value: "1"}, {Name: "hidden_size", Value: "2"}})
	if err == nil || !strings.Contains(err.Error(), "KUBEFLOW_TRAINER_OPT_HIDDEN_SIZE") {
		t.Errorf("error %v, want one naming the shared variable", err)
	}
}

func TestReadRefusesWhatIsNotATrial(t *testing.T) {
	tj, err := trial.New(job(), 1, []trainer.ParameterAssignment{{Name: "lr", Value: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	noIndex := tj.DeepCopy()
	delete(noIndex.Labels, trial.LabelIndex)
	badRecord := tj.DeepCopy()
	badRecord.Annotations[trial.AnnotationParameters] = "{"
	for name, tj := range map[string]*trainer.TrainJob{"no index": noIndex, "bad record": badRecord} {
		if _, err := trial.Read(tj); err == nil {
			t.Errorf("%s: Read accepted it", name)
		}
	}
}

// TestNewCopiesNoFinalizer (issue 41, finding 8): a trial never carries the template's
// finalizers, which would hold it back from the garbage collector.
func TestNewCopiesNoFinalizer(t *testing.T) {
	job := &trainer.OptimizationJob{ObjectMeta: metav1.ObjectMeta{Name: "digits", Namespace: "team-a", UID: "uid"}}
	job.Spec.TrainJobTemplate.Finalizers = []string{"example.com/cleanup"}
	tj, err := trial.New(job, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tj.Finalizers) != 0 {
		t.Errorf("trial finalizers %v; want none", tj.Finalizers)
	}
}
