package app

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	metricsauth "github.com/trainyard/trainyard/pkg/metrics/auth"
)

// The metrics server's bounds (package httpserver). Its clients are Prometheus (one
// scrape per target every 15–60 s, answered in well under a second) and an engineer's
// pprof; any pod can reach the port, and with auth.enabled each request costs a
// TokenReview and a SubjectAccessReview, so a flood is refused before them.
const (
	// metricsMaxConns is how many connections are open at once (~40 KiB each over TLS:
	// 10 MiB); more wait to be accepted. A few Prometheus replicas need one each.
	metricsMaxConns = 256
	// metricsMaxConnsPerSource is how many of them one IP holds: a further connection
	// from it is closed as soon as it is accepted. A pod holding slow connections takes
	// 8 slots, not the 64 that were all of them, and its excess connections leave the
	// accept queue at once instead of queueing ahead of Prometheus' (with 64 held and
	// more queued, reconnecting every 5 s, a scrape waited past its timeout). Filling
	// the cap takes 32 pods; the NetworkPolicy bounds who may try.
	metricsMaxConnsPerSource = 8
	// metricsMaxKeepAliveConns is how many are kept open between requests, so that
	// idle connections cannot take every slot.
	metricsMaxKeepAliveConns = 128
	// metricsMaxInFlight is how many requests are served at once; more are answered
	// 429 with Retry-After: 1 before any review. A CPU profile holds its slot for its
	// seconds parameter.
	metricsMaxInFlight = 16
	// metricsWriteTimeout bounds a request from its header to its answer: above
	// /debug/pprof/profile's default of 30 s, so a default CPU profile completes.
	metricsWriteTimeout = 60 * time.Second
)

// metricsLimits are the metrics server's timeouts and caps: 2 s for a header (a
// scraper sends it at once, and it frees a silent connection's slot), 10 s for a
// request (bodies are empty), metricsWriteTimeout for the answer, 120 s idle (above
// Prometheus' longest usual scrape interval of 60 s, so its connection is reused), 16 KiB
// of header (a bearer token).
var metricsLimits = httpserver.Limits{
	ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: metricsWriteTimeout,
	IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
	MaxConns: metricsMaxConns, MaxKeepAliveConns: metricsMaxKeepAliveConns, MaxConnsPerSource: metricsMaxConnsPerSource,
}

// newMetricsServer returns the server of /metrics (and /debug/pprof when profiling) that
// cfg describes, or nil when cfg.BindAddress is "0" or empty, within metricsLimits and
// serving at most metricsMaxInFlight requests at once. With secureServing its TLSConfig
// is set (its Serve serves TLS): certificate's when the controller has one (admission
// or progress server), a self-signed certificate generated now otherwise. With
// auth.enabled every path is behind pkg/metrics/auth's filter, asking kube. Errors: a
// self-signed certificate that cannot be generated.
func newMetricsServer(cfg configv1alpha1.MetricsConfiguration, reg *prometheus.Registry, profiling bool,
	certificate *servingCertificate, kube kubeclient.Interface, logger klog.Logger,
) (*httpserver.Server, error) {
	if cfg.BindAddress == "0" || cfg.BindAddress == "" {
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	if profiling {
		registerProfiling(mux)
	}
	var handler http.Handler = mux
	if ptrBool(cfg.Auth.Enabled) {
		handler = metricsauth.New(kube, logger.WithName("metrics-auth"), nil).Wrap(mux)
	}
	srv, err := httpserver.New(limitInFlight(handler, metricsMaxInFlight), cfg.BindAddress, nil, metricsLimits)
	if err != nil {
		return nil, fmt.Errorf("metrics server: %w", err)
	}
	auth := ptrBool(cfg.Auth.Enabled)
	switch {
	case !ptrBool(cfg.SecureServing):
		logger.Info("Serving metrics over plain HTTP", "address", cfg.BindAddress, "authenticated", auth, "profiling", profiling)
		return srv, nil
	case certificate != nil:
		srv.TLSConfig = certificate.TLSConfig()
		logger.Info("Serving metrics over HTTPS", "address", cfg.BindAddress, "certificate", "serving", "authenticated", auth, "profiling", profiling)
		return srv, nil
	}
	tlsConfig, err := selfSignedTLSConfig()
	if err != nil {
		return nil, err
	}
	srv.TLSConfig = tlsConfig
	logger.Info("Serving metrics over HTTPS", "address", cfg.BindAddress, "certificate", "self-signed", "authenticated", auth, "profiling", profiling)
	return srv, nil
}

// selfSignedTLSConfig returns a server configuration with a certificate generated in
// memory (client-go's cert.GenerateSelfSignedCertKey: a one-year certificate signed by
// a throwaway CA), for the host name and localhost. Prometheus scrapes pod IPs and
// cannot verify it: its ServiceMonitor skips verification, as for other controllers.
func selfSignedTLSConfig() (*tls.Config, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "trainyard-metrics"
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, nil, []string{"localhost"})
	if err != nil {
		return nil, fmt.Errorf("generating the metrics endpoint's self-signed certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the metrics endpoint's self-signed certificate: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, nil
}

// limitInFlight serves at most max requests of next at once and answers the others 429
// Too Many Requests with Retry-After: httpserver.RetryAfterSeconds at once, which
// Prometheus records as a failed scrape (up 0) and retries at its next interval.
func limitInFlight(next http.Handler, max int) http.Handler {
	inFlight := httpserver.NewInFlight(max)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !inFlight.TryAcquire() {
			w.Header().Set("Retry-After", strconv.Itoa(httpserver.RetryAfterSeconds))
			http.Error(w, fmt.Sprintf("too many requests in flight (%d): retry after %d s", max, httpserver.RetryAfterSeconds), http.StatusTooManyRequests)
			return
		}
		defer inFlight.Release()
		next.ServeHTTP(w, r)
	})
}
