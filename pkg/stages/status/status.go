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
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
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
	// RunPolicy returns the spec.runPolicy of the runtime tj references (nil when none):
	// the defaults of its activeDeadlineSeconds and ttlSecondsAfterFinished
	// (resolveruntime.RunPolicyLookup in production). nil applies the TrainJob's own
	// fields only.
	RunPolicy func(tj *trainer.TrainJob) *trainer.RunPolicy
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
	policy := s.runPolicy(tj)
	// Past its active deadline a TrainJob gets no JobSet: one deleted at the deadline
	// by a pass whose status write then failed is not re-created by the retry.
	_, pastDeadline := activeDeadline(tj, js, policy.ActiveDeadlineSeconds, now)
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
	deadline, expired := activeDeadline(tj, js, policy.ActiveDeadlineSeconds, now)
	if expired {
		if err := s.deleteJobSet(ctx, tj); err != nil {
			return engine.Retry(), err
		}
	}
	mutate := func(applied bool, planned []metav1.Condition, healed bool) func(*trainer.TrainJobStatus) {
		return func(st *trainer.TrainJobStatus) {
			base := st.DeepCopy()
			computeStatus(st, tj, js, applied, expired, now)
			planConditions(st, planned, now)
			writeCondition(st, tj, out.refused, out.conflict, healed, now)
			if s.Gang != nil && !finished {
				gangCondition(st, tj, s.Gang(tj), now)
			}
			// The times ride along with a write the pass makes anyway (issue 9: a few
			// status writes per life cycle); their values do not depend on when.
			if !onlySuspendedCounts(statuswriter.Change{Base: base, Next: st}) {
				setTimes(st, tj, now)
			}
		}
	}
	change := s.Status.Prepare(tj, mutate(out.applied, out.planned, out.objectsOurs && js != nil))
	if !change.Empty() {
		if out.applied && s.Settle > 0 && !expired && out.refused == nil && out.conflict == nil && settles(change, mutate(false, nil, false)) {
			return engine.RequeueAfter(s.Settle), nil
		}
		if onlySuspendedCounts(change) {
			return s.afterWrite(ctx, tj, out, finished || expired, deadline, change.Next, policy, now)
		}
	}
	wrote, err := s.Status.Write(ctx, change)
	if err != nil {
		return engine.Retry(), err
	}
	if out.conflict != nil && wrote {
		s.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainjob.ReasonSideObjectConflict, "Applying", "%s", out.conflict.message())
	}
	return s.afterWrite(ctx, tj, out, finished || expired, deadline, change.Next, policy, now)
}

// afterWrite ends a pass whose status st is written (or left to the next write): it
// deletes tj when st says it finished and its TTL has expired — the status, Complete
// or Failed, is written first, so a watcher sees how it ended even with a TTL of 0 —
// and returns WaitForEvent (its delete event forgets it); else nextSync, with the TTL
// expiry among the instants to come back at.
func (s *Stage) afterWrite(ctx context.Context, tj *trainer.TrainJob, out applyOutcome, done bool, deadline time.Time, st *trainer.TrainJobStatus, policy trainer.RunPolicy, now time.Time) (engine.Result, error) {
	expiry, ok := ttlExpiry(st, policy.TTLSecondsAfterFinished)
	if ok && !now.Before(expiry) {
		if err := s.deleteTrainJob(ctx, tj, expiry); err != nil {
			return engine.Retry(), err
		}
		return engine.WaitForEvent(), nil
	}
	if !ok {
		expiry = time.Time{}
	}
	return s.nextSync(out, done, deadline, expiry, now), nil
}

// nextSync returns when to sync the TrainJob again after its status was written:
// RequeueAfter the earliest of its active deadline (at least a second from now; none
// once done, i.e. finished or expired, or without a deadline), its TTL expiry (zero
// when none; at least a second from now, as KEP-2899 bounds a requeue that clock skew
// would make negative), its refusal delay and, for a side-object conflict no informer
// routes, ConflictRecheck (0 means DefaultConflictRecheck); WaitForEvent when none of
// them applies.
func (s *Stage) nextSync(out applyOutcome, done bool, deadline, expiry, now time.Time) engine.Result {
	var after time.Duration
	if !done && !deadline.IsZero() {
		after = max(deadline.Sub(now), time.Second)
	}
	if !expiry.IsZero() {
		if ttl := max(expiry.Sub(now), time.Second); after == 0 || ttl < after {
			after = ttl
		}
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

func (s *Stage) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}
