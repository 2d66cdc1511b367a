package status

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// applyPlan is a pass's apply step for the unfinished TrainJob tj: when the previous
// stage's plan for tj's generation has reached this stage, it applies it
// (applyIfChanged), ends tj's refusal count and frees the plan once the side objects
// are tj's. It returns what the step did, and a non-nil stop when Sync must return
// that Result with the error at once: Restart when tj has neither JobSet nor plan,
// Retry with the error for a failed write that is no refusal, RequeueAfter
// RefusalBackoff for a refusal below RefusalThreshold. From the threshold on, the
// refusal is in the outcome and stop is nil.
func (s *Stage) applyPlan(ctx context.Context, key cache.ObjectName, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) (applyOutcome, *engine.Result, error) {
	var out applyOutcome
	p, havePlan := s.Plans.Get(key, tj.UID, tj.Generation)
	switch {
	case havePlan && p.Stage == s.Index-1:
		var err error
		var held time.Duration
		if out.applied, held, out.conflict, err = s.applyIfChanged(ctx, tj, js, p); held > 0 {
			return out, ptr.To(engine.RequeueAfter(held)), nil
		} else if err != nil {
			s.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, ReasonApplyFailed, "Applying", "TrainJob resources reconciliation failed: %s", err.Error())
			var refusals int
			switch refusals, out.refused = s.countRefusal(key, tj, err); {
			case refusals == 0:
				return out, ptr.To(engine.Retry()), err
			case out.refused == nil:
				after := RefusalBackoff(refusals)
				klog.FromContext(ctx).V(2).Info("The API server refused a write; trying again", "err", err, "refusals", refusals, "after", after)
				return out, ptr.To(engine.RequeueAfter(after)), nil
			}
			klog.FromContext(ctx).Error(err, "The API server keeps refusing a write; trying again after the refusal delay",
				"refusals", out.refused.times, "after", out.refused.delay)
			return out, nil, nil
		}
		s.refusalsEnded(key)
		if out.applied {
			out.planned = p.Conditions
		}
		if out.conflict == nil {
			out.objectsOurs = true
			// The plan has served its purpose; free it (a spec change rebuilds it).
			s.Plans.DeleteIf(key, p)
		}
	case js == nil && !havePlan:
		return out, ptr.To(engine.Restart()), nil
	}
	return out, nil, nil
}

// applyIfChanged makes the plan's side objects exist as tj's (syncObjects; whatever
// the gate says, so a deleted one is re-created) and server-side applies the plan's
// JobSet when the gate allows it and its hash differs from what was last applied. It
// reports whether it applied the JobSet, how long SuspendedHold holds the change back
// (then it wrote nothing, side objects included: the pass is to end and come back),
// and the conflict that stopped it before the JobSet (nil when none did).
func (s *Stage) applyIfChanged(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, p *plan.Plan) (bool, time.Duration, *sideObjectConflict, error) {
	if g, ok := builtFromGeneration(js); ok && g > tj.Generation {
		// The JobSet was built from a newer spec than the cache's TrainJob has: the
		// TrainJob cache lags another writer's apply (a new leader's cache, behind the
		// old leader's last writes). Writing the older spec's JobSet or side objects
		// would undo it; the TrainJob's update event brings the key back.
		klog.FromContext(ctx).V(2).Info("Not applying a JobSet built from an older TrainJob generation than the cluster's",
			"generation", tj.Generation, "jobSetBuiltFrom", g)
		return false, 0, nil, nil
	}
	key := cache.MetaObjectToName(tj)
	last := s.lastApplied(key, tj.UID)
	var desired *Desired
	if mayApply(tj, js, last) {
		d, err := DesiredOf(p)
		if err != nil {
			return false, 0, nil, err
		}
		if last.hash != d.Hash && (js == nil || js.Annotations[AnnotationJobSetHash] != d.Hash) {
			desired = d
		}
	}
	if wait := s.holdSuspended(key, tj, js, desired != nil); wait > 0 {
		klog.FromContext(ctx).V(4).Info("Holding a suspended TrainJob's JobSet change", "for", wait)
		return false, wait, nil, nil
	}
	// Side objects first: pods must find their PodGroup, Workload, ConfigMap or Secret
	// when they appear, and a conflict must stop the JobSet (its pods would mount
	// someone else's object).
	if conflict, err := s.syncObjects(ctx, tj, p, desired != nil); err != nil || conflict != nil {
		return false, 0, conflict, err
	}
	if desired == nil {
		return false, 0, nil, nil
	}
	hash := desired.Hash
	body, err := desired.JobSetApplyBody()
	if err != nil {
		return false, 0, nil, err
	}
	if err := s.applyJobSet(ctx, tj.Namespace, tj.Name, body); err != nil {
		return false, 0, nil, &writeError{kind: "JobSet", name: tj.Name, err: fmt.Errorf("applying JobSet %s/%s: %w", tj.Namespace, tj.Name, err)}
	}
	s.remember(key, appliedJobSet{uid: tj.UID, hash: hash, suspended: ptr.Deref(desired.JobSet.Spec.Suspend, false), at: s.now()})
	logger := klog.FromContext(ctx)
	if js == nil {
		latency := s.now().Sub(tj.CreationTimestamp.Time)
		if s.Metrics != nil {
			s.Metrics.ObserveJobSetCreation(tj.UID, p.Runtime.Kind, latency)
		}
		// No Normal event: like upstream, Trainyard records events only for
		// failures. An event per TrainJob would be a second API write at
		// admission and an etcd object per TrainJob (issue 9); the JobSet
		// itself, this log line and the latency metric say the same.
		logger.V(2).Info("Created JobSet", "latency", latency)
	} else {
		logger.V(2).Info("Updated JobSet", "hash", hash)
	}
	return true, 0, nil, nil
}

