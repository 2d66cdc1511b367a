package controller_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/events"

	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/optimization/controller"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// TestEventsShowEachTrial (issue 42, item 5): `kubectl describe optimizationjob` shows
// each trial's parameters and value, from the Events the controller records on the
// OptimizationJob: one when a trial is created, with its parameters, and one when it
// ends — its objective value, why it failed or completed without the metric, or that
// it was deleted — once each, however many passes see it.
func TestEventsShowEachTrial(t *testing.T) {
	f := newFixture(t, optimizationJob(4, 4, random, lr, hidden))
	recorder := events.NewFakeRecorder(100)
	var err error
	f.stage, err = controller.New(controller.Config{Client: f.client, Recorder: recorder,
		OptimizationJobs: trainerlisters.NewOptimizationJobLister(f.jobs), TrainJobs: trainerlisters.NewTrainJobLister(f.tjs)})
	if err != nil {
		t.Fatal(err)
	}
	f.sync(engine.WaitForEvent())
	params := map[string]string{} // trial name → "lr=…, hidden=…", from its own record
	for _, tj := range f.trials() {
		rec, err := trial.Read(tj)
		if err != nil {
			t.Fatal(err)
		}
		params[tj.Name] = "lr=" + rec.Parameters[0].Value + ", hidden=" + rec.Parameters[1].Value
	}
	want := []string{
		"Normal TrialCreated Created trial digits-0: " + params["digits-0"],
		"Normal TrialCreated Created trial digits-1: " + params["digits-1"],
		"Normal TrialCreated Created trial digits-2: " + params["digits-2"],
		"Normal TrialCreated Created trial digits-3: " + params["digits-3"],
	}
	if diff := cmp.Diff(want, utiltesting.Events(recorder)); diff != "" {
		t.Fatalf("events after creating the trials (-want +got):\n%s", diff)
	}

	f.finish("digits-0", false, "0.25")
	f.failWith("digits-1", "FailedJobs", "jobset failed: node-0 exited 1")
	f.finish("digits-2", false, "")
	f.deleteTrial("digits-3")
	f.sync(engine.WaitForEvent())
	f.sync(engine.WaitForEvent()) // the OptimizationJob is Complete: nothing more
	want = []string{
		"Normal TrialCancelled Trial digits-3 (" + params["digits-3"] + ") was deleted: cancelled, not created again",
		"Normal TrialSucceeded Trial digits-0 (" + params["digits-0"] + "): loss 0.25",
		"Warning TrialFailed Trial digits-1 (" + params["digits-1"] + ") failed, reason FailedJobs: jobset failed: node-0 exited 1",
		"Warning TrialFailed Trial digits-2 (" + params["digits-2"] + `) completed without reporting a numeric value of metric "loss"`,
	}
	if diff := cmp.Diff(want, utiltesting.Events(recorder)); diff != "" {
		t.Errorf("events after the trials ended (-want +got):\n%s", diff)
	}
}
