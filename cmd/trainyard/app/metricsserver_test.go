package app

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/httpserver/slowclient"
)

// serveMetrics starts newMetricsServer(cfg) on a free port and returns its base URL.
func serveMetrics(t *testing.T, cfg configv1alpha1.MetricsConfiguration, profiling bool) string {
	t.Helper()
	kube := kubefake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.TokenReview{}, nil // nobody is authenticated
	})
	logger, _ := ktesting.NewTestContext(t)
	cfg.BindAddress = "127.0.0.1:0"
	srv, err := newMetricsServer(cfg, prometheus.NewRegistry(), profiling, nil, kube, logger)
	if err != nil || srv == nil {
		t.Fatalf("newMetricsServer = %v, %v", srv, err)
	}
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	scheme := "http"
	if srv.TLSConfig != nil {
		scheme = "https"
		go func() { _ = srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	t.Cleanup(func() { _ = srv.Close() })
	return scheme + "://" + ln.Addr().String()
}

func TestMetricsServer(t *testing.T) {
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for name, tc := range map[string]struct {
		secure, auth, profiling bool
		scheme                  string
		codes                   map[string]int
	}{
		"defaults: HTTPS, self-signed, authenticated": {secure: true, auth: true, profiling: true, scheme: "https",
			codes: map[string]int{"/metrics": 401, "/debug/pprof/": 401}},
		"HTTPS without auth": {secure: true, scheme: "https",
			codes: map[string]int{"/metrics": 200, "/debug/pprof/": 404}},
		"plain HTTP when asked for": {scheme: "http", profiling: true,
			codes: map[string]int{"/metrics": 200, "/debug/pprof/": 200}},
	} {
		t.Run(name, func(t *testing.T) {
			base := serveMetrics(t, configv1alpha1.MetricsConfiguration{SecureServing: ptr.To(tc.secure),
				Auth: configv1alpha1.MetricsAuthConfiguration{Enabled: ptr.To(tc.auth)}}, tc.profiling)
			if got := base[:len(tc.scheme)+3]; got != tc.scheme+"://" {
				t.Errorf("served at %s, want %s", base, tc.scheme)
			}
			for path, want := range tc.codes {
				resp, err := client.Get(base + path)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
				}
			}
		})
	}
	if srv, err := newMetricsServer(configv1alpha1.MetricsConfiguration{BindAddress: "0"}, nil, false, nil, nil, ktesting.NewLogger(t, ktesting.NewConfig())); srv != nil || err != nil {
		t.Errorf(`bindAddress "0" = %v, %v; want no server`, srv, err)
	}
}

