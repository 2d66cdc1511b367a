package controller_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/optimization/search"
)

// failWith ends trial name Failed with the JobSet's reason and message, as stage 6
// leaves a TrainJob whose JobSet failed.
func (f *fixture) failWith(name, reason, message string) {
	f.t.Helper()
	obj, ok, _ := f.tjs.GetByKey("team-a/" + name)
	if !ok {
		f.t.Fatalf("no trial %s", name)
	}
	tj := obj.(*trainer.TrainJob).DeepCopy()
	tj.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobFailed, Status: metav1.ConditionTrue, Reason: reason, Message: message}}
	if err := f.tjs.Update(tj); err != nil {
		f.t.Fatal(err)
	}
}

// budgetSpent fails the test unless the Failed condition is True, reason
// MaxFailedTrialsReached, with a message holding every one of want.
func (f *fixture) budgetSpent(want ...string) {
	f.t.Helper()
	c := f.condition(trainer.OptimizationJobFailed)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != trainer.OptimizationJobMaxFailedTrialsReachedReason {
		f.t.Fatalf("Failed = %+v; want True, MaxFailedTrialsReached", c)
	}
	for _, w := range want {
		if !strings.Contains(c.Message, w) {
			f.t.Errorf("Failed message %q does not contain %q", c.Message, w)
		}
	}
}

// TestDefaultBudgetStopsABrokenSearch (issue 42, item 1): a misspelt metric — every
// trial completes without it — ends a search of 20 trials Failed after the default
// budget's 3, not after 20: no trial is started once they failed, the message names
// the budget, what the trials share and the fix, and later passes create nothing.
func TestDefaultBudgetStopsABrokenSearch(t *testing.T) {
	f := newFixture(t, optimizationJob(20, 2, random, lr, hidden))
	f.sync(engine.WaitForEvent())
	f.finish("digits-0", false, "")
	f.finish("digits-1", false, "")
	f.sync(engine.WaitForEvent()) // 2 failed: the search goes on
	if f.condition(trainer.OptimizationJobFailed) != nil || f.creates != 4 {
		t.Fatalf("after 2 metric-less trials: Failed %+v, %d creates; want the search going on with digits-2 and digits-3", f.condition(trainer.OptimizationJobFailed), f.creates)
	}
	f.finish("digits-2", false, "")
	f.sync(engine.WaitForEvent())
	f.budgetSpent("3 trials failed and none succeeded",
		"the default failure budget (3 failed trials before a first success; annotation trainyard.dev/max-failed-trials sets another), is spent",
		`All 3 completed without reporting a numeric value of metric "loss" (digits-0, digits-1, digits-2)`,
		"1 trial still running is left to finish; no other is started",
		`the metric "loss" they report`, "set annotation trainyard.dev/max-failed-trials higher")
	for range 2 {
		f.finish("digits-3", false, "0.1") // a trial still running that succeeds changes nothing
		f.sync(engine.WaitForEvent())
	}
	if f.creates != 4 {
		t.Errorf("%d creates; want 4, none after the budget was spent", f.creates)
	}
}

// TestBudgetNamesTheReasonsTrialsFailedFor: trials that failed for different reasons
// are counted by reason, each with its message and its trials.
func TestBudgetNamesTheReasonsTrialsFailedFor(t *testing.T) {
	f := newFixture(t, optimizationJob(10, 3, random, lr))
	f.sync(engine.WaitForEvent())
	f.failWith("digits-0", "FailedJobs", `ReplicatedJob "node" failed: ImagePullBackOff`)
	f.failWith("digits-1", "FailedJobs", `ReplicatedJob "node" failed: ImagePullBackOff`)
	f.finish("digits-2", false, "")
	f.sync(engine.WaitForEvent())
	f.budgetSpent(`They failed for different reasons: 2 failed, reason FailedJobs (ReplicatedJob "node" failed: ImagePullBackOff) (digits-0, digits-1); `+
		`1 completed without reporting a numeric value of metric "loss" (digits-2).`, "spec.trainJobTemplate: image, command")
}

// TestDefaultBudgetEndsAtTheFirstSuccess: once a trial has reported the metric the
// setup works, and failures after it (a diverging learning rate) do not end the search.
func TestDefaultBudgetEndsAtTheFirstSuccess(t *testing.T) {
	f := newFixture(t, optimizationJob(6, 1, random, lr))
	f.sync(engine.WaitForEvent())
	f.finish("digits-0", false, "0.4")
	for i := 1; i <= 4; i++ {
		f.sync(engine.WaitForEvent())
		f.finish(f.trials()[i].Name, true, "")
	}
	f.sync(engine.WaitForEvent())
	if c := f.condition(trainer.OptimizationJobFailed); c != nil {
		t.Fatalf("Failed = %+v after a success and 4 failures; want the search going on", c)
	}
	if f.creates != 6 {
		t.Errorf("%d creates, want the 6th trial started", f.creates)
	}
}

// TestAnnotatedBudgetCountsEveryFailure: with trainyard.dev/max-failed-trials 2, the
// second failed trial ends the search though one succeeded (as Katib's
// maxFailedTrialCount), and the result keeps the best so far.
func TestAnnotatedBudgetCountsEveryFailure(t *testing.T) {
	job := optimizationJob(10, 1, random, lr)
	job.Annotations = map[string]string{search.AnnotationMaxFailedTrials: "2"}
	f := newFixture(t, job)
	f.sync(engine.WaitForEvent())
	f.finish("digits-0", false, "0.4")
	f.sync(engine.WaitForEvent())
	f.finish("digits-1", true, "")
	f.sync(engine.WaitForEvent())
	if c := f.condition(trainer.OptimizationJobFailed); c != nil {
		t.Fatalf("Failed = %+v after 1 failure of a budget of 2", c)
	}
	f.finish("digits-2", false, "")
	f.sync(engine.WaitForEvent())
	f.budgetSpent("2 trials failed: the failure budget of annotation trainyard.dev/max-failed-trials: 2, is spent", "(digits-1)", "(digits-2)")
	if res := f.job().Status.Result; res == nil || res.TrainJobName != "digits-0" {
		t.Errorf("result %+v; want digits-0, the best before the budget was spent", res)
	}
	if f.creates != 3 {
		t.Errorf("%d creates, want 3", f.creates)
	}
}

// TestInvalidBudgetFailsInvalidSpec: an annotation admitted without the webhook that is
// not a whole number from 1 fails the search at once, naming it, with no trial.
func TestInvalidBudgetFailsInvalidSpec(t *testing.T) {
	for _, v := range []string{"0", "-1", "three", "2.5", "99999999999"} {
		job := optimizationJob(4, 1, random, lr)
		job.Annotations = map[string]string{search.AnnotationMaxFailedTrials: v}
		f := newFixture(t, job)
		f.sync(engine.Terminal())
		c := f.condition(trainer.OptimizationJobFailed)
		if c == nil || c.Reason != trainer.OptimizationJobInvalidSpecReason || !strings.Contains(c.Message, "metadata.annotations[trainyard.dev/max-failed-trials]") ||
			!strings.Contains(c.Message, "whole number of failed trials from 1") {
			t.Errorf("%q: Failed = %+v; want InvalidSpec naming the annotation and the fix", v, c)
		}
		if f.creates != 0 {
			t.Errorf("%q: %d trials created", v, f.creates)
		}
	}
}
