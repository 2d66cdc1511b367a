package status_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/stages/status"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// TestSyncHoldsASuspendedChangeForKueuesUnsuspend: Kueue admits a queued TrainJob with
// two writes milliseconds apart, its runtime patch (generation 2, still suspended) and
// its unsuspend (generation 3). The pass of generation 2 holds its JobSet change for
// SuspendedHold instead of applying it; generation 3's pass applies the JobSet once,
// resumed and carrying the patch; the held sync, when it comes back, has nothing left
// to apply. One apply for Kueue's two writes, where each had its own.
func TestSyncHoldsASuspendedChangeForKueuesUnsuspend(t *testing.T) {
	patched := makeTrainJob().Generation(2).Suspend(true).Obj()
	js := makeJobSet(patched).Suspend(true).Annotation(status.AnnotationJobSetHash, "queued").Obj()
	f := newFixture(t, patched, js)
	f.stage.SuspendedHold = 500 * time.Millisecond
	f.plans.Put(key, patched.UID, patched.Generation, desiredPlan(t, patched))
	if got, err := f.sync(t); err != nil || got != engine.RequeueAfter(500*time.Millisecond) {
		t.Fatalf("generation 2's sync = %+v, %v; want RequeueAfter(500ms), the change held", got, err)
	}
	if n := len(f.jobSetApplies()); n != 0 {
		t.Fatalf("%d JobSet applies during the hold, want 0", n)
	}
	if w := utiltesting.Writes(f.trainer.Actions()); len(w) != 0 {
		t.Fatalf("TrainJob writes during the hold: %v", w)
	}

	// Kueue's unsuspend, 20 ms later: generation 3's pass resumes the JobSet at once.
	f.clock.SetTime(f.clock.Now().Add(20 * time.Millisecond))
	unsuspended := makeTrainJob().Generation(3).Suspend(false).Obj()
	if err := f.tjCache.Update(unsuspended); err != nil {
		t.Fatal(err)
	}
	f.plans.Put(key, unsuspended.UID, unsuspended.Generation, desiredPlan(t, unsuspended))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	applies := f.jobSetApplies()
	if len(applies) != 1 {
		t.Fatalf("%d JobSet applies after the unsuspend, want 1", len(applies))
	}
	var applied jobsetv1alpha2.JobSet
	if err := json.Unmarshal(applies[0].Patch, &applied); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(applied.Spec.Suspend, true) {
		t.Errorf("the one apply left the JobSet suspended")
	}

	// The held sync comes back: the JobSet it held is the one applied.
	f.clock.SetTime(f.clock.Now().Add(500 * time.Millisecond))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if n := len(f.jobSetApplies()); n != 1 {
		t.Errorf("%d JobSet applies after the held sync came back, want still 1", n)
	}
}

// TestSyncHoldEnds: a suspended TrainJob's change is applied once SuspendedHold has
// passed since the first change held, even when it changes again meanwhile (a TrainJob
// Kueue never unsuspends, a user editing a queued one): the hold delays, it never
// withholds. A JobSet to create, a suspend and a resume are never held.
func TestSyncHoldEnds(t *testing.T) {
	suspended := makeTrainJob().Generation(2).Suspend(true).Obj()
	f := newFixture(t, suspended, makeJobSet(suspended).Suspend(true).Annotation(status.AnnotationJobSetHash, "queued").Obj())
	f.stage.SuspendedHold = time.Second
	f.plans.Put(key, suspended.UID, suspended.Generation, desiredPlan(t, suspended))
	if got, _ := f.sync(t); got != engine.RequeueAfter(time.Second) {
		t.Fatalf("first sync = %+v, want RequeueAfter(1s)", got)
	}
	f.clock.SetTime(f.clock.Now().Add(600 * time.Millisecond))
	edited := makeTrainJob().Generation(3).Suspend(true).Obj()
	if err := f.tjCache.Update(edited); err != nil {
		t.Fatal(err)
	}
	f.plans.Put(key, edited.UID, edited.Generation, desiredPlan(t, edited))
	if got, _ := f.sync(t); got != engine.RequeueAfter(400*time.Millisecond) {
		t.Fatalf("sync of the edit = %+v, want RequeueAfter(400ms): the hold counts from the first change", got)
	}
	f.clock.SetTime(f.clock.Now().Add(400 * time.Millisecond))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if n := len(f.jobSetApplies()); n != 1 {
		t.Fatalf("%d JobSet applies once the hold is over, want 1", n)
	}

	for name, tc := range map[string]struct {
		tjSuspend, haveJobSet, jsSuspend bool
	}{
		"JobSet to create":                           {tjSuspend: true},
		"suspending a running TrainJob":              {tjSuspend: true, haveJobSet: true, jsSuspend: false},
		"resume: TrainJob running, JobSet suspended": {tjSuspend: false, haveJobSet: true, jsSuspend: true},
	} {
		t.Run(name, func(t *testing.T) {
			tj := makeTrainJob().Suspend(tc.tjSuspend).Obj()
			var js *jobsetv1alpha2.JobSet
			if tc.haveJobSet {
				js = makeJobSet(tj).Suspend(tc.jsSuspend).Annotation(status.AnnotationJobSetHash, "stale").Obj()
			}
			f := newFixture(t, tj, js)
			f.stage.SuspendedHold = time.Second
			f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
			if _, err := f.sync(t); err != nil {
				t.Fatal(err)
			}
			if n := len(f.jobSetApplies()); n != 1 {
				t.Errorf("%d JobSet applies, want 1 at once", n)
			}
		})
	}
}

