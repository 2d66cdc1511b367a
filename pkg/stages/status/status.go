// Package status is pipeline stage 6: it applies the desired JobSet (server-side apply,
// only when it changed and only while the JobSet may change) and writes the TrainJob's
// status from the JobSet (docs/compatibility.md#building-the-jobset gate,
// docs/compatibility.md#suspend-and-resume,
// docs/compatibility.md#status-from-the-jobset).
//
// JobSet status changes are routed straight here by the informers, so status-only
// traffic never rebuilds a JobSet. Writes: one apply per desired-JobSet change (compared
// through the trainyard.dev/jobset-hash annotation and an in-memory record of what this
// process applied), and one status patch per status change.
package status

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

const (
	// Name is the stage name: its queue name and its metrics' stage label.
	Name = "status"
	// AnnotationJobSetHash on a JobSet is the hash of the desired JobSet last applied.
	AnnotationJobSetHash = "trainyard.dev/jobset-hash"

	// ReasonApplyFailed is the Warning event recorded when applying fails (upstream's
	// TrainJobResourcesCreationFailed).
	ReasonApplyFailed = "TrainJobResourcesCreationFailed"

	// DefaultConflictRecheck is Stage.ConflictRecheck's default.
	DefaultConflictRecheck = 30 * time.Second
)

// Stage applies JobSets and writes status. Fields are required unless noted.
type Stage struct {
	// Index is the stage's 1-based position in the pipeline (the stage table's): it
	// applies a plan that reached the stage before it.
	Index int

	TrainJobs trainerlisters.TrainJobLister
	JobSets   jobsetlisters.JobSetLister
	JobSetAPI jobsetclient.Interface
	// ApplyJobSet applies the JobSet (RESTJobSetApply in production); nil applies with
	// JobSetAPI's typed client.
	ApplyJobSet JobSetApplyFunc
	Plans       *engine.Plans[plan.Plan]
	Status      *statuswriter.Writer
	Recorder    events.EventRecorder
	// Objects writes the plan's side objects before the JobSet; required when a gang
	// backend or an ML policy (MPI) produces any.
	Objects ObjectApplier
	// Metrics records JobSet creation latency; optional.
	Metrics *metrics.Metrics
	// Gang explains a TrainJob's gang that waits for the scheduler (gang.Waiting over
	// its cached PodGroups), "" when none does; nil reads no gang state.
	Gang func(tj *trainer.TrainJob) string
	// Clock is for tests; nil means the real clock.
	Clock clock.PassiveClock
	// ConflictRecheck is how long a TrainJob whose side object's name is held by a
	// foreign object that no informer routes to it (one without Trainyard's label:
	// someone else's, or created before side objects were labelled) waits before it
	// looks again; a foreign object an informer routes (an earlier TrainJob's of the
	// same name) is waited for as an event. 0 means DefaultConflictRecheck.
	ConflictRecheck time.Duration
	// RefusalThreshold is how many times in a row the API server may refuse a
	// TrainJob's writes (the JobSet or a side object) with an error retrying does not
	// fix (refusedReason: 403, 422, 400, 413, 405) before the TrainJob gets
	// JobSetReady=False, reason Write<StatusReason>, and waits RefusalDelay between
	// attempts instead of the queue's backoff. 0 means DefaultRefusalThreshold.
	RefusalThreshold int
	// RefusalDelay is the wait between two attempts of a refused TrainJob; a change to
	// the TrainJob's spec (a new generation) brings it back at once. 0 means
	// DefaultRefusalDelay.
	RefusalDelay time.Duration
	// Settle is how long the status write of a pass that applied the JobSet waits for
	// the JobSet controller's answer to the apply (a JobSet resumed or suspended
	// changes its Jobs, and so its status, within a fraction of a second; a created
	// one's add event routes its TrainJob to this stage at once, which writes then):
	// the pass returns RequeueAfter(Settle) instead of writing, and the sync then
	// writes the status with what the JobSet says by then, in one patch instead of
	// two. Only a status the later sync computes the same way waits: one carrying the
	// plan's conditions or a healed JobSetReady, which only the applying pass knows,
	// is written at once. It delays no count Kueue reads (a JobSet status update
	// routes its own sync after informers.StatusBatchPeriod, and delayed adds of a key
	// coalesce into the earliest). 0 writes at once; production uses
	// informers.StatusBatchPeriod (docs/design/status-writes.md).
	Settle time.Duration
	// SuspendedHold is how long a change to a suspended TrainJob whose JobSet exists,
	// suspended, waits before the JobSet is applied: nothing runs meanwhile, and
	// Kueue's admission writes the TrainJob twice milliseconds apart (its runtime
	// patch, then its unsuspend), so a pass of the first that waits for the second
	// lets one apply carry both instead of one apply each
	// (docs/design/status-writes.md). The wait counts from the first change held, so
	// a TrainJob edited again and again while suspended is still applied within it. A
	// JobSet yet to be created is never held (Kueue reads its pod sets from it), nor
	// a suspend or a resume. 0 holds nothing.
	SuspendedHold time.Duration

	mu       sync.Mutex
	applied  map[cache.ObjectName]appliedJobSet
	refusals map[cache.ObjectName]refusalCount
	held     map[cache.ObjectName]heldChange
}

