// Package authlimit bounds what a flood of unknown bearer tokens costs the API server.
// The controller's authenticated endpoints — the progress server (package progress) and
// /metrics (package metrics/auth) — cache their decisions, so a token they have seen
// costs nothing; a token they have not seen costs a TokenReview (authentication.k8s.io/v1).
// Without a bound, anyone who can reach an endpoint can make the controller send one
// TokenReview per random token, as fast as it can send requests (issue 25, item 5).
//
// A Limiter admits the TokenReviews of one endpoint: per source (the client's IP
// address, which the endpoint puts in the request's context with WithSource), a token
// bucket (golang.org/x/time/rate) of SourceQPS reviews per second and SourceBurst at
// once; over all sources, at most MaxInFlight reviews at a time. A review refused is
// not sent: the caller answers 429 Too Many Requests with Retry-After, and the client
// retries. Client wraps an endpoint's own API client so that every TokenReview it sends
// goes through the Limiter; the endpoints send TokenReviews only for tokens missing
// from their caches, so only unknown tokens are limited, and a token already reviewed
// (allowed or denied) is answered from the cache however hard the flood.
package authlimit

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trainyard/trainyard/pkg/httpserver"
)

// Values of the "result" label of trainyard_auth_token_reviews_total (package metrics
// re-exports them): what the Limiter did with one TokenReview an endpoint wanted to
// send.
const (
	// ResultSent: admitted and sent to the API server.
	ResultSent = "sent"
	// ResultSourceLimited: refused, its source had spent its token bucket.
	ResultSourceLimited = "source_limited"
	// ResultConcurrencyLimited: refused, MaxInFlight reviews were in flight.
	ResultConcurrencyLimited = "concurrency_limited"
)

// Observer is told what a Limiter does, e.g. to count it (*metrics.Metrics
// implements it): endpoint is the Limiter's, result one of the Result* values.
type Observer interface {
	ObserveTokenReviewAdmission(endpoint, result string)
}

// Limits are a Limiter's bounds. A zero or negative SourceQPS turns the per-source
// limit off; a zero or negative MaxInFlight, the global one.
type Limits struct {
	// SourceQPS is the sustained rate, in TokenReviews per second, one source may cause;
	// SourceBurst how many it may cause at once (at least 1 when SourceQPS is on).
	SourceQPS   float64
	SourceBurst int
	// MaxSources bounds the sources whose buckets are kept, least recently seen
	// dropped first, so that a flood from many addresses cannot grow the map without
	// bound (a bucket costs about 100 bytes). A dropped source starts again with a full
	// burst: MaxInFlight, not the buckets, is what bounds a flood from more addresses
	// than MaxSources. 0 means DefaultMaxSources.
	MaxSources int
	// MaxInFlight is how many TokenReviews may be in flight at once, all sources
	// together.
	MaxInFlight int
	// MaxInFlightPerShare is how many of them may be for one share (WithShare: the
	// endpoint's grouping of what a review is for, e.g. the progress endpoint's
	// namespace), so that a flood aimed at one share leaves the others' new tokens a
	// review; 0 or negative: no shares. Reviews without a share are one share.
	MaxInFlightPerShare int
}

// DefaultMaxSources is Limits.MaxSources when zero: more pod IPs than reach one
// endpoint between two refills of a bucket in any cluster this controller targets.
const DefaultMaxSources = 4096

// Limiter admits the TokenReviews of one endpoint under its Limits. Create it with New;
// it is safe for concurrent use.
type Limiter struct {
	endpoint string
	limits   Limits
	observer Observer
	clock    clock.PassiveClock

	mu      sync.Mutex
	sources map[string]*list.Element // of *sourceBucket, in order
	order   *list.List               // front: most recently seen

	inFlight *httpserver.FairInFlight // by share; unbounded when MaxInFlight ≤ 0

	// The refusals since the last log line (logRefusal), and when it was written.
	refused  int
	loggedAt time.Time
}

// refusalLogPeriod is the shortest time between two log lines about refusals: one line
// per period says how many, not one per refused request, whose count is the flood's.
const refusalLogPeriod = 10 * time.Second

// sourceBucket is one source's token bucket.
type sourceBucket struct {
	source string
	bucket *rate.Limiter
}

