package admission

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/gang/volcano"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Paths of TrainJob fields the rules name.
var (
	runtimeRefPath     = field.NewPath("spec", "runtimeRef")
	runtimePatchesPath = field.NewPath("spec", "runtimePatches")
)

// deprecationPolicyURL is upstream's runtime deprecation policy
// (docs/compatibility.md#well-known-names).
const deprecationPolicyURL = "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"

// validateTrainJob answers the TrainJob validating webhook.
func (d *Deps) validateTrainJob(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	tj, old, resp := decodeRequest[trainer.TrainJob](req)
	if resp != nil {
		return resp
	}
	return verdict(d.ValidateTrainJob(old, tj))
}

// ValidateTrainJob checks a TrainJob on CREATE (old nil) and UPDATE against every rule
// of upstream's TrainJob webhook (docs/compatibility.md#trainjob-validation,
// docs/compatibility.md#runtime-patch-changes) and Trainyard's build rules, returning
// the admission warnings and every violation (deny when non-empty):
//
//   - spec.runtimeRef names a TrainingRuntime or ClusterTrainingRuntime of
//     trainer.kubeflow.org (at spec.runtimeRef.apiGroup or .kind, "unsupported runtime:
//     <Kind>.<group>", trainjob.RuntimeKind);
//   - each spec.runtimePatches[i].manager is a domain-prefixed path (at
//     spec.runtimePatches[i].manager; validation.IsDomainPrefixedPath);
//   - no runtimePatch sets env on the containers node, dataset-initializer or
//     model-initializer (validatePatchEnv);
//   - on UPDATE, spec.runtimePatches change only while the TrainJob is suspended before
//     or after the update, and not while its JobSet has an active replicatedJob
//     (validatePatchChange, read from the JobSet cache);
//   - with the runtime (from the caches): the runtime's own rules (package mergepatches'
//     ValidateSteps, mlpolicy.ValidateRuntime; at spec.runtimeRef, naming the runtime's
//     field), the patches' replicatedJobs and containers exist
//     (mergepatches.ValidateRuntimePatches), spec.initializer's steps exist
//     (validateInitializers), the ML policy's rules (mlpolicy.ValidateTrainJob:
//     reserved env, MPI numNodes, torchtune, JAX/XGBoost numProcPerNode) and Volcano's
//     (volcano.ValidateQueue, validatePriorityClasses).
//
// Deliberate differences from upstream: a TrainJob whose runtime does not exist is
// admitted with a warning naming it, without the rules that need it (upstream denies);
// an UPDATE that leaves spec unchanged (metadata, finalizers) is not re-validated
// against a runtime that changed since (upstream denies it when the runtime is gone or
// now disagrees).
//
// Warnings: the runtime is missing; the ClusterTrainingRuntime is deprecated
// (upstream's text); spec.trainer.numProcPerNode is ignored by the runtime's policy; the
// trainer's DRA claims do not tell the GPUs per node (see claimsWarning).
func (d *Deps) ValidateTrainJob(old, tj *trainer.TrainJob) (warnings []string, errs field.ErrorList) {
	if old != nil && equality.Semantic.DeepEqual(old.Spec, tj.Spec) {
		return nil, nil
	}
	for i, p := range tj.Spec.RuntimePatches {
		errs = append(errs, validation.IsDomainPrefixedPath(runtimePatchesPath.Index(i).Child("manager"), p.Manager)...)
	}
	errs = append(errs, validatePatchEnv(tj)...)
	errs = append(errs, validatePatchChange(old, tj, d.JobSets)...)

	kind, err := trainjob.RuntimeKind(tj)
	if err != nil {
		path := runtimeRefPath.Child("kind")
		if g := tj.Spec.RuntimeRef.APIGroup; g != nil && *g != trainer.GroupName {
			path = runtimeRefPath.Child("apiGroup")
		}
		return nil, append(errs, field.Invalid(path, field.OmitValueType{}, err.Error()+
			": spec.runtimeRef must name a TrainingRuntime or ClusterTrainingRuntime of apiGroup trainer.kubeflow.org"))
	}
	rt, labels, err := d.runtime(kind, tj.Namespace, tj.Spec.RuntimeRef.Name)
	switch {
	case apierrors.IsNotFound(err):
		where := ""
		if kind == trainer.TrainingRuntimeKind {
			where = fmt.Sprintf(" in namespace %q", tj.Namespace)
		}
		return []string{fmt.Sprintf("%s %q referenced by spec.runtimeRef not found%s: the TrainJob waits for it "+
			"(condition RuntimeResolved=False); the checks that need the runtime were skipped", kind, rt.Name, where)}, errs
	case err != nil:
		return nil, append(errs, field.InternalError(runtimeRefPath, err))
	}
	if kind == trainer.ClusterTrainingRuntimeKind && labels[trainer.LabelSupport] == trainer.SupportDeprecated {
		warnings = append(warnings, fmt.Sprintf("Referenced ClusterTrainingRuntime %q is deprecated and will be removed in a future "+
			"release of Kubeflow Trainer. See runtime deprecation policy: %s", rt.Name, deprecationPolicyURL))
	}
	more, runtimeErrs := d.validateAgainstRuntime(tj, rt)
	warnings, errs = append(warnings, more...), append(errs, runtimeErrs...)
	if len(errs) == 0 {
		warnings = append(warnings, d.trainJobWarnings(tj, rt)...)
	}
	return warnings, errs
}

