// Package plantest holds test fixtures for the stages that build a plan: the runtime
// skeleton of docs/compatibility.md#upstream-test-cases, a TrainJob builder, and the
// upstream runtimes decoded into plan.Runtimes.
package plantest

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// The TrainJob of the docs/compatibility.md#upstream-test-cases cases.
const (
	TrainJobName      = "test-job"
	TrainJobNamespace = "default"
	TrainJobUID       = types.UID("uid")
	RuntimeName       = "test-runtime"
)

// TrainJob returns a TrainJob test-job/default (uid "uid") referencing the
// TrainingRuntime runtimeName, with trainer (may be nil).
func TrainJob(runtimeName string, t *trainer.Trainer) *trainer.TrainJob {
	return &trainer.TrainJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind},
		ObjectMeta: metav1.ObjectMeta{Name: TrainJobName, Namespace: TrainJobNamespace, UID: TrainJobUID},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: runtimeName},
			Trainer:    t,
		},
	}
}

// Container returns "Container(X)" of docs/compatibility.md#upstream-test-cases: image
// test:runtime, command and args [runtime], requests cpu 1, with env.
func Container(name string, env ...corev1.EnvVar) corev1.Container {
	return corev1.Container{
		Name:    name,
		Image:   "test:runtime",
		Command: []string{"runtime"},
		Args:    []string{"runtime"},
		Env:     env,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		},
	}
}

// Env returns a literal env var.
func Env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// SkeletonRuntime returns the TrainingRuntime test-runtime of
// docs/compatibility.md#upstream-test-cases: replicatedJobs dataset-initializer,
// model-initializer and node (ancestors dataset-initializer, model-initializer,
// trainer), each with replicas 1, groupName default, the PVC volume "initializer" and
// one Container(X) named after its step ("node" for the trainer) mounting it.
func SkeletonRuntime(policy *trainer.MLPolicy) plan.Runtime {
	volume := corev1.Volume{
		Name: "initializer",
		VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "initializer"},
		},
	}
	mount := func(paths ...string) []corev1.VolumeMount {
		var out []corev1.VolumeMount
		for _, p := range paths {
			out = append(out, corev1.VolumeMount{Name: "initializer", MountPath: p})
		}
		return out
	}
	rjob := func(name, ancestor string, c corev1.Container) jobsetv1alpha2.ReplicatedJob {
		return jobsetv1alpha2.ReplicatedJob{
			Name:      name,
			GroupName: "default",
			Replicas:  1,
			Template: batchJobTemplate(ancestor, corev1.PodSpec{
				Containers: []corev1.Container{c},
				Volumes:    []corev1.Volume{volume},
			}),
		}
	}
	dataset := Container(trainer.ContainerDatasetInitializer)
	dataset.VolumeMounts = mount("/workspace/dataset")
	model := Container(trainer.ContainerModelInitializer)
	model.VolumeMounts = mount("/workspace/model")
	node := Container(trainer.ContainerNode)
	node.VolumeMounts = mount("/workspace/dataset", "/workspace/model")
	return plan.Runtime{
		Kind: trainer.TrainingRuntimeKind,
		Name: RuntimeName,
		Spec: &trainer.TrainingRuntimeSpec{
			MLPolicy: policy,
			Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
				ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{
					rjob("dataset-initializer", trainer.AncestorDatasetInitializer, dataset),
					rjob("model-initializer", trainer.AncestorModelInitializer, model),
					rjob("node", trainer.AncestorTrainer, node),
				},
			}},
		},
	}
}

// UpstreamRuntime is an upstream TrainingRuntime or ClusterTrainingRuntime.
type UpstreamRuntime struct {
	// Doc names the document, e.g. "runtimes/torch_distributed.yaml#0".
	Doc     string
	Runtime plan.Runtime
}

// UpstreamRuntimes returns every TrainingRuntime and ClusterTrainingRuntime under
// shared/upstream (runtimes and examples), decoded strictly. The test is skipped when
// shared/upstream is absent.
func UpstreamRuntimes(t testing.TB) []UpstreamRuntime {
	t.Helper()
	var out []UpstreamRuntime
	for _, doc := range utiltesting.UpstreamDocuments(t, trainer.ClusterTrainingRuntimeKind, trainer.TrainingRuntimeKind) {
		// Both kinds share the spec type; ClusterTrainingRuntime decodes either.
		var obj trainer.ClusterTrainingRuntime
		if err := yaml.UnmarshalStrict(doc.JSON, &obj); err != nil {
			t.Fatalf("%s: %v", doc.Name(), err)
		}
		out = append(out, UpstreamRuntime{
			Doc:     doc.Name(),
			Runtime: plan.Runtime{Kind: doc.Kind, Name: obj.Name, Spec: &obj.Spec},
		})
	}
	return out
}

// UpstreamRuntimeFile returns the only runtime in the upstream file, e.g.
// "runtimes/torch_distributed.yaml". The test fails when there is not exactly one and
// is skipped when shared/upstream is absent.
func UpstreamRuntimeFile(t testing.TB, file string) plan.Runtime {
	t.Helper()
	var found []plan.Runtime
	for _, r := range UpstreamRuntimes(t) {
		if strings.HasPrefix(r.Doc, file+"#") {
			found = append(found, r.Runtime)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: want one runtime, found %d", file, len(found))
	}
	return found[0]
}

func batchJobTemplate(ancestor string, pod corev1.PodSpec) batchv1.JobTemplateSpec {
	tmpl := batchv1.JobTemplateSpec{}
	tmpl.Labels = map[string]string{trainer.LabelTrainJobAncestor: ancestor}
	tmpl.Spec.Template.Spec = pod
	return tmpl
}

// UpstreamTrainJob returns the only TrainJob in the upstream file, e.g.
// "examples/yaml/02-runtime-patches.yaml", decoded strictly, with namespace default and
// uid "uid" when unset. The test fails when there is not exactly one and is skipped
// when shared/upstream is absent.
func UpstreamTrainJob(t testing.TB, file string) *trainer.TrainJob {
	t.Helper()
	var found []*trainer.TrainJob
	for _, doc := range utiltesting.UpstreamDocuments(t, trainer.TrainJobKind) {
		if doc.File != file {
			continue
		}
		tj := &trainer.TrainJob{}
		if err := yaml.UnmarshalStrict(doc.JSON, tj); err != nil {
			t.Fatalf("%s: %v", doc.Name(), err)
		}
		if tj.Namespace == "" {
			tj.Namespace = TrainJobNamespace
		}
		if tj.UID == "" {
			tj.UID = TrainJobUID
		}
		found = append(found, tj)
	}
	if len(found) != 1 {
		t.Fatalf("%s: want one TrainJob, found %d", file, len(found))
	}
	return found[0]
}
