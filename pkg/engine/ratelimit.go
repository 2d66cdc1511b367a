package engine

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// namespaceBuckets is the token-bucket half of a stage's retry limiter, with one bucket
// per namespace instead of client-go's one bucket for every key
// (workqueue.DefaultTypedControllerRateLimiter).
//
// A bucket hands out a token per retry and, once empty, a reservation further in the
// future for each: with one shared bucket, the retries of keys that keep failing in one
// namespace (a policy denying its JobSets, a namespace being terminated) queue up ahead
// of everyone's, and a healthy TrainJob's first retry elsewhere waits behind them —
// minutes at 10 retries per second (issue 15's fault suite measured 1.5–2.3 min). With a
// bucket per namespace, a namespace's retries wait for its own tokens only: the burst of
// retries it can cause is still bounded (qps and burst per namespace), and no other
// namespace pays for it.
//
// A bucket that is full again carries no state, so buckets of namespaces that stopped
// retrying are dropped, at most once per sweepEvery, so the map holds the namespaces
// with retries in the last minute or so.
type namespaceBuckets struct {
	limit rate.Limit
	burst int
	clock clock.PassiveClock

	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
	lastSweep time.Time
}

// sweepEvery is how often namespaceBuckets drops its full buckets.
const sweepEvery = time.Minute

func newNamespaceBuckets(qps float64, burst int, clk clock.PassiveClock) *namespaceBuckets {
	return &namespaceBuckets{limit: rate.Limit(qps), burst: burst, clock: clk, buckets: map[string]*rate.Limiter{}}
}

// When reserves a token of key's namespace bucket and returns how long the retry must
// wait for it: 0 while the bucket has tokens.
func (b *namespaceBuckets) When(key cache.ObjectName) time.Duration {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.lastSweep) >= sweepEvery {
		for ns, l := range b.buckets {
			if l.TokensAt(now) >= float64(b.burst) {
				delete(b.buckets, ns)
			}
		}
		b.lastSweep = now
	}
	l, ok := b.buckets[key.Namespace]
	if !ok {
		l = rate.NewLimiter(b.limit, b.burst)
		b.buckets[key.Namespace] = l
	}
	return l.ReserveN(now, 1).DelayFrom(now)
}

// Forget does nothing: a bucket does not count one key's failures.
func (b *namespaceBuckets) Forget(cache.ObjectName) {}

// NumRequeues is 0: the per-key exponential limiter counts requeues.
func (b *namespaceBuckets) NumRequeues(cache.ObjectName) int { return 0 }

// namespaces returns how many buckets are held, for tests.
func (b *namespaceBuckets) namespaces() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buckets)
}