// runtime returns the runtime of kind and name (TrainingRuntimes in namespace) from the
// caches, with its labels. Errors: the listers' (NotFound when it does not exist, with
// the returned Runtime's Kind and Name set).
func (d *Deps) runtime(kind, namespace, name string) (plan.Runtime, map[string]string, error) {
	rt := plan.Runtime{Kind: kind, Name: name}
	if kind == trainer.TrainingRuntimeKind {
		obj, err := d.TrainingRuntimes.TrainingRuntimes(namespace).Get(name)
		if err != nil {
			return rt, nil, err
		}
		rt.Spec = &obj.Spec
		return rt, obj.Labels, nil
	}
	obj, err := d.ClusterTrainingRuntimes.Get(name)
	if err != nil {
		return rt, nil, err
	}
	rt.Spec = &obj.Spec
	return rt, obj.Labels, nil
}

// validateAgainstRuntime applies the rules that need tj's runtime rt.
func (d *Deps) validateAgainstRuntime(tj *trainer.TrainJob, rt plan.Runtime) ([]string, field.ErrorList) {
	plugins := d.plugins()
	runtimeErrs := append(mergepatches.ValidateSteps(rt.Spec), mlpolicy.ValidateRuntime(rt.Spec, plugins)...)
	if len(runtimeErrs) > 0 {
		// The TrainJob's own rules assume a runtime that builds.
		return nil, atRuntimeRef(rt, runtimeErrs)
	}
	errs := mergepatches.ValidateRuntimePatches(tj, rt)
	warnings, initErrs := validateInitializers(tj, rt)
	errs = append(errs, initErrs...)
	p := &plan.Plan{Runtime: rt}
	merged := tj
	if len(errs) > 0 {
		// Check the rest against the runtime without the patches that do not fit.
		unpatched := *tj
		unpatched.Spec.RuntimePatches = nil
		merged = &unpatched
	}
	js, err := mergepatches.Merge(merged, rt)
	if err != nil {
		return warnings, append(errs, field.InternalError(runtimeRefPath, err))
	}
	p.JobSet = js
	errs = append(errs, mlpolicy.ValidateTrainJob(tj, p, plugins)...)
	if pg := rt.Spec.PodGroupPolicy; pg != nil && pg.Volcano != nil {
		if object, queueErrs := volcano.ValidateQueue(tj, rt, js.Annotations); object == "" {
			errs = append(errs, queueErrs...)
		} else {
			errs = append(errs, atRuntimeRef(rt, queueErrs)...)
		}
		errs = append(errs, d.validatePriorityClasses(rt, p)...)
	}
	return warnings, errs
}

// atRuntimeRef reports errs, findings about runtime rt's fields, at the TrainJob's
// spec.runtimeRef, each message naming the runtime and its field (upstream reports
// runtime-derived TrainJob errors at spec.runtimeRef too).
func atRuntimeRef(rt plan.Runtime, errs field.ErrorList) field.ErrorList {
	out := make(field.ErrorList, 0, len(errs))
	for _, e := range errs {
		detail := e.Detail
		if detail == "" {
			detail = e.ErrorBody()
		}
		out = append(out, &field.Error{Type: e.Type, Field: runtimeRefPath.String(), BadValue: field.OmitValueType{},
			Detail: fmt.Sprintf("%s %s: %s", rt.Ref(), e.Field, detail)})
	}
	return out
}

