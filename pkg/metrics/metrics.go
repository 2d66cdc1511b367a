// Package metrics defines Trainyard's Prometheus metrics. Their names and
// label values are in names.go.
//
// Nothing here registers globally: New registers on the Registerer it is
// given, so every test can use a fresh prometheus.NewRegistry(). Every label
// is a bounded enum. No label ever carries a TrainJob's namespace, name or
// UID, so the number of series does not depend on the number of TrainJobs.
package metrics

import (
	"runtime"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Native histogram settings, used next to the classic buckets. Scrapers that
// negotiate native histograms get fine-grained percentiles; the others see
// only the classic buckets.
const (
	nativeBucketFactor    = 1.1
	nativeMaxBucketNumber = 100
	nativeMinResetPeriod  = time.Hour
)

// Metrics holds every Trainyard metric. Create it with New. All methods are
// safe for concurrent use.
type Metrics struct {
	queue workqueueProvider

	stageDuration *prometheus.HistogramVec
	stageSyncs    *prometheus.CounterVec
	stageRetries  *prometheus.CounterVec
	stageErrors   *prometheus.CounterVec
	stagePanics   *prometheus.CounterVec
	stageInflight *prometheus.GaugeVec
	stageWorkers  *prometheus.GaugeVec

	keysInFlight    prometheus.Gauge
	maxKeysInFlight prometheus.Gauge

	writesRefused *prometheus.CounterVec

	jobSetLagging prometheus.Gauge
	sweepRequeues prometheus.Counter
	sweeps        prometheus.Counter

	jobSetCreationLatency *prometheus.HistogramVec
	jobSetCreationSeen    *uidSet

	trainJobs *trainJobCollector
	buildInfo *prometheus.GaugeVec

	certExpiry    *prometheus.GaugeVec
	certRotations *prometheus.CounterVec

	admission admissionMetrics
	progress  progressMetrics

	authReviews *prometheus.CounterVec
}

// New creates the metrics and registers them on reg. If reg is nil, the
// metrics work but are not registered, so nothing exports them. New panics if
// reg already holds metrics with these names, which is a wiring bug: create
// one Metrics per registry.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{queue: newWorkqueueProvider()}
	m.createStageMetrics()
	m.createPipelineMetrics()
	m.createTrainJobMetrics()
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: BuildInfo,
		Help: "Always 1; the labels describe the running binary.",
	}, []string{LabelVersion, LabelGitCommit, LabelGoVersion})
	m.certExpiry, m.certRotations = newCertificateMetrics()
	m.admission = newAdmissionMetrics()
	m.progress = newProgressMetrics()
	m.authReviews = newAuthReviewMetrics()

	if reg != nil {
		reg.MustRegister(
			m.queue.depth, m.queue.adds, m.queue.latency, m.queue.workDuration,
			m.queue.unfinishedWork, m.queue.longestRunning, m.queue.retries,
			m.stageDuration, m.stageSyncs, m.stageRetries, m.stageErrors,
			m.stagePanics, m.stageInflight, m.stageWorkers,
			m.keysInFlight, m.maxKeysInFlight, m.writesRefused,
			m.jobSetLagging, m.sweepRequeues, m.sweeps,
			m.jobSetCreationLatency, m.trainJobs, m.buildInfo,
			m.certExpiry, m.certRotations,
		)
		reg.MustRegister(m.admission.collectors()...)
		reg.MustRegister(m.progress.collectors()...)
		reg.MustRegister(m.authReviews)
	}
	return m
}

// createStageMetrics creates the metrics of the pipeline's stages, labelled by stage:
// Sync durations (seconds) and results, retries, errors, panics, busy and configured
// workers.
func (m *Metrics) createStageMetrics() {
	m.stageDuration = prometheus.NewHistogramVec(histogramOpts(StageDurationSeconds,
		"Time spent in one stage Sync call, in seconds, by result (continue, requeue_after, wait_for_event, retry, terminal, restart).",
		stageBuckets), []string{LabelStage, LabelResult})
	m.stageSyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: StageSyncsTotal,
		Help: "Stage Sync calls by result (continue, requeue_after, wait_for_event, retry, terminal, restart).",
	}, []string{LabelStage, LabelResult})
	m.stageRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: StageRetriesTotal,
		Help: "Keys a stage requeued with rate-limited backoff after a failed, panicked or retry-requesting Sync.",
	}, []string{LabelStage})
	m.stageErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: StageErrorsTotal,
		Help: "Failed stage Sync calls by reason (conflict, not_found, invalid, forbidden, throttled, timeout, internal).",
	}, []string{LabelStage, LabelReason})
	m.stagePanics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: StagePanicsTotal,
		Help: "Stage Sync calls that panicked; each is also counted as an internal error and retried.",
	}, []string{LabelStage})
	m.stageInflight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: StageInflight,
		Help: "Workers of a stage currently inside Sync.",
	}, []string{LabelStage})
	m.stageWorkers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: StageWorkers,
		Help: "Configured worker pool size of a stage.",
	}, []string{LabelStage})
}

