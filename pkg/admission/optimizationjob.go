package admission

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/search"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// trainJobTemplatePath is where an OptimizationJob keeps its trials' TrainJob spec.
var trainJobTemplatePath = field.NewPath("spec", "trainJobTemplate", "spec")

// validateOptimizationJob answers the OptimizationJob validating webhook: the rules of
// ValidateOptimizationJob and, on CREATE, that the requester may create the trials
// (authorizeTrials).
func (d *Deps) validateOptimizationJob(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	job, old, resp := decodeRequest[trainer.OptimizationJob](req)
	if resp != nil {
		return resp
	}
	warnings, errs := d.ValidateOptimizationJob(old, job)
	if req.Operation == admissionv1.Create {
		errs = append(errs, d.authorizeTrials(req.UserInfo, req.Namespace)...)
	}
	return verdict(warnings, errs)
}

// trialAuthorizationTimeout bounds authorizeTrials' SubjectAccessReview, within the
// webhook's default timeout (TimeoutSeconds, the chart's webhook.timeoutSeconds: 10 s);
// a review the API server answers in milliseconds.
const trialAuthorizationTimeout = 5 * time.Second

// authorizeTrials asks the API server (a SubjectAccessReview) whether user may create
// trainjobs.trainer.kubeflow.org in namespace. The controller creates an
// OptimizationJob's trials with its own identity, so without this check whoever may
// create an OptimizationJob could run TrainJobs — and through runtimePatches, pods
// under any service account of the namespace — that RBAC does not let them create
// themselves. With it, creating an OptimizationJob grants nothing creating its trials
// directly would not (docs/compatibility.md#who-may-create-an-optimizationjob; issue
// 41, finding 8). Errors: Forbidden at spec.trainJobTemplate when the review denies,
// naming the user, the namespace and the fix; InternalError (code 500, the create
// fails: the check fails closed) when the review itself fails. Nil
// Deps.SubjectAccessReviews skips the check.
func (d *Deps) authorizeTrials(user authenticationv1.UserInfo, namespace string) field.ErrorList {
	if d.SubjectAccessReviews == nil {
		return nil
	}
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), trialAuthorizationTimeout)
	defer cancel()
	review, err := d.SubjectAccessReviews.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: "create", Group: trainer.GroupName, Version: trainer.SchemeGroupVersion.Version, Resource: "trainjobs",
		},
	}}, metav1.CreateOptions{})
	path := field.NewPath("spec", "trainJobTemplate")
	if err != nil {
		return field.ErrorList{field.InternalError(path, fmt.Errorf(
			"asking whether %q may create the trials (trainjobs in namespace %q), a SubjectAccessReview: %w; retry, and if it persists check the controller's RBAC (create subjectaccessreviews)",
			user.Username, namespace, err))}
	}
	if review.Status.Allowed {
		return nil
	}
	why := ""
	if review.Status.Reason != "" {
		why = " (" + review.Status.Reason + ")"
	}
	return field.ErrorList{field.Forbidden(path, fmt.Sprintf(
		"%q may not create trainjobs.trainer.kubeflow.org in namespace %q%s, and every trial of an OptimizationJob is a TrainJob created for its creator: "+
			"ask for a Role granting create on trainjobs.trainer.kubeflow.org in the namespace, bound to you by a RoleBinding", user.Username, namespace, why))}
}

