package trial_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

func finished(condition string, metrics ...trainer.Metric) *trainer.TrainJob {
	tj := &trainer.TrainJob{}
	if condition != "" {
		tj.Status.Conditions = []metav1.Condition{{Type: condition, Status: metav1.ConditionTrue}}
	}
	if metrics != nil {
		tj.Status.TrainerStatus = &trainer.TrainerStatus{Metrics: metrics}
	}
	return tj
}

func TestOutcome(t *testing.T) {
	for name, tc := range map[string]struct {
		tj    *trainer.TrainJob
		state trial.State
		value float64
	}{
		"running":                     {finished(""), trial.Running, 0},
		"failed with the metric":      {finished(trainer.TrainJobFailed, trainer.Metric{Name: "loss", Value: "0.1"}), trial.Failed, 0},
		"complete with the metric":    {finished(trainer.TrainJobComplete, trainer.Metric{Name: "acc", Value: "0.9"}, trainer.Metric{Name: "loss", Value: "0.25"}), trial.Succeeded, 0.25},
		"complete without reports":    {finished(trainer.TrainJobComplete), trial.NoMetric, 0},
		"complete, another metric":    {finished(trainer.TrainJobComplete, trainer.Metric{Name: "acc", Value: "0.9"}), trial.NoMetric, 0},
		"complete, not a number":      {finished(trainer.TrainJobComplete, trainer.Metric{Name: "loss", Value: "n/a"}), trial.NoMetric, 0},
		"complete, NaN":               {finished(trainer.TrainJobComplete, trainer.Metric{Name: "loss", Value: "NaN"}), trial.NoMetric, 0},
		"complete, exponent notation": {finished(trainer.TrainJobComplete, trainer.Metric{Name: "loss", Value: "2.5e-3"}), trial.Succeeded, 0.0025},
	} {
		t.Run(name, func(t *testing.T) {
			state, value := trial.Outcome(tc.tj, "loss")
			if state != tc.state || value != tc.value {
				t.Errorf("Outcome = %s, %v; want %s, %v", state, value, tc.state, tc.value)
			}
		})
	}
}

func TestBetter(t *testing.T) {
	if !trial.Better(1, 2, trainer.ObjectiveDirectionMinimize) || trial.Better(2, 1, trainer.ObjectiveDirectionMinimize) {
		t.Error("Minimize: lower must be better")
	}
	if !trial.Better(2, 1, trainer.ObjectiveDirectionMaximize) || trial.Better(1, 2, trainer.ObjectiveDirectionMaximize) {
		t.Error("Maximize: higher must be better")
	}
	if !trial.Better(1, 2, "") {
		t.Error("an unset direction must minimize (the CRD's default)")
	}
}

func TestUnsettled(t *testing.T) {
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	completeAt := func(progress *int32) *trainer.TrainJob {
		tj := finished(trainer.TrainJobComplete, trainer.Metric{Name: "loss", Value: "0.5"})
		tj.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at)
		tj.Status.TrainerStatus.ProgressPercentage = progress
		return tj
	}
	for name, tc := range map[string]struct {
		tj   *trainer.TrainJob
		now  time.Time
		want time.Duration
	}{
		"just complete, last report not final": {tj: completeAt(ptr.To[int32](90)), now: at.Add(time.Second), want: 4 * time.Second},
		"just complete, no progressPercentage": {tj: completeAt(nil), now: at, want: 5 * time.Second},
		"just complete, final report stored":   {tj: completeAt(ptr.To[int32](100)), now: at, want: 0},
		"complete for longer than settle":      {tj: completeAt(ptr.To[int32](90)), now: at.Add(6 * time.Second), want: 0},
		"running":                              {tj: finished(""), now: at, want: 0},
		"failed":                               {tj: finished(trainer.TrainJobFailed), now: at, want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			if got := trial.Unsettled(tc.tj, tc.now, 5*time.Second); got != tc.want {
				t.Errorf("Unsettled = %v, want %v", got, tc.want)
			}
		})
	}
}
