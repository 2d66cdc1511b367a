package auth

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/util/authlimit"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// The tests of a flood of random bearer tokens against /metrics (issue 25, item 5),
// through the metrics client's limiter as the controller builds it, DefaultReviewLimits,
// its buckets frozen at the fake clock's time (a source gets its burst, no refill).
const floodTokens = 1000

func newFloodServer() *apiServer {
	return &apiServer{
		tokens:  map[string]string{"prom": "prom", "fresh": "prom"},
		allowed: map[string]bool{"prom get /metrics": true},
	}
}

// limit returns a wrap for filterWith: the limiter with DefaultReviewLimits at clock,
// around extra's client (if extra is not nil).
func limit(clock *clocktesting.FakeClock, extra func(kubeclient.Interface) kubeclient.Interface) func(kubeclient.Interface) kubeclient.Interface {
	return func(kube kubeclient.Interface) kubeclient.Interface {
		if extra != nil {
			kube = extra(kube)
		}
		return authlimit.Client(kube, authlimit.New("metrics", DefaultReviewLimits, nil, clock))
	}
}

// getFrom GETs path with token from remote (host:port) under ctx: the status code and
// Retry-After.
func getFrom(ctx context.Context, h http.Handler, remote, path, token string) (int, string) {
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	r.RemoteAddr = remote
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Header().Get("Retry-After")
}

// TestRandomTokenFloodFromOneSource: 1,000 random tokens from one address, each on
// /metrics and on /metrics/x (2,000 decisions, more than a cache holds), cost at most
// the source's burst of TokenReviews, the rest answered 429 with Retry-After; the
// scraper's requests during the flood are answered from the allow cache, which the
// flood's denials do not churn.
func TestRandomTokenFloodFromOneSource(t *testing.T) {
	s, clock := newFloodServer(), clocktesting.NewFakeClock(time.Unix(1000, 0))
	h := s.filterWith(clock, limit(clock, nil)).Wrap(ok)
	if code, _ := getFrom(context.Background(), h, "10.0.0.5:9090", "/metrics", "prom"); code != http.StatusOK {
		t.Fatalf("the scraper's first request: %d", code)
	}
	var (
		wg              sync.WaitGroup
		scrapesOK       atomic.Int64
		unauth, refused atomic.Int64
		without         atomic.Int64 // 429 without Retry-After
		other           atomic.Int64
		paths           = []string{"/metrics", "/metrics/x"}
		reviewsBefore   = s.tokenReviews.Load()
		scrapes         = 50
	)
	wg.Go(func() {
		for range scrapes {
			if code, _ := getFrom(context.Background(), h, "10.0.0.5:9090", "/metrics", "prom"); code == http.StatusOK {
				scrapesOK.Add(1)
			}
		}
	})
	for i := range floodTokens {
		for _, p := range paths {
			wg.Go(func() {
				switch code, retryAfter := getFrom(context.Background(), h, "10.9.0.1:40000", p, fmt.Sprint("random-", i)); {
				case code == http.StatusUnauthorized:
					unauth.Add(1)
				case code == http.StatusTooManyRequests && retryAfter != "":
					refused.Add(1)
				case code == http.StatusTooManyRequests:
					without.Add(1)
				default:
					other.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if flooded := s.tokenReviews.Load() - reviewsBefore; flooded > int32(DefaultReviewLimits.SourceBurst) {
		t.Errorf("%d random tokens from one source cost %d TokenReviews, want at most the burst, %d", floodTokens, flooded, DefaultReviewLimits.SourceBurst)
	}
	if without.Load() != 0 || other.Load() != 0 {
		t.Errorf("the flood's answers: %d 401, %d 429 with Retry-After, %d without, %d other; want only the first two", unauth.Load(), refused.Load(), without.Load(), other.Load())
	}
	if scrapesOK.Load() != int64(scrapes) {
		t.Errorf("%d of the scraper's %d requests during the flood answered 200", scrapesOK.Load(), scrapes)
	}
	reviews := s.tokenReviews.Load()
	if code, _ := getFrom(context.Background(), h, "10.0.0.5:9090", "/metrics", "prom"); code != http.StatusOK || s.tokenReviews.Load() != reviews {
		t.Errorf("the scraper's request after the flood: %d and %d TokenReviews; want 200 from the cache, none", code, s.tokenReviews.Load()-reviews)
	}
}

// floodSlow sends floodTokens random tokens to /metrics at once (from one address, or
// each from its own) against an API server of seats seats that holds their reviews;
// once every one is answered or waits there, it sends the scraper's request with token
// and returns its status code and how many of the flood's reviews reached the server.
func floodSlow(t *testing.T, seats int, oneSource bool, token string) (int, int64) {
	s, clock := newFloodServer(), clocktesting.NewFakeClock(time.Unix(1000, 0))
	gate, entered := make(chan struct{}), &atomic.Int64{}
	seated := func(kube kubeclient.Interface) kubeclient.Interface {
		return utiltesting.SeatedKube{Interface: kube, Seats: make(chan struct{}, seats), Gate: gate, Entered: entered}
	}
	h := s.filterWith(clock, limit(clock, seated)).Wrap(ok)
	if token == "prom" { // known: reviewed before the flood
		if code, _ := getFrom(context.Background(), h, "10.0.0.5:9090", "/metrics", token); code != http.StatusOK {
			t.Fatalf("the scraper's first request: %d", code)
		}
	}
	var wg sync.WaitGroup
	var settled atomic.Int64
	for i := range floodTokens {
		wg.Go(func() {
			defer settled.Add(1)
			remote := "10.9.0.1:40000"
			if !oneSource {
				remote = fmt.Sprintf("10.9.%d.%d:40000", i/250, i%250+1)
			}
			getFrom(context.Background(), h, remote, "/metrics", fmt.Sprint("random-", i))
		})
	}
	for settled.Load()+entered.Load() < floodTokens {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a bound, not a figure
	code, _ := getFrom(ctx, h, "10.0.0.5:9090", "/metrics", token)
	cancel()
	waiting := entered.Load()
	close(gate)
	wg.Wait()
	return code, waiting
}

// TestScrapeDuringFloodOnSlowAPIServer: while 1,000 random tokens from one address wait
// on an overloaded API server (32 seats), a scraper's new token (from another address)
// is reviewed and answered 200: the limiter let at most the source's burst of the
// flood's reviews reach the API server. Without it the flood holds every seat.
func TestScrapeDuringFloodOnSlowAPIServer(t *testing.T) {
	code, waiting := floodSlow(t, 32, true, "fresh")
	if code != http.StatusOK {
		t.Errorf("the scraper's request during the flood: %d, want 200", code)
	}
	if waiting > int64(DefaultReviewLimits.SourceBurst) {
		t.Errorf("%d of the flood's TokenReviews reached the API server, want at most the burst, %d", waiting, DefaultReviewLimits.SourceBurst)
	}
}

// TestRandomTokenFloodFromManySources: 1,000 random tokens, each from its own address,
// have at most MaxInFlight TokenReviews in flight, and the scraper's known token is
// answered 200 from the cache throughout.
func TestRandomTokenFloodFromManySources(t *testing.T) {
	code, waiting := floodSlow(t, floodTokens, false, "prom")
	if code != http.StatusOK {
		t.Errorf("the scraper's request during the flood: %d, want 200", code)
	}
	if waiting > int64(DefaultReviewLimits.MaxInFlight) {
		t.Errorf("%d of the flood's TokenReviews were in flight at once, want at most MaxInFlight, %d", waiting, DefaultReviewLimits.MaxInFlight)
	}
}