// createPipelineMetrics creates the pipeline-wide metrics: the keys in flight and their
// bound, the refused writes by reason (every reason's child created at zero), and the
// consistency sweep's counts.
func (m *Metrics) createPipelineMetrics() {
	m.keysInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: PipelineKeysInFlight,
		Help: "TrainJob keys past the first stage, each with a plan in memory; at the maximum the first stage admits no new key.",
	})
	m.maxKeysInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: PipelineMaxKeysInFlight,
		Help: "Bound on the keys past the first stage; 0 means unbounded.",
	})
	m.writesRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: WritesRefusedTotal,
		Help: "Writes of a TrainJob's JobSet or side objects the API server refused with an error retrying does not fix, by reason (Forbidden, Invalid, BadRequest, RequestEntityTooLarge, MethodNotAllowed).",
	}, []string{LabelReason})
	m.jobSetLagging = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: TrainJobsJobSetLagging,
		Help: "TrainJobs whose JobSet has lagged their spec for longer than the consistency sweep's lag threshold.",
	})
	m.sweepRequeues = prometheus.NewCounter(prometheus.CounterOpts{
		Name: ConsistencySweepRequeuesTotal,
		Help: "TrainJobs the consistency sweep found lagging, and not in the pipeline, on two sweeps in a row and sent back to the first stage; any increase is a bug.",
	})
	m.sweeps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: ConsistencySweepsTotal,
		Help: "Consistency sweeps over the informer caches.",
	})
	for _, reason := range refusals {
		m.writesRefused.WithLabelValues(reason)
	}
}

// createTrainJobMetrics creates the JobSet creation latency histogram (seconds, by
// runtime kind) with the memory of the TrainJobs it observed, and the TrainJob phase
// collector.
func (m *Metrics) createTrainJobMetrics() {
	m.jobSetCreationLatency = prometheus.NewHistogramVec(histogramOpts(JobSetCreationLatencySeconds,
		"Time from a TrainJob's creation to this process creating its JobSet, in seconds, once per TrainJob, by runtime_kind (TrainingRuntime, ClusterTrainingRuntime, other).",
		jobSetCreationBuckets), []string{LabelRuntimeKind})
	m.jobSetCreationSeen = newUIDSet(jobSetCreationMemory)
	m.trainJobs = newTrainJobCollector()
	// Create every child at zero so that ratios over the histogram have
	// series before the first JobSet is created.
	for _, kind := range runtimeKinds {
		m.jobSetCreationLatency.WithLabelValues(kind)
	}
}

// SetKeysInFlight records the keys past the first stage (n) and their bound (max,
// 0 for none).
func (m *Metrics) SetKeysInFlight(n, max int) {
	m.keysInFlight.Set(float64(n))
	m.maxKeysInFlight.Set(float64(max))
}

// WriteRefused counts one write the API server refused with reason, one of the
// Refused* values (a metav1.StatusReason); any other value counts as
// ReasonInternal, so the series stay bounded.
func (m *Metrics) WriteRefused(reason string) {
	if !slices.Contains(refusals, reason) {
		reason = ReasonInternal
	}
	m.writesRefused.WithLabelValues(reason).Inc()
}

// ObserveSweep records one consistency sweep: lagging TrainJobs past the lag threshold
// and how many it re-queued.
func (m *Metrics) ObserveSweep(lagging, requeued int) {
	m.sweeps.Inc()
	m.jobSetLagging.Set(float64(lagging))
	m.sweepRequeues.Add(float64(requeued))
}

// WorkqueueMetricsProvider returns the provider to set as MetricsProvider in a
// workqueue config. Queues must be named (the name becomes the "name" label);
// client-go records nothing for unnamed queues.
func (m *Metrics) WorkqueueMetricsProvider() workqueue.MetricsProvider {
	return &m.queue
}

// SetBuildInfo sets trainyard_build_info to 1 for the given version and git
// commit, replacing any earlier value. go_version is taken from the runtime.
func (m *Metrics) SetBuildInfo(version, gitCommit string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, gitCommit, runtime.Version()).Set(1)
}

func histogramOpts(name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets,
		NativeHistogramBucketFactor:     nativeBucketFactor,
		NativeHistogramMaxBucketNumber:  nativeMaxBucketNumber,
		NativeHistogramMinResetDuration: nativeMinResetPeriod,
	}
}