// TestSyncLeavesSuspendedCountsToTheNextWrite: a queued TrainJob's JobSet reports its
// Job suspended (jobsStatus suspended: 1) seconds after the TrainJob's Suspended=True
// was written. No reader acts on that count, so it costs no patch of its own: the
// resume's write carries it. A change in a count readers act on (active, which Kueue
// waits for after a preemption) is written at once, its suspended count with it.
func TestSyncLeavesSuspendedCountsToTheNextWrite(t *testing.T) {
	suspendedCond := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, trainer.TrainJobSuspendedMessage)
	suspendedCond.ObservedGeneration = 1
	queued := makeTrainJob().Generation(1).Suspend(true).Condition(suspendedCond).Obj()
	js := makeJobSet(queued).Suspend(true).Annotation(status.AnnotationJobSetHash, hashOf(t, queued)).
		ReplicatedJobStatus("node", 0, 0, 0, 0, 1).Obj()
	f := newFixture(t, queued, js)
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if w := utiltesting.Writes(f.trainer.Actions()); len(w) != 0 {
		t.Fatalf("writes for a suspended count alone: %v", w)
	}

	// Preempted while running: active 1 → 0 and suspended 0 → 1 in one JobSet update.
	runningCond := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, trainer.TrainJobSuspendedMessage)
	runningCond.ObservedGeneration = 2
	preempted := makeTrainJob().Generation(2).Suspend(true).Condition(runningCond).Obj()
	preempted.Status.JobsStatus = []trainer.JobStatus{utiltesting.JobStatus("node", 1, 0, 0, 1, 0)}
	js = makeJobSet(preempted).Suspend(true).Annotation(status.AnnotationJobSetHash, hashOf(t, preempted)).
		ReplicatedJobStatus("node", 0, 0, 0, 0, 1).Obj()
	f = newFixture(t, preempted, js)
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	got := f.storedTrainJob(t).Status.JobsStatus
	if len(got) != 1 || ptr.Deref(got[0].Active, -1) != 0 || ptr.Deref(got[0].Suspended, -1) != 1 {
		t.Errorf("jobsStatus %+v after the preemption; want active 0 and suspended 1 written", got)
	}
}

// TestSyncJudgesSuspendedCountsOnItsLastWrite: whether a status change is only in
// jobsStatus[].suspended is judged on the status the write would build on — this
// process's last write while the cache has not shown it — not on the cache's older
// TrainJob. A queued TrainJob's first pass writes Suspended=True; the JobSet
// controller's suspended count comes before the cache shows that write, and the change
// it makes to the last write is the suspended count alone: no second patch.
func TestSyncJudgesSuspendedCountsOnItsLastWrite(t *testing.T) {
	queued := makeTrainJob().Generation(1).Suspend(true).Obj()
	queued.ResourceVersion = "10"
	js := makeJobSet(queued).Suspend(true).Annotation(status.AnnotationJobSetHash, hashOf(t, queued)).Obj()
	f := newFixture(t, queued, js)
	rv, patches := 10, 0
	f.trainer.PrependReactor("patch", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		patches++
		rv++
		written := queued.DeepCopy()
		written.ResourceVersion = fmt.Sprint(rv)
		return true, written, nil
	})
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if patches != 1 {
		t.Fatalf("%d status patches for the queued TrainJob's first pass, want 1 (Suspended=True)", patches)
	}
	// The cache still holds resourceVersion 10, without Suspended=True.
	counted := makeJobSet(queued).Suspend(true).Annotation(status.AnnotationJobSetHash, hashOf(t, queued)).
		ReplicatedJobStatus("node", 0, 0, 0, 0, 1).Obj()
	if err := f.jsCache.Update(counted); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if patches != 1 {
		t.Errorf("%d status patches after the JobSet's suspended count, want still 1: the count alone is left to the next write", patches)
	}
}
