package faults

import (
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainyard/trainyard/pkg/httpserver/slowclient"
)

// The HTTP/2 attack of TestAdmissionUnderHTTP2SlowBodies: package admission's
// DefaultMaxRequests streams take every request slot, h2Overflow more go beyond them.
const (
	admissionMaxRequests = 2048
	h2Overflow           = 256
)

// TestAdmissionUnderHTTP2SlowBodies holds 2,304 HTTP/2 streams sending their body a
// byte a second (32 to a connection, as the admission server allows) against a running
// controller's admission server, registered with failurePolicy Fail, while 100
// TrainJobs are created, 4 at a time, each once: none may be refused, their p99 must stay
// within half the webhook timeout, and the streams beyond the request slots must be
// cut (a 408, or the reset of their connection). Before the overflow lane every review was refused 429 while the slow
// bodies held the 2,048 slots, and the creates failed at the webhook's timeout.
func TestAdmissionUnderHTTP2SlowBodies(t *testing.T) {
	timed(t)
	const n = 100
	e := newEnv(t)
	ns := e.namespace(t)
	ctrl := e.startWebhookController(t, "trainyard-admission-h2")
	stop := make(chan struct{})
	var attackers sync.WaitGroup
	defer func() { close(stop); attackers.Wait() }()
	var cut, cut408 atomic.Int64
	var firstErr atomic.Pointer[error]                                                // a stream that failed rather than was answered
	attacker := slowclient.HTTP2Client((admissionMaxRequests + h2Overflow + 31) / 32) // 32 streams a connection
	for range admissionMaxRequests + h2Overflow {
		attackers.Go(func() {
			for {
				code, wasCut, err := slowclient.TrickleHTTP2(attacker, "https://"+ctrl.WebhookAddr+validateTrainJobPath, "application/json",
					maxRequestBytes, `{"kind":"AdmissionReview"`, stop)
				if !wasCut {
					return
				}
				cut.Add(1)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
				if code == http.StatusRequestTimeout {
					cut408.Add(1)
				}
			}
		})
	}
	time.Sleep(5 * time.Second) // the streams are open and their first bytes sent
	cutBefore := cut408.Load()
	latencies, refused := e.createEach(t, ns, n, 4, func() {})
	slices.Sort(latencies)
	p50, p99 := latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	t.Logf("%d slow HTTP/2 streams: %d of %d creates refused; create latency p50 %s, p99 %s, max %s; slow streams cut %d (%d with 408, %d while creating; first failed: %v); requests refused for the bounds: %.0f",
		admissionMaxRequests+h2Overflow, len(refused), n, p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		latencies[len(latencies)-1].Round(time.Millisecond), cut.Load(), cut408.Load(), cut408.Load()-cutBefore, failure(&firstErr),
		ctrl.Metric(t, "trainyard_admission_requests_rejected_total"))
	if len(refused) > 0 {
		t.Errorf("%d TrainJob creates refused under the HTTP/2 attack, want none; first: %v", len(refused), first(refused, 3))
	}
	if p99 > webhookTimeout/2 {
		t.Errorf("create p99 %s under the HTTP/2 attack, want within half the webhook timeout (%s)", p99, webhookTimeout)
	}
	// Cut, by a 408 or by the connection the server then resets: which of the two a
	// stream sees depends on whether the client is mid-write when the server answers
	// (seen in make check: 63 with 408 of 2,438 cut, the rest "connection loss").
	if cut.Load() < h2Overflow/2 {
		t.Errorf("%d slow streams cut (%d with 408), want at least half the %d beyond the request slots", cut.Load(), cut408.Load(), h2Overflow)
	}
	expectExact(t, e.waitAllJobSets(t, ns, n, 2*time.Minute), n)
}

// Bounds of TestMetricsAndProbePortsUnderFloods, for 2 loaded cores: Prometheus' scrape
// timeout is 10 s, the chart's probe timeout 5 s.
const (
	floodScrapeBound = 5 * time.Second
	floodProbeBound  = 3 * time.Second
)

