package progress

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
)

// Coalescer holds, per TrainJob, the latest accepted report until the progress Stage
// writes it: the handler Records, the Stage takes. A newer report replaces a pending
// one, so however often a trainer reports, a TrainJob costs one write per period. It is
// safe for concurrent use.
//
// Memory: one small entry per TrainJob that reported (the pending report's pointer, the
// TrainJob's uid, the time and lastUpdatedTime of this process's last write), dropped
// by Forget or when the Stage finds the TrainJob gone. Recording allocates nothing
// beyond the entry's first creation; the report is the one the handler decoded.
type Coalescer struct {
	enqueue  func(key cache.ObjectName)
	observer Observer

	mu      sync.Mutex
	entries map[cache.ObjectName]*entry
}

// entry is one TrainJob's state.
type entry struct {
	uid     types.UID              // the TrainJob the state belongs to
	pending *trainer.TrainerStatus // the report to write; nil when none
	// lastWrite is when this process last applied the TrainJob's trainerStatus (zero
	// before the first write): the start of the period.
	lastWrite time.Time
	// written is the lastUpdatedTime of that write, at the second precision the API
	// server stores: the Stage never writes a report that is not newer, even before the
	// informer cache shows the write.
	written time.Time
	// due is when the Stage's last Sync of the key deferred the write to (its
	// RequeueAfter: the end of the period, or the turn of the write's rate-limit
	// tokens); zero when that Sync did not defer it. While it is set, the engine holds
	// a delayed add of the key for that time, so a new report needs no enqueue.
	due time.Time
}

// NewCoalescer returns an empty Coalescer. enqueue is called with a TrainJob's key when
// a report arrives, none was pending and no deferred write of the key is scheduled (a
// pending report's key is already scheduled, by an earlier call or by the Stage's
// requeue), and by Flush: wire it to the progress pipeline, func(key) {
// pipeline.Enqueue(progress.Name, key) }. It must not block; nil enqueues nothing
// (tests). observer, which may be nil, is told about coalesced and dropped reports and
// about writes; the Stage uses it too.
func NewCoalescer(enqueue func(key cache.ObjectName), observer Observer) *Coalescer {
	if observer == nil {
		observer = nopObserver{}
	}
	return &Coalescer{enqueue: enqueue, observer: observer, entries: map[cache.ObjectName]*entry{}}
}

// Record makes status the pending report of the TrainJob at key, whose uid is uid (from
// the informer cache when the report was accepted), and schedules its write unless it
// is scheduled already. A pending report is replaced and counted as coalesced. status
// is dropped as stale when it is not newer (by lastUpdatedTime, in seconds) than this
// process's last write of the TrainJob — the trainer's other pods report the same
// second — or older than the pending report (two pods' reports arriving out of order).
// State kept for another uid (a deleted TrainJob of the same name) is discarded first.
// Record keeps status: the caller must not change it afterwards.
//
// A report costs no sync of the Stage unless it may be written sooner than the one
// already scheduled: the issue-14 benchmark saw 438,638 syncs for 1,675 writes when
// every report of a TrainJob waiting for its period or its rate-limit tokens requeued
// it.
func (c *Coalescer) Record(key cache.ObjectName, uid types.UID, status *trainer.TrainerStatus) {
	var schedule, coalesced bool
	var dropped string
	c.mu.Lock()
	switch e := c.entries[key]; {
	case e == nil:
		c.entries[key] = &entry{uid: uid, pending: status}
		schedule = true
	case e.uid != uid:
		// State of an earlier TrainJob of this name. Its pending report (if any) is
		// replaced, and its key is already scheduled. A new entry, not a reset one: a
		// write of the earlier TrainJob in flight must not set this one's period.
		if e.pending != nil {
			dropped = metrics.ReasonGone
		} else {
			schedule = e.due.IsZero()
		}
		c.entries[key] = &entry{uid: uid, pending: status, due: e.due}
	case !e.written.IsZero() && !reportTime(status).After(e.written):
		dropped = metrics.ReasonStale
	case e.pending == nil:
		e.pending = status
		schedule = e.due.IsZero()
	case reportTime(status).Before(reportTime(e.pending)):
		dropped = metrics.ReasonStale
	default:
		e.pending = status
		coalesced = true
	}
	c.mu.Unlock()
	switch {
	case dropped != "":
		c.observer.ObserveProgressDropped(dropped)
	case coalesced:
		c.observer.ObserveProgressCoalesced()
	}
	if schedule && c.enqueue != nil {
		c.enqueue(key)
	}
}

// Forget drops the TrainJob's state, its pending report included; call it when the
// TrainJob is deleted. A report arriving later starts afresh.
func (c *Coalescer) Forget(key cache.ObjectName) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}

// Flush schedules the write of the TrainJob's pending report, if any, now, even when a
// deferred write is scheduled. Call it when the TrainJob finishes (Complete or Failed
// becomes True): the Stage writes a finished TrainJob's report without waiting for the
// period, so the last report before completion lands as soon as the rate limits allow.
// It is a no-op without a pending report.
func (c *Coalescer) Flush(key cache.ObjectName) {
	c.mu.Lock()
	e := c.entries[key]
	pending := e != nil && e.pending != nil
	c.mu.Unlock()
	if pending && c.enqueue != nil {
		c.enqueue(key)
	}
}

// Pending returns the TrainJob's pending report (nil if none), for tests and debugging.
// The caller must not change it.
func (c *Coalescer) Pending(key cache.ObjectName) *trainer.TrainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		return e.pending
	}
	return nil
}

// Len returns the number of TrainJobs the Coalescer keeps state for.
func (c *Coalescer) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// reportTime returns ts.lastUpdatedTime at the second precision the API server stores
// (metav1.Time serialises as RFC 3339 seconds), or the zero time when unset.
func reportTime(ts *trainer.TrainerStatus) time.Time {
	if ts == nil || ts.LastUpdatedTime == nil {
		return time.Time{}
	}
	return ts.LastUpdatedTime.Truncate(time.Second)
}
