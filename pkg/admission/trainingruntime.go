package admission

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// LabelWebhookValidation = "disabled" on a runtime opts it out of validation, as the
// runtime webhooks' objectSelector does upstream
// (docs/compatibility.md#admission-rules); the handlers honour it too, for webhook
// configurations without the selector.
const LabelWebhookValidation = "trainer.kubeflow.org/webhook-validation"

// validateTrainingRuntime answers the TrainingRuntime validating webhook.
func (d *Deps) validateTrainingRuntime(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	obj, old, resp := decodeRequest[trainer.TrainingRuntime](req)
	if resp != nil {
		return resp
	}
	var oldSpec *trainer.TrainingRuntimeSpec
	if old != nil {
		oldSpec = &old.Spec
	}
	return verdict(d.ValidateRuntime(trainer.TrainingRuntimeKind, &obj.ObjectMeta, oldSpec, &obj.Spec))
}

// ValidateRuntime checks a TrainingRuntime or ClusterTrainingRuntime (kind; meta its
// metadata) on CREATE (oldSpec nil) and UPDATE, returning the warnings and every
// violation (see ValidateRuntimeSpec for the rules). A runtime labelled
// trainer.kubeflow.org/webhook-validation=disabled, or an UPDATE that leaves spec
// unchanged (metadata, finalizers), is admitted without checks.
//
// Upstream never validates a TrainingRuntime UPDATE
// (docs/compatibility.md#runtime-validation, docs/compatibility.md#upstream-quirks
// (quirk 9)) and validates ClusterTrainingRuntime UPDATEs. Trainyard validates both
// kinds alike: a runtime edited into one that cannot build fails every TrainJob that
// uses it, and the edit is the place to say so.
//
// Warnings (upstream has none but the deprecation, which ValidateClusterTrainingRuntime
// adds): on UPDATE, the unfinished TrainJobs already built from the runtime keep the
// version they were built from (runtime snapshots) and will not see the edit; on CREATE
// and UPDATE, the TrainJobs still to be built whose runtimePatches name a replicatedJob
// or container the runtime lacks (they would get JobSetReady=False).
func (d *Deps) ValidateRuntime(kind string, meta *metav1.ObjectMeta, oldSpec, spec *trainer.TrainingRuntimeSpec) (warnings []string, errs field.ErrorList) {
	if meta.Labels[LabelWebhookValidation] == "disabled" {
		return nil, nil
	}
	if oldSpec != nil && equality.Semantic.DeepEqual(oldSpec, spec) {
		return nil, nil
	}
	errs = ValidateRuntimeSpec(spec, d.plugins())
	if len(errs) == 0 {
		warnings = d.usersWarnings(plan.Runtime{Kind: kind, Name: meta.Name, Spec: spec}, meta.Namespace, oldSpec != nil)
	}
	return warnings, errs
}

// ValidateRuntimeSpec returns every violation of the rules a runtime spec must follow,
// with paths relative to the runtime object:
//
//   - upstream's (docs/compatibility.md#runtime-validation): a replicatedJob labelled
//     trainer.kubeflow.org/trainjob-ancestor-step (trainer, dataset-initializer,
//     model-initializer) has replicas 1 (at spec.template.spec.replicatedJobs
//     [name=<rj>].replicas, "always must be 1") and the container its step needs
//     (mergepatches.ValidateSteps);
//   - those the controller checks when it builds a TrainJob, which depend on the
//     runtime alone (otherwise every TrainJob using it gets JobSetReady=False): a
//     trainer step exists (mergepatches.ValidateSteps); the ML policy's
//     (mlpolicy.ValidateRuntime): MPI has a launcher, and a node unless
//     runLauncherAsNode; Flux has its node container and no init container
//     flux-installer; torch envInjection targets exist;
//   - KEP-2899's, which the CRD's CEL rules also enforce: no ttlSecondsAfterFinished in
//     the JobSet template, no activeDeadlineSeconds or ttlSecondsAfterFinished in a Job
//     template (validateLifecycleInTemplate).
//
// Upstream reports replicatedJobs by index (replicatedJobs[0]); Trainyard by name, as
// its conditions do.
func ValidateRuntimeSpec(spec *trainer.TrainingRuntimeSpec, plugins []mlpolicy.Plugin) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "template", "spec", "replicatedJobs")
	for _, rj := range spec.Template.Spec.ReplicatedJobs {
		switch plan.Ancestor(&rj) {
		case trainer.AncestorTrainer, trainer.AncestorDatasetInitializer, trainer.AncestorModelInitializer:
			if rj.Replicas != 1 {
				errs = append(errs, field.Invalid(path.Key("name="+rj.Name).Child("replicas"), rj.Replicas,
					"always must be 1: a TrainJob step runs one Job; scale it with parallelism (or spec.trainer.numNodes for the trainer)"))
			}
		}
	}
	errs = append(errs, validateLifecycleInTemplate(spec)...)
	errs = append(errs, mergepatches.ValidateSteps(spec)...)
	return append(errs, mlpolicy.ValidateRuntime(spec, plugins)...)
}

