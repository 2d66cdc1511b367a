package metrics

import (
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// progressMetrics are the series of the training-progress server and its write stage
// (package progress). The stage's queue, sync and error series are the engine's, under
// stage "progress".
type progressMetrics struct {
	reports      prometheus.Counter
	rejected     *prometheus.CounterVec
	duration     prometheus.Histogram
	tokenReviews *prometheus.CounterVec
	coalesced    prometheus.Counter
	dropped      *prometheus.CounterVec
	writes       *prometheus.CounterVec
	pendingBytes prometheus.Gauge
	maxPending   prometheus.Gauge
}

func newProgressMetrics() progressMetrics {
	p := progressMetrics{
		reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: ProgressReportsTotal,
			Help: "Progress reports POSTed to the progress endpoint of this replica, accepted or not.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ProgressReportsRejectedTotal,
			Help: "Progress reports answered with an error, by reason (too_large, too_many_requests, pending_bytes, unauthenticated, forbidden, not_found, invalid, internal).",
		}, []string{LabelReason}),
		duration: prometheus.NewHistogram(histogramOpts(ProgressReportDurationSeconds,
			"Time from receiving a progress report to writing the answer, in seconds.", progressBuckets)),
		tokenReviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ProgressTokenReviewsTotal,
			Help: "Authorization decisions on progress report tokens, by result (allowed, unauthenticated, forbidden, not_found, error) and whether the review cache answered (cached).",
		}, []string{LabelResult, LabelCached}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: ProgressReportsCoalescedTotal,
			Help: "Accepted progress reports replaced by a newer report of the same TrainJob before being written.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ProgressReportsDroppedTotal,
			Help: "Accepted progress reports not written, by reason (unchanged, stale, gone).",
		}, []string{LabelReason}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ProgressWritesTotal,
			Help: "Server-side applies of TrainJob status.trainerStatus, by result (success, error).",
		}, []string{LabelResult}),
		pendingBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: ProgressPendingReportBytes,
			Help: "Bytes the progress reports accepted and not yet written hold in memory, those being written included; at the maximum a report that does not fit is answered 429.",
		}),
		maxPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: ProgressMaxPendingReportBytes,
			Help: "Bound on the bytes pending progress reports hold (statusServer.maxPendingReportBytes); 0 means unbounded.",
		}),
	}
	// Every child at zero, so rates and ratios have series before the first report.
	for _, r := range progressRejectReasons {
		p.rejected.WithLabelValues(r)
	}
	for _, r := range tokenReviewResults {
		p.tokenReviews.WithLabelValues(r, "false")
		if r != TokenReviewError {
			p.tokenReviews.WithLabelValues(r, "true") // errors are never cached
		}
	}
	for _, r := range progressDropReasons {
		p.dropped.WithLabelValues(r)
	}
	for _, r := range progressWriteResults {
		p.writes.WithLabelValues(r)
	}
	return p
}

func (p progressMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.reports, p.rejected, p.duration, p.tokenReviews, p.coalesced, p.dropped, p.writes, p.pendingBytes, p.maxPending}
}

// ObserveProgressReport records one progress report answered after elapsed: rejected is
// "" for an accepted report (200), else why it was refused, one of ReasonTooLarge,
// ReasonTooManyRequests, ReasonPendingBytes, ReasonUnauthenticated, ReasonForbidden, ReasonNotFound,
// ReasonInvalid, ReasonInternal (any other value is recorded as ReasonInternal, so the series stay bounded). It
// implements part of the Observer interface of package progress.
func (m *Metrics) ObserveProgressReport(rejected string, elapsed time.Duration) {
	m.progress.reports.Inc()
	m.progress.duration.Observe(max(elapsed, 0).Seconds())
	if rejected != "" {
		if !slices.Contains(progressRejectReasons, rejected) {
			rejected = ReasonInternal
		}
		m.progress.rejected.WithLabelValues(rejected).Inc()
	}
}

// ObserveProgressTokenReview records one authorization decision on a report's token:
// result is one of the TokenReview* values (any other is recorded as TokenReviewError),
// cached whether the review cache answered instead of a TokenReview.
func (m *Metrics) ObserveProgressTokenReview(result string, cached bool) {
	if !slices.Contains(tokenReviewResults, result) {
		result = TokenReviewError
	}
	m.progress.tokenReviews.WithLabelValues(result, strconv.FormatBool(cached)).Inc()
}

// ObserveProgressCoalesced counts one pending report replaced by a newer one.
func (m *Metrics) ObserveProgressCoalesced() {
	m.progress.coalesced.Inc()
}

// ObserveProgressDropped counts one accepted report not written, for reason
// ReasonUnchanged, ReasonStale or ReasonGone (other values are ignored).
func (m *Metrics) ObserveProgressDropped(reason string) {
	if slices.Contains(progressDropReasons, reason) {
		m.progress.dropped.WithLabelValues(reason).Inc()
	}
}

// ObserveProgressWrite counts one apply of status.trainerStatus: success when err is
// nil, else error.
func (m *Metrics) ObserveProgressWrite(err error) {
	result := ProgressWriteSuccess
	if err != nil {
		result = ProgressWriteError
	}
	m.progress.writes.WithLabelValues(result).Inc()
}

// SetProgressPendingReportBytes sets the bytes pending progress reports hold. It
// implements part of the PendingBytesObserver interface of package progress.
func (m *Metrics) SetProgressPendingReportBytes(bytes int64) {
	m.progress.pendingBytes.Set(float64(bytes))
}

// SetProgressMaxPendingReportBytes sets the bound on the bytes pending progress reports
// hold; 0 means unbounded.
func (m *Metrics) SetProgressMaxPendingReportBytes(bytes int64) {
	m.progress.maxPending.Set(float64(bytes))
}
