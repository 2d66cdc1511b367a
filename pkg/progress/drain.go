package progress

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// drainPoll is how often Drain looks whether reports are still pending.
const drainPoll = 50 * time.Millisecond

// Drain writes every pending report without waiting for its period, for a replica
// that is stopping: a report its server answered 200 was accepted, and a trainer does
// not send it again. Call it once the server no longer accepts reports (closed
// listeners, in-flight requests answered), while the Stage's pipeline still runs; stop
// the pipeline after it returns. From the call on, the Stage writes a report as soon as
// the drain's rate limit allows (WriteLimits.QPS × DrainSpeedup over all namespaces, so
// a stopping replica writes fast without flooding the API server), and every pending
// report's key is scheduled now.
//
// Drain returns when no report is pending or being written, or when ctx ends (the
// drain period); it returns the number of reports still unwritten then, which are
// lost. A report whose write is under way when Drain is called (a trainer's final
// report, written without waiting for the period) is waited for: stopping the pipeline
// would cancel it. A report whose
// write keeps failing stays pending and is retried with the pipeline's backoff until
// ctx ends. Upstream writes each report inside its request, so it has nothing to drain.
func (s *Stage) Drain(ctx context.Context) (lost int) {
	s.draining.Store(true)
	for _, key := range s.coalescer.pendingKeys() {
		if s.coalescer.enqueue != nil {
			s.coalescer.enqueue(key)
		}
	}
	_ = wait.PollUntilContextCancel(ctx, drainPoll, true, func(context.Context) (bool, error) {
		lost = s.coalescer.unwritten()
		return lost == 0, nil
	})
	return lost
}

// unwritten returns how many TrainJobs have a report pending or being written.
func (c *Coalescer) unwritten() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.entries {
		if e.pending != nil || e.writing {
			n++
		}
	}
	return n
}

// pendingKeys returns the keys of the TrainJobs with a report pending, in no order.
func (c *Coalescer) pendingKeys() []cache.ObjectName {
	c.mu.Lock()
	defer c.mu.Unlock()
	var keys []cache.ObjectName
	for key, e := range c.entries {
		if e.pending != nil {
			keys = append(keys, key)
		}
	}
	return keys
}
