package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trainyard/trainyard/pkg/metrics"
)

// Pipeline runs an ordered list of stages, each with its own queue and worker
// pool. Its methods are safe for concurrent use.
//
// A key is in at most one stage at a time, queued or syncing (see the package
// doc): an event for a key that is in the pipeline already is remembered and
// acted on when the key's current sync ends, never lost and never run beside it.
type Pipeline struct {
	runners []*runner          // in stage order
	byName  map[string]*runner // immutable after New
	names   []string
	keys    *tracker
	logger  klog.Logger
	started atomic.Bool
}

// New builds a pipeline running stages in the given order. It returns an
// error, listing every problem found, if stages is empty, a stage is nil or
// has an empty or duplicate name, WithWorkers names an unknown stage or sets
// fewer than 1 worker, or WithRateLimit has a negative field or MaxDelay below
// BaseDelay.
//
// New creates the queues, so keys can be enqueued before Run; they wait until
// Run starts the workers. The queues hold goroutines from New until Run
// returns.
func New(stages []Stage, opts ...Option) (*Pipeline, error) {
	cfg := config{
		workers:     map[string]int{},
		maxInFlight: DefaultMaxInFlight,
		clock:       clock.RealClock{},
		logger:      klog.Background(),
		flowKey:     namespaceFlow,
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	cfg.rateLimit = cfg.rateLimit.withDefaults()
	if err := validate(stages, cfg); err != nil {
		return nil, fmt.Errorf("invalid pipeline: %w", err)
	}
	if cfg.metrics == nil {
		cfg.metrics = metrics.New(nil)
	}

	p := &Pipeline{
		byName: make(map[string]*runner, len(stages)),
		logger: cfg.logger,
	}
	queues := make([]queue, 0, len(stages))
	for i, s := range stages {
		workers := DefaultWorkers
		if n, ok := cfg.workers[s.Name()]; ok {
			workers = n
		}
		r := newRunner(s, i, workers, cfg)
		p.runners = append(p.runners, r)
		p.byName[r.name] = r
		p.names = append(p.names, r.name)
		queues = append(queues, r.queue)
	}
	// The in-flight gauges describe the keys past the first stage: a single-stage
	// pipeline (the progress server's) has none, and must not overwrite the gauges of
	// the TrainJob pipeline that shares the metrics.
	report := cfg.metrics.SetKeysInFlight
	if len(stages) == 1 {
		report = nil
	}
	p.keys = newTracker(queues, cfg.maxInFlight, report)
	for _, r := range p.runners {
		r.keys = p.keys
	}
	return p, nil
}

// maxStages is how many stages a pipeline may have: the tracker keeps a key's pending
// stages in a 64-bit set.
const maxStages = 64

func validate(stages []Stage, cfg config) error {
	var errs []error
	if len(stages) == 0 {
		errs = append(errs, errors.New("no stages"))
	}
	if len(stages) > maxStages {
		errs = append(errs, fmt.Errorf("%d stages, at most %d", len(stages), maxStages))
	}
	seen := map[string]bool{}
	for i, s := range stages {
		switch {
		case s == nil:
			errs = append(errs, fmt.Errorf("stage %d is nil", i))
		case s.Name() == "":
			errs = append(errs, fmt.Errorf("stage %d has an empty name", i))
		case seen[s.Name()]:
			errs = append(errs, fmt.Errorf("stage %d: duplicate name %q", i, s.Name()))
		default:
			seen[s.Name()] = true
		}
	}
	for name, n := range cfg.workers {
		if !seen[name] {
			errs = append(errs, fmt.Errorf("workers set for unknown stage %q", name))
		}
		if n < 1 {
			errs = append(errs, fmt.Errorf("stage %q: %d workers, need at least 1", name, n))
		}
	}
	if err := cfg.rateLimit.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Stages returns the stage names in order.
func (p *Pipeline) Stages() []string {
	return slices.Clone(p.names)
}

// Enqueue routes an event for key to the named stage: the stage syncs the key
// after this call, whatever the key is doing now. Event handlers use it to
// route a change to the earliest stage it can affect, e.g. a JobSet status
// change straight to the status stage. A key not in the pipeline enters it at
// the stage; a key waiting in the stage's queue is not added twice; a key
// syncing anywhere, or waiting in an earlier stage, gets the stage as pending
// and visits it when its current sync ends; a key waiting in a later stage
// moves to this one at once.
//
// An unknown stage name is a wiring bug: the key is dropped and the error
// logged through utilruntime.HandleError, since event handlers have no one to
// return an error to. After Run returns, keys are dropped silently.
func (p *Pipeline) Enqueue(stage string, key cache.ObjectName) {
	if r := p.lookup(stage); r != nil {
		p.keys.enqueue(r.index, key)
	}
}

// EnqueueAfter routes an event for key to the named stage once d has passed, as
// Enqueue does then; adds of a key already waiting coalesce into the earliest.
// Use it to batch noisy triggers, such as pod status churn.
func (p *Pipeline) EnqueueAfter(stage string, key cache.ObjectName, d time.Duration) {
	if r := p.lookup(stage); r != nil {
		r.queue.AddAfter(key, d)
	}
}

// EnqueueFirst routes an event for key to the first stage: the route for a new
// or changed TrainJob spec, or a changed runtime.
func (p *Pipeline) EnqueueFirst(key cache.ObjectName) {
	p.keys.enqueue(0, key)
}

// Has reports whether key is in the pipeline: queued in a stage or syncing. A
// key whose only future is a delayed add (EnqueueAfter, CodeRequeueAfter) is
// not. Like Len, the answer may be stale as soon as it is returned.
func (p *Pipeline) Has(key cache.ObjectName) bool {
	return p.keys.has(key)
}

// Len returns the number of keys waiting in the named stage's queue, not
// counting keys in flight or waiting out a delay; 0 for an unknown stage. It
// is informational: the value may be stale as soon as it is returned.
func (p *Pipeline) Len(stage string) int {
	if r, ok := p.byName[stage]; ok {
		return r.queue.Len()
	}
	return 0
}

func (p *Pipeline) lookup(stage string) *runner {
	r, ok := p.byName[stage]
	if !ok {
		utilruntime.HandleErrorWithLogger(p.logger, nil, "Dropping a key enqueued on an unknown stage", "stage", stage, "stages", p.names)
	}
	return r
}

// Run starts every stage's workers and blocks until ctx is cancelled. Waiting
// for informer caches to sync is the caller's job: start the informers, wait
// for them, then call Run.
//
// Workers sync with a context derived from ctx, so in-flight Syncs see the
// cancellation. Then Run shuts down in stage order: each queue stops taking
// keys and Run waits for the keys that stage has in flight to finish. Keys
// still waiting in a queue are dropped, not synced: informers replay every
// TrainJob at the next start. Run returns nil once every worker has stopped,
// so it takes as long as the slowest in-flight Sync.
//
// Run may be called once; a second call returns an error at once.
func (p *Pipeline) Run(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return errors.New("pipeline is already running or has run")
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Starting pipeline", "stages", p.names)

	var wg sync.WaitGroup
	for _, r := range p.runners {
		for range r.workers {
			wg.Go(func() { r.work(ctx) })
		}
	}
	<-ctx.Done()

	logger.V(2).Info("Stopping pipeline")
	for _, r := range p.runners {
		r.queue.ShutDownWithDrain()
		// ShutDownWithDrain stops only the inner queue; the delaying layer's
		// timer goroutine would linger until its next 10 s heartbeat.
		// ShutDown stops it now.
		r.queue.ShutDown()
	}
	wg.Wait()
	logger.V(2).Info("Pipeline stopped")
	return nil
}
