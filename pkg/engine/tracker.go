package engine

import (
	"math/bits"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
)

// tracker knows, for every key in the pipeline, where it is: which stage's queue holds
// it or which stage is syncing it, and which stages were asked to see it again while it
// was elsewhere. It is what makes a key's trip through the stages one pass at a time,
// and what keeps an update that arrives mid-pass from being lost (the package doc
// states the invariant).
//
// client-go's workqueue keeps, for one queue, a dirty mark that survives processing: an
// Add during a sync re-queues the key when the sync is Done. The tracker extends that
// mark across the stages: an event routed to stage i while the key syncs in stage j
// sets pending bit i, and the bit stays until stage i begins a sync of the key. When a
// sync ends, the key goes to the earlier of the stage its result names and the lowest
// pending stage; a key with pending stages never leaves the pipeline.
//
// The tracker also bounds the keys past the first stage (WithMaxInFlight): see admit.
type tracker struct {
	queues []queue // by stage index, for the adds the tracker decides

	mu   sync.Mutex
	keys map[cache.ObjectName]*keyState

	// The in-flight bound. Why: the build stages take microseconds, the status stage
	// waits on the API server. In a burst, keys raced through stages 1–5 and waited for
	// the status stage, each with its plan (a built JobSet) in memory: memory grew with
	// the burst, not with the cluster (issue 9 measured 10 MB of waiting plans, 20% of
	// the live heap, at 10,000 TrainJobs). With the bound, the excess waits in the first
	// stage's queue as a key.
	max      int              // 0: unbounded
	admitted int              // keys holding a slot
	parked   parkedKeys       // keys waiting for a slot, round-robin over namespaces
	report   func(n, max int) // records admitted; called with mu held
}

// queue is what the tracker needs of a stage queue.
type queue interface {
	Add(cache.ObjectName)
	AddRateLimited(cache.ObjectName)
	AddAfter(cache.ObjectName, time.Duration)
	Forget(cache.ObjectName)
}

// keyState is where one key is. A key is in the map from the event that brings it
// into the pipeline until a sync ends with nothing left to do for it.
type keyState struct {
	stage   int    // the stage whose queue holds the key, or that syncs it
	syncing bool   // a worker of stage is syncing it
	pending uint64 // bit i: stage i must sync the key again (it was asked while the key was elsewhere)
	// admitted: the key holds one of the max slots, from the first stage's admission until
	// it leaves the pipeline or waits for a retry.
	admitted bool
	// parked: the key is due in the first stage but waits for a slot; release re-queues
	// it with a slot reserved.
	parked bool
	// backoff bit i: stage i's rate limiter counts failures of the key (a retry was
	// added rate-limited and not forgotten since). A retry that an event overtakes
	// (finish) leaves its stage's count behind; when the key leaves the pipeline, the
	// counts it left are forgotten, so a rate limiter holds no key that is not in the
	// pipeline.
	backoff uint64
}

func newTracker(queues []queue, max int, report func(n, max int)) *tracker {
	if report == nil {
		report = func(int, int) {}
	}
	report(0, max)
	return &tracker{queues: queues, keys: map[cache.ObjectName]*keyState{}, max: max, report: report}
}

// enqueue routes an event for key to stage s: the key enters the pipeline at s, or, if
// it is in the pipeline already, s is remembered (pending) or, when the key only waits
// in a later stage's queue, the key moves to s at once and the later stage stays
// pending. Either way stage s syncs the key after this call.
func (t *tracker) enqueue(s int, key cache.ObjectName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.keys[key]
	switch {
	case !ok:
		t.keys[key] = &keyState{stage: s}
		t.queues[s].Add(key)
	case st.syncing || s > st.stage:
		st.pending |= 1 << s
	case s == st.stage:
		// Waiting in s already: Add coalesces with the queued key, or ends the wait of
		// a rate-limited retry early (an event is news the retry may need).
		t.queues[s].Add(key)
	default: // s < st.stage: waiting in a later stage's queue
		st.pending |= 1 << st.stage
		st.stage = s
		t.queues[s].Add(key)
	}
}