// New returns the Limiter of endpoint (the "endpoint" label of its observations, e.g.
// "progress" or "metrics") with limits. observer may be nil; clk nil means the real
// clock (tests pass a fake one to freeze or step the buckets' refill).
func New(endpoint string, limits Limits, observer Observer, clk clock.PassiveClock) *Limiter {
	if limits.MaxSources <= 0 {
		limits.MaxSources = DefaultMaxSources
	}
	if limits.SourceBurst < 1 {
		limits.SourceBurst = 1
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	l := &Limiter{endpoint: endpoint, limits: limits, observer: observer, clock: clk,
		sources: map[string]*list.Element{}, order: list.New()}
	l.inFlight = httpserver.NewFairInFlight(limits.MaxInFlight, limits.MaxInFlightPerShare)
	return l
}

// Admit takes one TokenReview of the source in ctx (WithSource; a context without one
// is limited by MaxInFlight only) and returns the function that ends it, to call once
// the review has been answered. When the review may not be sent it returns a 429
// *errors.StatusError of k8s.io/apimachinery (apierrors.IsTooManyRequests) whose
// RetryAfterSeconds says when to retry: the time until the source's bucket holds a
// token again, rounded up to whole seconds, or 1 s when MaxInFlight reviews are in
// flight, or MaxInFlightPerShare of the share in ctx (WithShare).
func (l *Limiter) Admit(ctx context.Context) (release func(), err error) {
	source, _ := ctx.Value(sourceKey{}).(string)
	share, _ := ctx.Value(shareKey{}).(string)
	if wait, ok := l.takeSource(source); !ok {
		l.observe(ResultSourceLimited)
		l.logRefusal(ctx, source, ResultSourceLimited)
		seconds := int(math.Ceil(wait.Seconds()))
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf(
			"too many unknown tokens from %s: at most %d token reviews at once and %g per second per client address",
			source, l.limits.SourceBurst, l.limits.SourceQPS), max(seconds, 1))
	}
	if !l.inFlight.TryAcquire(share) {
		l.observe(ResultConcurrencyLimited)
		l.logRefusal(ctx, source, ResultConcurrencyLimited)
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf(
			"too many unknown tokens: %d token reviews are in flight, at most %d for %q", l.limits.MaxInFlight, max(l.limits.MaxInFlightPerShare, 0), share), 1)
	}
	l.observe(ResultSent)
	var once sync.Once
	return func() { once.Do(func() { l.inFlight.Release(share) }) }, nil
}

// takeSource takes a token from source's bucket and returns true, or returns false
// and how long until the bucket holds one. An empty source, or SourceQPS off, always
// gets one.
func (l *Limiter) takeSource(source string) (time.Duration, bool) {
	if source == "" || l.limits.SourceQPS <= 0 {
		return 0, true
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var b *rate.Limiter
	if e, ok := l.sources[source]; ok {
		l.order.MoveToFront(e)
		b = e.Value.(*sourceBucket).bucket
	} else {
		b = rate.NewLimiter(rate.Limit(l.limits.SourceQPS), l.limits.SourceBurst)
		l.sources[source] = l.order.PushFront(&sourceBucket{source: source, bucket: b})
		if l.order.Len() > l.limits.MaxSources {
			oldest := l.order.Back()
			l.order.Remove(oldest)
			delete(l.sources, oldest.Value.(*sourceBucket).source)
		}
	}
	if b.AllowN(now, 1) {
		return 0, true
	}
	r := b.ReserveN(now, 1)
	defer r.CancelAt(now)
	return r.DelayFrom(now), false
}

// logRefusal counts a refusal of source's review, and logs the count at most once per
// refusalLogPeriod (with the logger of ctx), naming the source and result of the
// refusal that writes the line.
func (l *Limiter) logRefusal(ctx context.Context, source, result string) {
	now := l.clock.Now()
	l.mu.Lock()
	l.refused++
	n := l.refused
	if now.Sub(l.loggedAt) < refusalLogPeriod {
		l.mu.Unlock()
		return
	}
	l.refused, l.loggedAt = 0, now
	l.mu.Unlock()
	klog.FromContext(ctx).Info("Refusing the TokenReviews of unknown bearer tokens: answered 429 without a review",
		"endpoint", l.endpoint, "refused", n, "lastSource", source, "lastResult", result,
		"sourceQPS", l.limits.SourceQPS, "sourceBurst", l.limits.SourceBurst, "maxInFlight", l.limits.MaxInFlight)
}

// Sources returns how many sources' buckets are kept (at most Limits.MaxSources).
func (l *Limiter) Sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

func (l *Limiter) observe(result string) {
	if l.observer != nil {
		l.observer.ObserveTokenReviewAdmission(l.endpoint, result)
	}
}

type sourceKey struct{}

type shareKey struct{}

// WithShare returns ctx carrying share, the group (Limits.MaxInFlightPerShare) a
// Limiter counts the TokenReviews made under ctx in.
func WithShare(ctx context.Context, share string) context.Context {
	return context.WithValue(ctx, shareKey{}, share)
}

// WithSource returns ctx carrying source, the client address a Limiter charges the
// TokenReviews made under ctx to.
func WithSource(ctx context.Context, source string) context.Context {
	return context.WithValue(ctx, sourceKey{}, source)
}

// SourceOf returns the source of r: the IP address of r.RemoteAddr (without the port,
// so that the connections of one client are one source), or all of RemoteAddr when it
// is not host:port. It is the address of the peer that connected: behind a proxy that
// does not keep client addresses, every client is one source.
func SourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// RetryAfter returns the Retry-After, in whole seconds, that err suggests (a Limiter's
// refusal, or the API server's 429), and whether it suggests one.
func RetryAfter(err error) (int, bool) {
	return apierrors.SuggestsClientDelay(err)
}