// TestMetricsAndProbePortsUnderFloods attacks a running controller's metrics and health
// probe ports from one pod's address (127.0.0.2) while Prometheus (127.0.0.1) scrapes
// and the kubelet probes: first 320 connections sending a header a byte a second to the
// metrics port (five times the 64 connections it had, reconnecting when cut), then 64
// clients a port sending 64 KiB headers as fast as they are answered. Every scrape and
// probe must be answered 200 within its bound; the pod must hold at most its 8 metrics
// connections, the others closed as soon as accepted; the headers are answered 431.
// Before the per-source cap a scrape waited behind the pod's queued connections past
// its timeout.
func TestMetricsAndProbePortsUnderFloods(t *testing.T) {
	timed(t)
	e := newEnv(t)
	ctrl := e.startController(t, "floods", "trainyard-floods")
	scrapes, probes := &latencies{}, &latencies{}
	check := func(phase string) {
		for range 5 {
			time.Sleep(300 * time.Millisecond)
			code, took, err := getTimed("http://"+ctrl.MetricsAddr+"/metrics", 2*floodScrapeBound)
			scrapes.add(took)
			if err != nil || code != http.StatusOK || took > floodScrapeBound {
				t.Fatalf("%s: a scrape answered %d after %v (%v), want 200 within %v", phase, code, took, err, floodScrapeBound)
			}
			code, took, err = getTimed("http://"+ctrl.HealthAddr+"/healthz", 2*floodProbeBound)
			probes.add(took)
			if err != nil || code != http.StatusOK || took > floodProbeBound {
				t.Fatalf("%s: a probe answered %d after %v (%v), want 200 within %v", phase, code, took, err, floodProbeBound)
			}
		}
	}

	stop := make(chan struct{})
	var slow sync.WaitGroup
	var slowCut atomic.Int64
	for range 320 {
		slow.Go(func() {
			slowCut.Add(int64(slowclient.TricklePlainFrom("127.0.0.2", ctrl.MetricsAddr, "GET /metrics HTTP/1.1\r\nHost: metrics\r\n", "X-Slow: 1\r\n", stop)))
		})
	}
	time.Sleep(3 * time.Second)
	check("320 slow connections on the metrics port")
	close(stop)
	slow.Wait()
	t.Logf("320 slow connections from one address on the metrics port: scrape p50 %v, max %v; probe max %v; the pod's connections closed %d times",
		scrapes.quantile(0.5), scrapes.quantile(1), probes.quantile(1), slowCut.Load())

	scrapes, probes = &latencies{}, &latencies{}
	stop = make(chan struct{})
	var flood sync.WaitGroup
	var refused431 [2]atomic.Int64
	for i, addr := range []string{ctrl.HealthAddr, ctrl.MetricsAddr} {
		for range 64 {
			flood.Go(func() {
				refused431[i].Add(int64(slowclient.HeaderFlood("127.0.0.2", addr, "/metrics", 64<<10, stop)))
			})
		}
	}
	time.Sleep(2 * time.Second)
	check("a header flood on the probe and metrics ports")
	close(stop)
	flood.Wait()
	t.Logf("header flood (64 clients a port, 64 KiB headers): scrape p50 %v, max %v; probe p50 %v, max %v; 431 answers: probe port %d, metrics port %d",
		scrapes.quantile(0.5), scrapes.quantile(1), probes.quantile(0.5), probes.quantile(1), refused431[0].Load(), refused431[1].Load())
	if refused431[0].Load() == 0 || refused431[1].Load() == 0 {
		t.Errorf("431 answers: probe port %d, metrics port %d; want the flood refused on both", refused431[0].Load(), refused431[1].Load())
	}
}

// failure is the error p holds, or nil.
func failure(p *atomic.Pointer[error]) error {
	if e := p.Load(); e != nil {
		return *e
	}
	return nil
}

// latencies collects durations.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// quantile is the q quantile (0..1) of the durations, rounded to the millisecond.
func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))].Round(time.Millisecond)
}

// getTimed GETs url on a connection of its own (as Prometheus and the kubelet do) within
// timeout and returns the status and how long it took.
func getTimed(url string, timeout time.Duration) (int, time.Duration, error) {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := client.Get(url)
	if err != nil {
		return 0, time.Since(start), err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}
