package informers

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
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

// StripClientMetadata is the cache transform of TrainJobs, TrainingRuntimes and
// ClusterTrainingRuntimes: besides managedFields it drops the annotation
// kubectl.kubernetes.io/last-applied-configuration, which `kubectl apply` (without
// --server-side) leaves on every object it writes: the whole object as JSON, as large
// as the spec it repeats. Nothing reads an annotation of these objects from the cache
// (a JobSet takes its metadata from the runtime's template and the TrainJob's
// runtimePatches, never from the TrainJob's or the runtime's own metadata; a runtime
// snapshot records name, uid, generation and spec). The other annotations and all
// labels stay. A TrainJob's repeating strings are then interned (internTrainJob).
// Tombstones and objects without metadata pass unchanged.
func StripClientMetadata(obj any) (any, error) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	accessor.SetManagedFields(nil)
	if annotations := accessor.GetAnnotations(); annotations != nil {
		if _, ok := annotations[corev1.LastAppliedConfigAnnotation]; ok {
			delete(annotations, corev1.LastAppliedConfigAnnotation)
			if len(annotations) == 0 {
				accessor.SetAnnotations(nil)
			}
		}
	}
	if tj, ok := obj.(*trainer.TrainJob); ok {
		internTrainJob(tj)
	}
	return obj, nil
}

// TrimJobSet is the JobSet cache transform: it keeps what the readers of the JobSet
// cache use and drops the rest (docs/design/memory.md).
//
// Kept: metadata but for managedFields and the runtime snapshot annotation
// (objectkeys.AnnotationRuntimeSnapshot; its digest, objectkeys.AnnotationRuntimeSnapshotHash, is
// kept, so a TrainJob that has a JobSet is rebuilt without reading the snapshot from the
// API unless the live runtime's digest differs); spec.suspend (the status stage's apply gate, the consistency
// sweep); status whole (conditions, replicatedJobsStatus, restarts: the status stage,
// admission, routing); and, for each replicatedJob whose pod template mounts one of the
// TrainJob's create-only Secrets (sideObjectSecretVolumes, e.g. MPI's SSH key), its name
// and replicas and those Secret volumes: a restart of such a JobSet is routed to the
// build stage (MountsSideObjectSecret).
//
// Dropped: every other spec field — the Job templates (most of a JobSet's bytes; the
// desired JobSet comes from the plan and is compared through the
// trainyard.dev/jobset-hash annotation), the other replicatedJobs (1.2 KB each even
// with an empty template, the size of the struct), network, startup, success and
// failure policies, coordinator, TTL and managedBy, none of which is read from the
// cache.
//
// What is kept has its repeating strings interned (internJobSet).
func TrimJobSet(obj any) (any, error) {
	js, ok := obj.(*jobsetv1alpha2.JobSet)
	if !ok {
		return StripManagedFields(obj)
	}
	js.ManagedFields = nil
	delete(js.Annotations, objectkeys.AnnotationRuntimeSnapshot)
	var kept []jobsetv1alpha2.ReplicatedJob
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		kept = keepSideObjectMounts(kept, js.Name, rj.Name, rj.Replicas, rj.Template.Spec.Template.Spec.Volumes)
	}
	js.Spec = jobsetv1alpha2.JobSetSpec{Suspend: js.Spec.Suspend, ReplicatedJobs: kept}
	internJobSet(js)
	return js, nil
}

// keepSideObjectMounts appends to kept what the JobSet cache keeps of replicatedJob
// name of JobSet jobSet: its name, replicas and the volumes of its pod template that
// mount one of the TrainJob's create-only Secrets, when there are any. It returns
// kept unchanged otherwise.
func keepSideObjectMounts(kept []jobsetv1alpha2.ReplicatedJob, jobSet, name string, replicas int32, volumes []corev1.Volume) []jobsetv1alpha2.ReplicatedJob {
	mounts := sideObjectSecretVolumes(jobSet, volumes)
	if mounts == nil {
		return kept
	}
	trimmed := jobsetv1alpha2.ReplicatedJob{Name: name, Replicas: replicas}
	trimmed.Template.Spec.Template.Spec.Volumes = mounts
	return append(kept, trimmed)
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

var (
	_ cache.TransformFunc = StripManagedFields
	_ cache.TransformFunc = StripClientMetadata
	_ cache.TransformFunc = TrimJobSet
)
