package trainjob

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/pkg/admission/admissiontest"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// TestAdmissionRules sends every case of the admission rule table (package
// admissiontest, which package admission's unit tests run too) as a user does: `kubectl
// apply -f -` against the local control plane, whose API server calls the controller's
// webhooks over 127.0.0.1. A bad object is refused — kubectl exits non-zero and its
// message names each violated field — by a server-side dry run and by the apply; the
// warnings of an admitted (or refused) object are the "Warning:" lines kubectl prints.
//
// The rules read runtimes, PriorityClasses and ResourceClaims from the controller's
// caches, which see a new object a moment after kubectl created it: each case's dry run
// is repeated until it answers as the table says (at most 30 s), then the apply must
// answer so at once.
func TestAdmissionRules(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	k := newKubectl(t, e.c)
	applied := map[string]bool{}
	for _, c := range admissiontest.Cases(e.ns) {
		t.Run(c.Name, func(t *testing.T) {
			for _, obj := range c.Existing {
				if key := objectKey(obj); !applied[key] {
					k.ensure(t, obj)
					applied[key] = true
				}
			}
			if c.Object.GetNamespace() == "" {
				k.deleteOnCleanup(t, c.Object)
			}
			cluster.Eventually(t, 30*time.Second, "the dry run answered as the table says", func(context.Context) (bool, string) {
				problems := answeredAs(c, k.apply(t, c.Object, "--dry-run=server"))
				return len(problems) == 0, strings.Join(problems, "\n")
			})
			r := k.apply(t, c.Object)
			t.Logf("kubectl apply: exit %d, stderr: %s", r.exitCode, r.stderr)
			for _, problem := range answeredAs(c, r) {
				t.Error(problem)
			}
		})
	}
}

// answeredAs returns how kubectl's answer r differs from case c's: refused (non-zero
// exit, the webhook's denial naming each violated field, c.Message) or admitted, with
// c.Warnings printed in order.
func answeredAs(c admissiontest.Case, r kubectlResult) []string {
	var problems []string
	if len(c.Errors) > 0 {
		if r.exitCode == 0 {
			problems = append(problems, "admitted, want refused: "+r.String())
		}
		want := []string{"admission webhook", "denied the request", c.Message}
		for _, v := range c.Errors {
			want = append(want, v.InMessage())
		}
		for _, s := range want {
			if !strings.Contains(r.stderr, s) {
				problems = append(problems, fmt.Sprintf("stderr does not contain %q: %s", s, r))
			}
		}
	} else if r.exitCode != 0 {
		problems = append(problems, "refused, want admitted: "+r.String())
	}
	got := r.warnings()
	if len(got) != len(c.Warnings) {
		return append(problems, fmt.Sprintf("warnings %q, want %d containing %q", got, len(c.Warnings), c.Warnings))
	}
	for i, w := range c.Warnings {
		if !strings.Contains(got[i], w) {
			problems = append(problems, fmt.Sprintf("warning %d %q does not contain %q", i, got[i], w))
		}
	}
	return problems
}

// ensure creates obj with kubectl apply, removing it when the test ends if it is
// cluster-scoped (the namespace takes the others along).
func (k *kubectl) ensure(t *testing.T, obj admissiontest.Object) {
	t.Helper()
	if obj.GetNamespace() == "" {
		k.deleteOnCleanup(t, obj)
	}
	k.mustApply(t, obj)
}

// deleteOnCleanup deletes obj, if it exists, when the test ends.
func (k *kubectl) deleteOnCleanup(t *testing.T, obj admissiontest.Object) {
	t.Helper()
	doc := toYAML(t, obj)
	t.Cleanup(func() {
		if r := k.run(t, doc, "delete", "--ignore-not-found", "--wait=false", "-f", "-"); r.exitCode != 0 {
			t.Errorf("%s", r)
		}
	})
}

