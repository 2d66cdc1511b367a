package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// deleteTrial deletes trial name as a user does: from the API and, as the informer
// then does, from the cache.
func (f *fixture) deleteTrial(name string) {
	f.t.Helper()
	if err := f.client.TrainerV1alpha1().TrainJobs("team-a").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
	obj, ok, _ := f.tjs.GetByKey("team-a/" + name)
	if !ok {
		f.t.Fatalf("no trial %s", name)
	}
	if err := f.tjs.Delete(obj); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) names() []string {
	var out []string
	for _, tj := range f.trials() {
		out = append(out, tj.Name)
	}
	return out
}

// TestDeletedTrialIsCancelled (issue 42, item 6): deleting a trial cancels it — the
// latest one (no later trial shows it existed) and an earlier one alike: neither is
// created again, each counts toward numTrials as cancelled (the search makes
// numTrials trials in all), is said so in the summary, and frees its place under
// parallelTrials.
func TestDeletedTrialIsCancelled(t *testing.T) {
	f := newFixture(t, optimizationJob(5, 2, random, lr))
	f.sync(engine.WaitForEvent())
	if got := f.job().Annotations[trial.AnnotationTrialsCreated]; got != "2" {
		t.Fatalf("annotation %s = %q after creating 2 trials, want \"2\"", trial.AnnotationTrialsCreated, got)
	}
	f.deleteTrial("digits-1") // the latest
	f.sync(engine.WaitForEvent())
	if got := f.names(); !slices.Equal(got, []string{"digits-0", "digits-2"}) {
		t.Fatalf("trials %v; want digits-1 not created again, digits-2 in its place under parallelTrials", got)
	}
	f.deleteTrial("digits-0") // an earlier one
	f.sync(engine.WaitForEvent())
	if got := f.names(); !slices.Equal(got, []string{"digits-2", "digits-3"}) {
		t.Fatalf("trials %v; want digits-0 not created again, digits-3 started", got)
	}
	f.finish("digits-2", false, "0.3")
	f.sync(engine.WaitForEvent())
	f.finish("digits-3", false, "0.2")
	f.finish("digits-4", false, "0.4")
	f.sync(engine.WaitForEvent())
	if f.creates != 5 {
		t.Errorf("%d creates, want 5: numTrials, cancelled ones included", f.creates)
	}
	c := f.condition(trainer.OptimizationJobComplete)
	if c == nil || c.Reason != trainer.OptimizationJobMaxTrialsReachedReason ||
		!strings.Contains(c.Message, "5 trials finished: 3 succeeded, 0 failed, 0 completed without metric loss, 2 cancelled (deleted); best digits-3") {
		t.Errorf("Complete = %+v; want MaxTrialsReached counting 2 cancelled", c)
	}
}

// TestDeletedTrialAfterARestart: a controller started after a trial was deleted
// reads the count of trials created from the OptimizationJob's annotation and does
// not create the deleted one again, nor does it re-read it on every pass.
func TestDeletedTrialAfterARestart(t *testing.T) {
	f := newFixture(t, optimizationJob(3, 2, random, lr))
	f.sync(engine.WaitForEvent())
	f.deleteTrial("digits-1")
	f.stage = f.newStage() // a restart: nothing remembered
	f.client.ClearActions()
	for range 3 {
		f.sync(engine.WaitForEvent())
	}
	if got := f.names(); !slices.Equal(got, []string{"digits-0", "digits-2"}) {
		t.Fatalf("trials %v; want digits-1 cancelled, digits-2 started", got)
	}
	gets := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "trainjobs" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("%d reads of trials in 3 passes, want 1 (the deleted one, once)", gets)
	}
}

