package bench

import (
	"bufio"
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const exposition = `# TYPE rest_client_requests_total counter
rest_client_requests_total{code="201",host="h",method="POST"} 3
rest_client_requests_total{code="200",host="h",method="PATCH"} 7
rest_client_requests_total{code="200",host="h",method="GET"} 11
# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{name="status",le="0.001"} 10
workqueue_queue_duration_seconds_bucket{name="status",le="0.01"} 60
workqueue_queue_duration_seconds_bucket{name="status",le="0.1"} 100
workqueue_queue_duration_seconds_bucket{name="status",le="+Inf"} 100
workqueue_queue_duration_seconds_sum{name="status"} 1.5
workqueue_queue_duration_seconds_count{name="status"} 100
workqueue_queue_duration_seconds_bucket{name="gang",le="0.001"} 4
workqueue_queue_duration_seconds_bucket{name="gang",le="0.01"} 4
workqueue_queue_duration_seconds_bucket{name="gang",le="0.1"} 4
workqueue_queue_duration_seconds_bucket{name="gang",le="+Inf"} 5
workqueue_queue_duration_seconds_sum{name="gang"} 9
workqueue_queue_duration_seconds_count{name="gang"} 5
`

func parse(t *testing.T, text string) *Snapshot {
	t.Helper()
	s, err := ParseSnapshot(strings.NewReader(text), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSnapshotValuesAndHistograms(t *testing.T) {
	s := parse(t, exposition)
	if got := s.Value("rest_client_requests_total", nil); got != 21 {
		t.Errorf("all requests = %v, want 21", got)
	}
	if got := s.Value("rest_client_requests_total", Labels{"method": "PATCH"}); got != 7 {
		t.Errorf("PATCH = %v, want 7", got)
	}
	if got := s.ByLabel("rest_client_requests_total", "method", nil); got["POST"] != 3 || got["GET"] != 11 || len(got) != 3 {
		t.Errorf("by method = %v", got)
	}
	if got := s.LabelValues("workqueue_queue_duration_seconds", "name"); strings.Join(got, ",") != "gang,status" {
		t.Errorf("label values = %v", got)
	}
	h := s.Histogram("workqueue_queue_duration_seconds", Labels{"name": "status"})
	// rank 50 of 100 lies in (0.001, 0.01] holding 50 observations, 40 of them below it.
	if got, want := h.Quantile(0.5), 0.001+(0.01-0.001)*40/50; math.Abs(got-want) > 1e-12 {
		t.Errorf("p50 = %v, want %v", got, want)
	}
	// rank 5 lies in the first bucket: interpolated from 0.
	if got, want := h.Quantile(0.05), 0.001*5/10; math.Abs(got-want) > 1e-12 {
		t.Errorf("p5 = %v, want %v", got, want)
	}
	gang := s.Histogram("workqueue_queue_duration_seconds", Labels{"name": "gang"})
	if got := gang.Quantile(0.99); got != 0.1 {
		t.Errorf("a quantile in the +Inf bucket = %v, want the highest finite bound 0.1", got)
	}
	both := s.Histogram("workqueue_queue_duration_seconds", nil)
	if both.Count != 105 || both.Counts[len(both.Counts)-1] != 105 {
		t.Errorf("merged histogram count = %v / %v, want 105", both.Count, both.Counts)
	}
	if d := h.Sub(h); d.Count != 0 || !math.IsNaN(d.Quantile(0.5)) {
		t.Errorf("h - h = %+v, quantile %v; want empty and NaN", d, d.Quantile(0.5))
	}
	if d := h.Sub(Histogram{}); d.Count != 100 {
		t.Errorf("h - absent = %v observations, want 100", d.Count)
	}
}

func TestParseStatCPU(t *testing.T) {
	// Field 2 holds spaces and a ')', which must not shift the fields.
	line := "1234 (kube apiserver)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0 100 0 0"
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3.25 {
		t.Errorf("cpu = %v s, want (250+75)/100 = 3.25", got)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Error("no error for a malformed line")
	}
}

func TestParseStatusBytes(t *testing.T) {
	status := "Name:\ttrainyard\nVmPeak:\t  900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40000 kB\n"
	for field, want := range map[string]int64{"VmHWM": 51200 * 1024, "VmRSS": 40000 * 1024} {
		got, err := parseStatusBytes(bufio.NewScanner(strings.NewReader(status)), field)
		if err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", field, got, err, want)
		}
	}
	if _, err := parseStatusBytes(bufio.NewScanner(strings.NewReader("Name:\tx\n")), "VmHWM"); err == nil {
		t.Error("no error without a VmHWM line")
	}
	if _, err := parseStatusBytes(bufio.NewScanner(strings.NewReader("VmRSS:\t12 MB\n")), "VmRSS"); err == nil {
		t.Error("no error for a size not in kB")
	}
}

func TestBurstRunsEveryIndexOnceWithBoundedConcurrency(t *testing.T) {
	const n, parallelism = 500, 7
	var inFlight, peak atomic.Int64
	calls := make([]atomic.Int32, n)
	res := burst(context.Background(), n, parallelism, func(_ context.Context, i int) error {
		cur := inFlight.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		defer inFlight.Add(-1)
		calls[i].Add(1)
		if i%100 == 0 {
			return errors.New("boom")
		}
		return nil
	})
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("index %d called %d times", i, c)
		}
	}
	if res.Errors != 5 || res.FirstError == nil {
		t.Errorf("errors = %d (%v), want 5", res.Errors, res.FirstError)
	}
	if !res.Done[0].IsZero() || res.Done[1].IsZero() {
		t.Error("Done must be zero exactly for failed creates")
	}
	if p := peak.Load(); p > parallelism {
		t.Errorf("peak concurrency %d > %d", p, parallelism)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ p, want float64 }{{50, 5}, {99, 10}, {10, 1}, {0, 1}, {100, 10}} {
		if got := percentile(xs, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of nothing must be NaN")
	}
}

func TestAdmissionFiguresFromArrivals(t *testing.T) {
	start := time.Unix(1000, 0)
	created := burstResult{Start: start, End: start.Add(2 * time.Second), Done: make([]time.Time, 4)}
	seen := newArrivals()
	for i := range 3 { // TrainJob 3's JobSet never appears
		created.Done[i] = start.Add(time.Duration(i) * 500 * time.Millisecond)
		seen.record(name(i), created.Done[i].Add(time.Duration(i+1)*time.Second))
	}
	created.Done[3] = start.Add(2 * time.Second)
	a := admissionFigures(created, seen, 4)
	if a.Admitted != 3 {
		t.Fatalf("admitted = %d, want 3", a.Admitted)
	}
	// Last JobSet seen at 1.0 + 3 s = 4 s after the start.
	if a.Seconds != 4 || a.TrainJobsPerSecond != 0.75 {
		t.Errorf("seconds = %v, rate = %v; want 4 and 0.75", a.Seconds, a.TrainJobsPerSecond)
	}
	if a.LatencyP50 != 2 || a.LatencyMax != 3 {
		t.Errorf("p50 = %v, max = %v; want 2 and 3", a.LatencyP50, a.LatencyMax)
	}
}

func name(i int) string { return strings.Replace("tj-0000X", "X", string(rune('0'+i)), 1) }

func TestTargetsAndReport(t *testing.T) {
	r := &Result{
		Mode: ModeAdmission, N: 2000,
		Admission:  &Admission{TrainJobsPerSecond: 200, LatencyP99: 6},
		Limit:      &Limit{TrainJobsPerSecond: 220, TrainJobCreatesPerSecond: 360},
		Controller: Controller{WritesPerTrainJob: 1, Requests: map[string]float64{"PATCH": 2000, "GET": 4}, CPUSecondsPer1000: 1.2, PeakRSSBytes: 60 << 20, Errors: map[string]float64{"status/not_found": 2}, CacheLagErrors: 2},
	}
	r.Targets = evaluateTargets(r)
	met := map[string]bool{}
	for _, tg := range r.Targets {
		met[tg.Name] = tg.Met
	}
	want := map[string]bool{
		"admission throughput":                         true, // 200/220 = 0.91
		"admission latency p99":                        false,
		"API writes per TrainJob at admission":         true,
		"controller CPU per 1,000 TrainJobs":           true,
		"failed syncs from the controller's cache lag": false,
		"errors":              false,
		"controller peak RSS": true,
	}
	for k, v := range want {
		if got, ok := met[k]; !ok || got != v {
			t.Errorf("target %q met = %v (present %v), want %v", k, got, ok, v)
		}
	}
	report := Report(r)
	for _, s := range []string{"| admission latency p99 | ≤ 5 s | 6.00 s | **no** |", "PATCH 2000", "per TrainJob: GET 0.002, PATCH 1.000", "status/not_found 2"} {
		if !strings.Contains(report, s) {
			t.Errorf("report lacks %q:\n%s", s, report)
		}
	}
	CompareThroughput(r, &Result{N: 100, Admission: &Admission{TrainJobsPerSecond: 300}}, 0.2)
	if last := r.Targets[len(r.Targets)-1]; last.Met {
		t.Errorf("200/s vs a 300/s baseline is not within 20%%: %+v", last)
	}
	// Webhooks on vs off: named as such, judged against the given tolerance.
	r.Admission.Reviews = &Reviews{Count: 4000, P50Seconds: 0.001, P99Seconds: 0.004}
	CompareThroughput(r, &Result{N: 2000, Admission: &Admission{TrainJobsPerSecond: 215}}, 0.1)
	if last := r.Targets[len(r.Targets)-1]; !last.Met || !strings.Contains(last.Name, "webhooks") || last.Target != "within 10%" {
		t.Errorf("200/s with webhooks vs 215/s without: %+v, want met, named for the webhooks, within 10%%", last)
	}
	if report := Report(r); !strings.Contains(report, "4000 TrainJob admission reviews (validate + mutate), p50 0.0010 s, p99 0.0040 s") {
		t.Errorf("report lacks the review figures:\n%s", report)
	}
}

func TestLatencyNoteNamesTheAPIServerOnlyWhenItBounds(t *testing.T) {
	r := &Result{
		Mode: ModeAdmission, N: 2000,
		Admission:  &Admission{TrainJobsPerSecond: 108, LatencyP99: 10},
		Limit:      &Limit{TrainJobsPerSecond: 108, TrainJobCreatesPerSecond: 250},
		Components: map[string]float64{"kube-apiserver": 30, "etcd": 4, "trainyard": 3},
		Controller: Controller{Requests: map[string]float64{}},
		Machine:    Machine{Utilisation: 0.99},
	}
	note := func() string {
		for _, tg := range evaluateTargets(r) {
			if tg.Name == "admission latency p99" {
				return tg.Note
			}
		}
		t.Fatal("no latency target")
		return ""
	}
	if got := note(); !strings.Contains(got, "bounded by the API server") || !strings.Contains(got, "≥ 18.5 s") {
		t.Errorf("saturated run at the limit: note = %q", got)
	}
	r.Machine.Utilisation = 0.5
	if got := note(); got != "" {
		t.Errorf("idle machine: note = %q, want none", got)
	}
	r.Machine.Utilisation, r.Components["trainyard"] = 0.99, 20
	if got := note(); got != "" {
		t.Errorf("saturated machine, the controller using most CPU: note = %q, want none (the controller is the bound)", got)
	}
}

func TestCurvesAreThinnedKeepingTheEnds(t *testing.T) {
	xs := make([]float64, 10001)
	for i := range xs {
		xs[i] = float64(i) / 100
	}
	cum, c := cumulative(xs), cdf(xs)
	if len(cum) > maxPoints+2 || len(c) > maxPoints+1 {
		t.Errorf("points = %d and %d, want at most %d", len(cum), len(c), maxPoints+2)
	}
	if last := cum[len(cum)-1]; last.X != 100 || last.Y != 10001 {
		t.Errorf("last cumulative point = %+v, want the last sample (100, 10001)", last)
	}
	if last := c[len(c)-1]; last.X != 100 || last.Y != 100 {
		t.Errorf("last CDF point = %+v, want (100, 100%%)", last)
	}
	if small := cumulative([]float64{1, 2, 3}); len(small) != 4 {
		t.Errorf("3 samples: %d points, want all 3 and the origin", len(small))
	}
}

func TestWritePlotWritesSVGAndPNG(t *testing.T) {
	dir := t.TempDir()
	tl := &timeline{created: []float64{0.1, 0.2, 0.3}, admitted: []float64{0.5, 0.6, 0.9}, latencies: []float64{0.4, 0.4, 0.6}}
	if err := writePlot(dir+"/plot.svg", &Result{N: 3, Mode: ModeAdmission}, tl); err != nil {
		t.Fatal(err)
	}
	for name, magic := range map[string]string{"plot.svg": "<?xml", "plot.png": "\x89PNG"} {
		data, err := os.ReadFile(dir + "/" + name)
		if err != nil || !strings.HasPrefix(string(data), magic) {
			t.Errorf("%s: %v, starts %q; want a %q file", name, err, string(data[:min(len(data), 8)]), magic)
		}
	}
}

func TestRestartTargetsAndReport(t *testing.T) {
	r := &Result{
		Mode: ModeAdmission, N: 2000,
		Controller: Controller{Requests: map[string]float64{}},
		Restart: &Restart{
			TrainJobs: 2000, ReadySeconds: 1.5, IdleSeconds: 4.25, Idle: true,
			Requests: map[string]float64{"GET": 3, "PATCH": 2}, Writes: 2, Errors: map[string]float64{},
			PeakRSSBytes: 80 << 20, PeakHeapBytes: 30 << 20,
		},
	}
	met := func() map[string]Target {
		out := map[string]Target{}
		for _, tg := range evaluateTargets(r) {
			out[tg.Name] = tg
		}
		return out
	}
	got := met()
	if w := got["writes during a restart"]; w.Met || w.Measured != "2 (PATCH 2)" {
		t.Errorf("2 writes during the restart: %+v, want not met, measured 2 (PATCH 2)", w)
	}
	ready := got["restart ready (caches synced, pipeline idle)"]
	if !ready.Met || !strings.Contains(ready.Measured, "4.2 s") || !strings.Contains(ready.Note, "N = 50000") {
		t.Errorf("idle after 4.25 s at N = 2000: %+v, want met, 4.2 s measured, the note naming the target's N", ready)
	}
	r.Restart.Writes, r.Restart.Requests = 0, map[string]float64{"GET": 3}
	r.Restart.Idle, r.Restart.IdleSeconds = false, 600
	got = met()
	if w := got["writes during a restart"]; !w.Met {
		t.Errorf("no writes: %+v, want met", w)
	}
	if ready := got["restart ready (caches synced, pipeline idle)"]; ready.Met || !strings.Contains(ready.Note, "not idle") {
		t.Errorf("never idle: %+v, want not met, the note saying so", ready)
	}
	report := Report(r)
	for _, s := range []string{"## Restart (a fresh controller process, 2000 TrainJobs and their JobSets present)", "**not idle**", "**writes 0**", "peak RSS during the relist 80.0 MiB"} {
		if !strings.Contains(report, s) {
			t.Errorf("report lacks %q:\n%s", s, report)
		}
	}
}
