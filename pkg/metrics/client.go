package metrics

import (
	"context"
	"net/http"
	"net/url"
	"strings"
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
	writes      *prometheus.CounterVec
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
		m.writes = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: APIWritesTotal,
			Help: "Kubernetes API write requests this process sent, by verb (create, update, patch, delete) and kind of the object written (other: any other).",
		}, []string{LabelVerb, LabelKind})
		for _, verb := range writeVerbs {
			for _, kind := range writeKinds {
				m.writes.WithLabelValues(verb, kind)
			}
		}
		reg.MustRegister(m.requests, m.latency, m.rateLimiter, m.writes)
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestResult:      resultAdapter{m.requests},
			RequestLatency:     requestLatencyAdapter{latencyAdapter{m.latency}, m.writes},
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

// requestLatencyAdapter observes a request's latency and, for a write, counts it by
// verb and kind: client-go reports each request, retries included, once to this hook
// with its method and URL template (/apis/GROUP/VERSION/namespaces/{namespace}/RESOURCE/{name}).
type requestLatencyAdapter struct {
	latencyAdapter
	writes *prometheus.CounterVec
}

func (a requestLatencyAdapter) Observe(ctx context.Context, verb string, u url.URL, latency time.Duration) {
	a.latencyAdapter.Observe(ctx, verb, u, latency)
	if w, ok := writeVerb[verb]; ok {
		a.writes.WithLabelValues(w, writeKind(u.Path)).Inc()
	}
}

// writeVerb maps the HTTP methods of writes to Kubernetes verbs.
var writeVerb = map[string]string{
	http.MethodPost: VerbCreate, http.MethodPut: VerbUpdate, http.MethodPatch: VerbPatch, http.MethodDelete: VerbDelete,
}

// writtenKinds maps the resources Trainyard writes (chart RBAC) to their kinds;
// TokenReviews and SubjectAccessReviews are creates that write nothing and are
// left out, any other resource is KindOther.
var writtenKinds = map[string]string{
	"trainjobs": KindTrainJob, "optimizationjobs": KindOptimizationJob, "jobsets": KindJobSet,
	"events": KindEvent, "configmaps": KindConfigMap, "secrets": KindSecret, "leases": KindLease,
	"workloads": KindWorkload, "podgroups": KindPodGroup,
	"validatingwebhookconfigurations": KindValidatingWebhookConfiguration,
	"mutatingwebhookconfigurations":   KindMutatingWebhookConfiguration,
}

// writeKind returns the kind of the resource of an API path (/api/v1/..., or
// /apis/GROUP/VERSION/..., after any base path), subresources counting as their
// object's: /apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status
// is a TrainJob.
func writeKind(path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i, s := range segs {
		var rest []string
		switch s {
		case "api":
			rest = segs[min(i+2, len(segs)):]
		case "apis":
			rest = segs[min(i+3, len(segs)):]
		default:
			continue
		}
		if len(rest) >= 3 && rest[0] == "namespaces" {
			rest = rest[2:]
		}
		if len(rest) > 0 {
			if kind, ok := writtenKinds[rest[0]]; ok {
				return kind
			}
		}
		return KindOther
	}
	return KindOther
}
