package metrics

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxRuntimeSeries bounds the runtimes trainyard_trainjobs_by_runtime names: the
// first MaxRuntimeSeries runtimes of the cache, ordered by kind then name, get
// series of their own; TrainJobs of any other runtime count under RuntimeOther.
// With 5 phases the family has at most 5 × (MaxRuntimeSeries + 3) series.
const MaxRuntimeSeries = 50

// Runtime names a runtime as the runtime labels show it: Kind is a RuntimeKind*
// value, Name the runtime's metadata.name. A TrainingRuntime's namespace is not
// part of it: the same runtime copied into many namespaces is one series, which
// keeps the series bounded by the names in use, not by namespaces × names.
type Runtime struct {
	Kind string
	Name string
}

// TrainJobCounts is one scrape's view of the cached TrainJobs.
type TrainJobCounts struct {
	// ByRuntime counts TrainJobs by the runtime their spec.runtimeRef names
	// (whether it exists or not), then by Phase* value. Phase keys that are not
	// Phase* values are ignored.
	ByRuntime map[Runtime]map[string]int
	// Runtimes lists the runtimes in the informer caches (TrainingRuntimes of every
	// namespace and ClusterTrainingRuntimes; duplicates are merged). Each, up to
	// MaxRuntimeSeries, gets a series per phase, 0 when no TrainJob uses it; a
	// runtime that leaves the cache loses its series at the next scrape.
	Runtimes []Runtime
}

// SetTrainJobCounts sets the source of trainyard_trainjobs (by phase) and
// trainyard_trainjobs_by_runtime (by phase, runtime kind and runtime name): at
// every scrape, count is called and its result exported. Until a source is set,
// or while count returns nil, nothing is exported: an unsynced or non-leader
// replica must not claim zero TrainJobs. count runs on the scrape goroutine,
// possibly concurrently with itself, so it must be safe for concurrent use and
// cheap, such as counting listers' caches. A nil count stops the export.
func (m *Metrics) SetTrainJobCounts(count func() *TrainJobCounts) {
	if count == nil {
		m.trainJobs.count.Store(nil)
		return
	}
	m.trainJobs.count.Store(&count)
}

// trainJobCollector is a prometheus.Collector computing trainyard_trainjobs and
// trainyard_trainjobs_by_runtime at scrape time, so that no per-object state is
// kept between scrapes and a deleted runtime's series go with it.
type trainJobCollector struct {
	byPhase   *prometheus.Desc
	byRuntime *prometheus.Desc
	count     atomic.Pointer[func() *TrainJobCounts]
}

var _ prometheus.Collector = (*trainJobCollector)(nil)

func newTrainJobCollector() *trainJobCollector {
	return &trainJobCollector{
		byPhase: prometheus.NewDesc(TrainJobs,
			"TrainJobs in the informer cache by phase (Pending, Suspended, Running, Complete, Failed).",
			[]string{LabelPhase}, nil),
		byRuntime: prometheus.NewDesc(TrainJobsByRuntime,
			"TrainJobs in the informer cache by phase, runtime_kind and runtime: the name of a runtime in the cache (the first 50 by kind and name), or <other>.",
			[]string{LabelPhase, LabelRuntimeKind, LabelRuntime}, nil),
	}
}

func (c *trainJobCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.byPhase
	ch <- c.byRuntime
}

func (c *trainJobCollector) Collect(ch chan<- prometheus.Metric) {
	count := c.count.Load()
	if count == nil {
		return
	}
	counts := (*count)()
	if counts == nil {
		return
	}
	labelled := labelledRuntimes(counts.Runtimes)
	byPhase := make(map[string]int, len(phases))
	byRuntime := make(map[Runtime]map[string]int, len(labelled)+len(runtimeKinds))
	for _, rt := range labelled {
		byRuntime[rt] = map[string]int{}
	}
	for _, kind := range runtimeKinds {
		byRuntime[Runtime{Kind: kind, Name: RuntimeOther}] = map[string]int{}
	}
	for rt, perPhase := range counts.ByRuntime {
		if !slices.Contains(runtimeKinds, rt.Kind) {
			rt.Kind = RuntimeKindOther
		}
		if _, ok := byRuntime[rt]; !ok || rt.Kind == RuntimeKindOther {
			rt.Name = RuntimeOther
		}
		for phase, n := range perPhase {
			byPhase[phase] += n
			byRuntime[rt][phase] += n
		}
	}
	for _, phase := range phases {
		ch <- prometheus.MustNewConstMetric(c.byPhase, prometheus.GaugeValue, float64(byPhase[phase]), phase)
	}
	for rt, perPhase := range byRuntime {
		for _, phase := range phases {
			ch <- prometheus.MustNewConstMetric(c.byRuntime, prometheus.GaugeValue, float64(perPhase[phase]), phase, rt.Kind, rt.Name)
		}
	}
}

// labelledRuntimes returns the runtimes of the cache that get series of their
// own: those of a known kind, de-duplicated, the first MaxRuntimeSeries by kind
// then name.
func labelledRuntimes(cached []Runtime) []Runtime {
	var out []Runtime
	for _, rt := range cached {
		if rt.Kind == RuntimeKindTrainingRuntime || rt.Kind == RuntimeKindClusterTrainingRuntime {
			out = append(out, rt)
		}
	}
	slices.SortFunc(out, func(a, b Runtime) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	out = slices.Compact(out)
	return out[:min(len(out), MaxRuntimeSeries)]
}
