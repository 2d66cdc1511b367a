package status

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// The TrainJob's life cycle in time (KEP-2899 as kubeflow/trainer #4052 lists it,
// docs/compatibility.md#ttl-and-run-policy): the start and completion times, the
// active deadline and the TTL after finishing. Nothing here keeps a timer: each is
// recomputed from the TrainJob's status at every sync, and a future instant becomes
// the pass's RequeueAfter (the stage queue's delaying queue holds one entry per key,
// the earliest), so a controller restart finds every deadline and TTL again from the
// add events, and acts at once on those that passed while it was down.

// runPolicy returns tj's effective run policy: its own fields, else its runtime's
// (Stage.RunPolicy; none when that is nil).
func (s *Stage) runPolicy(tj *trainer.TrainJob) trainer.RunPolicy {
	var rt *trainer.RunPolicy
	if s.RunPolicy != nil {
		rt = s.RunPolicy(tj)
	}
	return trainjob.RunPolicy(tj, rt)
}

// activeStart returns when tj last became active: now for a TrainJob resumed since its
// status was written (Kueue admitted it: this pass removes Suspended and sets startTime
// to now, and the clock restarts there, as upstream's does — from the creation, a
// TrainJob queued longer than its deadline would fail the moment it was admitted); else
// status.startTime when set; else its last resume (upstream's Suspended=False, on a
// TrainJob resumed before a swap); else its creation.
func activeStart(tj *trainer.TrainJob, now time.Time) time.Time {
	c := meta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobSuspended)
	switch {
	case c != nil && c.Status == metav1.ConditionTrue:
		return now
	case tj.Status.StartTime != nil:
		return tj.Status.StartTime.Time
	case c != nil:
		return c.LastTransitionTime.Time
	}
	return tj.CreationTimestamp.Time
}

// activeDeadline returns when tj's active deadline falls (zero when none applies: no
// deadline of seconds, finished, or suspended) and whether it has passed. seconds is
// the effective activeDeadlineSeconds (the TrainJob's, else its runtime's); the clock
// starts at activeStart and restarts at each resume
// (docs/compatibility.md#active-deadline). A TrainJob whose JobSet js (nil when
// absent) completed or failed counts as finished: upstream checks the deadline on the
// status it just derived from the JobSet.
func activeDeadline(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, seconds *int64, now time.Time) (time.Time, bool) {
	if seconds == nil || trainjob.IsFinished(tj) || trainjob.IsSuspended(tj) || jobSetFinished(js) {
		return time.Time{}, false
	}
	deadline := activeStart(tj, now).Add(time.Duration(*seconds) * time.Second)
	return deadline, now.After(deadline)
}

// jobSetFinished reports whether js is Completed or Failed.
func jobSetFinished(js *jobsetv1alpha2.JobSet) bool {
	return js != nil && (meta.IsStatusConditionTrue(js.Status.Conditions, string(jobsetv1alpha2.JobSetCompleted)) ||
		meta.IsStatusConditionTrue(js.Status.Conditions, string(jobsetv1alpha2.JobSetFailed)))
}

// setTimes maintains st.startTime and st.completionTime as a Job's and a JobSet's
// (kubernetes-sigs/jobset KEP-1186): startTime is activeStart while tj runs, cleared
// while it is suspended; completionTime is the Complete condition's lastTransitionTime,
// set once. Both are written only while tj, as the pass read it, is unfinished: a
// finished TrainJob's times never change, and a TrainJob that finished before the
// fields existed gets none (no status write per finished TrainJob on upgrade). Times
// are whole seconds, as they serialize, so a value in memory equals the cache's.
func setTimes(st *trainer.TrainJobStatus, tj *trainer.TrainJob, now time.Time) {
	if trainjob.IsFinished(tj) {
		return
	}
	switch {
	case trainjob.IsSuspended(tj):
		st.StartTime = nil
	case st.StartTime == nil:
		st.StartTime = ptr.To(metav1.NewTime(activeStart(tj, now)).Rfc3339Copy())
	}
	if c := meta.FindStatusCondition(st.Conditions, trainer.TrainJobComplete); c != nil && c.Status == metav1.ConditionTrue && st.CompletionTime == nil {
		st.CompletionTime = ptr.To(c.LastTransitionTime.Rfc3339Copy())
	}
}

// ttlExpiry returns when the TrainJob whose status after this pass is st is to be
// deleted: ttl seconds after it finished (trainjob.FinishedAt); false when ttl is nil
// or it has not finished.
func ttlExpiry(st *trainer.TrainJobStatus, ttl *int32) (time.Time, bool) {
	if ttl == nil {
		return time.Time{}, false
	}
	at, finished := trainjob.FinishedAt(st)
	if !finished {
		return time.Time{}, false
	}
	return at.Add(time.Duration(*ttl) * time.Second), true
}

// deleteTrainJob deletes tj, its TTL after finishing expired: garbage collection
// deletes its JobSet, Jobs, Pods, Services and side objects (background propagation,
// as the TTL-after-finished controller deletes a Job). The UID precondition spares a
// TrainJob of the same name created since. Deleting the TrainJob, not the JobSet,
// leaves nothing to re-create a JobSet (kubeflow/trainer #3779).
func (s *Stage) deleteTrainJob(ctx context.Context, tj *trainer.TrainJob, expiry time.Time) error {
	propagation := metav1.DeletePropagationBackground
	err := s.Status.Client.TrainerV1alpha1().TrainJobs(tj.Namespace).Delete(ctx, tj.Name, metav1.DeleteOptions{
		PropagationPolicy: &propagation,
		Preconditions:     &metav1.Preconditions{UID: ptr.To(tj.UID)},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting TrainJob %s/%s after its ttlSecondsAfterFinished: %w", tj.Namespace, tj.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted a finished TrainJob past its ttlSecondsAfterFinished", "expiry", expiry, "late", s.now().Sub(expiry))
	return nil
}
