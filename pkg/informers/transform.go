package informers

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
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
// replicatedJob names and replicas, status, and the pod templates' volumes of the
// TrainJob's create-only Secrets (sideObjectSecretVolumes: a restart of such a JobSet
// is routed to the build stage, MountsSideObjectSecret).
func TrimJobSet(obj any) (any, error) {
	js, ok := obj.(*jobsetv1alpha2.JobSet)
	if !ok {
		return StripManagedFields(obj)
	}
	js.ManagedFields = nil
	delete(js.Annotations, plan.AnnotationRuntimeSnapshot)
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		volumes := sideObjectSecretVolumes(js.Name, rj.Template.Spec.Template.Spec.Volumes)
		rj.Template = jobTemplateTrimmed // a copy: its slices are nil
		rj.Template.Spec.Template.Spec.Volumes = volumes
	}
	return js, nil
}

// sideObjectSecretVolumes returns the volumes of Secrets named after the JobSet
// ("<jobSet>-...", the form of the create-only side objects, mlpolicy.SecretNames),
// nil when there are none. The runtime's own Secrets (a registry or model-hub token)
// do not match.
func sideObjectSecretVolumes(jobSet string, volumes []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range volumes {
		if v.Secret != nil && strings.HasPrefix(v.Secret.SecretName, jobSet+"-") {
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: v.Secret.SecretName}}})
		}
	}
	return out
}

// jobTemplateTrimmed replaces every cached Job template; shared, so never mutate it.
var jobTemplateTrimmed = jobsetv1alpha2.ReplicatedJob{}.Template

var (
	_ cache.TransformFunc = StripManagedFields
	_ cache.TransformFunc = TrimJobSet
)
