package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// workqueueProvider implements workqueue.MetricsProvider with client-go's
// standard metric names and SLO-grade buckets. Each New*Metric call returns
// the child for one queue name; client-go calls them when a queue is built.
type workqueueProvider struct {
	depth          *prometheus.GaugeVec
	adds           *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	workDuration   *prometheus.HistogramVec
	unfinishedWork *prometheus.GaugeVec
	longestRunning *prometheus.GaugeVec
	retries        *prometheus.CounterVec
}

var _ workqueue.MetricsProvider = (*workqueueProvider)(nil)

func newWorkqueueProvider() workqueueProvider {
	name := []string{LabelName}
	return workqueueProvider{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: WorkqueueDepth,
			Help: "Keys waiting in a stage workqueue.",
		}, name),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: WorkqueueAddsTotal,
			Help: "Keys added to a stage workqueue.",
		}, name),
		latency: prometheus.NewHistogramVec(histogramOpts(WorkqueueQueueDurationSeconds,
			"Seconds a key waits in a stage workqueue before a worker takes it.",
			queueBuckets), name),
		workDuration: prometheus.NewHistogramVec(histogramOpts(WorkqueueWorkDurationSeconds,
			"Seconds a worker spends on one key of a stage workqueue.",
			queueBuckets), name),
		unfinishedWork: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: WorkqueueUnfinishedWorkSeconds,
			Help: "Summed age in seconds of the keys being processed from a stage workqueue; a steady rise means a stuck worker.",
		}, name),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: WorkqueueLongestRunningProcessorSeconds,
			Help: "Age in seconds of the oldest key being processed from a stage workqueue.",
		}, name),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: WorkqueueRetriesTotal,
			Help: "Delayed adds (AddAfter) handled by a stage workqueue.",
		}, name),
	}
}

func (p *workqueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}

func (p *workqueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}

func (p *workqueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}

func (p *workqueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.workDuration.WithLabelValues(name)
}

func (p *workqueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinishedWork.WithLabelValues(name)
}

func (p *workqueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longestRunning.WithLabelValues(name)
}

func (p *workqueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}