// DefaultSuspendedHold is the SuspendedHold production uses: Kueue's runtime patch and
// its unsuspend arrive 10–30 ms apart on a quiet control plane, a few hundred under a
// burst, and a queued TrainJob's JobSet that shows a change half a second late costs
// nothing (no pod runs; Kueue reads only its pod sets, set when it was created).
const DefaultSuspendedHold = 500 * time.Millisecond

// heldChange is a suspended TrainJob's change that SuspendedHold holds back.
type heldChange struct {
	uid   types.UID
	since time.Time // when the first change of the hold reached the stage
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

var _ engine.Stage = (*Stage)(nil)

// Name returns Name.
func (s *Stage) Name() string { return Name }

// Forget drops what the stage and its status Writer remember about the TrainJob at key;
// call it when the TrainJob is deleted.
func (s *Stage) Forget(key cache.ObjectName) {
	s.forgetApplied(key)
	s.mu.Lock()
	delete(s.held, key)
	s.mu.Unlock()
	s.refusalsEnded(key)
	s.Status.Forget(key)
}

func (s *Stage) forgetApplied(key cache.ObjectName) {
	s.mu.Lock()
	delete(s.applied, key)
	s.mu.Unlock()
}

// Sync makes the plan's side objects exist as the TrainJob's and applies the JobSet when
// the plan holds a change the gate allows, then writes status. It returns Restart when
// an unfinished TrainJob has neither JobSet nor plan (the JobSet was deleted, or this
// process has not built it), RequeueAfter until an active deadline, WaitForEvent
// otherwise, and Retry with the API error on failure.
//
// A write the API server refuses with an error retrying does not fix (a policy denying
// JobSets in the namespace, an invalid object: see refusedReason) is retried with the
// queue's backoff RefusalThreshold times; from then on, the TrainJob gets
// JobSetReady=False, reason Write<StatusReason> (e.g. WriteForbidden), its message
// naming the object and quoting the server, and the stage returns RequeueAfter
// RefusalDelay: the key leaves the pipeline, and its in-flight slot, until then or
// until the TrainJob's spec changes
// (docs/design/architecture.md#a-refused-write-holds-no-capacity). The count is per
// TrainJob generation; a pass whose writes go through ends it and turns the condition
// True.
//
// A side object's name held by an object the TrainJob does not control (someone
// else's, nobody's, an earlier TrainJob's of the same name) is never used or
// overwritten: the TrainJob gets JobSetReady=False, reason SideObjectConflict, naming
// the object, its controller and the fix, no JobSet is applied, and the plan is kept
// until the object is gone: its deletion routes the TrainJob back (informers), or,
// for an object no informer routes, the stage looks again after ConflictRecheck.
func (s *Stage) Sync(ctx context.Context, key cache.ObjectName) (engine.Result, error) {
	tj, err := s.TrainJobs.TrainJobs(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		s.Plans.Delete(key)
		s.Forget(key)
		return engine.WaitForEvent(), nil
	}
	if err != nil {
		return engine.Retry(), err
	}
	if !trainjob.IsManaged(tj) || tj.DeletionTimestamp != nil {
		return engine.WaitForEvent(), nil
	}
	if s.Status.WroteFinished(tj) {
		// This process made it Complete or Failed and the cache lags: the TrainJob's
		// update event brings the key back, finished.
		return engine.WaitForEvent(), nil
	}
	js, err := s.JobSets.JobSets(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		js = nil
	} else if err != nil {
		return engine.Retry(), err
	} else if !metav1.IsControlledBy(js, tj) {
		return s.rejectForeignJobSet(ctx, tj)
	} else if js.Annotations[AnnotationJobSetHash] == s.lastApplied(key, tj.UID).hash {
		// The cache shows what this process last applied, so the record has done its
		// job; keeping it would stop a JobSet deleted later from being re-created.
		s.forgetApplied(key)
	}
	return s.reconcile(ctx, key, tj, js)
}

// applyOutcome is what a pass's apply step (applyPlan) did, from which the pass writes
// the TrainJob's status. Its zero value is a pass that applied nothing.
type applyOutcome struct {
	applied     bool                // the JobSet was applied
	objectsOurs bool                // the plan's side objects exist as the TrainJob's
	planned     []metav1.Condition  // the plan's conditions, when the JobSet was applied
	conflict    *sideObjectConflict // the side object that stopped the apply; nil if none
	refused     *refusal            // the refusal to report; nil below RefusalThreshold
}

// reconcile is the rest of Sync for the managed TrainJob tj and its JobSet js (nil when
// there is none; tj controls it otherwise): the apply step, the active deadline and the
// status write. It returns Sync's Result and error.
func (s *Stage) reconcile(ctx context.Context, key cache.ObjectName, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) (engine.Result, error) {
	finished := trainjob.IsFinished(tj)
	now := s.now()
	// Past its active deadline a TrainJob gets no JobSet: one deleted at the deadline
	// by a pass whose status write then failed is not re-created by the retry.
	_, pastDeadline := activeDeadline(tj, js, now)
	var out applyOutcome
	if !finished && !pastDeadline {
		var stop *engine.Result
		var err error
		if out, stop, err = s.applyPlan(ctx, key, tj, js); stop != nil {
			return *stop, err
		}
	}

	if out.applied {
		tj = s.newest(tj)
	}
	deadline, expired := activeDeadline(tj, js, now)
	if expired {
		if err := s.deleteJobSet(ctx, tj); err != nil {
			return engine.Retry(), err
		}
	}
	mutate := func(applied bool, planned []metav1.Condition, healed bool) func(*trainer.TrainJobStatus) {
		return func(st *trainer.TrainJobStatus) {
			computeStatus(st, tj, js, applied, expired, now)
			planConditions(st, planned, now)
			writeCondition(st, tj, out.refused, out.conflict, healed, now)
			if s.Gang != nil && !finished {
				gangCondition(st, tj, s.Gang(tj), now)
			}
		}
	}
	change := s.Status.Prepare(tj, mutate(out.applied, out.planned, out.objectsOurs && js != nil))
	if !change.Empty() {
		if out.applied && s.Settle > 0 && !expired && out.refused == nil && out.conflict == nil && settles(change, mutate(false, nil, false)) {
			return engine.RequeueAfter(s.Settle), nil
		}
		if onlySuspendedCounts(change) {
			return s.nextSync(out, finished || expired, deadline, now), nil
		}
	}
	wrote, err := s.Status.Write(ctx, change)
	if err != nil {
		return engine.Retry(), err
	}
	if out.conflict != nil && wrote {
		s.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainjob.ReasonSideObjectConflict, "Applying", "%s", out.conflict.message())
	}
	return s.nextSync(out, finished || expired, deadline, now), nil
}

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

