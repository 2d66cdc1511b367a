package informers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// StripManagedFields is a cache.TransformFunc that drops metadata.managedFields, which
// no stage reads and which can be larger than the rest of an object. Tombstones and
// objects without metadata pass unchanged.
func StripManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

// TrimJobSet is the JobSet cache transform. Besides managedFields it drops the
// replicatedJobs' Job templates — most of a JobSet's bytes, and never read from the cache:
// the desired JobSet comes from the plan and is compared through the
// trainyard.dev/jobset-hash annotation — and the runtime snapshot annotation
// (plan.AnnotationRuntimeSnapshot), about as large and read from the API only when a
// TrainJob that has a JobSet is rebuilt. Kept: the rest of metadata, spec.suspend,
// replicatedJob names and replicas, and status.
func TrimJobSet(obj any) (any, error) {
	js, ok := obj.(*jobsetv1alpha2.JobSet)
	if !ok {
		return StripManagedFields(obj)
	}
	js.ManagedFields = nil
	delete(js.Annotations, plan.AnnotationRuntimeSnapshot)
	for i := range js.Spec.ReplicatedJobs {
		js.Spec.ReplicatedJobs[i].Template = jobTemplateTrimmed
	}
	return js, nil
}

// jobTemplateTrimmed replaces every cached Job template; shared, so never mutate it.
var jobTemplateTrimmed = jobsetv1alpha2.ReplicatedJob{}.Template

var (
	_ cache.TransformFunc = StripManagedFields
	_ cache.TransformFunc = TrimJobSet
)
