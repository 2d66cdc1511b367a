package trial

import (
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"

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
	// or one that is not a finite number: the trial counts as run, without a result.
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

// Better reports whether value a beats b in direction (Minimize unless Maximize).
func Better(a, b float64, direction trainer.ObjectiveDirection) bool {
	if direction == trainer.ObjectiveDirectionMaximize {
		return a > b
	}
	return a < b
}
