package search

import (
	"fmt"
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Validate returns what makes spec's search impossible to run, as field errors naming
// the field and the fix: bounds that do not parse as float64 (or overflow it); min not
// below max; a log-uniform min not above 0; an Int range holding no integer; a grid
// over a parameter that is not categorical; two parameters of one name. The CRD's rules
// refuse most of these already (docs/compatibility.md); Validate is the controller's
// own check, for objects created before the CRD was installed and for `trainyard
// render`. It returns nil for a valid spec.
func Validate(spec *trainer.OptimizationJobSpec) error {
	var errs field.ErrorList
	params := field.NewPath("spec", "parameters")
	grid := spec.SearchAlgorithm != nil && spec.SearchAlgorithm.Grid != nil
	seen := map[string]bool{}
	for i, p := range spec.Parameters {
		path := params.Index(i)
		if seen[p.Name] {
			errs = append(errs, field.Duplicate(path.Child("name"), p.Name))
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
	return errs.ToAggregate()
}

// validateRange checks the bounds of a uniform (log false) or log-uniform space.
func validateRange(path *field.Path, minBound, maxBound trainer.Double, typ trainer.ParameterType, log bool) field.ErrorList {
	var errs field.ErrorList
	lo, err := strconv.ParseFloat(string(minBound), 64)
	if err != nil || math.IsInf(lo, 0) {
		errs = append(errs, field.Invalid(path.Child("min"), minBound, "must be a decimal number, e.g. 0.001 or 1e-3"))
	}
	hi, err2 := strconv.ParseFloat(string(maxBound), 64)
	if err2 != nil || math.IsInf(hi, 0) {
		errs = append(errs, field.Invalid(path.Child("max"), maxBound, "must be a decimal number, e.g. 0.1 or 1e-1"))
	}
	if len(errs) > 0 {
		return errs
	}
	switch {
	case lo >= hi:
		errs = append(errs, field.Invalid(path.Child("min"), minBound, fmt.Sprintf("must be below max (%s)", maxBound)))
	case log && lo <= 0:
		errs = append(errs, field.Invalid(path.Child("min"), minBound, "a log-uniform range must start above 0; use uniform for ranges from 0 or below"))
	case typ == trainer.ParameterTypeInt && math.Ceil(lo) > math.Floor(hi):
		errs = append(errs, field.Invalid(path, fmt.Sprintf("[%s, %s]", minBound, maxBound), "type Int needs at least one integer in [min, max]"))
	case typ == trainer.ParameterTypeInt && (math.Abs(lo) > 1<<53 || math.Abs(hi) > 1<<53):
		errs = append(errs, field.Invalid(path, fmt.Sprintf("[%s, %s]", minBound, maxBound), "type Int bounds must lie within ±2^53"))
	}
	return errs
}
