package metrics_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trainyard/trainyard/pkg/metrics"
)

func TestTrainJobPhases(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	if n, err := testutil.GatherAndCount(reg, metrics.TrainJobs, metrics.TrainJobsByRuntime); err != nil || n != 0 {
		t.Fatalf("before a source is set: got %d series (err %v), want 0", n, err)
	}

	torch := metrics.Runtime{Kind: metrics.RuntimeKindClusterTrainingRuntime, Name: "torch"}
	counts := &metrics.TrainJobCounts{
		Runtimes: []metrics.Runtime{torch},
		ByRuntime: map[metrics.Runtime]map[string]int{
			torch: {metrics.PhaseRunning: 2, metrics.PhaseFailed: 1, "NotAPhase": 7},
			{Kind: metrics.RuntimeKindTrainingRuntime, Name: "gone"}: {metrics.PhaseRunning: 1},
		},
	}
	m.SetTrainJobCounts(func() *metrics.TrainJobCounts { return counts })
	want := `
# HELP trainyard_trainjobs TrainJobs in the informer cache by phase (Pending, Suspended, Running, Complete, Failed).
# TYPE trainyard_trainjobs gauge
trainyard_trainjobs{phase="Complete"} 0
trainyard_trainjobs{phase="Failed"} 1
trainyard_trainjobs{phase="Pending"} 0
trainyard_trainjobs{phase="Running"} 3
trainyard_trainjobs{phase="Suspended"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.TrainJobs); err != nil {
		t.Error(err)
	}

	// Computed at scrape time: a changed source shows at the next scrape.
	counts = &metrics.TrainJobCounts{ByRuntime: map[metrics.Runtime]map[string]int{torch: {metrics.PhaseComplete: 4}}}
	if got := byRuntime(t, reg)[`Complete ClusterTrainingRuntime <other>`]; got != 4 {
		t.Errorf("Complete of a runtime no longer cached: got %v, want 4 under <other>", got)
	}

	counts = nil
	if n, err := testutil.GatherAndCount(reg, metrics.TrainJobs, metrics.TrainJobsByRuntime); err != nil || n != 0 {
		t.Errorf("while the source returns nil: got %d series (err %v), want 0", n, err)
	}
	m.SetTrainJobCounts(nil)
	if n, err := testutil.GatherAndCount(reg, metrics.TrainJobs, metrics.TrainJobsByRuntime); err != nil || n != 0 {
		t.Errorf("after clearing the source: got %d series (err %v), want 0", n, err)
	}
}

// TestTrainJobsByRuntime checks which runtimes get series: the cached ones, each
// with every phase; TrainJobs of a missing runtime or of another kind under
// <other>; a deleted runtime's series gone at the next scrape.
func TestTrainJobsByRuntime(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	torch := metrics.Runtime{Kind: metrics.RuntimeKindClusterTrainingRuntime, Name: "torch"}
	mpi := metrics.Runtime{Kind: metrics.RuntimeKindTrainingRuntime, Name: "mpi"}
	missing := metrics.Runtime{Kind: metrics.RuntimeKindTrainingRuntime, Name: "missing"}
	counts := &metrics.TrainJobCounts{
		// mpi is cached in two namespaces: one series.
		Runtimes: []metrics.Runtime{torch, mpi, mpi},
		ByRuntime: map[metrics.Runtime]map[string]int{
			torch:                    {metrics.PhaseRunning: 2, metrics.PhaseSuspended: 1},
			mpi:                      {metrics.PhaseFailed: 3},
			missing:                  {metrics.PhasePending: 4},
			{Kind: "Job", Name: "x"}: {metrics.PhasePending: 5},
		},
	}
	m.SetTrainJobCounts(func() *metrics.TrainJobCounts { return counts })

	got := byRuntime(t, reg)
	want := map[string]float64{}
	for _, rt := range []string{"ClusterTrainingRuntime torch", "TrainingRuntime mpi", "ClusterTrainingRuntime <other>", "TrainingRuntime <other>", "other <other>"} {
		for _, phase := range []string{metrics.PhasePending, metrics.PhaseSuspended, metrics.PhaseRunning, metrics.PhaseComplete, metrics.PhaseFailed} {
			want[phase+" "+rt] = 0
		}
	}
	want["Running ClusterTrainingRuntime torch"] = 2
	want["Suspended ClusterTrainingRuntime torch"] = 1
	want["Failed TrainingRuntime mpi"] = 3
	want["Pending TrainingRuntime <other>"] = 4
	want["Pending other <other>"] = 5
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want,+got):\n%s", metrics.TrainJobsByRuntime, diff)
	}

	// mpi deleted: its series go; its TrainJobs count under <other>.
	counts.Runtimes = []metrics.Runtime{torch}
	got = byRuntime(t, reg)
	if _, ok := got["Failed TrainingRuntime mpi"]; ok {
		t.Error("a deleted runtime's series are still exported")
	}
	if got["Failed TrainingRuntime <other>"] != 3 {
		t.Errorf("Failed TrainingRuntime <other> = %v, want 3 (the deleted runtime's TrainJobs)", got["Failed TrainingRuntime <other>"])
	}
}

// TestTrainJobsByRuntimeBounded checks the cap: however many runtimes the cache
// holds, at most MaxRuntimeSeries are named, the first by kind and name.
func TestTrainJobsByRuntimeBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	counts := &metrics.TrainJobCounts{ByRuntime: map[metrics.Runtime]map[string]int{}}
	for i := range 3 * metrics.MaxRuntimeSeries {
		rt := metrics.Runtime{Kind: metrics.RuntimeKindTrainingRuntime, Name: fmt.Sprintf("rt-%03d", i)}
		counts.Runtimes = append(counts.Runtimes, rt)
		counts.ByRuntime[rt] = map[string]int{metrics.PhaseRunning: 1}
	}
	m.SetTrainJobCounts(func() *metrics.TrainJobCounts { return counts })

	got := byRuntime(t, reg)
	if want := 5 * (metrics.MaxRuntimeSeries + 3); len(got) != want {
		t.Errorf("%d series, want %d", len(got), want)
	}
	last := fmt.Sprintf("Running TrainingRuntime rt-%03d", metrics.MaxRuntimeSeries-1)
	if got[last] != 1 {
		t.Errorf("%s = %v, want 1 (within the cap); series: %v", last, got[last], slices.Sorted(maps.Keys(got))[:10])
	}
	if other, want := got["Running TrainingRuntime <other>"], float64(2*metrics.MaxRuntimeSeries); other != want {
		t.Errorf("Running TrainingRuntime <other> = %v, want %v (the runtimes past the cap)", other, want)
	}
}

// byRuntime returns trainyard_trainjobs_by_runtime's values by "phase kind runtime".
func byRuntime(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range family(t, reg, metrics.TrainJobsByRuntime) {
		key := labelValue(s, metrics.LabelPhase) + " " + labelValue(s, metrics.LabelRuntimeKind) + " " + labelValue(s, metrics.LabelRuntime)
		if _, dup := out[key]; dup {
			t.Errorf("series %s exported twice", key)
		}
		out[key] = s.GetGauge().GetValue()
	}
	return out
}
