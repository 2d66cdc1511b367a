package app

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	metricsauth "github.com/trainyard/trainyard/pkg/metrics/auth"
)

// newMetricsServer returns the server of /metrics (and /debug/pprof when profiling) that
// cfg describes, or nil when cfg.BindAddress is "0" or empty. With secureServing its
// TLSConfig is set (serve it with ServeTLS): certificate's when the controller has one
// (admission or progress server), a self-signed certificate generated now otherwise.
// With auth.enabled every path is behind pkg/metrics/auth's filter, asking kube.
// Errors: a self-signed certificate that cannot be generated.
func newMetricsServer(cfg configv1alpha1.MetricsConfiguration, reg *prometheus.Registry, profiling bool,
	certificate *servingCertificate, kube kubernetes.Interface, logger klog.Logger,
) (*http.Server, error) {
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
	srv := &http.Server{Addr: cfg.BindAddress, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
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
