package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// SetTrainJobPhaseCounts sets the source of trainyard_trainjobs: at every
// scrape, count is called and its result exported as one series per Phase*
// value (phases missing from the map export 0; keys that are not Phase*
// values are ignored, so the series stay bounded). Until a source is set,
// nothing is exported: an unsynced or non-leader replica must not claim zero
// TrainJobs. count runs on the scrape goroutine, possibly concurrently with
// itself, so it must be safe for concurrent use and cheap, such as counting
// a lister's cache. A nil count stops the export.
func (m *Metrics) SetTrainJobPhaseCounts(count func() map[string]int) {
	if count == nil {
		m.trainJobs.count.Store(nil)
		return
	}
	m.trainJobs.count.Store(&count)
}

// phaseCollector is a prometheus.Collector computing trainyard_trainjobs at
// scrape time, so that no per-object state is kept between scrapes.
type phaseCollector struct {
	desc  *prometheus.Desc
	count atomic.Pointer[func() map[string]int]
}

var _ prometheus.Collector = (*phaseCollector)(nil)

func newPhaseCollector() *phaseCollector {
	return &phaseCollector{
		desc: prometheus.NewDesc(TrainJobs,
			"TrainJobs in the informer cache by phase (Pending, Created, Suspended, Running, Complete, Failed).",
			[]string{LabelPhase}, nil),
	}
}

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
}

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	count := c.count.Load()
	if count == nil {
		return
	}
	counts := (*count)()
	for _, phase := range phases {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[phase]), phase)
	}
}
