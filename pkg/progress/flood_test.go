package progress_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/util/authlimit"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// The tests of a flood of random bearer tokens (issue 25, item 5): the progress
// client's limiter as the controller builds it (cmd/trainyard/app), with small bounds.
const floodTokens = 1000

var (
	floodSourceBurst = progress.DefaultReviewLimits.SourceBurst
	floodMaxInFlight = progress.DefaultReviewLimits.MaxInFlight
)

// limitClient puts cfg's client behind the progress endpoint's limiter with
// DefaultReviewLimits, as the controller's progress client is (authlimit.Client), its
// buckets frozen at the cluster's fake time: a source gets its burst and no refill.
func limitClient(cfg *progress.AuthorizerConfig) {
	cfg.Client = authlimit.Client(cfg.Client, authlimit.New("progress", progress.DefaultReviewLimits, nil, cfg.Clock))
}

// postFrom POSTs a full report for TrainJob llm with token from remote (host:port)
// under ctx and returns the status code and Retry-After.
func postFrom(ctx context.Context, h http.Handler, remote, token string) (int, string) {
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, wire.Path(ns, "llm"), strings.NewReader(fullReport))
	req.RemoteAddr = remote
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header().Get("Retry-After")
}

// flood sends floodTokens reports with random tokens at once, from one source
// (10.9.0.1) or each from its own, and returns the count of each status code.
func flood(h http.Handler, oneSource bool) map[int]int {
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
	)
	for i := range floodTokens {
		wg.Go(func() {
			remote := "10.9.0.1:40000"
			if !oneSource {
				remote = fmt.Sprintf("10.9.%d.%d:40000", i/250, i%250+1)
			}
			code, retryAfter := postFrom(context.Background(), h, remote, fmt.Sprintf("random-%d", i))
			if code == http.StatusTooManyRequests && retryAfter == "" {
				code = -code // a 429 without Retry-After
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

// TestRandomTokenFloodFromOneSource: 1,000 random tokens from one address cost at most
// the source's burst of TokenReviews, the rest answered 429 with Retry-After; a
// trainer's reports, sent while the flood arrives, are answered 200 from the allow
// cache, which the flood's denials (more than either cache holds) do not churn.
func TestRandomTokenFloodFromOneSource(t *testing.T) {
	c := newClusterWith(t, func(cfg *progress.AuthorizerConfig) {
		cfg.CacheSize, cfg.DenyCacheSize = 100, 100
		limitClient(cfg)
	})
	c.tokens["good"] = boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "llm"))
	h := progress.NewHandler(progress.HandlerConfig{Authorizer: c.authorizer, Coalescer: progress.NewCoalescer(nil, &observer{}),
		Clock: c.clock, MaxInFlight: -1})
	if code, _ := postFrom(context.Background(), h, "10.0.0.7:5000", "good"); code != http.StatusOK {
		t.Fatalf("the trainer's first report: %d, want 200", code)
	}
	var trainer sync.WaitGroup
	var trainerOK atomic.Int64
	trainer.Go(func() { // the trainer's reports, while the flood arrives
		for range 50 {
			if code, _ := postFrom(context.Background(), h, "10.0.0.7:5000", "good"); code == http.StatusOK {
				trainerOK.Add(1)
			}
		}
	})
	codes := flood(h, true)
	trainer.Wait()
	reviews, _ := c.counts()
	if flooded := reviews - 1; flooded > floodSourceBurst {
		t.Errorf("%d random tokens from one source cost %d TokenReviews, want at most the burst, %d", floodTokens, flooded, floodSourceBurst)
	}
	if codes[http.StatusForbidden]+codes[http.StatusTooManyRequests] != floodTokens {
		t.Errorf("the flood's answers: %v, want only 403 (reviewed) and 429 with Retry-After", codes)
	}
	if trainerOK.Load() != 50 {
		t.Errorf("%d of the trainer's 50 reports during the flood answered 200", trainerOK.Load())
	}
	if code, _ := postFrom(context.Background(), h, "10.0.0.7:5000", "good"); code != http.StatusOK {
		t.Errorf("the trainer's report after the flood: %d, want 200", code)
	}
	if after, _ := c.counts(); after != reviews {
		t.Errorf("the trainer's reports after the flood cost %d TokenReviews: the flood evicted its allow", after-reviews)
	}
}

// TestTrainerReportDuringFloodOnSlowAPIServer: while 1,000 random tokens from one
// address wait on an overloaded API server (32 seats), a trainer pod's first report
// (a token never reviewed, from another address) is reviewed and answered 200 before
// the flood's reviews end: the limiter let at most the source's burst of them reach the
// API server, so seats remain. Without it the flood holds every seat and the report
// waits until its deadline.
func TestTrainerReportDuringFloodOnSlowAPIServer(t *testing.T) {
	const seats = 32
	gate, entered := make(chan struct{}), &atomic.Int64{}
	var settled atomic.Int64 // flood requests answered, or waiting in the API server
	c := newClusterWith(t, func(cfg *progress.AuthorizerConfig) {
		cfg.Client = utiltesting.SeatedKube{Interface: cfg.Client, Seats: make(chan struct{}, seats), Gate: gate, Entered: entered}
		limitClient(cfg)
	})
	c.tokens["fresh"] = boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "llm"))
	h := progress.NewHandler(progress.HandlerConfig{Authorizer: c.authorizer, Coalescer: progress.NewCoalescer(nil, &observer{}),
		Clock: c.clock, MaxInFlight: -1})
	var wg sync.WaitGroup
	for i := range floodTokens {
		wg.Go(func() {
			defer settled.Add(1)
			postFrom(context.Background(), h, "10.9.0.1:40000", fmt.Sprintf("random-%d", i))
		})
	}
	// Every flood request is answered or has reached the API server.
	for settled.Load()+entered.Load() < floodTokens {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a bound, not a figure
	code, _ := postFrom(ctx, h, "10.0.0.7:5000", "fresh")
	cancel()
	waiting := entered.Load()
	close(gate)
	wg.Wait()
	if code != http.StatusOK {
		t.Errorf("the trainer's report during the flood: %d, want 200 before the flood's reviews end", code)
	}
	if waiting > int64(floodSourceBurst) {
		t.Errorf("%d of the flood's TokenReviews reached the API server, want at most the source's burst, %d", waiting, floodSourceBurst)
	}
}

// TestRandomTokenFloodFromManySources: 1,000 random tokens, each from its own address,
// cost at most MaxInFlight TokenReviews while the API server holds them, and the
// trainer's cached token is answered 200 throughout.
func TestRandomTokenFloodFromManySources(t *testing.T) {
	gate, entered := make(chan struct{}), &atomic.Int64{}
	var settled atomic.Int64
	c := newClusterWith(t, func(cfg *progress.AuthorizerConfig) {
		cfg.Client = utiltesting.SeatedKube{Interface: cfg.Client, Seats: make(chan struct{}, 1000), Gate: gate, Entered: entered}
		limitClient(cfg)
	})
	c.tokens["good"] = boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "llm"))
	h := progress.NewHandler(progress.HandlerConfig{Authorizer: c.authorizer, Coalescer: progress.NewCoalescer(nil, &observer{}),
		Clock: c.clock, MaxInFlight: -1})
	if code, _ := postFrom(context.Background(), h, "10.0.0.7:5000", "good"); code != http.StatusOK {
		t.Fatalf("the trainer's first report: %d, want 200", code)
	}
	var wg sync.WaitGroup
	for i := range floodTokens {
		wg.Go(func() {
			defer settled.Add(1)
			postFrom(context.Background(), h, fmt.Sprintf("10.9.%d.%d:40000", i/250, i%250+1), fmt.Sprintf("random-%d", i))
		})
	}
	for settled.Load()+entered.Load() < floodTokens {
		time.Sleep(time.Millisecond)
	}
	code, _ := postFrom(context.Background(), h, "10.0.0.7:5000", "good")
	waiting := entered.Load()
	close(gate)
	wg.Wait()
	if code != http.StatusOK {
		t.Errorf("the trainer's report during the flood: %d, want 200 from the cache", code)
	}
	if waiting > int64(floodMaxInFlight) {
		t.Errorf("%d of the flood's TokenReviews were in flight at once, want at most MaxInFlight, %d", waiting, floodMaxInFlight)
	}
}