// nextSync returns when to sync the TrainJob again after its status was written:
// RequeueAfter the earliest of its active deadline (at least a second from now; none
// once done, i.e. finished or expired, or without a deadline), its refusal delay and,
// for a side-object conflict no informer routes, ConflictRecheck (0 means
// DefaultConflictRecheck); WaitForEvent when none of them applies.
func (s *Stage) nextSync(out applyOutcome, done bool, deadline, now time.Time) engine.Result {
	var after time.Duration
	if !done && !deadline.IsZero() {
		after = max(deadline.Sub(now), time.Second)
	}
	var recheck time.Duration
	switch {
	case out.refused != nil:
		recheck = out.refused.delay
	case out.conflict != nil && !out.conflict.watched:
		recheck = s.ConflictRecheck
		if recheck <= 0 {
			recheck = DefaultConflictRecheck
		}
	}
	if recheck > 0 && (after == 0 || recheck < after) {
		after = recheck
	}
	if after > 0 {
		return engine.RequeueAfter(after)
	}
	return engine.WaitForEvent()
}

// settles reports whether the status write change of a pass that applied the JobSet,
// one that writes something, may wait for Settle: a later sync, which has neither the
// plan nor the apply, computes the same (later applied to change's base gives change's
// result).
func settles(change statuswriter.Change, later func(*trainer.TrainJobStatus)) bool {
	settled := change.Base.DeepCopy()
	later(settled)
	return equality.Semantic.DeepEqual(change.Next, settled)
}

