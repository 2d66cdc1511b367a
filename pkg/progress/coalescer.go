package progress

import (
	"fmt"
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
// Memory: one small entry per TrainJob that reported (the pending report's pointer and
// size, the TrainJob's uid, the time and lastUpdatedTime of this process's last write),
// dropped by Forget or when the Stage finds the TrainJob gone; and the pending reports,
// bounded in bytes (MaxPendingBytes, ReportBytes: what the decoded reports retain, the
// reports being written included). At the bound a newer report of a TrainJob still
// replaces its pending one when the difference fits, and any other report is refused
// (Record returns ErrPendingFull; the handler answers 429 with Retry-After), never
// accepted and then lost: the reports already pending are written, which frees their
// bytes, and the trainer's next report is kept. Dropping another TrainJob's pending
// report to make room would lose a report answered 200. Recording allocates nothing
// beyond the entry's first creation; the report is the one the handler decoded.
type Coalescer struct {
	enqueue  func(key cache.ObjectName)
	observer Observer

	// maxBytes bounds bytes; 0 means no bound. maxNamespaceBytes bounds each
	// namespace's share of them, namespaceBytes; 0 means no share. bytesObserver, when
	// the observer implements it, is told bytes.
	maxBytes, maxNamespaceBytes int64
	namespaceShare              bool // maxNamespaceBytes was set by an option
	bytesObserver               PendingBytesObserver

	mu      sync.Mutex
	entries map[cache.ObjectName]*entry
	// bytes is what the pending reports and the reports being written hold
	// (ReportBytes), by the sizes their entries and the Stage's writes recorded, and
	// namespaceBytes the same by namespace (no key for a namespace holding none).
	bytes          int64
	namespaceBytes map[string]int64
}

// entry is one TrainJob's state.
type entry struct {
	namespace string                 // the TrainJob's, whose share its bytes count in
	uid       types.UID              // the TrainJob the state belongs to
	pending   *trainer.TrainerStatus // the report to write; nil when none
	size      int64                  // ReportBytes(pending), counted in Coalescer.bytes
	// lastWrite is when this process last applied the TrainJob's trainerStatus (zero
	// before the first write): the start of the period.
	lastWrite time.Time
	// written is the order of that write (orderOf): the Stage never writes a report
	// that comes before it, even before the informer cache shows the write.
	written order
	// due is when the Stage's last Sync of the key deferred the write to (its
	// RequeueAfter: the end of the period, or the turn of the write's rate-limit
	// tokens); zero when that Sync did not defer it. While it is set, the engine holds
	// a delayed add of the key for that time, so a new report needs no enqueue.
	due time.Time
	// wroteFinal is set once this process has written a report of progressPercentage
	// 100: only the first final report skips the period (isFinal).
	wroteFinal bool
	// writing is set while the Stage writes a report it took from the entry: Drain
	// waits for it as for a pending one (a report taken as SIGTERM arrives is no less
	// accepted).
	writing bool
}

// NewCoalescer returns an empty Coalescer. enqueue is called with a TrainJob's key when
// a report arrives, none was pending and no deferred write of the key is scheduled (a
// pending report's key is already scheduled, by an earlier call or by the Stage's
// requeue), and by Flush: wire it to the progress pipeline, func(key) {
// pipeline.Enqueue(progress.Name, key) }. It must not block; nil enqueues nothing
// (tests). observer, which may be nil, is told about coalesced and dropped reports and
// about writes, and, when it implements PendingBytesObserver, about the pending bytes;
// the Stage uses it too. Without options the pending reports are bounded at
// DefaultMaxPendingBytes.
func NewCoalescer(enqueue func(key cache.ObjectName), observer Observer, opts ...CoalescerOption) *Coalescer {
	if observer == nil {
		observer = nopObserver{}
	}
	c := &Coalescer{enqueue: enqueue, observer: observer, maxBytes: DefaultMaxPendingBytes,
		entries: map[cache.ObjectName]*entry{}, namespaceBytes: map[string]int64{}}
	for _, opt := range opts {
		opt(c)
	}
	if !c.namespaceShare {
		c.maxNamespaceBytes = c.maxBytes / NamespaceShareDivisor
	}
	if o, ok := observer.(PendingBytesObserver); ok {
		c.bytesObserver = o
		o.SetProgressMaxPendingReportBytes(c.maxBytes)
		o.SetProgressPendingReportBytes(0)
	}
	return c
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
// Record returns an error wrapping ErrPendingFull, and keeps nothing, when keeping
// status would take the pending reports over the Coalescer's bound in bytes: its
// ReportBytes, less those of the TrainJob's pending report it replaces, must fit. The
// caller must then tell the trainer its report was not kept (the handler answers 429).
// A report dropped as stale is not refused: it would not be written anyway.
//
// A report costs no sync of the Stage unless it may be written sooner than the one
// already scheduled: the issue-14 benchmark saw 438,638 syncs for 1,675 writes when
// every report of a TrainJob waiting for its period or its rate-limit tokens requeued
// it.
func (c *Coalescer) Record(key cache.ObjectName, uid types.UID, status *trainer.TrainerStatus) error {
	size := ReportBytes(status)
	c.mu.Lock()
	e := c.entries[key]
	if e != nil && e.uid == uid && isStale(e, status) {
		c.mu.Unlock()
		c.observer.ObserveProgressDropped(metrics.ReasonStale)
		return nil
	}
	var replaced int64 // the bytes of the pending report status replaces
	if e != nil {
		replaced = e.size
	}
	if c.maxBytes > 0 && c.bytes-replaced+size > c.maxBytes {
		held := c.bytes
		c.mu.Unlock()
		return fmt.Errorf("%w: a report of %d bytes would take the %d bytes held over %d (statusServer.maxPendingReportBytes)",
			ErrPendingFull, size, held, c.maxBytes)
	}
	if held := c.namespaceBytes[key.Namespace]; c.maxNamespaceBytes > 0 && held-replaced+size > c.maxNamespaceBytes {
		c.mu.Unlock()
		return fmt.Errorf("%w: a report of %d bytes would take the %d bytes namespace %s holds over its share, %d",
			ErrPendingFull, size, held, key.Namespace, c.maxNamespaceBytes)
	}
	var schedule, coalesced bool
	var dropped string
	switch {
	case e == nil:
		c.entries[key] = &entry{namespace: key.Namespace, uid: uid, pending: status, size: size}
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
		c.entries[key] = &entry{namespace: key.Namespace, uid: uid, pending: status, size: size, due: e.due}
	case e.pending == nil:
		e.pending, e.size = status, size
		schedule = e.due.IsZero() || isFinal(status) && !e.wroteFinal
	default:
		e.pending, e.size = status, size
		coalesced = true
		schedule = !e.due.IsZero() && isFinal(status) && !e.wroteFinal
	}
	c.addBytes(key.Namespace, size-replaced)
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
	return nil
}

// isFinal reports whether status says training is over (progressPercentage 100). The
// first such report of a TrainJob is written without waiting for the period: it is
// the trainer's last word, sent just before its process exits, and readers that act
// on completion (an OptimizationJob taking a trial's objective metric) must find it
// stored by the time the TrainJob is Complete (docs/design/progress.md). It costs a
// TrainJob one write at most that the period would have merged.
func isFinal(status *trainer.TrainerStatus) bool {
	return status != nil && status.ProgressPercentage != nil && *status.ProgressPercentage == 100
}

// isStale reports whether status comes before e's last write or e's pending report
// (order.before): Record drops it (metrics.ReasonStale). Called with mu held.
func isStale(e *entry, status *trainer.TrainerStatus) bool {
	o := orderOf(status)
	return !e.written.at.IsZero() && o.before(e.written) ||
		e.pending != nil && o.before(orderOf(e.pending))
}

// addBytes adds delta (negative to free) to the bytes held, and namespace's, and tells
// the PendingBytesObserver. Called with mu held.
func (c *Coalescer) addBytes(namespace string, delta int64) {
	if delta == 0 {
		return
	}
	c.bytes += delta
	if c.namespaceBytes[namespace] += delta; c.namespaceBytes[namespace] <= 0 {
		delete(c.namespaceBytes, namespace)
	}
	if c.bytesObserver != nil {
		c.bytesObserver.SetProgressPendingReportBytes(c.bytes)
	}
}

// removeEntry deletes key's entry e and frees its pending report's bytes. Called with
// mu held.
func (c *Coalescer) removeEntry(key cache.ObjectName, e *entry) {
	delete(c.entries, key)
	c.addBytes(e.namespace, -e.size)
}

// clearPending drops e's pending report and frees its bytes. Called with mu held.
func (c *Coalescer) clearPending(e *entry) {
	e.pending = nil
	c.addBytes(e.namespace, -e.size)
	e.size = 0
}

// releaseWrite frees the size bytes of a report the Stage took for writing once its
// write is over, or makes the report e's pending one again (keeping its bytes) when
// restore is set: the write is to be retried and no newer report replaced it.
func (c *Coalescer) releaseWrite(e *entry, report *trainer.TrainerStatus, size int64, restore bool) {
	e.writing = false
	if restore {
		e.pending, e.size = report, size
		return
	}
	c.addBytes(e.namespace, -size)
}

// Forget drops the TrainJob's state, its pending report included; call it when the
// TrainJob is deleted. A report arriving later starts afresh.
func (c *Coalescer) Forget(key cache.ObjectName) {
	c.mu.Lock()
	if e := c.entries[key]; e != nil {
		c.removeEntry(key, e)
	}
	c.mu.Unlock()
}

// PendingBytes returns the bytes (ReportBytes) the pending reports and the reports being
// written hold, and the bound on them (0: none).
func (c *Coalescer) PendingBytes() (held, bound int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes, c.maxBytes
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
// order is where a report stands among a TrainJob's reports: its lastUpdatedTime at the
// second precision the API server stores, then its progressPercentage (-1 without one).
type order struct {
	at       time.Time
	progress int32
}

func orderOf(ts *trainer.TrainerStatus) order {
	o := order{at: reportTime(ts), progress: -1}
	if ts != nil && ts.ProgressPercentage != nil {
		o.progress = *ts.ProgressPercentage
	}
	return o
}

// before reports whether a report of order o must not replace one of order p: it is
// older, or of the same second with less progress. Reports of the same second and
// progress replace each other in the order they arrive: a trainer that reports more
// often than once a second (every epoch of a small model) must not lose the rest of
// that second's reports — its last one among them — to the first, as it did when the
// same second was stale (the real-node OptimizationJob e2e saw trials ranked by their
// first epoch's loss).
func (o order) before(p order) bool {
	return o.at.Before(p.at) || o.at.Equal(p.at) && o.progress < p.progress
}

func reportTime(ts *trainer.TrainerStatus) time.Time {
	if ts == nil || ts.LastUpdatedTime == nil {
		return time.Time{}
	}
	return ts.LastUpdatedTime.Truncate(time.Second)
}
