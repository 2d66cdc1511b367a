package bench

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func TestPlanExpiriesSpreadsWholeSecondTTLsFromEachFinish(t *testing.T) {
	// Three TrainJobs finished at different whole seconds; expiries planned from t0+100 s
	// over 30 s: at or just after t0+100, +110, +120.
	finished := []time.Time{t0, t0.Add(7 * time.Second), t0.Add(-3 * time.Second)}
	ttls, expiries, err := planExpiries(finished, t0.Add(100*time.Second+300*time.Millisecond), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantTTLs := []int32{101, 104, 124} // ceil(100.3), ceil(110.3 − 7), ceil(120.3 + 3)
	wantExpiries := []time.Time{t0.Add(101 * time.Second), t0.Add(111 * time.Second), t0.Add(121 * time.Second)}
	for i := range finished {
		if ttls[i] != wantTTLs[i] || !expiries[i].Equal(wantExpiries[i]) {
			t.Errorf("TrainJob %d: ttl %d expiry %s; want %d and %s", i, ttls[i], expiries[i], wantTTLs[i], wantExpiries[i])
		}
	}
	// The whole-second TTLs leave the expiries nearly sorted: the range is taken, not
	// the ends.
	if earliest, latest := expiryRange([]time.Time{t0.Add(time.Second), t0, t0.Add(3 * time.Second), t0.Add(2 * time.Second)}); !earliest.Equal(t0) || !latest.Equal(t0.Add(3*time.Second)) {
		t.Errorf("expiryRange = %s, %s; want t0 and t0+3s", earliest, latest)
	}
	// A finish after its planned expiry has no TTL that expresses it.
	if _, _, err := planExpiries([]time.Time{t0.Add(time.Hour)}, t0, time.Minute); err == nil || !strings.Contains(err.Error(), "ttlSecondsAfterFinished") {
		t.Errorf("a finish after the planned expiry: error %v, want one naming ttlSecondsAfterFinished", err)
	}
}

func TestTTLSpanIsHalfTheCreateRateAndAtLeastTheMinimum(t *testing.T) {
	for _, tc := range []struct {
		n       int
		creates float64
		want    time.Duration
	}{
		{50000, 140, 714 * time.Second}, // 50,000 at 70/s
		{300, 300, ttlMinSpan},          // 2 s, raised to the minimum
		{1000, 0, ttlMinSpan},           // no rate measured
	} {
		if got := ttlSpan(tc.n, tc.creates); got != tc.want {
			t.Errorf("ttlSpan(%d, %v) = %v, want %v", tc.n, tc.creates, got, tc.want)
		}
	}
}

func TestDeletionFiguresMeasureLatenessAgainstEachExpiry(t *testing.T) {
	// Nearly sorted, as planned: the latest expiry is not the last.
	expiries := []time.Time{t0, t0.Add(time.Second), t0.Add(3 * time.Second), t0.Add(2 * time.Second)}
	deleted := []time.Time{
		t0.Add(100 * time.Millisecond),
		t0.Add(time.Second + 300*time.Millisecond),
		{}, // not seen
		t0.Add(5 * time.Second),
	}
	d := deletionFigures(expiries, deleted)
	if d.Expected != 4 || d.Deleted != 3 {
		t.Fatalf("expected %d deleted %d, want 4 and 3", d.Expected, d.Deleted)
	}
	if d.LatenessMin != 0.1 || d.LatenessP50 != 0.3 || d.LatenessP99 != 3 || d.LatenessMax != 3 {
		t.Errorf("lateness min %v p50 %v p99 %v max %v; want 0.1, 0.3, 3, 3", d.LatenessMin, d.LatenessP50, d.LatenessP99, d.LatenessMax)
	}
	// First deletion t0+0.1, last t0+5: 2 intervals over 4.9 s; the last 2 s after the
	// latest expiry (t0+3).
	if d.Seconds != 4.9 || d.PerSecond != round3(2/4.9) || d.AfterLastExpiry != 2 {
		t.Errorf("seconds %v, per second %v, after last expiry %v; want 4.9, %v, 2", d.Seconds, d.PerSecond, d.AfterLastExpiry, round3(2/4.9))
	}
	if none := deletionFigures(expiries, make([]time.Time, 4)); none.Deleted != 0 || none.LatenessP99 != 0 {
		t.Errorf("no deletion seen: %+v", none)
	}
}

func TestGCLagsPairTrainJobAndJobSetDeletions(t *testing.T) {
	tjs := []time.Time{t0, t0.Add(time.Second), {}, t0}
	jss := []time.Time{t0.Add(2 * time.Second), t0.Add(1500 * time.Millisecond), t0, {}}
	got := gcLags(tjs, jss)
	if len(got) != 2 || got[0] != 0.5 || got[1] != 2 {
		t.Errorf("gcLags = %v, want [0.5 2] (pairs with both seen, sorted)", got)
	}
}

func TestPerSecondCountsTheIntervalsBetweenTheInstantsSeen(t *testing.T) {
	ats := []time.Time{t0.Add(4 * time.Second), {}, t0, t0.Add(2 * time.Second)}
	if got := perSecond(ats); got != 0.5 {
		t.Errorf("perSecond = %v, want 2 intervals over 4 s = 0.5", got)
	}
	if got := perSecond([]time.Time{t0, {}}); got != 0 {
		t.Errorf("perSecond of one instant = %v, want 0", got)
	}
}

func TestWindowFiguresTakeCPURequestsMedianRSSAndTheCollectedHeap(t *testing.T) {
	start := &sample{controller: "trainyard", procCPU: map[string]float64{"trainyard": 10},
		metrics: &Snapshot{At: t0, Families: parse(t, exposition).Families}}
	end := &sample{controller: "trainyard", procCPU: map[string]float64{"trainyard": 10.6},
		metrics: parse(t, strings.ReplaceAll(exposition, `method="GET"} 11`, `method="GET"} 14`))}
	end.metrics.At = t0.Add(60 * time.Second)
	collected := parse(t, "# TYPE go_memstats_heap_inuse_bytes gauge\ngo_memstats_heap_inuse_bytes 1.048576e+08\n"+
		"# TYPE go_memstats_heap_alloc_bytes gauge\ngo_memstats_heap_alloc_bytes 9e+07\n"+
		"# TYPE go_memstats_heap_objects gauge\ngo_memstats_heap_objects 250000\n# TYPE go_goroutines gauge\ngo_goroutines 80\n")
	w := windowFigures(start, end, collected, []float64{300, 100, 200, 900})
	if w.Seconds != 60 || w.CPUSeconds != 0.6 || w.Millicores != 10 {
		t.Errorf("seconds %v cpu %v millicores %v; want 60, 0.6, 10", w.Seconds, w.CPUSeconds, w.Millicores)
	}
	if w.RSSBytes != 200 || w.HeapAllocBytes != 9e7 || w.HeapInuseBytes != 100<<20 || w.HeapObjects != 250000 || w.Goroutines != 80 {
		t.Errorf("rss %d heap alloc %d in use %d objects %v goroutines %v; want 200 (median), 9e7, %d, 250000, 80",
			w.RSSBytes, w.HeapAllocBytes, w.HeapInuseBytes, w.HeapObjects, w.Goroutines, 100<<20)
	}
	if len(w.Requests) != 1 || w.Requests["GET"] != 3 {
		t.Errorf("requests %v, want GET 3 only", w.Requests)
	}
}

func TestCompletedJobSetPatchIsTheJobSetControllersCompletion(t *testing.T) {
	at := metav1.NewTime(t0.Add(1500 * time.Millisecond))
	body, err := completedJobSetPatch(at)
	if err != nil {
		t.Fatal(err)
	}
	js := &jobsetv1alpha2.JobSet{}
	if err := json.Unmarshal(body, js); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(js.Status.Conditions, string(jobsetv1alpha2.JobSetCompleted))
	if js.Status.TerminalState != string(jobsetv1alpha2.JobSetCompleted) || c == nil || c.Status != metav1.ConditionTrue ||
		c.Reason != "AllJobsCompleted" || !c.LastTransitionTime.Equal(&metav1.Time{Time: t0.Add(time.Second)}) {
		t.Errorf("status %+v; want terminalState Completed and Completed=True, AllJobsCompleted, at whole seconds", js.Status)
	}
}

func ttlResult() *Result {
	return &Result{
		Mode: ModeTTL, N: 1000,
		Admission: &Admission{},
		Controller: Controller{Requests: map[string]float64{"DELETE": 1000, "GET": 2}, Writes: 1000, WritesPerTrainJob: 1,
			PeakRSSBytes: 120 << 20, Errors: map[string]float64{}},
		TTL: &TTL{
			Finished: 1000, CreatesPerSecond: 200, ScheduledPerSecond: 100, SpanSeconds: 10,
			Without: &TTLWindow{Seconds: 60, Millicores: 2, RSSBytes: 100 << 20, HeapAllocBytes: 40 << 20, HeapInuseBytes: 50 << 20,
				Requests: map[string]float64{"GET": 4}},
			With: &TTLWindow{Seconds: 60, Millicores: 2.5, RSSBytes: 101 << 20, HeapAllocBytes: 40<<20 + 200<<10, HeapInuseBytes: 51 << 20,
				Requests: map[string]float64{"GET": 4}},
			PatchController: Controller{Requests: map[string]float64{"GET": 1}},
			Deletions:       Deletions{Expected: 1000, Deleted: 1000, LatenessP50: 0.05, LatenessP99: 0.4, LatenessMax: 1.2},
			JobSetsDeleted:  1000, GCLagP99: 0.8,
		},
	}
}

func TestTTLTargetsAndReport(t *testing.T) {
	r := ttlResult()
	r.Targets = evaluateTargets(r)
	met := map[string]bool{}
	for _, tg := range r.Targets {
		met[tg.Name] = tg.Met
	}
	want := map[string]bool{
		"TrainJobs deleted by their TTL":               true,
		"TTL deletion lateness p99":                    true,
		"live heap per 1,000 pending TTLs":             true, // 0.2 MiB for 1,000
		"API writes while the TTLs pend":               true, // reads are the idle controller's
		"idle CPU with the TTLs pending":               true,
		"writes to set the TTLs of finished TrainJobs": true,
		"API writes per TrainJob at deletion":          true,
		"JobSets deleted by garbage collection":        true,
		"controller peak RSS":                          true,
		"errors":                                       true,
	}
	for k, v := range want {
		if got, ok := met[k]; !ok || got != v {
			t.Errorf("target %q met = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if n := len(r.Targets); n != len(want)+1 { // + the cache-lag target
		t.Errorf("%d targets, want %d: the generic RSS target is TTL mode's own", n, len(want)+1)
	}
	report := Report(r)
	for _, s := range []string{
		"| TTL deletion lateness p99 | ≤ 5 s | 0.400 s (p50 0.050 s, max 1.200 s) | yes |",
		"| Go live heap after a forced GC (heap_alloc) | 40.0 MiB | 40.2 MiB | +0.20 MiB | +0.195 MiB |",
		"| live heap per 1,000 pending TTLs | ≤ 0.5 MiB | 0.195 MiB, 205 B a TrainJob (RSS +1.000 MiB) | yes |",
		"**1000 of 1000 deleted**",
		"## Controller during the deletions",
	} {
		if !strings.Contains(report, s) {
			t.Errorf("report lacks %q:\n%s", s, report)
		}
	}

	// Each way a TTL run falls short misses its target.
	r = ttlResult()
	r.TTL.Deletions.Deleted, r.TTL.Deletions.LatenessP99 = 999, 6
	r.TTL.With.HeapAllocBytes = r.TTL.Without.HeapAllocBytes + 1<<20
	r.TTL.With.Requests = map[string]float64{"GET": 4, "PATCH": 1}
	r.TTL.With.Millicores = r.TTL.Without.Millicores + 11
	r.TTL.PatchController = Controller{Requests: map[string]float64{"PATCH": 1000}, Writes: 1000}
	r.Controller.Requests["PATCH"], r.Controller.Writes = 5, 1005
	r.TTL.JobSetsDeleted, r.TTL.GCPerSecond = 990, 5
	r.Controller.PeakRSSBytes = 500 << 20
	for _, tg := range evaluateTargets(r) {
		if tg.Name == "JobSets deleted by garbage collection" && !strings.Contains(tg.Note, "at 5.0/s the other 10 take 0 min more") {
			t.Errorf("the garbage collection target's note %q does not estimate the rest", tg.Note)
		}
		if tg.Met && tg.Name != "failed syncs from the controller's cache lag" && tg.Name != "errors" {
			t.Errorf("target %q met (%s), want missed", tg.Name, tg.Measured)
		}
	}
}

func TestTTLWithoutTheSecondWindowMissesATargetAndStillReports(t *testing.T) {
	r := ttlResult()
	r.TTL.With = nil
	r.Targets = evaluateTargets(r)
	found := false
	for _, tg := range r.Targets {
		if tg.Name == "the idle controller with the TTLs pending" {
			found = !tg.Met
		}
		if strings.Contains(tg.Name, "pend") && tg.Name != "the idle controller with the TTLs pending" {
			t.Errorf("target %q stated without the window it needs", tg.Name)
		}
	}
	if !found {
		t.Errorf("no missed target for the window left out: %+v", r.Targets)
	}
	if report := Report(r); !strings.Contains(report, "**1000 of 1000 deleted**") {
		t.Errorf("report lacks the deletions:\n%s", report)
	}
}

func TestTTLPlotWritesSVG(t *testing.T) {
	expiries := []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second)}
	deleted := []time.Time{t0.Add(50 * time.Millisecond), t0.Add(1200 * time.Millisecond), {}}
	jobSets := []time.Time{t0.Add(time.Second), {}, {}}
	tl := newTTLTimeline(expiries, deleted, jobSets)
	if len(tl.expiries) != 3 || len(tl.deleted) != 2 || len(tl.jobSetsDeleted) != 1 || tl.lateness[1] != 0.2 {
		t.Fatalf("timeline %+v; want 3 expiries, 2 deletions, 1 JobSet deletion, lateness [0.05 0.2]", tl)
	}
	dir := t.TempDir()
	if err := writePlot(dir+"/plot.svg", &Result{N: 3, Mode: ModeTTL}, &timeline{ttl: tl}); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(dir + "/plot.svg"); err != nil || !strings.Contains(string(data), "TTL deletions over time") {
		t.Errorf("plot.svg: %v; want the TTL plot", err)
	}
}
