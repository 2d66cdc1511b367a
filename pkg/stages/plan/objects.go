package plan

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
)

// CreateOnlyObject is a side object the status stage creates when it does not exist and
// never updates: its content is generated once (e.g. the MPI SSH key,
// docs/compatibility.md#mpi) and must not change under running pods. Unlike
// Plan.Objects it does not enter the hash of the desired state, so a rebuild, which
// would generate new content, never counts as a change.
type CreateOnlyObject struct {
	// Object is the object without its generated content: apiVersion, kind, name,
	// namespace, owner and any fixed fields. Deterministic for a TrainJob generation.
	Object *unstructured.Unstructured
	// Generate, when non-nil, adds the generated content to obj (a copy of Object) right
	// before it is created. It is not called when the object already exists.
	Generate func(obj *unstructured.Unstructured) error
}

// DeepCopy returns a copy of o whose Object is a deep copy; Generate is shared.
func (o CreateOnlyObject) DeepCopy() CreateOnlyObject {
	return CreateOnlyObject{Object: o.Object.DeepCopy(), Generate: o.Generate}
}

// SideObjectLabels returns the labels of a side object of tj: objectkeys.LabelTrainJobName. It
// returns nil for a name that is no valid label value (longer than 63 characters, which
// the CRD forbids): such an object is still found by name, just not watched.
func SideObjectLabels(tj *trainer.TrainJob) map[string]string {
	if len(validation.IsValidLabelValue(tj.Name)) > 0 {
		return nil
	}
	return map[string]string{objectkeys.LabelTrainJobName: tj.Name}
}

// OwnedObject returns an unstructured object of apiVersion and kind named name in tj's
// namespace, with tj as its controller (controller and blockOwnerDeletion true), as
// every object the pipeline creates for a TrainJob
// (docs/compatibility.md#objects-per-trainjob), and labelled as tj's side object
// (SideObjectLabels).
func OwnedObject(tj *trainer.TrainJob, apiVersion, kind, name string) *unstructured.Unstructured {
	owner := metav1.NewControllerRef(tj, trainer.SchemeGroupVersion.WithKind(trainer.TrainJobKind))
	metadata := map[string]any{
		"name":      name,
		"namespace": tj.Namespace,
		"ownerReferences": []any{map[string]any{
			"apiVersion": owner.APIVersion, "kind": owner.Kind, "name": owner.Name, "uid": string(owner.UID),
			"controller": true, "blockOwnerDeletion": true,
		}},
	}
	if labels := SideObjectLabels(tj); labels != nil {
		l := make(map[string]any, len(labels))
		for k, v := range labels {
			l[k] = v
		}
		metadata["labels"] = l
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion,
		"kind":       kind,
		"metadata":   metadata,
	}}
}
