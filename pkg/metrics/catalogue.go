package metrics

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// Catalogue registers on reg every metric the binary exports — Trainyard's own, the
// workqueue metrics of each of stages, the REST client and leader election metrics —
// and gives every labelled family at least one child, so that reg.Gather() lists them
// all. It is for tools that document or check the metrics (docs/metrics.md, the
// dashboard and alert tests), not for the controller. Like RegisterClientMetrics it
// hooks client-go once per process.
func Catalogue(reg prometheus.Registerer, stages []string) *Metrics {
	RegisterClientMetrics(reg)
	RegisterLeaderElectionMetrics(reg, "trainyard-controller")
	m := New(reg)
	m.SetBuildInfo("v0.0.0", "0000000")
	m.SetTrainJobCounts(func() *TrainJobCounts {
		return &TrainJobCounts{Runtimes: []Runtime{{Kind: RuntimeKindClusterTrainingRuntime, Name: "torch-distributed"}}}
	})
	for _, c := range certificates {
		m.SetCertificateExpiry(c, time.Unix(0, 0))
	}
	m.admission.catalogue()
	q := m.WorkqueueMetricsProvider()
	for _, s := range stages {
		m.Stage(s)
		q.NewDepthMetric(s)
		q.NewAddsMetric(s)
		q.NewLatencyMetric(s)
		q.NewWorkDurationMetric(s)
		q.NewUnfinishedWorkSecondsMetric(s)
		q.NewLongestRunningProcessorSecondsMetric(s)
		q.NewRetriesMetric(s)
	}
	// The REST client metrics get children only when client-go reports a request.
	ctx := context.Background()
	u := url.URL{Scheme: "https", Host: "apiserver:6443"}
	clientmetrics.RequestResult.Increment(ctx, "200", "GET", u.Host)
	clientmetrics.RequestLatency.Observe(ctx, "GET", u, time.Millisecond)
	clientmetrics.RateLimiterLatency.Observe(ctx, "GET", u, time.Millisecond)
	return m
}
