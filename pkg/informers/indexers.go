package informers

import (
	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

const (
	// IndexRuntimeRef indexes TrainJobs by the runtime they reference; values come from
	// RuntimeRefKey.
	IndexRuntimeRef = "trainer.kubeflow.org/runtimeRef"
	// IndexOwnerTrainJob indexes owned objects by their controller TrainJob,
	// "namespace/name".
	IndexOwnerTrainJob = "trainer.kubeflow.org/owner-trainjob"
)

// RuntimeRefKey is the IndexRuntimeRef value for a runtime: "ClusterTrainingRuntime/<name>"
// or "TrainingRuntime/<namespace>/<name>".
func RuntimeRefKey(kind, namespace, name string) string {
	if kind == trainer.TrainingRuntimeKind {
		return kind + "/" + namespace + "/" + name
	}
	return kind + "/" + name
}

// indexByRuntimeRef indexes a TrainJob under its runtimeRef when the reference is to a
// trainer.kubeflow.org runtime kind (unset apiGroup and kind take the CRD defaults).
func indexByRuntimeRef(obj any) ([]string, error) {
	tj, ok := obj.(*trainer.TrainJob)
	if !ok {
		return nil, nil
	}
	group, kind := trainer.GroupName, trainer.ClusterTrainingRuntimeKind
	if ref := tj.Spec.RuntimeRef; ref.APIGroup != nil {
		group = *ref.APIGroup
	}
	if ref := tj.Spec.RuntimeRef; ref.Kind != nil {
		kind = *ref.Kind
	}
	if group != trainer.GroupName || (kind != trainer.TrainingRuntimeKind && kind != trainer.ClusterTrainingRuntimeKind) {
		return nil, nil
	}
	return []string{RuntimeRefKey(kind, tj.Namespace, tj.Spec.RuntimeRef.Name)}, nil
}

// indexByOwnerTrainJob indexes an object under the TrainJob that controls it.
func indexByOwnerTrainJob(obj any) ([]string, error) {
	accessor, ok := obj.(v1.Object)
	if !ok {
		return nil, nil
	}
	if owner := ControllerTrainJob(accessor); owner != "" {
		return []string{accessor.GetNamespace() + "/" + owner}, nil
	}
	return nil, nil
}

// ControllerTrainJob returns the name of the TrainJob that is obj's controller owner,
// or "" when none is (trainjob.ControllerName).
func ControllerTrainJob(obj v1.Object) string {
	return trainjob.ControllerName(obj)
}

// trainJobIndexers are the indexes New adds to the TrainJob informers, beside the
// namespace index of the generated factory.
var trainJobIndexers = cache.Indexers{IndexRuntimeRef: indexByRuntimeRef}

var (
	_ cache.IndexFunc = indexByRuntimeRef
	_ cache.IndexFunc = indexByOwnerTrainJob
)