// objectKey is "<Kind> <namespace>/<name>" of obj.
func objectKey(obj admissiontest.Object) string {
	return fmt.Sprintf("%s %s/%s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName())
}

// TestAdmissionWarningsAboutTrainJobsOfARuntime: the warnings of a runtime's creation
// and edits, which name other objects, printed by kubectl: creating a runtime warns
// about the waiting TrainJobs whose runtimePatches it does not fit; editing it warns
// that its started TrainJobs keep the version they were built from. (The warnings
// about one TrainJob — its runtime missing, numProcPerNode ignored, GPUs per node not
// derivable from DRA claims — are cases of TestAdmissionRules.)
func TestAdmissionWarningsAboutTrainJobsOfARuntime(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	k := newKubectl(t, e.c)

	// A TrainJob of a runtime still to come, patching a replicatedJob it will lack.
	early := trainJob("early", trainer.TrainingRuntimeKind, "later")
	early.Namespace = e.ns
	early.TypeMeta = metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind}
	early.Spec.RuntimePatches = []trainer.RuntimePatch{tolerationPatch(kueueManager, "x")}
	early.Spec.RuntimePatches[0].TrainingRuntimeSpec.Template.Spec.ReplicatedJobs[0].Name = "worker"
	if r := k.mustApply(t, early.TrainJob); !strings.Contains(strings.Join(r.warnings(), "\n"), `TrainingRuntime "later" referenced by spec.runtimeRef not found`) {
		t.Errorf("warnings %q, want the missing runtime named", r.warnings())
	}
	expectWarnings(t, k, e.kubectlRuntime("later", nil), fmt.Sprintf(
		"the runtimePatches of 1 TrainJob(s) name a replicatedJob or container this runtime lacks; they get JobSetReady=False until fixed: %s/early", e.ns))

	// A started TrainJob keeps the runtime it was built from.
	k.mustApply(t, e.kubectlRuntime("torch", map[string]string{cluster.AnnotationCompleteDelay: "30m"}))
	started := trainJob("started", trainer.TrainingRuntimeKind, "torch")
	started.Namespace = e.ns
	started.TypeMeta = early.TypeMeta
	k.mustApply(t, started.TrainJob)
	e.waitJobSet(t, "started")
	expectWarnings(t, k, e.kubectlRuntime("torch", map[string]string{cluster.AnnotationCompleteDelay: "1h"}), fmt.Sprintf(
		"1 started TrainJob(s) keep the runtime they were built from and will not see this edit (runtime snapshot): %s/started", e.ns))
}

// expectWarnings applies obj with kubectl (a server-side dry run until the controller's
// caches answer, then for real) and fails unless it is admitted with exactly the
// warnings want (substrings, in order).
func expectWarnings(t *testing.T, k *kubectl, obj admissiontest.Object, want ...string) {
	t.Helper()
	c := admissiontest.Case{Name: objectKey(obj), Object: obj, Warnings: want}
	cluster.Eventually(t, 30*time.Second, "dry run of "+c.Name+" warns as wanted", func(context.Context) (bool, string) {
		problems := answeredAs(c, k.apply(t, obj, "--dry-run=server"))
		return len(problems) == 0, strings.Join(problems, "\n")
	})
	for _, problem := range answeredAs(c, k.apply(t, obj)) {
		t.Error(problem)
	}
}

// kubectlRuntime is the TrainingRuntime createRuntime creates, as a user's YAML: its
// TypeMeta set, to be applied with kubectl (an object kubectl did not create would get
// kubectl's own warning about its missing last-applied-configuration).
func (e *env) kubectlRuntime(name string, podAnnotations map[string]string) *trainer.TrainingRuntime {
	return &trainer.TrainingRuntime{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainingRuntimeKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: trainer.TrainingRuntimeSpec{
			MLPolicy: &trainer.MLPolicy{NumNodes: ptr.To[int32](1), MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}},
			Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
				Name: "node", Template: batchJobTemplate(podAnnotations),
			}}}},
		},
	}
}
