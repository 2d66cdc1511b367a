package progress

import (
	"fmt"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Limits of a TrainerStatus, the CRD's (pkg/apis/trainer/v1alpha1 TrainerStatus and
// Metric markers, upstream v2.3's).
const (
	MaxProgressPercentage = 100
	MaxMetrics            = 256
	MaxMetricNameLength   = 64 // characters, as the CRD's maxLength counts them
	MaxMetricValueLength  = 64
)

// DefaultMaxClockSkew is the default HandlerConfig.MaxClockSkew: how far a report's
// lastUpdatedTime may be ahead of the server's clock.
const DefaultMaxClockSkew = 5 * time.Minute

// ValidateTrainerStatus checks ts against the rules the TrainJob CRD enforces on
// status.trainerStatus (upstream v2.3's markers and CEL rule), so a report the API
// server would refuse is refused when it arrives (422) instead of failing its write
// later, when no one can be told. fldPath is where ts sits in the request, e.g.
// field.NewPath("trainerStatus"). The rules:
//
//   - progressPercentage, when set, is 0 to 100 (CRD minimum/maximum);
//   - estimatedRemainingSeconds, when set, is at least 0 (CRD minimum);
//   - metrics has at most 256 items (CRD maxItems); each name and value is 1 to 64
//     characters (CRD minLength/maxLength; the value has no pattern, so any string of
//     that length, e.g. "0.0123" or "nan", passes). The list is atomic, so duplicate
//     names are allowed, as the API server allows them;
//   - lastUpdatedTime is set (CRD CEL rule "has(self.lastUpdatedTime)", with its message).
//
// Every violation is reported, each naming the field and what would be accepted.
func ValidateTrainerStatus(ts *trainer.TrainerStatus, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ts == nil {
		return errs
	}
	if p := ts.ProgressPercentage; p != nil && (*p < 0 || *p > MaxProgressPercentage) {
		errs = append(errs, field.Invalid(fldPath.Child("progressPercentage"), *p,
			fmt.Sprintf("must be between 0 and %d", MaxProgressPercentage)))
	}
	if s := ts.EstimatedRemainingSeconds; s != nil && *s < 0 {
		errs = append(errs, field.Invalid(fldPath.Child("estimatedRemainingSeconds"), *s,
			"must be greater than or equal to 0 (seconds until training completes)"))
	}
	// Paths are built only for errors: a valid report allocates nothing here.
	if n := len(ts.Metrics); n > MaxMetrics {
		errs = append(errs, field.TooMany(fldPath.Child("metrics"), n, MaxMetrics))
	}
	for i := range ts.Metrics {
		m := &ts.Metrics[i]
		if err := validateMetricString(fldPath, i, "name", m.Name, MaxMetricNameLength, "a metric name", `"loss"`); err != nil {
			errs = append(errs, err)
		}
		if err := validateMetricString(fldPath, i, "value", m.Value, MaxMetricValueLength, "the metric's value as a string", `"0.0123"`); err != nil {
			errs = append(errs, err)
		}
	}
	if ts.LastUpdatedTime == nil {
		errs = append(errs, field.Required(fldPath.Child("lastUpdatedTime"),
			"lastUpdatedTime is required when trainerStatus is present"))
	}
	return errs
}

// validateMetricString checks metrics[i].<child> of the TrainerStatus at fldPath.
func validateMetricString(fldPath *field.Path, i int, child, s string, maxLen int, what, example string) *field.Error {
	switch {
	case s == "":
		return field.Required(fldPath.Child("metrics").Index(i).Child(child),
			fmt.Sprintf("%s of 1 to %d characters, e.g. %s", what, maxLen, example))
	case len(s) > maxLen && utf8.RuneCountInString(s) > maxLen:
		return field.TooLongCharacters(fldPath.Child("metrics").Index(i).Child(child), s, maxLen)
	}
	return nil
}

// validateClockSkew refuses a lastUpdatedTime more than maxSkew ahead of now (a negative
// maxSkew disables the check). Not a CRD rule, and upstream has none: it guards the
// forward-only rule of the Stage (see the package doc), under which one report stamped
// far in the future would freeze trainerStatus until the clock caught up.
func validateClockSkew(ts *trainer.TrainerStatus, fldPath *field.Path, now time.Time, maxSkew time.Duration) field.ErrorList {
	if ts == nil || ts.LastUpdatedTime == nil || maxSkew < 0 {
		return nil
	}
	if ahead := ts.LastUpdatedTime.Sub(now); ahead > maxSkew {
		return field.ErrorList{field.Invalid(fldPath.Child("lastUpdatedTime"), ts.LastUpdatedTime.UTC().Format(time.RFC3339),
			fmt.Sprintf("must not be more than %v ahead of the server's clock (it is %v ahead): set it to the current time and check the node's clock synchronisation",
				maxSkew, ahead.Round(time.Second)))}
	}
	return nil
}