// onlySuspendedCounts reports whether change, a status write that writes something,
// changes nothing but jobsStatus[].suspended: then the stage does not write it on its
// own, and the next write carries it. No reader acts on that count — Kueue reads
// active, ready and succeeded and the conditions; users read the Suspended condition,
// written at once — and through Kueue it cost every queued TrainJob a status patch of
// its own, seconds after its Suspended=True, when the JobSet controller created its Job
// suspended (docs/design/status-writes.md). A list whose other counts are all zero
// counts as no list, as jobsStatus writes it.
func onlySuspendedCounts(change statuswriter.Change) bool {
	cur, next := *change.Base, *change.Next
	cur.JobsStatus, next.JobsStatus = withoutSuspendedCounts(cur.JobsStatus), withoutSuspendedCounts(next.JobsStatus)
	return equality.Semantic.DeepEqual(&cur, &next)
}

// withoutSuspendedCounts returns jobs with every suspended count cleared, or nil when
// every other count is zero.
func withoutSuspendedCounts(jobs []trainer.JobStatus) []trainer.JobStatus {
	var any bool
	out := make([]trainer.JobStatus, len(jobs))
	for i, j := range jobs {
		j.Suspended = nil
		out[i] = j
		any = any || ptr.Deref(j.Ready, 0) != 0 || ptr.Deref(j.Succeeded, 0) != 0 || ptr.Deref(j.Failed, 0) != 0 || ptr.Deref(j.Active, 0) != 0
	}
	if !any {
		return nil
	}
	return out
}

// newest returns the cache's TrainJob of tj's key when it is tj itself (same uid) and
// not being deleted, else tj. A pass that applied the JobSet computes the status from
// it: the apply took a round trip to the API server, in which the TrainJob may have
// changed, and a status computed from the copy read before would be outdated before it
// is written. Through Kueue it is: Kueue writes its runtime patch (generation 2) and
// unsuspends (generation 3) in two requests milliseconds apart, and the status of
// generation 2 — Suspended=True with observedGeneration 2 — was a patch of its own,
// followed by generation 3's Resumed; from the newest TrainJob the pass that applied
// generation 2 writes Resumed at once, and generation 3's pass, which resumes the
// JobSet, finds nothing left to write (docs/design/status-writes.md). The status
// follows spec.suspend as upstream's does (docs/compatibility.md#suspended-condition);
// the newer generation is queued for its own build (the informers route it), which
// resumes the JobSet.
func (s *Stage) newest(tj *trainer.TrainJob) *trainer.TrainJob {
	cached, err := s.TrainJobs.TrainJobs(tj.Namespace).Get(tj.Name)
	if err != nil || cached.UID != tj.UID || cached.DeletionTimestamp != nil {
		return tj
	}
	return cached
}

// applyIfChanged makes the plan's side objects exist as tj's (syncObjects; whatever
// the gate says, so a deleted one is re-created) and server-side applies the plan's
// JobSet when the gate allows it and its hash differs from what was last applied. It
// reports whether it applied the JobSet, how long SuspendedHold holds the change back
// (then it wrote nothing, side objects included: the pass is to end and come back),
// and the conflict that stopped it before the JobSet (nil when none did).
func (s *Stage) applyIfChanged(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, p *plan.Plan) (bool, time.Duration, *sideObjectConflict, error) {
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

// holdSuspended returns how much longer SuspendedHold holds back the change of tj
// (changed: the plan's JobSet differs from what is applied): the rest of the hold
// when tj is suspended and its JobSet js exists suspended, counted from the first
// change held; 0 otherwise, or once the hold is over, and then it forgets the hold.
func (s *Stage) holdSuspended(key cache.ObjectName, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, changed bool) time.Duration {
	hold := changed && s.SuspendedHold > 0 && js != nil && trainjob.IsSuspended(tj) && ptr.Deref(js.Spec.Suspend, false)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[key]
	if !hold {
		delete(s.held, key)
		return 0
	}
	if !ok || h.uid != tj.UID {
		if s.held == nil {
			s.held = map[cache.ObjectName]heldChange{}
		}
		s.held[key] = heldChange{uid: tj.UID, since: now}
		return s.SuspendedHold
	}
	if wait := h.since.Add(s.SuspendedHold).Sub(now); wait > 0 {
		return wait
	}
	delete(s.held, key)
	return 0
}

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

func (s *Stage) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}
