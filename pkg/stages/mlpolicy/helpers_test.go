package mlpolicy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// build runs what the merge-patches and ML-policy stages run: Merge, then Apply with
// the default plugins.
func build(t *testing.T, tj *trainer.TrainJob, rt plan.Runtime) (*jobsetv1alpha2.JobSet, error) {
	t.Helper()
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	p := &plan.Plan{Runtime: rt, JobSet: js}
	return p.JobSet, Apply(tj, p, DefaultPlugins(SecretNames{}))
}

func mustBuild(t *testing.T, tj *trainer.TrainJob, rt plan.Runtime) *jobsetv1alpha2.JobSet {
	t.Helper()
	js, err := build(t, tj, rt)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return js
}

func torchPolicy(numNodes int32) *trainer.MLPolicy {
	return &trainer.MLPolicy{NumNodes: ptr.To(numNodes), MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}}
}

func nodeContainer(t *testing.T, js *jobsetv1alpha2.JobSet) *corev1.Container {
	t.Helper()
	c := trainerContainer(js)
	if c == nil {
		t.Fatalf("no trainer node container in %v", js.Spec.ReplicatedJobs)
	}
	return c
}

func quantities(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

func rankEnv(name string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']",
	}}}
}

// petEnv is the full PET_* set for nnodes and nproc with the plantest TrainJob.
func petEnv(nnodes, nproc string) []corev1.EnvVar {
	return []corev1.EnvVar{
		env("PET_NNODES", nnodes),
		env("PET_NPROC_PER_NODE", nproc),
		rankEnv("PET_NODE_RANK"),
		env("PET_MASTER_ADDR", "test-job-node-0-0.test-job"),
		env("PET_MASTER_PORT", "29500"),
	}
}

var port29500 = []corev1.ContainerPort{{ContainerPort: 29500}}

// counts returns parallelism by replicatedJob name, failing on parallelism != completions.
func counts(t *testing.T, js *jobsetv1alpha2.JobSet) map[string]int32 {
	t.Helper()
	out := map[string]int32{}
	for i := range js.Spec.ReplicatedJobs {
		s := js.Spec.ReplicatedJobs[i].Template.Spec
		if s.Parallelism == nil || s.Completions == nil || *s.Parallelism != *s.Completions {
			t.Errorf("%s: parallelism %v, completions %v: want both set and equal",
				js.Spec.ReplicatedJobs[i].Name, ptr.Deref(s.Parallelism, -1), ptr.Deref(s.Completions, -1))
		}
		out[js.Spec.ReplicatedJobs[i].Name] = ptr.Deref(s.Parallelism, -1)
	}
	return out
}

// testSecretSuffix ends the names of the create-only Secrets of the test TrainJobs
// (plantest.TrainJobUID) under the zero SecretNames (secretnames_test.go pins it).
const testSecretSuffix = "-pmtgosl7z3"
