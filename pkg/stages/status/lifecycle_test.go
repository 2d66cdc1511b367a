package status_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// completeAt is a Complete condition that turned True at at.
func completeAt(at time.Time) metav1.Condition {
	c := utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "jobset completed")
	c.LastTransitionTime = metav1.NewTime(at)
	return c
}

// TestSyncTTL covers ttlSecondsAfterFinished (KEP-2899,
// docs/compatibility.md#ttl-and-run-policy): a finished TrainJob is deleted once its
// TTL after the terminal condition has passed — at once when that happened while the
// controller was down — and requeued at the expiry before; the TrainJob's own value
// wins over its runtime's runPolicy.
func TestSyncTTL(t *testing.T) {
	finishedAt := t0.Add(10 * time.Minute)
	finished := makeTrainJob().Condition(completeAt(finishedAt))
	cases := map[string]struct {
		trainJob    *trainer.TrainJob
		runtime     *trainer.RunPolicy
		now         time.Time
		want        engine.Result
		wantDeleted bool
	}{
		"expired: deleted": {
			trainJob: finished.Clone().TTLSecondsAfterFinished(60).Obj(),
			now:      finishedAt.Add(61 * time.Second), want: engine.WaitForEvent(), wantDeleted: true,
		},
		"expired long ago (controller down): deleted at once": {
			trainJob: finished.Clone().TTLSecondsAfterFinished(60).Obj(),
			now:      finishedAt.Add(24 * time.Hour), want: engine.WaitForEvent(), wantDeleted: true,
		},
		"0: deleted as soon as finished": {
			trainJob: finished.Clone().TTLSecondsAfterFinished(0).Obj(),
			now:      finishedAt, want: engine.WaitForEvent(), wantDeleted: true,
		},
		"not yet: requeued at the expiry": {
			trainJob: finished.Clone().TTLSecondsAfterFinished(60).Obj(),
			now:      finishedAt.Add(20 * time.Second), want: engine.RequeueAfter(40 * time.Second),
		},
		"the runtime's default applies": {
			trainJob: finished.Clone().Obj(), runtime: &trainer.RunPolicy{TTLSecondsAfterFinished: ptr.To[int32](30)},
			now: finishedAt.Add(31 * time.Second), want: engine.WaitForEvent(), wantDeleted: true,
		},
		"the TrainJob's value overrides the runtime's": {
			trainJob: finished.Clone().TTLSecondsAfterFinished(3600).Obj(), runtime: &trainer.RunPolicy{TTLSecondsAfterFinished: ptr.To[int32](30)},
			now: finishedAt.Add(31 * time.Second), want: engine.RequeueAfter(3600*time.Second - 31*time.Second),
		},
		"no TTL: kept": {
			trainJob: finished.Clone().Obj(), now: finishedAt.Add(24 * time.Hour), want: engine.WaitForEvent(),
		},
		"unfinished: kept": {
			trainJob: makeTrainJob().TTLSecondsAfterFinished(0).Obj(), now: finishedAt, want: engine.WaitForEvent(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.trainJob, makeJobSet(tc.trainJob).Suspend(false).Obj())
			f.stage.RunPolicy = func(*trainer.TrainJob) *trainer.RunPolicy { return tc.runtime }
			f.clock.SetTime(tc.now)
			got, err := f.sync(t)
			if err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			var want []string
			if tc.wantDeleted {
				want = []string{"delete trainjobs"}
			}
			if diff := cmp.Diff(want, utiltesting.Writes(f.trainer.Actions())); diff != "" {
				t.Errorf("TrainJob writes (-want +got):\n%s", diff)
			}
			if tc.wantDeleted {
				del := f.trainer.Actions()[len(f.trainer.Actions())-1]
				if del.GetNamespace() != ns {
					t.Errorf("deleted in %q, want %q", del.GetNamespace(), ns)
				}
			}
			if n := len(utiltesting.Writes(f.jobsets.Actions())); n != 0 {
				t.Errorf("%d JobSet writes; the TTL deletes the TrainJob only (its JobSet goes by garbage collection)", n)
			}
		})
	}
}

// TestSyncTTLWritesTheEndFirst: a TrainJob whose JobSet completes with a TTL of 0 gets
// Complete (and its completionTime) written before it is deleted, so a watcher sees
// how it ended.
func TestSyncTTLWritesTheEndFirst(t *testing.T) {
	tj := makeTrainJob().TTLSecondsAfterFinished(0).Obj()
	js := makeJobSet(tj).Suspend(false).Condition(metav1.Condition{Type: "Completed", Status: metav1.ConditionTrue, Reason: "AllJobsCompleted", LastTransitionTime: metav1.NewTime(t0.Add(time.Minute))}).Obj()
	f := newFixture(t, tj, js)
	f.clock.SetTime(t0.Add(time.Minute))
	if _, err := f.sync(t); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if diff := cmp.Diff([]string{"patch trainjobs/status", "delete trainjobs"}, utiltesting.Writes(f.trainer.Actions())); diff != "" {
		t.Errorf("TrainJob writes (-want +got):\n%s", diff)
	}
}

