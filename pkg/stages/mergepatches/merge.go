// Package mergepatches builds a TrainJob's desired JobSet from its runtime before any
// ML policy is applied: the runtime's JobSet template with the TrainJob's
// runtimePatches, counts, resourcesPerNode, initializer and trainer overrides
// (docs/compatibility.md#the-build-model, docs/compatibility.md#plugin-order
// PreBuildSync and docs/compatibility.md#building-the-jobset steps 2–4, 6, 7). It is
// pure logic: no API calls, no listers.
package mergepatches

import (
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// Merge returns the JobSet tj asks for from runtime rt, before the ML policy (package
// mlpolicy) refines it:
//
//   - TypeMeta jobset.x-k8s.io/v1alpha2 JobSet; name and namespace of tj; a controller
//     ownerReference to tj; labels and annotations = rt's template metadata overlaid by
//     each runtimePatch's template metadata, in list order
//     (docs/compatibility.md#the-build-model step 1), plus
//     objectkeys.AnnotationRuntimeSnapshot = rt.Snapshot and its digest
//     objectkeys.AnnotationRuntimeSnapshotHash when set (the runtime snapshot,
//     docs/compatibility.md#runtime-snapshots) and objectkeys.AnnotationTrainJobGeneration =
//     tj's generation when it has one (objects from the API always do), neither of
//     which a runtimePatch overrides;
//   - spec = rt's JobSet spec with each runtimePatch applied as a strategic merge
//     patch, in list order, keeping the runtime's replicatedJobs order
//     (docs/compatibility.md#the-build-model step 2);
//   - spec.trainer.resourcesPerNode merged into the trainer "node" container
//     (docs/compatibility.md#the-build-model step 4);
//   - every replicatedJob with parallelism == completions == its count: the runtime's
//     mlPolicy.numNodes (default 1) for the trainer, else its template parallelism
//     (default 1), at least 1 (docs/compatibility.md#the-build-model step 4,
//     docs/compatibility.md#plugin-order PreBuildSync);
//   - replicas 1 on every replicatedJob whose ancestor is dataset-initializer,
//     model-initializer or trainer, and spec.initializer and spec.trainer's image,
//     command, args and env applied to their containers
//     (docs/compatibility.md#building-the-jobset steps 3, 4);
//   - spec.suspend = tj.spec.suspend (false when unset)
//     (docs/compatibility.md#building-the-jobset step 6).
//
// spec.trainer.numNodes is left to the ML policy, which owns the trainer count.
//
// Neither tj nor rt.Spec (shared with the informer cache) is modified: everything taken
// from them is copied.
//
// Errors: *plan.InvalidInputError for the first violation of ValidateSteps (the runtime
// has no trainer step or a step lacks its container; Object is the runtime) or of
// ValidateRuntimePatches (a runtimePatch names a replicatedJob or container the runtime
// does not have); any other error is a bug.
func Merge(tj *trainer.TrainJob, rt plan.Runtime) (*jobsetv1alpha2.JobSet, error) {
	if tj == nil || rt.Spec == nil {
		return nil, errors.New("mergepatches: nil TrainJob or runtime spec")
	}
	if err := plan.FirstInvalid(rt.Ref(), ValidateSteps(rt.Spec)); err != nil {
		return nil, err
	}
	if err := plan.FirstInvalid("", ValidateRuntimePatches(tj, rt)); err != nil {
		return nil, err
	}
	js := &jobsetv1alpha2.JobSet{
		TypeMeta: metav1.TypeMeta{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: "JobSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            tj.Name,
			Namespace:       tj.Namespace,
			Labels:          overlayMetadata(rt.Spec.Template.Labels, tj, labelsOf),
			Annotations:     overlayMetadata(rt.Spec.Template.Annotations, tj, annotationsOf),
			OwnerReferences: []metav1.OwnerReference{ownerReference(tj)},
		},
	}
	if rt.Snapshot != "" || tj.Generation > 0 {
		if js.Annotations == nil {
			js.Annotations = map[string]string{}
		}
	}
	if rt.Snapshot != "" {
		js.Annotations[objectkeys.AnnotationRuntimeSnapshot] = rt.Snapshot
		js.Annotations[objectkeys.AnnotationRuntimeSnapshotHash] = plan.SnapshotHash(rt.Snapshot)
	}
	if tj.Generation > 0 {
		js.Annotations[objectkeys.AnnotationTrainJobGeneration] = strconv.FormatInt(tj.Generation, 10)
	}
	rt.Spec.Template.Spec.DeepCopyInto(&js.Spec)
	if err := applyRuntimePatches(tj, &js.Spec); err != nil {
		return nil, err
	}

	policy := rt.Spec.MLPolicy
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		plan.SetCount(rj, initialCount(policy, rj))
		applyAncestorStep(tj, rj)
		if receivesTrainerOverrides(policy, rj) {
			applyTrainerOverrides(tj, rj)
		}
	}
	js.Spec.Suspend = ptr.To(ptr.Deref(tj.Spec.Suspend, false))
	return js, nil
}