// controllerContainers are the containers whose env Trainyard sets from spec.trainer
// and spec.initializer; a runtimePatch must not set it
// (docs/compatibility.md#trainjob-validation).
var controllerContainers = []string{trainer.ContainerDatasetInitializer, trainer.ContainerModelInitializer, trainer.ContainerNode}

// validatePatchEnv forbids env in a runtimePatch's containers[] entry named node,
// dataset-initializer or model-initializer (upstream's rule,
// docs/compatibility.md#trainjob-validation), at
// spec.runtimePatches[manager=<m>].trainingRuntimeSpec.template.spec.replicatedJobs
// [name=<rj>].template.spec.template.spec.containers[name=<c>].env, the message
// starting with upstream's text. Upstream checks only containers the runtime has; the
// rule needs no runtime here.
func validatePatchEnv(tj *trainer.TrainJob) field.ErrorList {
	var errs field.ErrorList
	for _, p := range tj.Spec.RuntimePatches {
		if p.TrainingRuntimeSpec == nil || p.TrainingRuntimeSpec.Template == nil || p.TrainingRuntimeSpec.Template.Spec == nil {
			continue
		}
		for _, rjp := range p.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs {
			t := rjp.Template
			if t == nil || t.Spec == nil || t.Spec.Template == nil || t.Spec.Template.Spec == nil {
				continue
			}
			for _, c := range t.Spec.Template.Spec.Containers {
				if len(c.Env) == 0 || !slices.Contains(controllerContainers, c.Name) {
					continue
				}
				errs = append(errs, field.Forbidden(runtimePatchesPath.Key("manager="+p.Manager).
					Child("trainingRuntimeSpec", "template", "spec", "replicatedJobs").Key("name="+rjp.Name).
					Child("template", "spec", "template", "spec", "containers").Key("name="+c.Name).Child("env"),
					fmt.Sprintf("must not have envs for the %s containers: set the %q container's env with %s instead",
						strings.Join(controllerContainers, ", "), c.Name, envInstead(c.Name))))
			}
		}
	}
	return errs
}

// envInstead is the TrainJob field that sets the env of controller container name.
func envInstead(name string) string {
	switch name {
	case trainer.ContainerDatasetInitializer:
		return "spec.initializer.dataset.env"
	case trainer.ContainerModelInitializer:
		return "spec.initializer.model.env"
	}
	return "spec.trainer.env"
}

// validatePatchChange applies upstream's runtimePatches change rules on UPDATE
// (docs/compatibility.md#runtime-patch-changes): when spec.runtimePatches changed
// (after defaulting, so an unchanged entry keeps its time), the TrainJob must be
// suspended before or after the update ("RuntimePatches can only be modified when the
// TrainJob is suspended before or after the update"), and its JobSet (from the cache;
// one the TrainJob does not control is not its own) must have no replicatedJob with
// active pods ("RuntimePatches cannot be modified when the JobSet's ReplicatedJob
// <name> is still active"). Both Forbidden at spec.runtimePatches; a cache error is an
// InternalError.
func validatePatchChange(old, tj *trainer.TrainJob, jobSets jobsetlisters.JobSetLister) field.ErrorList {
	if old == nil || equality.Semantic.DeepEqual(old.Spec.RuntimePatches, tj.Spec.RuntimePatches) {
		return nil
	}
	if !trainjob.IsSuspended(old) && !trainjob.IsSuspended(tj) {
		return field.ErrorList{field.Forbidden(runtimePatchesPath, "RuntimePatches can only be modified when the TrainJob is "+
			"suspended before or after the update: set spec.suspend to true in this update or before it")}
	}
	js, err := jobSets.JobSets(tj.Namespace).Get(tj.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return field.ErrorList{field.InternalError(runtimePatchesPath, err)}
	}
	if !metav1.IsControlledBy(js, tj) {
		return nil
	}
	var errs field.ErrorList
	for _, s := range js.Status.ReplicatedJobsStatus {
		if s.Active > 0 {
			errs = append(errs, field.Forbidden(runtimePatchesPath, fmt.Sprintf("RuntimePatches cannot be modified when the "+
				"JobSet's ReplicatedJob %s is still active: wait until its %d active pods of the suspended TrainJob are gone", s.Name, s.Active)))
		}
	}
	return errs
}

