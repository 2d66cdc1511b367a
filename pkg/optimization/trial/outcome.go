package trial

import (
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// State is where a trial stands, for the search.
type State string

const (
	// Running: neither Complete nor Failed yet (suspended ones included).
	Running State = "Running"
	// Succeeded: Complete, with a numeric value of the objective metric.
	Succeeded State = "Succeeded"
	// NoMetric: Complete, but its trainerStatus has no objective metric of that name,
	// or one that is not a finite number: the trial counts as failed (against the
	// search's failure budget), without a result.
	NoMetric State = "NoMetric"
	// Failed: Failed.
	Failed State = "Failed"
)

// Outcome returns tj's state and, when Succeeded, the value of metric in
// status.trainerStatus.metrics (the last report the trainer made before it completed,
// written by the progress server).
func Outcome(tj *trainer.TrainJob, metric string) (State, float64) {
	switch {
	case meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed):
		return Failed, 0
	case !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete):
		return Running, 0
	}
	if ts := tj.Status.TrainerStatus; ts != nil {
		for _, m := range ts.Metrics {
			if m.Name != metric {
				continue
			}
			if v, err := strconv.ParseFloat(m.Value, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
				return Succeeded, v
			}
		}
	}
	return NoMetric, 0
}

// Failure says why a trial counts as failed, for the search's messages.
type Failure struct {
	// Reason groups the trials that failed alike: the reason of the TrainJob's Failed
	// condition (the JobSet's, e.g. FailedJobs or DeadlineExceeded), or NoMetric.
	Reason string
	// Message says it in words: the Failed condition's message, or that the trial
	// completed without the metric.
	Message string
}

// FailureOf returns why tj, whose Outcome is Failed or NoMetric for metric, counts as
// failed.
func FailureOf(tj *trainer.TrainJob, metric string) Failure {
	if c := meta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed); c != nil && c.Status == metav1.ConditionTrue {
		reason := c.Reason
		if reason == "" {
			reason = trainer.TrainJobFailed
		}
		return Failure{Reason: reason, Message: c.Message}
	}
	return Failure{Reason: string(NoMetric), Message: "completed without reporting a numeric value of metric " + strconv.Quote(metric)}
}

// Better reports whether value a beats b in direction (Minimize unless Maximize).
func Better(a, b float64, direction trainer.ObjectiveDirection) bool {
	if direction == trainer.ObjectiveDirectionMaximize {
		return a > b
	}
	return a < b
}

// Unsettled returns how much longer tj's objective metric may still change though tj is
// Complete: the rest of settle after its Complete condition's lastTransitionTime, or 0
// when tj is not Complete, when that time has passed, or when its trainerStatus says
// progressPercentage 100. A trainer's last report can reach status.trainerStatus after
// the TrainJob completes — a progress server defers reports within its period and
// writes the pending one when it sees the TrainJob finish — except a report of 100,
// which is written at once (docs/design/progress.md). A search that took the metric
// before then would rank the trial by an earlier epoch's value.
func Unsettled(tj *trainer.TrainJob, now time.Time, settle time.Duration) time.Duration {
	c := meta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobComplete)
	if c == nil || c.Status != metav1.ConditionTrue {
		return 0
	}
	if ts := tj.Status.TrainerStatus; ts != nil && ts.ProgressPercentage != nil && *ts.ProgressPercentage == 100 {
		return 0
	}
	// lastTransitionTime has the API's second precision: the wait is at most a second short.
	return max(0, c.LastTransitionTime.Add(settle).Sub(now))
}
