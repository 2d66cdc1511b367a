package search

import (
	"fmt"
	"math"
	"regexp"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// doublePattern is the wire form of a trainer.Double, the CRD's pattern: strconv
// alone would also take "NaN", "Inf", hexadecimal and underscores.
var doublePattern = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// Validate returns the spec's rules of ValidateSpec (all but the failure budget's
// annotation) as one error (a field.ErrorList aggregate), nil for a valid spec: New's
// check.
func Validate(spec *trainer.OptimizationJobSpec) error {
	return validateSpec(spec).ToAggregate()
}

// ValidateSpec returns what makes job's search impossible to run, as field errors at
// spec.… (or metadata.annotations[…]) naming the field and the fix:
//
//   - spec.objectives: none, more than one, or one whose metric is empty;
//   - spec.parameters: none; a parameter without a name; two parameters of one name; two
//     parameters whose trainer variables collide (trial.EnvName: "learning-rate" and
//     "learning_rate" both set KUBEFLOW_TRAINER_OPT_LEARNING_RATE);
//   - a search space setting not exactly one of uniform, logUniform and categorical; a
//     categorical space without choices; a grid over a parameter that is not categorical;
//   - bounds that are not decimal numbers in the CRD's form (e.g. 0.001 or 1e-3; not
//     NaN, Inf or hexadecimal) or overflow float64; min not below max; a uniform range
//     whose width, max − min, overflows float64 (e.g. ±1e308: every draw would be
//     +Inf); a log-uniform min not above 0; an Int range holding no integer, or
//     reaching past ±2^53;
//   - metadata.annotations[trainyard.dev/max-failed-trials] (AnnotationMaxFailedTrials)
//     that is not a whole number from 1 (FailureBudget);
//   - metadata.annotations[trainyard.dev/final-report-wait] (AnnotationFinalReportWait)
//     that is not a duration from 0s to 1h (FinalReportWait);
//   - spec.trainJobTemplate.metadata.finalizers that are not empty
//     (validateTemplateFinalizers; issue 41, finding 8).
//
// The CRD's schema and CEL rules refuse most of the spec's already (docs/compatibility.md#optimizationjob-validation);
// ValidateSpec is the controller's own check (an OptimizationJob that fails it gets
// Failed, reason InvalidSpec, and no trial), for objects admitted without the CRD's rules
// or the webhook and for `trainyard render`, and the admission webhook's first rule. It
// returns nil for a valid job.
func ValidateSpec(job *trainer.OptimizationJob) field.ErrorList {
	errs := validateSpec(&job.Spec)
	if _, err := FailureBudget(job); err != nil {
		errs = append(errs, err)
	}
	if _, err := FinalReportWait(job, 0); err != nil {
		errs = append(errs, err)
	}
	return append(errs, validateTemplateFinalizers(job)...)
}

// validateTemplateFinalizers refuses finalizers in spec.trainJobTemplate.metadata: every
// trial would carry them, and a trial is deleted with its OptimizationJob by the garbage
// collector (its controller owner reference), which a finalizer that only another
// controller removes holds back — deleted or not, the trials and their pods would stay.
// Trainyard puts no finalizer on a TrainJob; a user's own clean-up belongs on the
// OptimizationJob (docs/compatibility.md#who-may-create-an-optimizationjob).
func validateTemplateFinalizers(job *trainer.OptimizationJob) field.ErrorList {
	if len(job.Spec.TrainJobTemplate.Finalizers) == 0 {
		return nil
	}
	return field.ErrorList{field.Forbidden(field.NewPath("spec", "trainJobTemplate", "metadata", "finalizers"),
		fmt.Sprintf("must be empty, not %q: every trial would carry them, and trials are deleted with their OptimizationJob by the garbage collector, "+
			"which a finalizer only another controller removes holds back; put finalizers on the OptimizationJob itself", job.Spec.TrainJobTemplate.Finalizers))}
}

// validateSpec is ValidateSpec's rules of the spec.
func validateSpec(spec *trainer.OptimizationJobSpec) field.ErrorList {
	var errs field.ErrorList
	objectives := field.NewPath("spec", "objectives")
	switch n := len(spec.Objectives); {
	case n == 0:
		errs = append(errs, field.Required(objectives, "name the objective metric to optimize, e.g. [{metric: loss}]"))
	case n > 1:
		errs = append(errs, field.TooMany(objectives, n, 1))
	}
	for i, o := range spec.Objectives {
		if o.Metric == "" {
			errs = append(errs, field.Required(objectives.Index(i).Child("metric"),
				"name the metric the trials report (status.trainerStatus.metrics[].name), e.g. loss"))
		}
	}
	params := field.NewPath("spec", "parameters")
	grid := spec.SearchAlgorithm != nil && spec.SearchAlgorithm.Grid != nil
	seen := map[string]bool{}
	envs := map[string]string{}
	for i, p := range spec.Parameters {
		path := params.Index(i)
		switch {
		case p.Name == "":
			errs = append(errs, field.Required(path.Child("name"), "name the parameter: the trials read it as "+trial.EnvPrefix+"<NAME>"))
		case seen[p.Name]:
			errs = append(errs, field.Duplicate(path.Child("name"), p.Name))
		default:
			env := trial.EnvName(p.Name)
			if other, ok := envs[env]; ok {
				errs = append(errs, field.Invalid(path.Child("name"), p.Name, fmt.Sprintf(
					"parameters %q and %q would both set %s in the trials (upper case, characters other than letters and digits as '_'): rename one",
					other, p.Name, env)))
			} else {
				envs[env] = p.Name
			}
		}
		seen[p.Name] = true
		space := path.Child("searchSpace")
		switch ss := p.SearchSpace; {
		case ss.Categorical != nil && ss.Uniform == nil && ss.LogUniform == nil:
			if len(ss.Categorical.Choices) == 0 {
				errs = append(errs, field.Required(space.Child("categorical", "choices"), "list at least one choice"))
			}
		case grid:
			errs = append(errs, field.Invalid(space, p.Name, "grid search runs categorical parameters only: give this one a categorical searchSpace, or use random search"))
		case ss.Uniform != nil && ss.LogUniform == nil && ss.Categorical == nil:
			errs = append(errs, validateRange(space.Child("uniform"), ss.Uniform.Min, ss.Uniform.Max, ss.Uniform.Type, false)...)
		case ss.LogUniform != nil && ss.Uniform == nil && ss.Categorical == nil:
			errs = append(errs, validateRange(space.Child("logUniform"), ss.LogUniform.Min, ss.LogUniform.Max, ss.LogUniform.Type, true)...)
		default:
			errs = append(errs, field.Invalid(space, p.Name, "set exactly one of uniform, logUniform and categorical"))
		}
	}
	if len(spec.Parameters) == 0 {
		errs = append(errs, field.Required(params, "list at least one parameter to search over"))
	}
	return errs
}

// validateRange checks the bounds of a uniform (log false) or log-uniform space.
func validateRange(path *field.Path, minBound, maxBound trainer.Double, typ trainer.ParameterType, log bool) field.ErrorList {
	var errs field.ErrorList
	parse := func(d trainer.Double) (float64, bool) {
		if !doublePattern.MatchString(string(d)) {
			return 0, false
		}
		v, err := strconv.ParseFloat(string(d), 64)
		return v, err == nil && !math.IsInf(v, 0)
	}
	lo, ok := parse(minBound)
	if !ok {
		errs = append(errs, field.Invalid(path.Child("min"), minBound, "must be a decimal number within float64's range, written as a string, e.g. \"0.001\" or \"1e-3\""))
	}
	hi, ok2 := parse(maxBound)
	if !ok2 {
		errs = append(errs, field.Invalid(path.Child("max"), maxBound, "must be a decimal number within float64's range, written as a string, e.g. \"0.1\" or \"1e-1\""))
	}
	if len(errs) > 0 {
		return errs
	}
	switch {
	case lo >= hi:
		errs = append(errs, field.Invalid(path.Child("min"), minBound, fmt.Sprintf("must be below max (%s): swap them, or widen the range", maxBound)))
	case !log && math.IsInf(hi-lo, 0):
		errs = append(errs, field.Invalid(path, fmt.Sprintf("[%s, %s]", minBound, maxBound), fmt.Sprintf(
			"the range's width, max − min, overflows float64 (above %.4g), so a draw would be +Inf: narrow the range", math.MaxFloat64)))
	case log && lo <= 0:
		errs = append(errs, field.Invalid(path.Child("min"), minBound, "a log-uniform range must start above 0: raise min, or use uniform for ranges from 0 or below"))
	case typ == trainer.ParameterTypeInt && math.Ceil(lo) > math.Floor(hi):
		errs = append(errs, field.Invalid(path, fmt.Sprintf("[%s, %s]", minBound, maxBound), "type Int needs at least one integer in [min, max]: widen the range, or use type Float"))
	case typ == trainer.ParameterTypeInt && (math.Abs(lo) > 1<<53 || math.Abs(hi) > 1<<53):
		errs = append(errs, field.Invalid(path, fmt.Sprintf("[%s, %s]", minBound, maxBound), "type Int bounds must lie within ±2^53 (9007199254740992): narrow the range, or use type Float"))
	}
	return errs
}
