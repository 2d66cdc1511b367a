package engine

import (
	"context"
	"fmt"
	"runtime/debug"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/util/fairlimit"
)

// runner owns one stage's queue and worker pool.
type runner struct {
	name    string
	index   int // position in the pipeline, from 0
	stage   Stage
	workers int
	queue   workqueue.TypedRateLimitingInterface[cache.ObjectName]
	clock   clock.PassiveClock
	metrics *metrics.StageMetrics
	// flowKey names the flow of a key's API requests in its sync's context
	// (fairlimit.WithFlow), so that the client's rate limiter serves them in turn as
	// the queues serve the keys; nil: no flow, the limiter's one queue.
	flowKey flowKeyFunc

	keys *tracker // shared by every stage of the pipeline
}

func newRunner(s Stage, index, workers int, cfg config) *runner {
	name := s.Name()
	r := &runner{
		name:    name,
		index:   index,
		stage:   s,
		workers: workers,
		queue:   newStageQueue(name, cfg),
		clock:   cfg.clock,
		metrics: cfg.metrics.Stage(name),
		flowKey: cfg.flowKey,
	}
	r.metrics.SetWorkers(workers)
	return r
}

// newStageQueue builds the named stage's queue: client-go's rate-limiting, delaying
// workqueue, named and instrumented as before (the workqueue_* metrics, label name),
// whose storage is a fairQueue over cfg.flowKey — or client-go's FIFO if flowKey is nil
// (the benchmarks' baseline). The three layers are built one by one because only the
// innermost config takes a storage (workqueue.TypedQueueConfig.Queue).
func newStageQueue(name string, cfg config) workqueue.TypedRateLimitingInterface[cache.ObjectName] {
	var storage workqueue.Queue[cache.ObjectName] // nil: client-go's FIFO
	if cfg.flowKey != nil {
		storage = newFairQueue(cfg.flowKey)
	}
	provider := cfg.metrics.WorkqueueMetricsProvider()
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		cfg.rateLimit.newRateLimiter(cfg.clock),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{
			Clock: cfg.clock,
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{
				Name:            name,
				MetricsProvider: provider,
				Clock:           cfg.clock,
				Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[cache.ObjectName]{
					Name:            name,
					MetricsProvider: provider,
					Clock:           cfg.clock,
					Queue:           storage,
				}),
			}),
		})
}

// work is one worker: it processes keys until the queue shuts down.
func (r *runner) work(ctx context.Context) {
	// A panic in Sync is recovered per key (see sync). One reaching this
	// point is a bug in the engine itself: log it and crash.
	defer utilruntime.HandleCrashWithContext(ctx)
	for r.processNext(ctx) {
	}
}

// processNext handles one key and reports whether the worker should go on.
func (r *runner) processNext(ctx context.Context) bool {
	key, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(key)
	if ctx.Err() != nil {
		// Shutting down: skip keys still queued instead of syncing them with a
		// cancelled context. Informers replay every TrainJob at the next start.
		return true
	}
	if !r.keys.begin(r.index, key) {
		return true // due in another stage (this one stays pending), or waiting for room
	}
	r.handle(ctx, key)
	return true
}

// handle syncs key once, applies the result to the queues and records it.
func (r *runner) handle(ctx context.Context, key cache.ObjectName) {
	logger := withLazyValues(klog.FromContext(ctx), "stage", r.name, "trainJob", klog.KRef(key.Namespace, key.Name))
	ctx = klog.NewContext(ctx, logger)
	if r.flowKey != nil {
		ctx = fairlimit.WithFlow(ctx, r.flowKey(key))
	}

	r.metrics.SyncStarted()
	start := r.clock.Now()
	res, err := r.sync(ctx, key)
	elapsed := r.clock.Since(start)
	// Judged now, not after acting on the result: a failure that happened
	// before the shutdown began is still a failure.
	interrupted := err != nil && ctx.Err() != nil

	code := res.Code
	switch {
	case err != nil:
		code = CodeRetry
	case code < CodeContinue || code > CodeRestart:
		err = fmt.Errorf("stage returned unknown result code %d", int(code))
		code = CodeRetry
	case code == CodeRequeueAfter && res.After <= 0:
		err = fmt.Errorf("stage returned %s with non-positive delay %v", code, res.After)
		code = CodeRetry
	}
	r.metrics.SyncFinished(code.String(), elapsed)
	if code == CodeRetry {
		r.metrics.Retried()
	}
	r.keys.finish(r.index, key, Result{Code: code, After: res.After})

	switch {
	case err == nil && code == CodeRequeueAfter:
		logger.V(4).Info("Synced", "result", code, "after", res.After, "duration", elapsed)
	case err == nil:
		logger.V(4).Info("Synced", "result", code, "duration", elapsed)
	case interrupted:
		// The shutdown cancelled the Sync's API calls: not a failure of the
		// stage, so neither counted nor reported as one.
		logger.V(2).Info("Sync interrupted by shutdown", "err", err)
	default:
		r.metrics.Failed(err)
		utilruntime.HandleErrorWithContext(ctx, err, "Sync failed, retrying with backoff", "requeues", r.queue.NumRequeues(key))
	}
}

// sync calls the stage's Sync and turns a panic into an error, so that one
// bad TrainJob cannot crash the controller: the key is retried with backoff
// like any other failure, and the panic is logged with its stack.
func (r *runner) sync(ctx context.Context, key cache.ObjectName) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.metrics.Panicked()
			klog.FromContext(ctx).Error(nil, "Observed a panic in Sync", "panic", fmt.Sprint(p), "stacktrace", string(debug.Stack()))
			err = fmt.Errorf("panic in Sync: %v", p)
		}
	}()
	return r.stage.Sync(ctx, key)
}