// begin is called when a worker of stage s took key from its queue. It reports whether
// the worker should sync it, and marks it syncing if so. A key taken from a queue that
// no longer holds it (it moved to an earlier stage, or syncs elsewhere) is not synced
// here: s is remembered as pending instead. A key not in the pipeline was added by a
// delayed add (RequeueAfter, EnqueueAfter) and enters it here.
//
// The first stage syncs a key only once it holds an in-flight slot: it holds one
// already (a restart), or fewer than max keys do. Otherwise the key is parked, and the
// worker moves on: a worker never blocks, so keys in flight that return to the first
// stage always find one free.
func (t *tracker) begin(s int, key cache.ObjectName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.keys[key]
	switch {
	case !ok:
		st = &keyState{stage: s}
		t.keys[key] = st
	case st.stage == s && !st.syncing:
	case st.syncing || s > st.stage:
		st.pending |= 1 << s
		return false
	default: // s < st.stage: waiting in a later stage, which stays pending
		st.pending |= 1 << st.stage
		st.stage = s
	}
	if s == 0 && t.max > 0 && !st.admitted {
		if st.parked {
			return false // already waiting for a slot
		}
		if t.admitted >= t.max {
			st.parked = true
			t.parked.push(key)
			return false
		}
		st.admitted = true
		t.admitted++
		t.report(t.admitted, t.max)
	}
	st.syncing = true
	st.pending &^= 1 << s
	return true
}

// finish is called when stage s has synced key with result res. It sends the key on:
// to the next stage (CodeContinue), back to s with backoff (CodeRetry), to the first
// stage (CodeRestart), to s after res.After (CodeRequeueAfter: a delayed add, the key
// leaves the pipeline meanwhile), or nowhere (CodeWaitForEvent, CodeTerminal) — unless
// a stage was asked for while the key synced: then the key goes to the lowest pending
// stage if that comes first. A key with nowhere to go leaves the pipeline.
func (t *tracker) finish(s int, key cache.ObjectName, res Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.keys[key]
	st.syncing = false
	next, retry := -1, false
	switch res.Code {
	case CodeContinue:
		if s+1 < len(t.queues) {
			next = s + 1
		}
	case CodeRetry:
		next, retry = s, true
	case CodeRestart:
		next = 0
	case CodeRequeueAfter:
		t.queues[s].AddAfter(key, res.After)
	}
	if !retry {
		t.queues[s].Forget(key)
		st.backoff &^= 1 << s
	}
	if st.pending != 0 {
		if p := bits.TrailingZeros64(st.pending); next < 0 || p <= next {
			// An event arrived during the sync: its stage runs now, before a backoff.
			next, retry = p, false
		}
	}
	if next < 0 {
		t.release(st)
		for ; st.backoff != 0; st.backoff &= st.backoff - 1 {
			t.queues[bits.TrailingZeros64(st.backoff)].Forget(key)
		}
		delete(t.keys, key)
		return
	}
	st.stage = next
	if retry {
		// A key waiting out a backoff is not making progress: its slot goes to a key
		// that is (docs/design/architecture.md#a-refused-write-holds-no-capacity:
		// failing keys hold no capacity that healthy TrainJobs need).
		t.release(st)
		t.queues[s].AddRateLimited(key)
		st.backoff |= 1 << s
		return
	}
	t.queues[next].Add(key)
}

// release frees st's in-flight slot, if it holds one, and hands it to the next parked
// key (the oldest of the namespace whose turn it is: parkedKeys), which it queues in the
// first stage. Called with mu held.
func (t *tracker) release(st *keyState) {
	if !st.admitted {
		return
	}
	st.admitted = false
	t.admitted--
	for {
		key, ok := t.parked.pop()
		if !ok {
			break
		}
		if next, ok := t.keys[key]; ok && next.parked {
			next.parked, next.admitted = false, true
			t.admitted++
			t.queues[0].Add(key)
			break
		}
	}
	t.report(t.admitted, t.max)
}

// has reports whether key is in the pipeline: queued in a stage (not counting a delayed
// add not yet due) or syncing.
func (t *tracker) has(key cache.ObjectName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.keys[key]
	return ok
}