// TestNewTrainerTokenDuringManySourceFlood: 1,000 random tokens, each from its own
// address and for a TrainJob that does not exist, wait on a slow API server, with the
// handler's bounds on as the controller serves it (DefaultMaxInFlight, its namespace
// share); a new trainer pod's first report (a token never reviewed, for an existing
// TrainJob) is reviewed and answered 200 meanwhile: the flood holds its share of the
// review slots (MaxInFlightPerShare), not all of them. Before the shares the flood held
// all 64 and the new token was answered 429 until the flood's reviews ended.
func TestNewTrainerTokenDuringManySourceFlood(t *testing.T) {
	gate, entered := make(chan struct{}), &atomic.Int64{}
	var settled atomic.Int64
	c := newClusterWith(t, func(cfg *progress.AuthorizerConfig) {
		cfg.Client = utiltesting.SeatedKube{Interface: cfg.Client, Seats: make(chan struct{}, floodTokens+1), Gate: gate, Entered: entered}
		limitClient(cfg)
	})
	c.tokens["fresh"] = boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "llm"))
	h := progress.NewHandler(progress.HandlerConfig{Authorizer: c.authorizer, Coalescer: progress.NewCoalescer(nil, &observer{}), Clock: c.clock})
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range floodTokens {
		wg.Go(func() {
			defer settled.Add(1)
			req := httptest.NewRequest(http.MethodPost, wire.Path(ns, fmt.Sprintf("guess-%d", i)), strings.NewReader(fullReport))
			req.RemoteAddr = fmt.Sprintf("10.9.%d.%d:40000", i/250, i%250+1)
			req.Header.Set("Authorization", fmt.Sprintf("Bearer random-%d", i))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == http.StatusTooManyRequests {
				refused.Add(1)
			}
		})
	}
	for settled.Load()+entered.Load() < floodTokens {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a bound, not a figure
	code, _ := postFrom(ctx, h, "10.0.0.7:5000", "fresh")
	cancel()
	waiting := entered.Load()
	close(gate)
	wg.Wait()
	if code != http.StatusOK {
		t.Errorf("a new trainer token's report during a flood from %d addresses (%d reviews in flight): %d, want 200", floodTokens, waiting, code)
	}
	if share := int64(progress.DefaultReviewLimits.MaxInFlightPerShare); waiting > share {
		t.Errorf("%d of the flood's TokenReviews were in flight at once, want at most its share, %d", waiting, share)
	}
	t.Logf("flood of %d addresses: %d reviews in flight, %d answered 429; the new token's report: %d", floodTokens, waiting, refused.Load(), code)
}