// ValidateOptimizationJob checks an OptimizationJob on CREATE (old nil) and on an
// UPDATE that changes spec (docs/compatibility.md#optimizationjob-validation),
// returning the admission warnings and every violation (deny when non-empty):
//
//   - the search's rules, search.ValidateSpec (the controller's own check: bounds,
//     objectives, parameter names and variables, grid over categorical parameters, the
//     failure budget's annotation trainyard.dev/max-failed-trials);
//   - spec.parallelTrials at most spec.numTrials (both default 1);
//   - on CREATE, no metadata.annotations[trainyard.dev/trials-created]: the
//     controller's record (trial.AnnotationTrialsCreated), which would make the
//     trials it counts look deleted;
//   - the trials' names, trial.Name(metadata.name, index), are RFC 1035 labels, as a
//     TrainJob's name must be (at metadata.name);
//   - spec.trainJobTemplate.metadata's labels and annotations are valid for a TrainJob
//     (validateTemplateMetadata), and it has no finalizers (search.ValidateSpec);
//   - spec.trainJobTemplate.spec is a valid TrainJob spec: the trial TrainJob of index 0
//     (trial.New, with the search's first assignment) passes ValidateTrainJob, its
//     findings and warnings reported at spec.trainJobTemplate.spec.… (a missing runtime
//     is a warning, as for a TrainJob).
//
// An UPDATE that leaves spec unchanged is admitted as is: status and metadata writes
// are never held to rules added after the object was created. The spec itself cannot
// change (the CRD's rule self == oldSelf refuses it before this webhook is called).
//
// Warnings: a grid search whose spec.numTrials is not its size (gridWarnings), and the
// template's TrainJob warnings.
func (d *Deps) ValidateOptimizationJob(old, job *trainer.OptimizationJob) (warnings []string, errs field.ErrorList) {
	if old != nil && equality.Semantic.DeepEqual(old.Spec, job.Spec) {
		return nil, nil
	}
	errs = search.ValidateSpec(job)
	searchRuns := len(errs) == 0
	numTrials, parallel := ptr.Deref(job.Spec.NumTrials, 1), ptr.Deref(job.Spec.ParallelTrials, 1)
	if parallel > numTrials {
		errs = append(errs, field.Invalid(field.NewPath("spec", "parallelTrials"), parallel, fmt.Sprintf(
			"must not exceed numTrials (%d): lower parallelTrials, or raise numTrials", numTrials)))
	}
	if _, ok := job.Annotations[trial.AnnotationTrialsCreated]; ok && old == nil {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations").Key(trial.AnnotationTrialsCreated),
			"the controller's record of the trials it has created (a trial below it that is gone counts as deleted): remove it; a copy of another OptimizationJob carries it"))
	}
	errs = append(errs, validateTrialNames(job.Name, int(max(numTrials, 1)))...)
	errs = append(errs, validateTemplateMetadata(&job.Spec.TrainJobTemplate.ObjectMeta)...)

	var assignment []trainer.ParameterAssignment
	if searchRuns {
		srch, err := search.New(&job.Spec, search.Seed(job))
		if err != nil { // ValidateSpec found nothing: New cannot fail
			return nil, append(errs, field.InternalError(field.NewPath("spec"), err))
		}
		warnings = append(warnings, gridWarnings(job, srch.Size())...)
		if assignment, err = srch.Assignment(0); err != nil {
			return nil, append(errs, field.InternalError(field.NewPath("spec"), err))
		}
	}
	// With a spec the search refuses, the template is checked without the parameters'
	// variables.
	tj, err := trial.New(job, 0, assignment)
	if err != nil { // the variables' collisions are ValidateSpec's
		return warnings, append(errs, field.Invalid(field.NewPath("spec", "parameters"), field.OmitValueType{}, err.Error()))
	}
	tmplWarnings, tmplErrs := d.ValidateTrainJob(nil, tj)
	for _, w := range tmplWarnings {
		warnings = append(warnings, "spec.trainJobTemplate (every trial): "+inTemplate(w))
	}
	for _, e := range tmplErrs {
		moved := *e
		moved.Field = inTemplate(e.Field)
		moved.Detail = inTemplate(e.Detail)
		errs = append(errs, &moved)
	}
	return warnings, errs
}

// maxNumTrials is spec.numTrials' maximum (the CRD's, upstream's).
const maxNumTrials = 100