// overlayMetadata returns base overlaid by each runtimePatch's JobSet-level labels or
// annotations (as picked by of), later patches winning; nil when all are empty. The
// runtime object's own metadata and the TrainJob's are deliberately not propagated
// (docs/compatibility.md#the-build-model step 1).
func overlayMetadata(base map[string]string, tj *trainer.TrainJob, of func(*metav1.ObjectMeta) map[string]string) map[string]string {
	var out map[string]string
	set := func(m map[string]string) {
		if len(m) == 0 {
			return
		}
		if out == nil {
			out = make(map[string]string, len(base)+len(m))
		}
		for k, v := range m {
			out[k] = v
		}
	}
	set(base)
	for i := range tj.Spec.RuntimePatches {
		if s := tj.Spec.RuntimePatches[i].TrainingRuntimeSpec; s != nil && s.Template != nil && s.Template.Metadata != nil {
			set(of(s.Template.Metadata))
		}
	}
	return out
}

func labelsOf(m *metav1.ObjectMeta) map[string]string      { return m.Labels }
func annotationsOf(m *metav1.ObjectMeta) map[string]string { return m.Annotations }

// ownerReference makes tj the JobSet's controller, so garbage collection deletes the
// JobSet with the TrainJob and the JobSet informer can map events back to it.
func ownerReference(tj *trainer.TrainJob) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         trainer.SchemeGroupVersion.String(),
		Kind:               trainer.TrainJobKind,
		Name:               tj.Name,
		UID:                tj.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// initialCount is rj's pod count before the ML policy runs
// (docs/compatibility.md#the-build-model step 4): the runtime's mlPolicy.numNodes
// (default 1) for a trainer replicatedJob when the runtime has an mlPolicy, else the
// template parallelism (default 1); at least 1.
func initialCount(policy *trainer.MLPolicy, rj *jobsetv1alpha2.ReplicatedJob) int32 {
	n := plan.Count(rj)
	if policy != nil && plan.Ancestor(rj) == trainer.AncestorTrainer {
		n = ptr.Deref(policy.NumNodes, 1)
	}
	return max(n, 1)
}

// receivesTrainerOverrides reports whether spec.trainer.env and resourcesPerNode apply
// to rj's "node" container: rj is a trainer replicatedJob, or the runtime runs the MPI
// launcher as a node and rj is the "node" replicatedJob
// (docs/compatibility.md#the-build-model step 4,
// docs/compatibility.md#building-the-jobset step 4).
//
// Upstream quirk 2 (docs/compatibility.md#upstream-quirks): upstream ignores
// resourcesPerNode on a trainer replicatedJob when the runtime has no mlPolicy.
// Trainyard applies it: silently dropping resources the user asked for is worse than
// the one divergence it causes, which is that Kueue (recomputing upstream's model) does
// not count them for such runtimes. Every shipped runtime has an mlPolicy.
func receivesTrainerOverrides(policy *trainer.MLPolicy, rj *jobsetv1alpha2.ReplicatedJob) bool {
	if plan.Ancestor(rj) == trainer.AncestorTrainer {
		return true
	}
	return policy != nil && policy.MPI != nil && ptr.Deref(policy.MPI.RunLauncherAsNode, false) &&
		rj.Name == trainer.ReplicatedJobNode
}

// applyAncestorStep applies the TrainJob section matching rj's ancestor label
// (docs/compatibility.md#building-the-jobset steps 3, 4): every such replicatedJob runs
// one Job, the initializers get spec.initializer, the trainer spec.trainer's image,
// command, args.
func applyAncestorStep(tj *trainer.TrainJob, rj *jobsetv1alpha2.ReplicatedJob) {
	in := tj.Spec.Initializer
	switch plan.Ancestor(rj) {
	case trainer.AncestorDatasetInitializer:
		rj.Replicas = 1
		if in != nil && in.Dataset != nil {
			d := in.Dataset
			applyInitializer(rj, trainer.ContainerDatasetInitializer, d.StorageUri, d.Env, d.SecretRef)
		}
	case trainer.AncestorModelInitializer:
		rj.Replicas = 1
		if in != nil && in.Model != nil {
			m := in.Model
			applyInitializer(rj, trainer.ContainerModelInitializer, m.StorageUri, m.Env, m.SecretRef)
		}
	case trainer.AncestorTrainer:
		rj.Replicas = 1
		applyTrainerContainer(tj, rj)
	}
}

// applyTrainerOverrides merges spec.trainer.resourcesPerNode and env into rj's first
// "node" container: resources per resource name and claims per name
// (docs/compatibility.md#the-build-model step 4, case 7 of
// docs/compatibility.md#upstream-test-cases), env by name
// (docs/compatibility.md#building-the-jobset step 4), the TrainJob winning; entries
// only in the runtime are kept.
func applyTrainerOverrides(tj *trainer.TrainJob, rj *jobsetv1alpha2.ReplicatedJob) {
	t := tj.Spec.Trainer
	if t == nil {
		return
	}
	c := plan.Container(plan.PodSpec(rj).Containers, trainer.ContainerNode)
	if c == nil {
		return
	}
	if t.ResourcesPerNode != nil {
		plan.MergeResources(&c.Resources, t.ResourcesPerNode)
	}
	c.Env = plan.UpsertEnv(c.Env, t.Env...)
}

