package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
)

func snapshotSpec() *trainer.TrainingRuntimeSpec {
	return &trainer.TrainingRuntimeSpec{
		MLPolicy: &trainer.MLPolicy{NumNodes: ptr.To[int32](2), MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}},
		Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
			Name: "node", Replicas: 1,
			Template: batchJobTemplate(corev1.Container{Name: "node", Image: "torch:v1",
				Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}),
		}}}},
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		kind, namespace, wantNamespace string
	}{
		{trainer.TrainingRuntimeKind, "team-a", "team-a"},
		{trainer.ClusterTrainingRuntimeKind, "", ""},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			rt := Runtime{Kind: tc.kind, Name: "torch", Spec: snapshotSpec()}
			value, err := EncodeSnapshot(rt, metav1.ObjectMeta{Name: "torch", Namespace: tc.namespace, UID: "uid-1", Generation: 7,
				Labels: map[string]string{"not": "recorded"}, ResourceVersion: "99"})
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{`"apiVersion":"trainer.kubeflow.org/v1alpha1"`, `"kind":"` + tc.kind + `"`, `"uid":"uid-1"`, `"generation":7`, `"image":"torch:v1"`} {
				if !strings.Contains(value, want) {
					t.Errorf("snapshot %s lacks %s", value, want)
				}
			}
			if strings.Contains(value, "recorded") || strings.Contains(value, "resourceVersion") {
				t.Errorf("snapshot %s records more metadata than its identity", value)
			}
			got, err := DecodeSnapshot(value, tc.kind, "torch", "llm")
			if err != nil {
				t.Fatal(err)
			}
			want := Runtime{Kind: tc.kind, Name: "torch", Spec: snapshotSpec(), Snapshot: value}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSnapshotErrors(t *testing.T) {
	big := snapshotSpec()
	big.Template.Annotations = map[string]string{"huge": strings.Repeat("x", MaxSnapshotBytes)}
	_, err := EncodeSnapshot(Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: big}, metav1.ObjectMeta{Name: "torch"})
	var unsupported *UnsupportedError
	if !errors.As(err, &unsupported) || !strings.Contains(err.Error(), objectkeys.AnnotationRuntimeSnapshot) || unsupported.Object != "ClusterTrainingRuntime/torch" {
		t.Errorf("EncodeSnapshot(too large) = %v, want an UnsupportedError naming the runtime and the annotation", err)
	}

	value, err := EncodeSnapshot(Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: snapshotSpec()}, metav1.ObjectMeta{Name: "torch"})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ value, kind, name, want string }{
		"not JSON":      {"{", trainer.ClusterTrainingRuntimeKind, "torch", "not a runtime snapshot"},
		"another kind":  {value, trainer.TrainingRuntimeKind, "torch", "records trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime/torch but spec.runtimeRef names TrainingRuntime/torch"},
		"another name":  {value, trainer.ClusterTrainingRuntimeKind, "jax", "but spec.runtimeRef names ClusterTrainingRuntime/jax"},
		"not a runtime": {`{"apiVersion":"v1","kind":"ConfigMap"}`, trainer.ClusterTrainingRuntimeKind, "torch", "records v1 ConfigMap/"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeSnapshot(tc.value, tc.kind, tc.name, "llm")
			var invalid *InvalidInputError
			if !errors.As(err, &invalid) || invalid.Object != "JobSet/llm" ||
				invalid.Field != "metadata.annotations["+objectkeys.AnnotationRuntimeSnapshot+"]" || !strings.Contains(invalid.Message, tc.want) {
				t.Errorf("DecodeSnapshot = %v, want an InvalidInputError on JobSet/llm's annotation containing %q", err, tc.want)
			}
		})
	}
}

func batchJobTemplate(c corev1.Container) batchv1.JobTemplateSpec {
	var t batchv1.JobTemplateSpec
	t.Spec.Template.Spec.Containers = []corev1.Container{c}
	return t
}