// builtFromGeneration returns the TrainJob generation js was built from
// (objectkeys.AnnotationTrainJobGeneration), false when js is nil or carries none.
func builtFromGeneration(js *jobsetv1alpha2.JobSet) (int64, bool) {
	if js == nil {
		return 0, false
	}
	g, err := strconv.ParseInt(js.Annotations[objectkeys.AnnotationTrainJobGeneration], 10, 64)
	return g, err == nil
}

// mayApply is the upstream gate (docs/compatibility.md#building-the-jobset,
// docs/compatibility.md#suspend-and-resume): a JobSet is written when absent, while the
// TrainJob is suspended (runtimePatches may change then), and once more on resume (the
// JobSet is still suspended). A running JobSet is never modified.
//
// js is the cache's JobSet and last what this process last applied (zero if nothing).
// When the cache does not show that apply yet, the JobSet is as applied: judging by the
// older cached JobSet would take a JobSet this process just suspended for a running one,
// and drop the resume that follows (issue 18).
func mayApply(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, last appliedJobSet) bool {
	if trainjob.IsSuspended(tj) {
		return true
	}
	if last.hash != "" && (js == nil || js.Annotations[AnnotationJobSetHash] != last.hash) {
		return last.suspended
	}
	return js == nil || ptr.Deref(js.Spec.Suspend, false)
}

// appliedJobSet remembers what this process last applied for a TrainJob, so a sync that
// runs before the informer cache shows the write neither applies it again nor judges
// the gate by the JobSet as it was before the write.
//
// A record the cache never confirms expires after appliedRecordTTL: by then the cache
// has seen the write unless the JobSet was deleted before it could (a delete the cache
// never shows sends no event), and a record kept forever would stop the JobSet from
// being re-created, even by the consistency sweep's re-queue.
type appliedJobSet struct {
	uid       types.UID
	hash      string
	suspended bool      // the applied JobSet's spec.suspend
	at        time.Time // when it was applied
}

// appliedRecordTTL is how long an apply the cache has not shown yet is trusted over
// the cache: far beyond a watch's delivery lag (milliseconds; seconds in a burst).
const appliedRecordTTL = 2 * time.Minute

// lastApplied returns what this process last applied for the TrainJob of uid at key,
// zero if nothing or if the record expired (appliedRecordTTL).
func (s *Stage) lastApplied(key cache.ObjectName, uid types.UID) appliedJobSet {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.applied[key]; ok && a.uid == uid && now.Sub(a.at) < appliedRecordTTL {
		return a
	}
	return appliedJobSet{}
}

func (s *Stage) remember(key cache.ObjectName, a appliedJobSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied == nil {
		s.applied = map[cache.ObjectName]appliedJobSet{}
	}
	s.applied[key] = a
}

// JobSetDeleted drops the record of this process's last apply for the TrainJob that
// controls js when js, as the cache last held it, carries that apply's hash: the cache
// has shown the apply, and then its deletion. Why: the record stands in for an apply
// the cache has not shown yet, and only a sync that finds the JobSet in the cache
// drops it (Sync); a JobSet created and deleted before any sync of its TrainJob ran
// left the record behind, and the gate, taking the record for a running JobSet, did not
// re-create it until the record expired (appliedRecordTTL). A deleted JobSet with
// another hash (an apply of this process came after the deletion, or a tombstone from
// a relist is older) leaves the record: the apply's add event is still to come.
//
// The informers call it (informers.Hooks.JobSetDeleted) before the deletion routes the
// TrainJob here.
func (s *Stage) JobSetDeleted(js *jobsetv1alpha2.JobSet) {
	ref := metav1.GetControllerOf(js)
	if ref == nil {
		return
	}
	key := cache.ObjectName{Namespace: js.Namespace, Name: ref.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.applied[key]; ok && a.uid == ref.UID && a.hash == js.Annotations[AnnotationJobSetHash] {
		delete(s.applied, key)
	}
}

func (s *Stage) forgetApplied(key cache.ObjectName) {
	s.mu.Lock()
	delete(s.applied, key)
	s.mu.Unlock()
}

// rejectForeignJobSet refuses to touch a JobSet of the TrainJob's name that the
// TrainJob does not control: adopting or overwriting it could destroy someone's work.
func (s *Stage) rejectForeignJobSet(ctx context.Context, tj *trainer.TrainJob) (engine.Result, error) {
	message := fmt.Sprintf("a JobSet named %q already exists in namespace %q and is not controlled by this TrainJob: delete or rename that JobSet, or recreate the TrainJob under another name", tj.Name, tj.Namespace)
	wrote, err := s.Status.Update(ctx, tj, func(st *trainer.TrainJobStatus) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionFalse,
			Reason: trainjob.ReasonJobSetConflict, Message: message, ObservedGeneration: tj.Generation,
		})
	})
	if err != nil {
		return engine.Retry(), err
	}
	if wrote {
		s.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainjob.ReasonJobSetConflict, "Applying", "%s", message)
	}
	return engine.WaitForEvent(), nil
}

func (s *Stage) deleteJobSet(ctx context.Context, tj *trainer.TrainJob) error {
	propagation := metav1.DeletePropagationBackground
	err := s.JobSetAPI.JobsetV1alpha2().JobSets(tj.Namespace).Delete(ctx, tj.Name, metav1.DeleteOptions{PropagationPolicy: &propagation})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting JobSet %s/%s after its deadline: %w", tj.Namespace, tj.Name, err)
	}
	return nil
}