// applyInitializer applies one spec.initializer section to the container named name of
// an initializer replicatedJob (docs/compatibility.md#building-the-jobset step 3):
// STORAGE_URI when storageUri is set (even empty), then env by name, then the secret as
// an envFrom source.
func applyInitializer(rj *jobsetv1alpha2.ReplicatedJob, name string, storageURI *string, env []corev1.EnvVar, secret *corev1.LocalObjectReference) {
	c := plan.Container(plan.PodSpec(rj).Containers, name)
	if c == nil {
		return
	}
	if storageURI != nil {
		c.Env = plan.UpsertEnv(c.Env, corev1.EnvVar{Name: trainer.EnvStorageURI, Value: *storageURI})
	}
	c.Env = plan.UpsertEnv(c.Env, env...)
	if secret != nil {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{
			SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: secret.Name}},
		})
	}
}

// applyTrainerContainer replaces the trainer "node" container's image, command and args
// with spec.trainer's when set (docs/compatibility.md#building-the-jobset step 4). A
// command or args that is set but empty clears the runtime's (the image's entrypoint
// runs).
func applyTrainerContainer(tj *trainer.TrainJob, rj *jobsetv1alpha2.ReplicatedJob) {
	t := tj.Spec.Trainer
	if t == nil {
		return
	}
	c := plan.Container(plan.PodSpec(rj).Containers, trainer.ContainerNode)
	if c == nil {
		return
	}
	if t.Image != nil {
		c.Image = *t.Image
	}
	if t.Command != nil {
		c.Command = append([]string{}, t.Command...)
	}
	if t.Args != nil {
		c.Args = append([]string{}, t.Args...)
	}
}

// stepContainers maps each trainjob-ancestor-step value to the container a
// replicatedJob with that label must have (docs/compatibility.md#well-known-names,
// docs/compatibility.md#runtime-validation).
var stepContainers = map[string]string{
	trainer.AncestorTrainer:            trainer.ContainerNode,
	trainer.AncestorDatasetInitializer: trainer.ContainerDatasetInitializer,
	trainer.AncestorModelInitializer:   trainer.ContainerModelInitializer,
}

// ValidateSteps checks a runtime spec's steps: every replicatedJob labelled
// trainer.kubeflow.org/trainjob-ancestor-step has the container of its step ("node" for
// the trainer, "dataset-initializer" and "model-initializer" for the initializers), and
// some replicatedJob is the trainer step (labelled trainer, or named "node"; not
// required of MPI runtimes, whose trainer may be the launcher and whose replicatedJobs
// package mlpolicy checks). Without them spec.trainer and spec.initializer would
// silently apply to nothing. It returns every violation, with paths relative to the
// runtime object: spec.template.spec.replicatedJobs[name=<rj>].template.spec.template.
// spec.containers ("must contain the required container for the ancestor: <step>",
// upstream's runtime admission text, docs/compatibility.md#runtime-validation) and
// spec.template.spec.replicatedJobs (no trainer step).
//
// Upstream's runtime admission webhook has the container rule and builds a JobSet
// without a trainer. Trainyard refuses both: the runtime admission webhook (package
// admission) and the merge-patches stage (Merge, as a JobSetReady=False condition for
// a runtime admitted without the webhook) call this same function.
func ValidateSteps(spec *trainer.TrainingRuntimeSpec) field.ErrorList {
	var errs field.ErrorList
	rjs := spec.Template.Spec.ReplicatedJobs
	path := field.NewPath("spec", "template", "spec", "replicatedJobs")
	hasTrainer := false
	for i := range rjs {
		step := plan.Ancestor(&rjs[i])
		hasTrainer = hasTrainer || step == trainer.AncestorTrainer || rjs[i].Name == trainer.ReplicatedJobNode
		want, ok := stepContainers[step]
		if !ok {
			continue
		}
		containers := plan.PodSpec(&rjs[i]).Containers
		if plan.Container(containers, want) != nil {
			continue
		}
		errs = append(errs, field.Invalid(path.Key("name="+rjs[i].Name).Child("template", "spec", "template", "spec", "containers"),
			field.OmitValueType{}, fmt.Sprintf("must contain the required container for the ancestor: %s (a container named %q; it has %v): "+
				"rename the container in the runtime", step, want, plan.ContainerNames(containers))))
	}
	// MPI runtimes are the ML policy's to check: their trainer may be the launcher
	// (runLauncherAsNode, docs/compatibility.md#mpi), and the MPI plugin names a
	// missing launcher or node.
	if !hasTrainer && (spec.MLPolicy == nil || spec.MLPolicy.MPI == nil) {
		errs = append(errs, field.Invalid(path, field.OmitValueType{}, fmt.Sprintf(
			"no replicatedJob is the trainer step (replicatedJobs %v): label the Job template of the one that trains, usually %q, with %s: %s",
			replicatedJobNames(&spec.Template.Spec), trainer.ReplicatedJobNode, trainer.LabelTrainJobAncestor, trainer.AncestorTrainer)))
	}
	return errs
}