// validateInitializers applies upstream's initializer rules
// (docs/compatibility.md#trainjob-validation): with spec.initializer.dataset (model)
// set, the runtime has a replicatedJob named dataset-initializer (model-initializer),
// with a container or init container of that name: Invalid at spec.initializer.dataset
// (model), the messages starting with upstream's texts (upstream reports them at
// spec.runtimeRef). Upstream also denies when that container mounts no volume
// "initializer"; Trainyard only warns, since upstream's own example 05-multi-step (an
// initializer without the mount) would be denied otherwise, and the TrainJob runs.
func validateInitializers(tj *trainer.TrainJob, rt plan.Runtime) (warnings []string, errs field.ErrorList) {
	in := tj.Spec.Initializer
	if in == nil {
		return nil, nil
	}
	js := &jobsetv1alpha2.JobSet{Spec: rt.Spec.Template.Spec}
	check := func(set bool, step, config, member string) {
		if !set {
			return
		}
		path := field.NewPath("spec", "initializer", member)
		rj := plan.ReplicatedJob(js, step)
		if rj == nil {
			errs = append(errs, field.Invalid(path, field.OmitValueType{}, fmt.Sprintf("must have %s job when trainJob is configured "+
				"with input %s: runtime %s has no replicatedJob %q; remove spec.initializer.%s or use a runtime with one",
				step, config, rt.Ref(), step, member)))
			return
		}
		pod := plan.PodSpec(rj)
		c := plan.Container(pod.Containers, step)
		if c == nil && plan.Container(pod.InitContainers, step) == nil {
			errs = append(errs, field.Invalid(path, field.OmitValueType{}, fmt.Sprintf("must have container with name - %s in the %s job: "+
				"runtime %s's replicatedJob %q has containers %v", step, step, rt.Ref(), step, plan.ContainerNames(pod.Containers))))
			return
		}
		if c != nil && slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == initializerVolume }) {
			return
		}
		warnings = append(warnings, fmt.Sprintf("%s: the %q container of runtime %s mounts no volume %q, where the trainer "+
			"usually reads what it downloads", path, step, rt.Ref(), initializerVolume))
	}
	check(in.Dataset != nil, trainer.ContainerDatasetInitializer, "datasetConfig", "dataset")
	check(in.Model != nil, trainer.ContainerModelInitializer, "modelConfig", "model")
	return warnings, errs
}

// initializerVolume is the volume initializers write to
// (docs/compatibility.md#well-known-names).
const initializerVolume = "initializer"

// validatePriorityClasses applies upstream's Volcano rule
// (docs/compatibility.md#volcano): each priorityClassName of the desired JobSet's pod
// templates names an existing PriorityClass, except system-cluster-critical and
// system-node-critical. Reported at spec.runtimeRef (the pod templates are the
// runtime's: patches cannot set it), the message starting with upstream's
// `PriorityClass "<n>" doesn't exist: <error>`. Upstream stops checking at the first
// system-* name; every replicatedJob is checked here. Skipped without a PriorityClass
// cache.
func (d *Deps) validatePriorityClasses(rt plan.Runtime, p *plan.Plan) field.ErrorList {
	if d.PriorityClasses == nil {
		return nil
	}
	var errs field.ErrorList
	for _, rj := range p.JobSet.Spec.ReplicatedJobs {
		name := rj.Template.Spec.Template.Spec.PriorityClassName
		if name == "" || name == "system-cluster-critical" || name == "system-node-critical" {
			continue
		}
		_, err := d.PriorityClasses.Get(name)
		path := field.NewPath("spec", "template", "spec", "replicatedJobs").Key("name="+rj.Name).
			Child("template", "spec", "template", "spec", "priorityClassName")
		switch {
		case apierrors.IsNotFound(err):
			errs = append(errs, atRuntimeRef(rt, field.ErrorList{field.Invalid(path, name, fmt.Sprintf(
				"PriorityClass %q doesn't exist: %v: create it or change the runtime's priorityClassName", name, err))})...)
		case err != nil:
			errs = append(errs, field.InternalError(runtimeRefPath, err))
		}
	}
	return errs
}

// trainJobWarnings are the warnings about an admissible TrainJob tj of runtime rt.
func (d *Deps) trainJobWarnings(tj *trainer.TrainJob, rt plan.Runtime) []string {
	var warnings []string
	if t := tj.Spec.Trainer; t != nil && t.NumProcPerNode != nil && !startsProcsPerNode(rt.Spec.MLPolicy) {
		warnings = append(warnings, fmt.Sprintf("spec.trainer.numProcPerNode is ignored: runtime %s has no mlPolicy "+
			"(torch, mpi, flux, jax or xgboost) that starts processes per node", rt.Ref()))
	}
	if w := d.claimsWarning(tj, rt); w != "" {
		warnings = append(warnings, w)
	}
	return warnings
}