// TestMetricsServerBounds: the metrics server has read, write and idle timeouts and a
// connection cap (metricsLimits), and a request beyond metricsMaxInFlight is answered
// 429 with Retry-After at once.
func TestMetricsServerBounds(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	srv, err := newMetricsServer(configv1alpha1.MetricsConfiguration{BindAddress: "127.0.0.1:0", SecureServing: ptr.To(false), Auth: configv1alpha1.MetricsAuthConfiguration{Enabled: ptr.To(false)}},
		prometheus.NewRegistry(), false, nil, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	if srv.ReadHeaderTimeout == 0 || srv.ReadTimeout == 0 || srv.WriteTimeout < 30*time.Second || srv.IdleTimeout == 0 || srv.MaxHeaderBytes != 16<<10 {
		t.Errorf("timeouts %v/%v/%v/%v, header bound %d: want all set, the write timeout above a 30 s CPU profile",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	h := limitInFlight(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { entered <- struct{}{}; <-release }), 1)
	go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/metrics", nil))
	<-entered
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	close(release)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("a request beyond the in-flight cap: %d, Retry-After %q; want 429, 1", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// scrapeTimeout is Prometheus' default scrape_timeout.
const scrapeTimeout = 10 * time.Second

// scrapeBound is how long a scrape may take while a pod floods the port: half the
// scrape timeout, for 2 loaded cores under -race (alone, ~5 ms).
const scrapeBound = scrapeTimeout / 2

// serveMetricsPlain serves newMetricsServer over plain HTTP without auth, through the
// controller's Serve (its connection caps), and returns it and its address.
func serveMetricsPlain(t *testing.T) (*httpserver.Server, string) {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	srv, err := newMetricsServer(configv1alpha1.MetricsConfiguration{BindAddress: "127.0.0.1:0", SecureServing: ptr.To(false),
		Auth: configv1alpha1.MetricsAuthConfiguration{Enabled: ptr.To(false)}}, prometheus.NewRegistry(), false, nil, kubefake.NewClientset(), logger)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, ln.Addr().String()
}

// scrape GETs /metrics as Prometheus does (its own connection, scrapeTimeout) and
// returns the status and how long it took.
func scrape(addr string) (int, time.Duration, error) {
	client := &http.Client{Timeout: scrapeTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, time.Since(start), err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

// TestMetricsServerScrapedWhileAPodHoldsSlowConnections: one pod (127.0.0.2) opens
// slowConns connections sending a header a byte a second, reconnecting when cut; a
// scrape from another address (Prometheus, 127.0.0.1) is answered within scrapeBound
// each round, the pod holds at most metricsMaxConnsPerSource connections, and its
// others are closed as soon as they are accepted. Before the per-source cap the pod
// held all 64 connections with ~250 more queued ahead of the scrape, cut every 5 s:
// the scrape timed out.
func TestMetricsServerScrapedWhileAPodHoldsSlowConnections(t *testing.T) {
	const slowConns = 320
	srv, addr := serveMetricsPlain(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); _ = srv.Close(); wg.Wait() })
	for range slowConns {
		wg.Go(func() {
			slowclient.TricklePlainFrom("127.0.0.2", addr, "GET /metrics HTTP/1.1\r\nHost: metrics\r\n", "X-Slow: 1\r\n", stop)
		})
	}
	for deadline := time.Now().Add(10 * time.Second); srv.OpenConns() < min(slowConns, metricsMaxConns, metricsMaxConnsPerSource); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want the pod's", srv.OpenConns())
		}
	}
	for round := range 3 {
		time.Sleep(time.Second)
		code, took, err := scrape(addr)
		if err != nil || code != http.StatusOK || took > scrapeBound {
			t.Fatalf("round %d: a scrape beside %d slow connections: %d after %v (%v), want 200 within %v", round, slowConns, code, took, err, scrapeBound)
		}
		// The scrape's own connection may still be open on the server side, its close
		// not yet handled (CI saw 9 once): wait for it, up to a second, before counting
		// the pod's.
		open := srv.OpenConns()
		for deadline := time.Now().Add(time.Second); open > metricsMaxConnsPerSource && time.Now().Before(deadline); open = srv.OpenConns() {
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("round %d: scraped in %v; %d connections open, %d refused", round, took, open, srv.RefusedConns())
		if open > metricsMaxConnsPerSource {
			t.Errorf("round %d: %d connections open, want the pod's %d at most", round, open, metricsMaxConnsPerSource)
		}
	}
	if refused := srv.RefusedConns(); refused < slowConns-metricsMaxConnsPerSource {
		t.Errorf("%d of the pod's connections closed on accepting them, want at least the %d beyond its share", refused, slowConns-metricsMaxConnsPerSource)
	}
}

// floodHeaderBytes is the header of the header floods: above the probe and metrics
// servers' bounds (8 and 16 KiB, plus net/http's 4 KiB slack), below what a kernel
// socket buffer takes at once, so the server reads it and answers 431.
const floodHeaderBytes = 64 << 10

// TestHeaderFloodOnProbeAndMetricsPorts: 64 clients of one pod (127.0.0.2) send
// requests with 64 KiB headers as fast as they are answered, to the health probe port
// and to the metrics port; each is answered 431 and its connection closed, while the
// kubelet's probes and Prometheus' scrapes (127.0.0.1) are answered 200 within their
// bounds.
func TestHeaderFloodOnProbeAndMetricsPorts(t *testing.T) {
	const flooders = 64
	_, probeAddr, _ := serveHealth(t)
	metricsSrv, metricsAddr := serveMetricsPlain(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := map[string]int{}
	t.Cleanup(func() { close(stop); wg.Wait() })
	for _, addr := range []string{probeAddr, metricsAddr} {
		for range flooders {
			wg.Go(func() {
				n := slowclient.HeaderFlood("127.0.0.2", addr, "/metrics", floodHeaderBytes, stop)
				mu.Lock()
				refused[addr] += n
				mu.Unlock()
			})
		}
	}
	var worstProbe, worstScrape time.Duration
	for round := range 3 {
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		if code, body, err := kubeletProbe(probeAddr, "/healthz", http.Header{}); err != nil || code != http.StatusOK || body != "ok\n" {
			t.Fatalf("round %d: a probe during a header flood: %d %q %v, want 200 ok within %v", round, code, body, err, probeTimeout)
		}
		worstProbe = max(worstProbe, time.Since(start))
		code, took, err := scrape(metricsAddr)
		if err != nil || code != http.StatusOK || took > scrapeBound {
			t.Fatalf("round %d: a scrape during a header flood: %d after %v (%v), want 200 within %v", round, code, took, err, scrapeBound)
		}
		worstScrape = max(worstScrape, took)
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the cleanup
	t.Logf("header flood (%d clients a port, %d KiB headers): slowest probe %v, slowest scrape %v; %d and %d requests answered 431, %d connections to the metrics port closed on accepting them",
		flooders, floodHeaderBytes>>10, worstProbe, worstScrape, refused[probeAddr], refused[metricsAddr], metricsSrv.RefusedConns())
	// The probe port answers every connection 431; the metrics port the pod's 8 at a
	// time, closing its others on accepting them.
	if refused[probeAddr] < flooders {
		t.Errorf("%d requests of the flood on the probe port answered 431, want each client's at least", refused[probeAddr])
	}
	if refused[metricsAddr] == 0 || refused[metricsAddr]+metricsSrv.RefusedConns() < flooders {
		t.Errorf("on the metrics port %d requests of the flood answered 431 and %d connections closed, want 431s and at least %d in all",
			refused[metricsAddr], metricsSrv.RefusedConns(), flooders)
	}
}
