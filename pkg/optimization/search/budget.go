package search

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// AnnotationMaxFailedTrials sets an OptimizationJob's failure budget: a decimal integer
// N from 1, the search ending Failed (reason MaxFailedTrialsReached) once N of its
// trials have failed — whatever succeeded before, as Katib's
// spec.maxFailedTrialCount. A trial counts as failed when it ends Failed or completes
// without a numeric value of the objective metric. Upstream's OptimizationJob has no
// such field (KEP-3562 leaves the end of a search to a "TrialPolicy" it does not
// define; trainer #3800 adds suspend and managedBy, not a budget), so Trainyard takes
// it as an annotation in its own namespace, checked at admission and by the controller
// (ValidateSpec).
const AnnotationMaxFailedTrials = "trainyard.dev/max-failed-trials"

// DefaultMaxFailedTrials is the failure budget of an OptimizationJob without
// AnnotationMaxFailedTrials: the search ends Failed once this many trials have failed
// while none has succeeded yet; after a first success failures no longer end it.
// Rationale: a setup fault — an image that does not pull, a command that crashes, a
// misspelt metric name — fails every trial, and shows in the first ones; once a trial
// has reported the metric the setup works, and a failure says something about its
// parameters (a learning rate that diverges), which is what a search explores. Three
// rather than one, so that one unlucky trial (a node lost, a diverging first draw)
// does not end a search.
const DefaultMaxFailedTrials = 3

// Budget is an OptimizationJob's failure budget (FailureBudget).
type Budget struct {
	// Max is the count of failed trials that ends the search, from 1.
	Max int
	// Annotated is true when Max comes from AnnotationMaxFailedTrials (failed trials
	// count whatever succeeded), false for the default (they count until a trial
	// succeeds).
	Annotated bool
}

// Exhausted reports whether failed failed trials, with succeeded succeeded ones, end the
// search under b.
func (b Budget) Exhausted(failed, succeeded int) bool {
	if !b.Annotated && succeeded > 0 {
		return false
	}
	return failed >= b.Max
}

// String says what b is, for condition messages: "the failure budget of
// trainyard.dev/max-failed-trials: 5" or "the default failure budget (3 failed trials
// before a first success)".
func (b Budget) String() string {
	if b.Annotated {
		return fmt.Sprintf("the failure budget of annotation %s: %d", AnnotationMaxFailedTrials, b.Max)
	}
	return fmt.Sprintf("the default failure budget (%d failed trials before a first success; annotation %s sets another)", b.Max, AnnotationMaxFailedTrials)
}

// FailureBudget returns job's failure budget: AnnotationMaxFailedTrials when set, else
// DefaultMaxFailedTrials before a first success. Error: the annotation is not a decimal
// integer from 1 to 2^31-1, at metadata.annotations[trainyard.dev/max-failed-trials],
// naming the fix.
func FailureBudget(job *trainer.OptimizationJob) (Budget, *field.Error) {
	v, ok := job.Annotations[AnnotationMaxFailedTrials]
	if !ok {
		return Budget{Max: DefaultMaxFailedTrials}, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 1 {
		return Budget{}, field.Invalid(field.NewPath("metadata", "annotations").Key(AnnotationMaxFailedTrials), v,
			"must be a whole number of failed trials from 1, e.g. \"5\": the search ends Failed once that many trials have failed; "+
				"set it to spec.numTrials to run every trial whatever fails, or remove it for the default (3 failed trials before a first success)")
	}
	return Budget{Max: int(n), Annotated: true}, nil
}