// TestTrialsTheCacheDoesNotShowYetAreNotCancelled: with the OptimizationJob's cache
// ahead of the TrainJobs' (it records 2 trials created, the TrainJob cache shows none),
// the trials are read from the API, found, and counted as running: nothing is
// cancelled or created.
func TestTrialsTheCacheDoesNotShowYetAreNotCancelled(t *testing.T) {
	f := newFixture(t, optimizationJob(4, 2, random, lr))
	f.lagging = true
	f.sync(engine.WaitForEvent()) // creates 0 and 1, records 2; the TrainJob cache shows neither
	f.creates = 0
	f.sync(engine.WaitForEvent())
	if f.creates != 0 {
		t.Errorf("%d creates while 2 trials exist unseen; want none", f.creates)
	}
	if c := f.condition(trainer.OptimizationJobCreated); c == nil || c.Message != "2 of 4 trials created; 0 done (0 succeeded, 0 failed), 2 running" {
		t.Errorf("Created = %+v; want 2 of 4 trials created, 2 running", c)
	}
}

// TestTerminatingTrialIsCancelled: a trial the cache shows with a deletionTimestamp
// (a finalizer holds it) is cancelled at once.
func TestTerminatingTrialIsCancelled(t *testing.T) {
	f := newFixture(t, optimizationJob(2, 1, random, lr))
	f.sync(engine.WaitForEvent())
	obj, _, _ := f.tjs.GetByKey("team-a/digits-0")
	tj := obj.(*trainer.TrainJob).DeepCopy()
	tj.DeletionTimestamp = &metav1.Time{}
	if err := f.tjs.Update(tj); err != nil {
		t.Fatal(err)
	}
	f.sync(engine.WaitForEvent())
	if got := f.names(); !slices.Equal(got, []string{"digits-0", "digits-1"}) || f.creates != 2 {
		t.Fatalf("trials %v, %d creates; want digits-1 started in the terminating digits-0's place", got, f.creates)
	}
}

// TestCancelledTrialsDoNotSpendTheBudget: deleting trials is a person's decision, not
// a sign the setup is broken: 3 deleted trials leave the default failure budget
// untouched, and a search whose every trial was deleted ends NoTrialSucceeded.
func TestCancelledTrialsDoNotSpendTheBudget(t *testing.T) {
	f := newFixture(t, optimizationJob(3, 3, random, lr))
	f.sync(engine.WaitForEvent())
	for _, name := range []string{"digits-0", "digits-1", "digits-2"} {
		f.deleteTrial(name)
	}
	f.sync(engine.WaitForEvent())
	c := f.condition(trainer.OptimizationJobFailed)
	if c == nil || c.Reason != trainer.OptimizationJobNoTrialSucceededReason || !strings.Contains(c.Message, "3 cancelled (deleted)") {
		t.Errorf("Failed = %+v; want NoTrialSucceeded counting 3 cancelled", c)
	}
}

// TestEditedTrialsCreatedIsCappedAtNumTrials: an annotation someone edited past
// numTrials reads no trial beyond numTrials.
func TestEditedTrialsCreatedIsCappedAtNumTrials(t *testing.T) {
	job := optimizationJob(4, 2, random, lr)
	job.Annotations = map[string]string{trial.AnnotationTrialsCreated: "1000000"}
	f := newFixture(t, job)
	f.sync(engine.WaitForEvent())
	gets := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "trainjobs" {
			gets++
		}
	}
	if gets != 4 {
		t.Errorf("%d reads of trials, want 4 (numTrials)", gets)
	}
}

// TestCreatedConditionTalliesTrials (issue 42, item 5): the Created condition's
// message — the TRIALS column of `kubectl get optimizationjobs` — counts the trials
// created, done (succeeded, failed — metric-less ones included —, cancelled) and
// running, and names the best with its value.
func TestCreatedConditionTalliesTrials(t *testing.T) {
	f := newFixture(t, optimizationJob(5, 2, random, lr))
	f.sync(engine.WaitForEvent())
	f.finish("digits-0", false, "0.5")
	f.finish("digits-1", true, "")
	f.sync(engine.WaitForEvent())
	f.finish("digits-2", false, "")
	f.deleteTrial("digits-3")
	f.sync(engine.WaitForEvent())
	want := "5 of 5 trials created; 4 done (1 succeeded, 2 failed, 1 cancelled), 1 running; best digits-0, loss 0.5"
	if c := f.condition(trainer.OptimizationJobCreated); c == nil || c.Message != want {
		t.Errorf("Created = %+v; want message %q", c, want)
	}
}
