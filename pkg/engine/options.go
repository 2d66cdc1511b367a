package engine

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trainyard/trainyard/pkg/metrics"
)

// DefaultWorkers is the worker pool size of a stage that WithWorkers does not
// mention.
const DefaultWorkers = 1

// RateLimit sets how long a key waits before a retry (CodeRetry or a Sync
// error): the larger of a per-key exponential backoff and the wait of a token
// bucket shared by the keys of the stage in the key's namespace (namespaceBuckets:
// one namespace's failing keys do not delay another's retries). Every stage gets
// its own limiter with these settings. Zero fields take the defaults of
// DefaultRateLimit.
type RateLimit struct {
	// BaseDelay is the delay before a key's first retry; it doubles with
	// every consecutive failure of that key. Default 5ms.
	BaseDelay time.Duration
	// MaxDelay caps the per-key delay. Default 5m.
	MaxDelay time.Duration
	// QPS and Burst size each namespace's bucket, which spreads out a retry
	// storm (e.g. the API server failing every key of a namespace at once).
	// Defaults 10 and 100.
	QPS   float64
	Burst int
}

// DefaultRateLimit returns the default retry limits: 5ms doubling up to 5m per
// key, and 10 qps with a burst of 100 per stage and namespace.
func DefaultRateLimit() RateLimit {
	return RateLimit{BaseDelay: 5 * time.Millisecond, MaxDelay: 5 * time.Minute, QPS: 10, Burst: 100}
}

// withDefaults returns rl with its zero fields set to the defaults.
func (rl RateLimit) withDefaults() RateLimit {
	def := DefaultRateLimit()
	if rl.BaseDelay == 0 {
		rl.BaseDelay = def.BaseDelay
	}
	if rl.MaxDelay == 0 {
		rl.MaxDelay = def.MaxDelay
	}
	if rl.QPS == 0 {
		rl.QPS = def.QPS
	}
	if rl.Burst == 0 {
		rl.Burst = def.Burst
	}
	return rl
}

func (rl RateLimit) validate() error {
	var errs []error
	if rl.BaseDelay < 0 {
		errs = append(errs, fmt.Errorf("rate limit: BaseDelay %v is negative", rl.BaseDelay))
	}
	if rl.MaxDelay < rl.BaseDelay {
		errs = append(errs, fmt.Errorf("rate limit: MaxDelay %v is less than BaseDelay %v", rl.MaxDelay, rl.BaseDelay))
	}
	if rl.QPS < 0 {
		errs = append(errs, fmt.Errorf("rate limit: QPS %v is negative", rl.QPS))
	}
	if rl.Burst < 0 {
		errs = append(errs, fmt.Errorf("rate limit: Burst %d is negative", rl.Burst))
	}
	return errors.Join(errs...)
}

// newRateLimiter returns the limiter for one stage queue, its buckets timed by clk.
func (rl RateLimit) newRateLimiter(clk clock.PassiveClock) workqueue.TypedRateLimiter[cache.ObjectName] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](rl.BaseDelay, rl.MaxDelay),
		newNamespaceBuckets(rl.QPS, rl.Burst, clk),
	)
}

// Option configures a Pipeline.
type Option func(*config)

type config struct {
	workers     map[string]int
	maxInFlight int
	rateLimit   RateLimit
	clock       clock.WithTicker
	metrics     *metrics.Metrics
	logger      klog.Logger
	// flowKey names the flow each stage queue serves a key in, flows taking turns
	// (fairQueue); nil means client-go's single FIFO. New sets namespaceFlow. The seam
	// for another flow key: an Option setting this field (and a configuration field
	// feeding it); nothing else in the engine depends on what a flow is.
	flowKey flowKeyFunc
}

// WithWorkers sets the worker pool size of the named stages; each must be at
// least 1. Stages not in the map get DefaultWorkers. Naming a stage the
// pipeline does not have is an error, so a typo in configuration is caught.
func WithWorkers(workers map[string]int) Option {
	return func(c *config) {
		for name, n := range workers {
			c.workers[name] = n
		}
	}
}

// WithMaxInFlight bounds the keys past the first stage: the first stage admits a
// new key only while fewer than n are between it and the end of the pipeline, so a
// burst waits as keys in the first queue rather than as plans in memory. n <= 0 means
// no bound. Default: DefaultMaxInFlight.
func WithMaxInFlight(n int) Option {
	return func(c *config) { c.maxInFlight = n }
}

// DefaultMaxInFlight is the default WithMaxInFlight: at the status stage's measured
// 200 applies per second on 2 cores (issue 9), 2.5 s of work, enough to keep it busy.
const DefaultMaxInFlight = 500

// WithRateLimit sets the retry limits of every stage queue.
func WithRateLimit(rl RateLimit) Option {
	return func(c *config) { c.rateLimit = rl }
}

// WithClock sets the clock of the queues (AddAfter delays, queue metrics) and
// of the stage duration metrics. Tests pass a fake clock. Default: the real
// clock.
func WithClock(clk clock.WithTicker) Option {
	return func(c *config) { c.clock = clk }
}

// WithMetrics sets where the pipeline records its queue and stage metrics.
// Default: a private, unregistered set that nothing exports.
func WithMetrics(m *metrics.Metrics) Option {
	return func(c *config) { c.metrics = m }
}

// WithLogger sets the logger for problems outside a Sync, such as an Enqueue
// naming an unknown stage. Workers log through the logger in Run's context.
// Default: klog.Background().
func WithLogger(logger klog.Logger) Option {
	return func(c *config) { c.logger = logger }
}
