package app

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
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