// TestSyncRunPolicyDeadline: the runtime's runPolicy.activeDeadlineSeconds stops a
// TrainJob that sets none; a TrainJob's own value overrides it.
func TestSyncRunPolicyDeadline(t *testing.T) {
	runtime := &trainer.RunPolicy{ActiveDeadlineSeconds: ptr.To[int64](60)}
	for name, tc := range map[string]struct {
		trainJob     *trainer.TrainJob
		want         engine.Result
		wantExceeded bool
	}{
		"the runtime's deadline applies":        {trainJob: makeTrainJob().Obj(), want: engine.WaitForEvent(), wantExceeded: true},
		"the TrainJob's own deadline overrides": {trainJob: makeTrainJob().ActiveDeadlineSeconds(600).Obj(), want: engine.RequeueAfter(600*time.Second - 61*time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.trainJob, makeJobSet(tc.trainJob).Suspend(false).Obj())
			f.stage.RunPolicy = func(*trainer.TrainJob) *trainer.RunPolicy { return runtime }
			f.clock.SetTime(t0.Add(61 * time.Second))
			got, err := f.sync(t)
			if err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			failed := findCondition(f.storedTrainJob(t).Status.Conditions, trainer.TrainJobFailed)
			if exceeded := failed != nil && failed.Reason == trainer.TrainJobDeadlineExceededReason; exceeded != tc.wantExceeded {
				t.Errorf("Failed=%+v, want DeadlineExceeded %v", failed, tc.wantExceeded)
			}
		})
	}
}

// TestSyncTimes: startTime and completionTime as a Job's (KEP-1186): set with a write
// the pass makes anyway, startTime at the creation for a TrainJob never suspended,
// cleared on suspend, at the resume after; completionTime is Complete's time; neither
// moves on later syncs.
func TestSyncTimes(t *testing.T) {
	tj := makeTrainJob().Obj()
	running := makeJobSet(tj).Suspend(false).ReplicatedJobStatus("node", 1, 0, 0, 1, 0)
	f := newFixture(t, tj, running.Clone().Obj())
	f.clock.SetTime(t0.Add(5 * time.Minute))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	st := f.storedTrainJob(t).Status
	if st.StartTime == nil || !st.StartTime.Time.Equal(t0) || st.CompletionTime != nil {
		t.Fatalf("startTime %v completionTime %v; want the creation (%v) and none", st.StartTime, st.CompletionTime, t0)
	}

	// Completed: completionTime is the JobSet's Complete time; startTime stays.
	doneAt := t0.Add(7 * time.Minute)
	stored := f.storedTrainJob(t)
	completed := running.Clone().Condition(metav1.Condition{Type: "Completed", Status: metav1.ConditionTrue, Reason: "AllJobsCompleted", LastTransitionTime: metav1.NewTime(doneAt)}).Obj()
	f = newFixture(t, stored, completed)
	f.clock.SetTime(t0.Add(8 * time.Minute))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	st = f.storedTrainJob(t).Status
	if st.StartTime == nil || !st.StartTime.Time.Equal(t0) || st.CompletionTime == nil || !st.CompletionTime.Time.Equal(doneAt) {
		t.Fatalf("startTime %v completionTime %v; want %v and %v", st.StartTime, st.CompletionTime, t0, doneAt)
	}

	// A resync later writes nothing.
	f = newFixture(t, f.storedTrainJob(t), completed)
	f.clock.SetTime(t0.Add(time.Hour))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if w := utiltesting.Writes(f.trainer.Actions()); len(w) != 0 {
		t.Errorf("a resync of a finished TrainJob wrote %v", w)
	}
}

// TestSyncStartTimeSuspendResume: suspending clears startTime; the resume sets it to
// the resume.
func TestSyncStartTimeSuspendResume(t *testing.T) {
	started := metav1.NewTime(t0)
	tj := makeTrainJob().Suspend(true).Obj()
	tj.Status.StartTime = &started
	f := newFixture(t, tj, makeJobSet(tj).Suspend(true).Obj())
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	stored := f.storedTrainJob(t)
	if stored.Status.StartTime != nil {
		t.Fatalf("suspended: startTime %v, want none", stored.Status.StartTime)
	}
	stored.Spec.Suspend = ptr.To(false)
	resumeAt := t0.Add(time.Hour)
	f = newFixture(t, stored, makeJobSet(stored).Suspend(false).ReplicatedJobStatus("node", 0, 0, 0, 1, 0).Obj())
	f.clock.SetTime(resumeAt)
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if st := f.storedTrainJob(t).Status.StartTime; st == nil || !st.Time.Equal(resumeAt) {
		t.Errorf("resumed: startTime %v, want %v", st, resumeAt)
	}
}
