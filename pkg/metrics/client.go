package metrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

var clientBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}

// clientMetrics adapts client-go's REST client hooks to Prometheus.
type clientMetrics struct {
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	rateLimiter *prometheus.HistogramVec
}

var registerClientOnce sync.Once

// RegisterClientMetrics registers the REST client metrics on reg and hooks them into
// client-go. client-go accepts one set of hooks per process, so only the first call has
// any effect; call it before creating clients.
func RegisterClientMetrics(reg prometheus.Registerer) {
	registerClientOnce.Do(func() {
		m := &clientMetrics{
			requests: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: RESTClientRequestsTotal,
				Help: "Kubernetes API requests made by this process, by HTTP status code, method and host.",
			}, []string{"code", "method", "host"}),
			latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name:    RESTClientRequestDurationSeconds,
				Help:    "Kubernetes API request latency in seconds, by verb and host.",
				Buckets: clientBuckets,
			}, []string{"verb", "host"}),
			rateLimiter: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name:    RESTClientRateLimiterDurationSeconds,
				Help:    "Seconds Kubernetes API requests waited in the client-side rate limiter, by verb and host.",
				Buckets: clientBuckets,
			}, []string{"verb", "host"}),
		}
		reg.MustRegister(m.requests, m.latency, m.rateLimiter)
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestResult:      resultAdapter{m.requests},
			RequestLatency:     latencyAdapter{m.latency},
			RateLimiterLatency: latencyAdapter{m.rateLimiter},
		})
	})
}

type resultAdapter struct{ v *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.v.WithLabelValues(code, method, host).Inc()
}

type latencyAdapter struct{ v *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	a.v.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}
