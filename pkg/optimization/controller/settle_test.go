package controller_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/optimization/controller"
	"github.com/trainyard/trainyard/pkg/optimization/search"
)

// completeNow marks trial name Complete at now with a stored report of progress
// percent and metric loss ("" for none), as stage 6 and the progress server leave it.
func (f *fixture) completeNow(name string, now time.Time, percent int32, loss string) {
	f.t.Helper()
	obj, ok, _ := f.tjs.GetByKey("team-a/" + name)
	if !ok {
		f.t.Fatalf("no trial %s", name)
	}
	tj := obj.(*trainer.TrainJob).DeepCopy()
	tj.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)}}
	tj.Status.TrainerStatus = &trainer.TrainerStatus{ProgressPercentage: ptr.To(percent)}
	if loss != "" {
		tj.Status.TrainerStatus.Metrics = []trainer.Metric{{Name: "loss", Value: loss}}
	}
	if err := f.tjs.Update(tj); err != nil {
		f.t.Fatal(err)
	}
}

// TestMetricIsTakenOnceSettled: a trial that completes before its trainer's last report
// is stored (the progress server writes the report it deferred once it sees the
// TrainJob finish) is ranked by that last report, not by the earlier epoch's value the
// TrainJob showed at completion. Meanwhile it makes room for the next trial, and a
// report that never comes holds the search for Settle only.
func TestMetricIsTakenOnceSettled(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakePassiveClock(now)
	f := newFixture(t, optimizationJob(2, 1, random, lr))
	var err error
	f.stage, err = controller.New(controller.Config{Client: f.client, Clock: clock, Settle: 5 * time.Second,
		OptimizationJobs: trainerlisters.NewOptimizationJobLister(f.jobs), TrainJobs: trainerlisters.NewTrainJobLister(f.tjs)})
	if err != nil {
		t.Fatal(err)
	}
	f.sync(engine.WaitForEvent())

	// digits-0 completes showing epoch 1's loss; its final report (0.1) is still pending.
	f.completeNow("digits-0", now, 3, "2.3")
	f.sync(engine.RequeueAfter(5 * time.Second))
	if len(f.trials()) != 2 {
		t.Fatalf("%d trials; a completed trial must make room for the next at once", len(f.trials()))
	}
	if r := f.job().Status.Result; r != nil {
		t.Fatalf("result %+v before digits-0's metric settled", r)
	}
	f.completeNow("digits-0", now, 100, "0.1") // the flushed final report
	f.completeNow("digits-1", now.Add(time.Second), 40, "0.5")
	clock.SetTime(now.Add(2 * time.Second))
	f.sync(engine.RequeueAfter(4 * time.Second)) // digits-1's last report has not come
	if r := f.job().Status.Result; r == nil || r.TrainJobName != "digits-0" {
		t.Fatalf("result %+v; want digits-0 once its final report is stored", r)
	}
	if c := f.condition(trainer.OptimizationJobComplete); c != nil {
		t.Fatalf("Complete %+v while digits-1's metric may still change", c)
	}

	clock.SetTime(now.Add(6 * time.Second)) // it never comes: digits-1 counts as it stands
	f.sync(engine.WaitForEvent())
	c := f.condition(trainer.OptimizationJobComplete)
	if c == nil || !strings.Contains(c.Message, "best digits-0 (loss 0.1)") || !strings.Contains(c.Message, "2 succeeded") {
		t.Fatalf("Complete = %+v; want both trials counted, digits-0 best at loss 0.1", c)
	}
}

// withClock replaces f's Stage with one timed by clock (Config.Settle left to its default).
func (f *fixture) withClock(clock *clocktesting.FakePassiveClock) {
	f.t.Helper()
	var err error
	f.stage, err = controller.New(controller.Config{Client: f.client, Clock: clock,
		OptimizationJobs: trainerlisters.NewOptimizationJobLister(f.jobs), TrainJobs: trainerlisters.NewTrainJobLister(f.tjs)})
	if err != nil {
		f.t.Fatal(err)
	}
}

// TestLateFinalReportIsRanked (issue 42, item 4): a final report that arrives past the
// default wait of 5 s, within the wait annotation trainyard.dev/final-report-wait sets,
// ranks the trial, and the OptimizationJob is not Complete before. Before, the wait was
// a fixed 5 s: the trial was ranked by its earlier epoch's loss and the search Complete
// with it 5 s after the trial completed.
func TestLateFinalReportIsRanked(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakePassiveClock(now)
	job := optimizationJob(1, 1, random, lr)
	job.Annotations = map[string]string{search.AnnotationFinalReportWait: "30s"}
	f := newFixture(t, job)
	f.withClock(clock)
	f.sync(engine.WaitForEvent())

	f.completeNow("digits-0", now, 40, "2.3") // epoch 12's loss; the final report is held back
	clock.SetTime(now.Add(10 * time.Second))
	f.sync(engine.RequeueAfter(20 * time.Second))
	if c := f.condition(trainer.OptimizationJobComplete); c != nil {
		t.Fatalf("Complete %+v 10 s after the trial completed; its final report may come for 30 s", c)
	}
	if r := f.job().Status.Result; r != nil {
		t.Fatalf("result %+v before the trial's final report", r)
	}
	if c := f.condition(trainer.OptimizationJobCreated); c == nil || !strings.Contains(c.Message, "0 done (0 succeeded, 0 failed), 1 running") {
		t.Errorf("Created = %+v; want the waiting trial counted as running", c)
	}

	clock.SetTime(now.Add(25 * time.Second))
	f.completeNow("digits-0", now, 100, "0.1") // the final report, 25 s late
	f.sync(engine.WaitForEvent())
	c := f.condition(trainer.OptimizationJobComplete)
	if c == nil || !strings.Contains(c.Message, "best digits-0 (loss 0.1)") {
		t.Fatalf("Complete = %+v; want digits-0 ranked by its final report, loss 0.1", c)
	}
}

// TestDefaultBudgetWaitsForASettlingTrial (issue 42, item 4): the default failure
// budget ends a search only while no trial has succeeded, so a completed trial waiting
// for its final report — which may carry the metric — holds it back: three failed
// trials and one settling do not end the search Failed, and once the report comes the
// search completes with that trial as its best.
func TestDefaultBudgetWaitsForASettlingTrial(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakePassiveClock(now)
	f := newFixture(t, optimizationJob(4, 4, random, lr))
	f.withClock(clock)
	f.sync(engine.WaitForEvent())
	for _, name := range []string{"digits-0", "digits-1", "digits-2"} {
		f.finish(name, true, "")
	}
	f.completeNow("digits-3", now, 40, "") // no metric yet: the final report has it
	f.sync(engine.RequeueAfter(5 * time.Second))
	if c := f.condition(trainer.OptimizationJobFailed); c != nil {
		t.Fatalf("Failed %+v while digits-3 may still report the metric", c)
	}
	f.completeNow("digits-3", now, 100, "0.4")
	f.sync(engine.WaitForEvent())
	c := f.condition(trainer.OptimizationJobComplete)
	if c == nil || !strings.Contains(c.Message, "1 succeeded, 3 failed") || !strings.Contains(c.Message, "best digits-3 (loss 0.4)") {
		t.Fatalf("Complete = %+v; want digits-3 best, 3 failed", c)
	}
}
