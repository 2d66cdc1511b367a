package stages

import (
	"context"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// inFlight bounds the keys between the first stage and the end of the pipeline.
//
// Why: the build stages take microseconds, the status stage waits on the API server.
// In a burst, keys race through stages 1–5 and wait for the status stage, each with
// its plan (a built JobSet) in memory: memory grew with the burst, not with the
// cluster (issue 9 measured 10 MB of waiting plans, 20% of the live heap, at 10,000
// TrainJobs). With a bound, the excess waits in the first stage's queue as a key,
// the status stage stays saturated, and throughput is unchanged.
//
// A key is admitted by the first stage before its Sync (keys already in flight pass
// at once, so a restarted key never waits behind itself) and leaves when any stage
// finishes it with a result other than Continue or Retry (which keep it in the
// pipeline): WaitForEvent, Terminal, RequeueAfter, Restart's return to the first
// stage, or the last stage's Continue. Leaving is idempotent, so keys the informers
// route straight to a later stage (never admitted) leave harmlessly.
type inFlight struct {
	max    int              // 0: unbounded
	report func(n, max int) // records the count; called with mu held

	mu      sync.Mutex
	keys    map[cache.ObjectName]struct{}
	changed chan struct{} // closed and replaced whenever a key leaves
}

func newInFlight(max int, report func(n, max int)) *inFlight {
	if report == nil {
		report = func(int, int) {}
	}
	report(0, max)
	return &inFlight{max: max, report: report, keys: map[cache.ObjectName]struct{}{}, changed: make(chan struct{})}
}

// admit waits until key may enter (it is in flight already, or fewer than max keys
// are) and records it. It returns false when ctx ends first.
func (f *inFlight) admit(ctx context.Context, key cache.ObjectName) bool {
	if f.max <= 0 {
		return true
	}
	for {
		f.mu.Lock()
		_, ok := f.keys[key]
		if ok || len(f.keys) < f.max {
			f.keys[key] = struct{}{}
			f.report(len(f.keys), f.max)
			f.mu.Unlock()
			return true
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// leave forgets key and wakes the admissions waiting for room.
func (f *inFlight) leave(key cache.ObjectName) {
	if f.max <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.keys[key]; !ok {
		return
	}
	delete(f.keys, key)
	f.report(len(f.keys), f.max)
	close(f.changed)
	f.changed = make(chan struct{})
}

// len is the number of keys in flight.
func (f *inFlight) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys)
}