// gridWarnings returns the warnings for a grid search of size combinations (none for a
// random search, whose Size is math.MaxInt): with spec.numTrials below size the
// search runs only that many of them (spread over every parameter's choices, see
// search's grid order) — also when numTrials is unset, as it defaults to 1 — naming
// spec.numTrials and the value that runs the whole grid, or, past numTrials' maximum
// of 100, that choices must go; with spec.numTrials above size the search stops at
// size (Complete, reason SearchSpaceExhausted). Issue 42, item 2: a cut grid was silent.
func gridWarnings(job *trainer.OptimizationJob, size int) []string {
	grid := job.Spec.SearchAlgorithm != nil && job.Spec.SearchAlgorithm.Grid != nil
	numTrials := int(ptr.Deref(job.Spec.NumTrials, 1))
	switch {
	case !grid || numTrials == size:
		return nil
	case numTrials > size:
		return []string{fmt.Sprintf("spec.numTrials is %d but the grid has %d combinations of its parameters' choices: "+
			"the search will stop at %d trials (condition Complete, reason %s)", numTrials, size, size, trainer.OptimizationJobSearchSpaceExhaustedReason)}
	}
	set := fmt.Sprintf("spec.numTrials is %d", numTrials)
	if job.Spec.NumTrials == nil {
		set = "spec.numTrials is unset (default 1)"
	}
	fix := fmt.Sprintf("set spec.numTrials to %d to run the whole grid", size)
	if size > maxNumTrials {
		fix = fmt.Sprintf("numTrials is at most %d: remove choices from spec.parameters to run the whole grid", maxNumTrials)
	}
	return []string{fmt.Sprintf("%s but the grid has %d combinations of its parameters' choices: the search runs %d of them, "+
		"spread over every parameter's choices, and never the other %d; %s", set, size, numTrials, size-numTrials, fix)}
}

// validateTrialNames checks that the names of the trials of the OptimizationJob named
// name, indexes 0 to numTrials-1, are valid TrainJob names (RFC 1035 labels; trial.Name
// keeps them within 63 characters). Checking the first and the last index is enough:
// later names keep a prefix of the first's. An empty name (not generated yet) is not
// checked.
func validateTrialNames(name string, numTrials int) field.ErrorList {
	if name == "" {
		return nil
	}
	for _, index := range []int{0, numTrials - 1} {
		trialName := trial.Name(name, index)
		if msgs := validation.IsDNS1035Label(trialName); len(msgs) > 0 {
			return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), name, fmt.Sprintf(
				"the trials are TrainJobs named <name>-<index>, and %q is not a valid TrainJob name (%s): "+
					"name the OptimizationJob with lower-case letters, digits and '-', starting with a letter", trialName, msgs[0]))}
		}
	}
	return nil
}

// validateTemplateMetadata checks what the trials copy from
// spec.trainJobTemplate.metadata as the API server checks a TrainJob's metadata, which
// it does not check in an OptimizationJob (an embedded object's metadata is not
// validated): label keys and values, annotation keys and total size. Each trial's
// create would be refused otherwise. Finalizers are refused whatever their names
// (search.ValidateSpec).
func validateTemplateMetadata(meta *metav1.ObjectMeta) field.ErrorList {
	path := field.NewPath("spec", "trainJobTemplate", "metadata")
	errs := metavalidation.ValidateLabels(meta.Labels, path.Child("labels"))
	return append(errs, apivalidation.ValidateAnnotations(meta.Annotations, path.Child("annotations"))...)
}

// templateFields matches the TrainJob spec's field paths in a rule's field or message
// (spec.runtimeRef, spec.trainer.env, ...): "spec." followed by a field of
// trainer.TrainJobSpec, at the start or after a character that cannot be part of a
// path. A runtime's fields (spec.template..., spec.mlPolicy, which runtime-derived
// findings name) are not TrainJobSpec fields and are left alone, and so is the "spec."
// inside a longer path (template.spec.replicatedJobs).
var templateFields = func() *regexp.Regexp {
	var names []string
	t := reflect.TypeFor[trainer.TrainJobSpec]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, regexp.QuoteMeta(name))
		}
	}
	return regexp.MustCompile(`(^|[^.\w\[\]=])spec\.((?:` + strings.Join(names, "|") + `)\b)`)
}()

// inTemplate rewrites the TrainJob spec's field paths in s to the OptimizationJob's
// spec.trainJobTemplate.spec.….
func inTemplate(s string) string {
	return templateFields.ReplaceAllString(s, "${1}"+trainJobTemplatePath.String()+".${2}")
}