// startsProcsPerNode reports whether a runtime with this mlPolicy reads
// spec.trainer.numProcPerNode (JAX and XGBoost reject values other than 1).
func startsProcsPerNode(p *trainer.MLPolicy) bool {
	return p != nil && (p.Torch != nil || p.MPI != nil || p.Flux != nil || p.JAX != nil || p.XGBoost != nil)
}

// claimsWarning warns when the trainer's DRA claims do not tell how many GPUs a node
// has, so the processes per node (PET_NPROC_PER_NODE, MPI slots) keep the ML policy's
// value: the condition ProcsPerNodeDerived=False the DRA stage would set, said at
// admission. Empty when spec.trainer.numProcPerNode is set, without DRA caches, or when
// the claims' templates cannot be read (the stage waits for them).
func (d *Deps) claimsWarning(tj *trainer.TrainJob, rt plan.Runtime) string {
	if d.Claims == nil {
		return ""
	}
	p := &plan.Plan{Runtime: rt}
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		return ""
	}
	p.JobSet = js
	why, err := d.Claims.ProcsPerNodeUnknown(tj, p)
	if err != nil || why == "" {
		return ""
	}
	return why + ": the processes per node keep the ML policy's value; set spec.trainer.numProcPerNode"
}

// mutateTrainJob answers the TrainJob mutating webhook.
func (d *Deps) mutateTrainJob(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	tj, old, resp := decodeRequest[trainer.TrainJob](req)
	if resp != nil {
		return resp
	}
	ops := DefaultRuntimePatchTimes(old, tj, d.now())
	resp = &admissionv1.AdmissionResponse{Allowed: true}
	if len(ops) == 0 {
		return resp
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return badRequest("encoding the patch: " + err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	return resp
}

// PatchOperation is one RFC 6902 JSON patch operation.
type PatchOperation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// DefaultRuntimePatchTimes defaults spec.runtimePatches[].time exactly as upstream's
// mutating webhook does (docs/compatibility.md#trainjob-defaulting) and returns the
// JSON patch that does it (empty when nothing changes); tj is not modified. now is
// taken at second precision.
//
//   - CREATE (old nil): each patch without a time gets now; a time the user set is kept.
//   - UPDATE: a patch whose manager the old object has gets the old patch's time when the
//     two are equal apart from time (even if the user changed the time, and removed when
//     the old patch had none), else now; a patch of a new manager keeps the user's time,
//     or gets now.
func DefaultRuntimePatchTimes(old, tj *trainer.TrainJob, now time.Time) []PatchOperation {
	stamp := metav1.NewTime(now.Truncate(time.Second))
	var oldByManager map[string]*trainer.RuntimePatch
	if old != nil {
		oldByManager = make(map[string]*trainer.RuntimePatch, len(old.Spec.RuntimePatches))
		for i := range old.Spec.RuntimePatches {
			oldByManager[old.Spec.RuntimePatches[i].Manager] = &old.Spec.RuntimePatches[i]
		}
	}
	var ops []PatchOperation
	for i := range tj.Spec.RuntimePatches {
		p := &tj.Spec.RuntimePatches[i]
		want := p.Time
		switch prev, ok := oldByManager[p.Manager]; {
		case ok && equalIgnoringTime(prev, p):
			want = prev.Time
		case ok:
			want = &stamp
		case p.Time == nil:
			want = &stamp
		}
		path := fmt.Sprintf("/spec/runtimePatches/%d/time", i)
		switch {
		case want == nil && p.Time != nil:
			ops = append(ops, PatchOperation{Op: "remove", Path: path})
		case want != nil && (p.Time == nil || !p.Time.Equal(want)):
			ops = append(ops, PatchOperation{Op: "add", Path: path, Value: *want})
		}
	}
	return ops
}

// equalIgnoringTime reports whether two runtime patches are semantically equal apart
// from their time.
func equalIgnoringTime(a, b *trainer.RuntimePatch) bool {
	x, y := *a, *b
	x.Time, y.Time = nil, nil
	return equality.Semantic.DeepEqual(x, y)
}
