package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StageMetrics records the series of one stage. Its children are bound once,
// so recording costs no label lookup. Obtain it from Metrics.Stage. Its methods
// are safe for concurrent use.
type StageMetrics struct {
	stage string
	m     *Metrics

	duration map[string]prometheus.Observer // by result
	syncs    map[string]prometheus.Counter  // by result
	errors   map[string]prometheus.Counter  // by reason
	retries  prometheus.Counter
	panics   prometheus.Counter
	inflight prometheus.Gauge
	workers  prometheus.Gauge
}

// Stage returns the recorder for the named stage. It creates every
// stage×result and stage×reason child at zero, so rate() and alerts have series
// before the first sync. Calling it again for the same stage returns a
// recorder for the same series.
func (m *Metrics) Stage(stage string) *StageMetrics {
	s := &StageMetrics{
		stage:    stage,
		m:        m,
		duration: make(map[string]prometheus.Observer, len(results)),
		syncs:    make(map[string]prometheus.Counter, len(results)),
		errors:   make(map[string]prometheus.Counter, len(reasons)),
		retries:  m.stageRetries.WithLabelValues(stage),
		panics:   m.stagePanics.WithLabelValues(stage),
		inflight: m.stageInflight.WithLabelValues(stage),
		workers:  m.stageWorkers.WithLabelValues(stage),
	}
	for _, r := range results {
		s.duration[r] = m.stageDuration.WithLabelValues(stage, r)
		s.syncs[r] = m.stageSyncs.WithLabelValues(stage, r)
	}
	for _, r := range reasons {
		s.errors[r] = m.stageErrors.WithLabelValues(stage, r)
	}
	return s
}

// SetWorkers records the configured size of the stage's worker pool.
func (s *StageMetrics) SetWorkers(n int) {
	s.workers.Set(float64(n))
}

// SyncStarted marks one worker busy. Pair every call with SyncFinished.
func (s *StageMetrics) SyncStarted() {
	s.inflight.Inc()
}

// SyncFinished marks the worker idle again and records one Sync call that
// took d and ended with result, one of the Result* values.
func (s *StageMetrics) SyncFinished(result string, d time.Duration) {
	s.inflight.Dec()
	duration, ok := s.duration[result]
	if !ok {
		// Not reached through package engine, whose results are all bound above.
		duration = s.m.stageDuration.WithLabelValues(s.stage, result)
	}
	duration.Observe(d.Seconds())
	syncs, ok := s.syncs[result]
	if !ok {
		syncs = s.m.stageSyncs.WithLabelValues(s.stage, result)
	}
	syncs.Inc()
}

// Retried counts one key requeued with rate-limited backoff.
func (s *StageMetrics) Retried() {
	s.retries.Inc()
}

// Failed counts one failed Sync under the reason ErrorReason(err) gives.
// A nil err is not counted.
func (s *StageMetrics) Failed(err error) {
	if err == nil {
		return
	}
	s.errors[ErrorReason(err)].Inc()
}

// Panicked counts one Sync that panicked. The caller also reports the panic
// as an error through Failed.
func (s *StageMetrics) Panicked() {
	s.panics.Inc()
}
