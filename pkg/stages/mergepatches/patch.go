package mergepatches

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// Strategic-merge metadata read from the Go struct tags of core/v1 (containers and env
// by name, volumeMounts by mountPath, ...) and meta/v1.
var (
	podSpecPatchMeta    = mustPatchMeta(corev1.PodSpec{})
	objectMetaPatchMeta = mustPatchMeta(metav1.ObjectMeta{})
)

func mustPatchMeta(v any) strategicpatch.PatchMetaFromStruct {
	meta, err := strategicpatch.NewPatchMetaFromStruct(v)
	if err != nil {
		panic(err) // only fails for a non-struct, a programming error
	}
	return meta
}

// applyRuntimePatches applies the spec part of each of tj's runtimePatches, in list
// order, to spec (a copy of rt's JobSet spec), so a later manager wins on scalars and
// map keys (docs/compatibility.md#the-build-model step 2). The patches must have passed
// ValidateRuntimePatches: a replicatedJob they name that spec lacks is skipped.
//
// Upstream applies each JobSetSpecPatch to the whole JobSetSpec and then restores the
// runtime's replicatedJobs order. Trainyard patches each named replicatedJob in place
// with its ReplicatedJobPatch instead: replicatedJobs merge by name, so the result is the
// same, the order never changes, and only the patched parts are converted.
func applyRuntimePatches(tj *trainer.TrainJob, spec *jobsetv1alpha2.JobSetSpec) error {
	for i := range tj.Spec.RuntimePatches {
		p := &tj.Spec.RuntimePatches[i]
		for j, rjp := range patchedReplicatedJobs(p) {
			rj := findReplicatedJob(spec, rjp.Name)
			if rj == nil {
				continue
			}
			if err := patchReplicatedJob(rj, &p.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs[j], replicatedJobPatchPath(p).Key("name="+rjp.Name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// patchedReplicatedJobs returns the replicatedJob patches of p, nil when it has none.
func patchedReplicatedJobs(p *trainer.RuntimePatch) []trainer.ReplicatedJobPatch {
	if p.TrainingRuntimeSpec == nil || p.TrainingRuntimeSpec.Template == nil || p.TrainingRuntimeSpec.Template.Spec == nil {
		return nil
	}
	return p.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs
}

// replicatedJobPatchPath is the path of p's replicatedJob patches in the TrainJob.
func replicatedJobPatchPath(p *trainer.RuntimePatch) *field.Path {
	return field.NewPath("spec", "runtimePatches").Key("manager="+p.Manager).
		Child("trainingRuntimeSpec", "template", "spec", "replicatedJobs")
}

// ValidateRuntimePatches checks that every replicatedJob, container and init container
// tj's runtimePatches name exists in runtime rt: a replicatedJob by name among the
// runtime's replicatedJobs, a containers[] entry among that replicatedJob's containers
// and an initContainers[] entry among its init containers (a strategic merge would
// otherwise add a half-specified one, which the API server then rejects). It returns
// every violation, at
// spec.runtimePatches[manager=<m>].trainingRuntimeSpec.template.spec.
// replicatedJobs[name=<rj>] (plus .template.spec.template.spec.containers[name=<c>] or
// .initContainers[name=<c>]), each message starting with upstream's admission text
// (docs/compatibility.md#trainjob-validation: "must not have replicated job that
// doesn't exist in the runtime job template", "must not have container that doesn't
// exist in the runtime job <rj>", "must not have initContainer that doesn't exist in
// the runtime job <rj>").
//
// Upstream checks patches against the runtime template with the patches already
// applied, and accepts a containers[] patch naming an init container (and the reverse);
// Trainyard checks the runtime itself and the list the patch names, which is what the
// merge needs. The merge-patches stage (Merge) and the TrainJob admission webhook both
// call it.
func ValidateRuntimePatches(tj *trainer.TrainJob, rt plan.Runtime) field.ErrorList {
	var errs field.ErrorList
	spec := &rt.Spec.Template.Spec
	for i := range tj.Spec.RuntimePatches {
		p := &tj.Spec.RuntimePatches[i]
		for _, rjp := range patchedReplicatedJobs(p) {
			rjPath := replicatedJobPatchPath(p).Key("name=" + rjp.Name)
			rj := findReplicatedJob(spec, rjp.Name)
			if rj == nil {
				errs = append(errs, field.Invalid(rjPath, field.OmitValueType{}, fmt.Sprintf(
					"must not have replicated job that doesn't exist in the runtime job template: replicatedJob %q not found: "+
						"the runtime %s has replicatedJobs %v; patch one of those or remove this entry", rjp.Name, rt.Ref(), replicatedJobNames(spec))))
				continue
			}
			t := rjp.Template
			if t == nil || t.Spec == nil || t.Spec.Template == nil || t.Spec.Template.Spec == nil {
				continue
			}
			podPath := rjPath.Child("template", "spec", "template", "spec")
			pod := plan.PodSpec(rj)
			errs = append(errs, validateContainerPatches(rj.Name, "containers", t.Spec.Template.Spec.Containers, pod.Containers, podPath)...)
			errs = append(errs, validateContainerPatches(rj.Name, "initContainers", t.Spec.Template.Spec.InitContainers, pod.InitContainers, podPath)...)
		}
	}
	return errs
}

// validateContainerPatches checks that every patch in patches (the list named list of
// replicatedJob rj's pod spec patch at podPath) names one of have.
func validateContainerPatches(rj, list string, patches []trainer.ContainerPatch, have []corev1.Container, podPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	upstream, what := "container", "container"
	if list == "initContainers" {
		upstream, what = "initContainer", "init container"
	}
	for i := range patches {
		if plan.Container(have, patches[i].Name) != nil {
			continue
		}
		errs = append(errs, field.Invalid(podPath.Child(list).Key("name="+patches[i].Name), field.OmitValueType{}, fmt.Sprintf(
			"must not have %s that doesn't exist in the runtime job %s: %s %q not found: replicatedJob %q has %s %v; "+
				"patch one of those or remove this entry", upstream, rj, what, patches[i].Name, rj, list, plan.ContainerNames(have))))
	}
	return errs
}

// patchReplicatedJob applies one ReplicatedJobPatch to rj as a strategic merge patch
// would with the JobSet v1alpha2 patch metadata, then merges by name what the strategic
// merge would replace or combine wrongly: containers' resources.claims and pod
// resourceClaims (Trainyard extensions, KEP-2782).
//
// The patch's three parts (Job template metadata, pod template metadata, pod spec) are
// merged separately, the same result as merging the whole replicatedJob: a strategic
// merge treats the keys of an object independently, and typed patches carry no
// directives ($patch, $retainKeys, ...) that would tie them.
func patchReplicatedJob(rj *jobsetv1alpha2.ReplicatedJob, rjp *trainer.ReplicatedJobPatch, path *field.Path) error {
	if rjp.Template == nil {
		return nil
	}
	path = path.Child("template")
	if md := rjp.Template.Metadata; md != nil {
		if err := patchObjectMeta(&rj.Template.ObjectMeta, md, path.Child("metadata")); err != nil {
			return err
		}
	}
	if rjp.Template.Spec == nil || rjp.Template.Spec.Template == nil {
		return nil
	}
	podTemplate, podPath := rjp.Template.Spec.Template, path.Child("spec", "template")
	if md := podTemplate.Metadata; md != nil {
		if err := patchObjectMeta(&rj.Template.Spec.Template.ObjectMeta, md, podPath.Child("metadata")); err != nil {
			return err
		}
	}
	if podTemplate.Spec == nil {
		return nil
	}
	claims := containerClaims(rj, podTemplate.Spec)
	if err := patchPodSpec(plan.PodSpec(rj), podTemplate.Spec, podPath.Child("spec")); err != nil {
		return err
	}
	restoreContainerClaims(rj, podTemplate.Spec, claims)
	replacePodResourceClaims(rj, podTemplate.Spec)
	return nil
}

// patchObjectMeta applies patch to meta as a strategic merge patch: labels and
// annotations merge key by key (docs/compatibility.md#runtime-patches metadata note).
func patchObjectMeta(meta *metav1.ObjectMeta, patch *metav1.ObjectMeta, path *field.Path) error {
	var out metav1.ObjectMeta
	if err := strategicMerge(meta, patch, &out, objectMetaPatchMeta, path); err != nil {
		return err
	}
	*meta = out
	return nil
}

// patchPodSpec applies patch to pod as a strategic merge patch. Only the fields the
// patch sets are converted and merged, which gives the same result (see
// patchReplicatedJob) for a fraction of the cost: a Kueue patch sets a few small
// fields of a large pod spec.
func patchPodSpec(pod *corev1.PodSpec, patch *trainer.PodSpecPatch, path *field.Path) error {
	var subset, out corev1.PodSpec
	copyPatchedFields(&subset, pod, patch)
	if err := strategicMerge(&subset, patch, &out, podSpecPatchMeta, path); err != nil {
		return err
	}
	copyPatchedFields(pod, &out, patch)
	return nil
}

// copyPatchedFields copies from src to dst the pod spec fields patch sets. It must
// list every PodSpecPatch field (TestPatchPodSpecCoversEveryField checks it).
func copyPatchedFields(dst, src *corev1.PodSpec, patch *trainer.PodSpecPatch) {
	if patch.ServiceAccountName != nil {
		dst.ServiceAccountName = src.ServiceAccountName
	}
	if len(patch.Volumes) > 0 {
		dst.Volumes = src.Volumes
	}
	if len(patch.InitContainers) > 0 {
		dst.InitContainers = src.InitContainers
	}
	if len(patch.Containers) > 0 {
		dst.Containers = src.Containers
	}
	if len(patch.ImagePullSecrets) > 0 {
		dst.ImagePullSecrets = src.ImagePullSecrets
	}
	if patch.SecurityContext != nil {
		dst.SecurityContext = src.SecurityContext
	}
	if len(patch.NodeSelector) > 0 {
		dst.NodeSelector = src.NodeSelector
	}
	if patch.Affinity != nil {
		dst.Affinity = src.Affinity
	}
	if len(patch.Tolerations) > 0 {
		dst.Tolerations = src.Tolerations
	}
	if len(patch.SchedulingGates) > 0 {
		dst.SchedulingGates = src.SchedulingGates
	}
	if patch.TerminationGracePeriodSeconds != nil {
		dst.TerminationGracePeriodSeconds = src.TerminationGracePeriodSeconds
	}
	if len(patch.ResourceClaims) > 0 {
		dst.ResourceClaims = src.ResourceClaims
	}
}

// strategicMerge decodes into out the strategic merge of patch onto original, both
// converted to their JSON form (maps, which saves the text round trips of the []byte
// API). out shares nothing with original or patch.
func strategicMerge(original, patch, out any, meta strategicpatch.LookupPatchMeta, path *field.Path) error {
	originalMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(original)
	if err != nil {
		return fmt.Errorf("converting the object patched at %s: %w", path, err)
	}
	patchMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(patch)
	if err != nil {
		return fmt.Errorf("converting the patch at %s: %w", path, err)
	}
	merged, err := strategicpatch.StrategicMergeMapPatchUsingLookupPatchMeta(originalMap, patchMap, meta)
	if err != nil {
		return fmt.Errorf("applying the patch at %s: %w", path, err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(merged, out); err != nil {
		return fmt.Errorf("converting the patched object at %s: %w", path, err)
	}
	return nil
}

// patchedClaims remembers, per patched container, its resources.claims before the
// strategic merge (which replaces the list wholesale).
type patchedClaims struct {
	containers, initContainers [][]corev1.ResourceClaim
}

func containerClaims(rj *jobsetv1alpha2.ReplicatedJob, podPatch *trainer.PodSpecPatch) patchedClaims {
	var out patchedClaims
	if podPatch == nil {
		return out
	}
	pod := plan.PodSpec(rj)
	collect := func(patches []trainer.ContainerPatch, have []corev1.Container) [][]corev1.ResourceClaim {
		var claims [][]corev1.ResourceClaim
		for i := range patches {
			if patches[i].Resources == nil || len(patches[i].Resources.Claims) == 0 {
				continue
			}
			if claims == nil {
				claims = make([][]corev1.ResourceClaim, len(patches))
			}
			claims[i] = append([]corev1.ResourceClaim(nil), plan.Container(have, patches[i].Name).Resources.Claims...)
		}
		return claims
	}
	out.containers = collect(podPatch.Containers, pod.Containers)
	out.initContainers = collect(podPatch.InitContainers, pod.InitContainers)
	return out
}

// restoreContainerClaims sets each patched container's claims to its claims before the
// patch, upserted by name with the patch's claims.
func restoreContainerClaims(rj *jobsetv1alpha2.ReplicatedJob, podPatch *trainer.PodSpecPatch, before patchedClaims) {
	pod := plan.PodSpec(rj)
	restore := func(patches []trainer.ContainerPatch, have []corev1.Container, claims [][]corev1.ResourceClaim) {
		for i := range claims {
			if patches[i].Resources == nil || len(patches[i].Resources.Claims) == 0 {
				continue
			}
			c := plan.Container(have, patches[i].Name)
			c.Resources.Claims = plan.UpsertResourceClaims(claims[i], patches[i].Resources.Claims...)
		}
	}
	restore(podPatch.Containers, pod.Containers, before.containers)
	restore(podPatch.InitContainers, pod.InitContainers, before.initContainers)
}

// replacePodResourceClaims replaces each pod resourceClaim the patch names with the
// patch's entry. The strategic merge already merged them by name, but field by field:
// patching {name: gpu, resourceClaimName: x} onto a runtime's {name: gpu,
// resourceClaimTemplateName: t} would keep both sources, which the API server rejects.
func replacePodResourceClaims(rj *jobsetv1alpha2.ReplicatedJob, podPatch *trainer.PodSpecPatch) {
	pod := plan.PodSpec(rj)
	for i := range podPatch.ResourceClaims {
		want := &podPatch.ResourceClaims[i]
		for j := range pod.ResourceClaims {
			if pod.ResourceClaims[j].Name == want.Name {
				pod.ResourceClaims[j] = *want.DeepCopy()
			}
		}
	}
}

func findReplicatedJob(spec *jobsetv1alpha2.JobSetSpec, name string) *jobsetv1alpha2.ReplicatedJob {
	for i := range spec.ReplicatedJobs {
		if spec.ReplicatedJobs[i].Name == name {
			return &spec.ReplicatedJobs[i]
		}
	}
	return nil
}

func replicatedJobNames(spec *jobsetv1alpha2.JobSetSpec) []string {
	names := make([]string, len(spec.ReplicatedJobs))
	for i := range spec.ReplicatedJobs {
		names[i] = spec.ReplicatedJobs[i].Name
	}
	return names
}