// validateLifecycleInTemplate refuses a deadline or TTL inside the runtime's JobSet or
// Job templates, as the CRD's CEL rules do (KEP-2899, kubeflow/trainer #4052): the
// TrainJob owns both, and a JobSet or Job removed or failed under it by a timer of its
// own would be re-created or leave it without its final status (kubeflow/trainer
// #3779). The fix is spec.runPolicy (docs/compatibility.md#ttl-and-run-policy).
func validateLifecycleInTemplate(spec *trainer.TrainingRuntimeSpec) field.ErrorList {
	var errs field.ErrorList
	js := field.NewPath("spec", "template", "spec")
	if ttl := spec.Template.Spec.TTLSecondsAfterFinished; ttl != nil {
		errs = append(errs, field.Forbidden(js.Child("ttlSecondsAfterFinished"),
			"must not be set: the TrainJob owns its cleanup; set spec.runPolicy.ttlSecondsAfterFinished on the runtime (or spec.ttlSecondsAfterFinished on the TrainJob) instead"))
	}
	for _, rj := range spec.Template.Spec.ReplicatedJobs {
		job := js.Child("replicatedJobs").Key("name="+rj.Name).Child("template", "spec")
		if rj.Template.Spec.ActiveDeadlineSeconds != nil {
			errs = append(errs, field.Forbidden(job.Child("activeDeadlineSeconds"),
				"must not be set: the TrainJob owns its deadline; set spec.runPolicy.activeDeadlineSeconds on the runtime (or spec.activeDeadlineSeconds on the TrainJob) instead"))
		}
		if rj.Template.Spec.TTLSecondsAfterFinished != nil {
			errs = append(errs, field.Forbidden(job.Child("ttlSecondsAfterFinished"),
				"must not be set: the TrainJob owns its cleanup; set spec.runPolicy.ttlSecondsAfterFinished on the runtime (or spec.ttlSecondsAfterFinished on the TrainJob) instead"))
		}
	}
	return errs
}

// maxNamed bounds how many TrainJobs a warning names.
const maxNamed = 5

// usersWarnings warns about the TrainJobs of runtime rt (in namespace for a
// TrainingRuntime) that an edit (update) or its creation concerns; none without a
// TrainJob cache.
func (d *Deps) usersWarnings(rt plan.Runtime, namespace string, update bool) []string {
	if d.TrainJobs == nil {
		return nil
	}
	if rt.Kind == trainer.ClusterTrainingRuntimeKind {
		namespace = ""
	}
	tjs, err := d.TrainJobs.TrainJobsUsing(rt.Kind, namespace, rt.Name)
	if err != nil {
		return nil
	}
	var built, misfit []string
	for _, tj := range tjs {
		if trainjob.IsFinished(tj) || tj.DeletionTimestamp != nil {
			continue
		}
		if js, err := d.JobSets.JobSets(tj.Namespace).Get(tj.Name); err == nil && metav1.IsControlledBy(js, tj) {
			built = append(built, tj.Namespace+"/"+tj.Name)
			continue
		}
		if len(mergepatches.ValidateRuntimePatches(tj, rt)) > 0 {
			misfit = append(misfit, tj.Namespace+"/"+tj.Name)
		}
	}
	var warnings []string
	if update && len(built) > 0 {
		warnings = append(warnings, fmt.Sprintf("%d started TrainJob(s) keep the runtime they were built from and will not see "+
			"this edit (runtime snapshot): %s", len(built), names(built)))
	}
	if len(misfit) > 0 {
		warnings = append(warnings, fmt.Sprintf("the runtimePatches of %d TrainJob(s) name a replicatedJob or container this "+
			"runtime lacks; they get JobSetReady=False until fixed: %s", len(misfit), names(misfit)))
	}
	return warnings
}

// names lists at most maxNamed of list, then how many more.
func names(list []string) string {
	if len(list) <= maxNamed {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:maxNamed], ", "), len(list)-maxNamed)
}
