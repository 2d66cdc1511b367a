package bench

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

func TestWriteCeiling(t *testing.T) {
	if got := perNamespace(1003, 10); got[0] != 101 || got[2] != 101 || got[3] != 100 || got[9] != 100 {
		t.Errorf("perNamespace(1003, 10) = %v, want 101 in the first three, 100 in the rest", got)
	}
	for _, tc := range []struct {
		name       string
		trainJobs  []int
		qps, nsQPS float64
		want       float64
	}{
		{"one per period fits every limit", []int{20, 20}, 50, 10, 4},
		{"one namespace over its limit", []int{200}, 50, 10, 10},
		{"namespaces at their limit, the replica's binds", perNamespace(1000, 10), 50, 10, 50},
		{"one namespace limited, the others not", []int{500, 30}, 50, 10, 13},
	} {
		if got := writeCeiling(tc.trainJobs, 10*time.Second, tc.qps, tc.nsQPS); got != tc.want {
			t.Errorf("%s: ceiling = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReportBodyIsAValidRisingReport(t *testing.T) {
	now := time.Date(2026, 11, 25, 3, 4, 5, 600_000_000, time.FixedZone("x", 3600))
	var last int32 = -1
	for _, elapsed := range []time.Duration{0, 15 * time.Second, 30 * time.Second, 60 * time.Second, 61 * time.Second} {
		var req wire.UpdateTrainJobStatusRequest
		body := reportBody(elapsed, time.Minute, now)
		if err := json.Unmarshal(body, &req); err != nil || req.TrainerStatus == nil {
			t.Fatalf("body %s: %v", body, err)
		}
		ts := req.TrainerStatus
		if errs := progress.ValidateTrainerStatus(ts, field.NewPath("trainerStatus")); len(errs) > 0 {
			t.Errorf("body %s: invalid: %v", body, errs)
		}
		if *ts.ProgressPercentage < last || *ts.ProgressPercentage > 100 {
			t.Errorf("at %v: progress %d after %d; want rising, at most 100", elapsed, *ts.ProgressPercentage, last)
		}
		last = *ts.ProgressPercentage
		if want := now.UTC().Truncate(time.Second); !ts.LastUpdatedTime.Time.Equal(want) {
			t.Errorf("lastUpdatedTime = %v, want now at second precision %v", ts.LastUpdatedTime, want)
		}
		if len(ts.Metrics) != 1 || ts.Metrics[0].Name != "loss" {
			t.Errorf("metrics = %+v, want a loss", ts.Metrics)
		}
	}
	if last != 100 {
		t.Errorf("progress at the end = %d, want 100", last)
	}
}

func TestReportClientFigures(t *testing.T) {
	logs := [][]reportLog{
		{{At: 0.1, Latency: 0.050, Code: 200, First: true}, {At: 1.1, Latency: 0.002, Code: 200}, {At: 2.1, Latency: 0.003, Code: 200}},
		{{At: 0.6, Latency: 0.040, Code: 403, First: true}, {At: 1.6, Code: 0}, {At: 2.6, Latency: 0.001, Code: 200}},
	}
	c := reportClientFigures(logs, 3*time.Second, 2, "boom")
	if c.Sent != 6 || c.Accepted != 4 || c.TransportErrors != 1 || c.Refused["403"] != 1 || c.Skipped != 2 || c.FirstError != "boom" {
		t.Errorf("counts = %+v", c)
	}
	if c.SentPerSecond != 2 || c.AcceptedPerSecond != 1.333 {
		t.Errorf("rates = %v sent/s, %v accepted/s; want 2 and 1.333", c.SentPerSecond, c.AcceptedPerSecond)
	}
	// Five answered: 1, 2, 3, 40, 50 ms; the transport error has no latency.
	if c.LatencyP50 != 0.003 || c.LatencyP99 != 0.05 || c.LatencyMax != 0.05 {
		t.Errorf("latency p50 %v, p99 %v, max %v; want 0.003, 0.05, 0.05", c.LatencyP50, c.LatencyP99, c.LatencyMax)
	}
	if c.FirstLatencyP99 != 0.05 || c.LaterLatencyP99 != 0.003 {
		t.Errorf("first p99 %v, later p99 %v; want 0.05 and 0.003", c.FirstLatencyP99, c.LaterLatencyP99)
	}
}

const progressBefore = `# TYPE trainyard_progress_reports_total counter
trainyard_progress_reports_total 100
# TYPE trainyard_progress_reports_rejected_total counter
trainyard_progress_reports_rejected_total{reason="forbidden"} 1
trainyard_progress_reports_rejected_total{reason="invalid"} 0
# TYPE trainyard_progress_token_reviews_total counter
trainyard_progress_token_reviews_total{cached="false",result="allowed"} 10
trainyard_progress_token_reviews_total{cached="true",result="allowed"} 89
trainyard_progress_token_reviews_total{cached="false",result="forbidden"} 1
# TYPE trainyard_progress_reports_coalesced_total counter
trainyard_progress_reports_coalesced_total 50
# TYPE trainyard_progress_reports_dropped_total counter
trainyard_progress_reports_dropped_total{reason="stale"} 3
# TYPE trainyard_progress_writes_total counter
trainyard_progress_writes_total{result="success"} 20
trainyard_progress_writes_total{result="error"} 0
# TYPE trainyard_progress_report_duration_seconds histogram
trainyard_progress_report_duration_seconds_bucket{le="0.001"} 50
trainyard_progress_report_duration_seconds_bucket{le="0.01"} 100
trainyard_progress_report_duration_seconds_bucket{le="+Inf"} 100
trainyard_progress_report_duration_seconds_sum 0.2
trainyard_progress_report_duration_seconds_count 100
`

const progressAfter = `# TYPE trainyard_progress_reports_total counter
trainyard_progress_reports_total 1100
# TYPE trainyard_progress_reports_rejected_total counter
trainyard_progress_reports_rejected_total{reason="forbidden"} 1
trainyard_progress_reports_rejected_total{reason="invalid"} 2
# TYPE trainyard_progress_token_reviews_total counter
trainyard_progress_token_reviews_total{cached="false",result="allowed"} 30
trainyard_progress_token_reviews_total{cached="true",result="allowed"} 1069
trainyard_progress_token_reviews_total{cached="false",result="forbidden"} 1
# TYPE trainyard_progress_reports_coalesced_total counter
trainyard_progress_reports_coalesced_total 850
# TYPE trainyard_progress_reports_dropped_total counter
trainyard_progress_reports_dropped_total{reason="stale"} 13
# TYPE trainyard_progress_writes_total counter
trainyard_progress_writes_total{result="success"} 120
trainyard_progress_writes_total{result="error"} 1
# TYPE trainyard_progress_report_duration_seconds histogram
trainyard_progress_report_duration_seconds_bucket{le="0.001"} 1000
trainyard_progress_report_duration_seconds_bucket{le="0.01"} 1100
trainyard_progress_report_duration_seconds_bucket{le="+Inf"} 1100
trainyard_progress_report_duration_seconds_sum 1.2
trainyard_progress_report_duration_seconds_count 1100
`

func TestReportServerAndWriteFiguresFromScrapes(t *testing.T) {
	before, after := parse(t, progressBefore), parse(t, progressAfter)
	s := reportServerFigures(before, after)
	if s.Reports != 1000 || s.Accepted != 998 || s.Rejected["invalid"] != 2 || len(s.Rejected) != 1 {
		t.Errorf("reports = %v, accepted %v, rejected %v; want 1000, 998, invalid 2 only", s.Reports, s.Accepted, s.Rejected)
	}
	if s.TokenReviews["allowed"] != 20 || len(s.TokenReviews) != 1 || s.CachedTokens != 980 || s.CacheHitRatio != 0.98 {
		t.Errorf("token reviews %v, cached %v, hit ratio %v; want allowed 20, 980, 0.98", s.TokenReviews, s.CachedTokens, s.CacheHitRatio)
	}
	if s.Coalesced != 800 || s.Dropped["stale"] != 10 {
		t.Errorf("coalesced %v, dropped %v; want 800 and stale 10", s.Coalesced, s.Dropped)
	}
	// 1000 observations: 950 at most 1 ms, 50 in (1 ms, 10 ms].
	if want := 0.001 * 500 / 950; math.Abs(s.DurationP50-round4(want)) > 1e-9 || s.DurationP99 <= 0.001 || s.DurationP99 > 0.01 {
		t.Errorf("duration p50 %v (want %v), p99 %v (want in (1 ms, 10 ms])", s.DurationP50, round4(want), s.DurationP99)
	}

	// 10 TrainJobs over 30 s, period 10 s: 100 writes, one TrainJob never written.
	start := time.Unix(1000, 0)
	end := start.Add(30 * time.Second)
	changes := map[string][]time.Time{}
	last := map[string]time.Time{}
	for i := range 9 {
		key := name(i)
		for _, at := range []float64{0.5, 10.5, 20.6} {
			changes[key] = append(changes[key], start.Add(time.Duration(at*float64(time.Second))))
		}
		last[key] = start.Add(20 * time.Second)
	}
	last[name(9)] = time.Time{}
	changes[name(0)][2] = start.Add(18 * time.Second) // 7.5 s after the one before: too soon
	w := writeFigures(before, after, changes, last, 30*time.Second, 10*time.Second, end, 1500*time.Millisecond)
	if w.Succeeded != 100 || w.Failed != 1 || w.TrainJobs != 10 || w.Written != 9 || w.NeverWritten != 1 || w.Observed != 27 {
		t.Errorf("writes = %+v", w)
	}
	if w.PerSecond != 3.333 || w.PerTrainJobPerPeriod != 3.333 {
		t.Errorf("per second %v, per TrainJob per period %v; want 3.333 and 3.333 (100 / 10 / 3)", w.PerSecond, w.PerTrainJobPerPeriod)
	}
	if w.LaterPerSecond != 3.033 || w.LaterPerTrainJobPerPeriod != 3.033 {
		t.Errorf("beyond the first: %v/s, %v per TrainJob per period; want 3.033 (91 / 30)", w.LaterPerSecond, w.LaterPerTrainJobPerPeriod)
	}
	if w.MinGapSeconds != 7.5 || w.ShortGaps != 1 || w.GapToleranceSeconds != 1.5 {
		t.Errorf("shortest gap %v, short gaps %d, tolerance %v; want 7.5, 1 and 1.5", w.MinGapSeconds, w.ShortGaps, w.GapToleranceSeconds)
	}
	// The same gaps with a slow write's round trip allowed: 7.5 s is not short.
	if w := writeFigures(before, after, changes, last, 30*time.Second, 10*time.Second, end, 3*time.Second); w.ShortGaps != 0 {
		t.Errorf("tolerance 3 s: %d short gaps, want 0", w.ShortGaps)
	}
	if w.AgeP50 != 10 || w.AgeMax != 10 {
		t.Errorf("age p50 %v, max %v; want 10 and 10", w.AgeP50, w.AgeMax)
	}
}

func TestSeriesRates(t *testing.T) {
	start := time.Unix(1000, 0)
	points := []seriesPoint{
		{At: start, Reports: 10, Writes: 1},
		{At: start.Add(2 * time.Second), Reports: 210, Writes: 41},
		{At: start.Add(2 * time.Second), Reports: 210, Writes: 41}, // same instant: skipped
		{At: start.Add(3 * time.Second), Reports: 260, Writes: 41},
	}
	reports, writes := seriesRates(start, points)
	if len(reports) != 2 || reports[0].X != 1 || reports[0].Y != 100 || reports[1].X != 2.5 || reports[1].Y != 50 {
		t.Errorf("reports/s = %v, want (1, 100) and (2.5, 50)", reports)
	}
	if len(writes) != 2 || writes[0].Y != 20 || writes[1].Y != 0 {
		t.Errorf("writes/s = %v, want 20 then 0", writes)
	}
}

// progressResult is a progress-mode result as a run of 200 TrainJobs in 10 namespaces
// would give it.
func progressResult() *Result {
	return &Result{
		Mode: ModeProgress, N: 200, NumNodes: 4, CPUs: 2,
		Progress: &Progress{
			Pods: 800, Namespaces: 10, ReportIntervalSeconds: 1, WindowSeconds: 30, TokenSeconds: 2,
			Client: ReportClient{Sent: 24000, SentPerSecond: 800, Accepted: 24000, AcceptedPerSecond: 800, Refused: map[string]int{},
				LatencyP50: 0.001, LatencyP99: 0.02, LatencyMax: 0.3, FirstLatencyP99: 0.2, LaterLatencyP99: 0.01, Connections: 12},
			Server: ReportServer{Reports: 24000, Accepted: 24000, TokenReviews: map[string]float64{"allowed": 800}, CachedTokens: 23200,
				CacheHitRatio: 0.9667, Coalesced: 23000, Dropped: map[string]float64{"stale": 400}, DurationP50: 0.0002, DurationP99: 0.004},
			Writes: StatusWrites{Succeeded: 600, PerSecond: 20, PerTrainJobPerPeriod: 1, LaterPerSecond: 13.333, LaterPerTrainJobPerPeriod: 0.667,
				TrainJobs: 200, Written: 200, Observed: 600, MinGapSeconds: 10.01, AgeP50: 5, AgeP99: 9.9, AgeMax: 10},
			WritePeriodSeconds: 10, WriteLimitsQPS: 50, WriteLimitsNSQPS: 10, WriteCeiling: 20,
			Cores: map[string]float64{"trainyard": 0.25, "kube-apiserver": 0.4},
			WithoutReports: &Burst{Namespace: quietNamespace, Admission: Admission{Admitted: 500, Seconds: 2.5, TrainJobsPerSecond: 200},
				Components: map[string]float64{"kube-apiserver": 3, "trainyard": 0.5}, Machine: Machine{WallSeconds: 2.5, BusyCPUSeconds: 3.8, Utilisation: 0.76}},
			WithReports: &Burst{Namespace: loadedNamespace, StartSeconds: 7.5, Admission: Admission{Admitted: 500, Seconds: 2.7, TrainJobsPerSecond: 185},
				Components: map[string]float64{"kube-apiserver": 4, "trainyard": 1.2}, Machine: Machine{WallSeconds: 2.7, BusyCPUSeconds: 4.9, Utilisation: 0.907}},
			WithoutReportsAfter: &Burst{Namespace: quietAfterNamespace, Admission: Admission{Admitted: 500, Seconds: 2.5, TrainJobsPerSecond: 200},
				Components: map[string]float64{"kube-apiserver": 3, "trainyard": 0.5}, Machine: Machine{WallSeconds: 2.5, BusyCPUSeconds: 4, Utilisation: 0.8}},
			AdmissionRatio: 0.925,
		},
		Controller: Controller{CPUSeconds: 7.5, Requests: map[string]float64{"POST": 800, "PATCH": 1100, "GET": 800}, Errors: map[string]float64{}},
		Components: map[string]float64{"trainyard": 7.5, "kube-apiserver": 12},
		Machine:    Machine{WallSeconds: 30, BusyCPUSeconds: 25, Utilisation: 0.417},
	}
}

func TestProgressTargetsAndReport(t *testing.T) {
	r := progressResult()
	r.Targets = evaluateTargets(r)
	met := map[string]bool{}
	for _, tg := range r.Targets {
		met[tg.Name] = tg.Met
	}
	for k, v := range map[string]bool{
		"trainerStatus writes per TrainJob per period": true,
		"admission throughput with reports vs without": true, // −7.5%
		"errors":                               true,
		"controller peak RSS":                  true,
		"admission throughput":                 false, // admission mode's: absent
		"API writes per TrainJob at admission": false,
	} {
		if got, ok := met[k]; ok != v || got != v {
			t.Errorf("target %q: present %v, met %v; want %v", k, ok, got, v)
		}
	}
	report := Report(r)
	for _, s := range []string{
		"| trainerStatus writes per TrainJob per period | ≤ 1 per 10 s (≤ 20.0 writes/s) | 0.67 beyond each TrainJob's first write (13.3 writes/s); 1.00 with it (20.0/s); shortest gap between two writes of one TrainJob 10.0 s | yes |",
		"| admission throughput with reports vs without | drop < 10% | 185/s vs 200/s without: 200/s before, 200/s after (−7.5%) | yes |",
		"**24000 accepted (800/s)**",
		"**p99 20.0 ms**",
		"800 TokenReviews (allowed 800), 23200 decisions from the cache: hit ratio 96.67%",
		"**20.0 writes/s**",
		"| | without reports, before | with reports | without reports, after |\n|---|---|---|---|\n",
		"| **throughput** | **200 TrainJobs/s** | **185 TrainJobs/s** (−7.5%) | **200 TrainJobs/s** |",
		"| kube-apiserver CPU | 3.00 s | 4.00 s | 3.00 s |",
		"| other processes' CPU | 0.30 s | -0.30 s | 0.50 s |",
		"**0.25 cores**",
		"| kube-apiserver | 12.00 | 0.40 |",
		"| other processes on the machine | 5.50 | 0.18 |",
		"bounded by the machine's cores: 91% busy with reports (78% without)",
		"the controller +0.7 CPU s against the burst without",
		"| machine busy | 76% of 2 cores over 2.5 s | 91% of 2 cores over 2.7 s | 80% of 2 cores over 2.5 s |",
	} {
		if !strings.Contains(report, s) {
			t.Errorf("report lacks %q:\n%s", s, report)
		}
	}

	// Too many writes, a short gap, a larger drop, a refused report: all caught.
	r.Progress.Writes.LaterPerTrainJobPerPeriod, r.Progress.Writes.ShortGaps = 1.2, 3
	r.Progress.AdmissionRatio = 0.85
	r.Progress.Client.Accepted--
	r.Progress.Client.Refused["403"] = 1
	for _, tg := range evaluateTargets(r) {
		switch tg.Name {
		case "trainerStatus writes per TrainJob per period", "admission throughput with reports vs without", "errors":
			if tg.Met {
				t.Errorf("target %q met with %s", tg.Name, tg.Measured)
			}
		}
	}
}

func TestWriteBoundNamesTheLimitsOnlyWhenTheyBind(t *testing.T) {
	r := progressResult()
	if got := writeBound(r); got != "" {
		t.Errorf("ceiling 20/s for 200 TrainJobs: note %q, want none", got)
	}
	r.N, r.Progress.Writes.TrainJobs, r.Progress.Writes.NeverWritten, r.Progress.WriteCeiling, r.Progress.Namespaces = 1000, 1000, 400, 10, 1
	got := writeBound(r)
	for _, s := range []string{"1000 TrainJobs in 1 namespaces would take 100 writes/s", "allow 10/s", "about every 100 s", "400 never written"} {
		if !strings.Contains(got, s) {
			t.Errorf("note %q lacks %q", got, s)
		}
	}
}

func TestBaselineAveragesTheBurstsWithoutReports(t *testing.T) {
	p := progressResult().Progress
	p.WithoutReportsAfter.Admission.TrainJobsPerSecond = 150
	p.WithoutReportsAfter.Components["trainyard"] = 1.5
	b := p.baseline()
	if b.Admission.TrainJobsPerSecond != 175 || b.Components["trainyard"] != 1 || math.Abs(b.Machine.Utilisation-0.78) > 1e-9 {
		t.Errorf("baseline = %+v, want 175/s, trainyard 1 CPU s, 78%% busy", b)
	}
	p.WithoutReportsAfter = nil
	if b := p.baseline(); b.Admission.TrainJobsPerSecond != 200 {
		t.Errorf("without a burst after: %v/s, want the burst before's 200", b.Admission.TrainJobsPerSecond)
	}
	p.WithoutReports = nil
	if b := p.baseline(); b != nil {
		t.Errorf("no burst without reports: baseline %+v, want nil", b)
	}
}

func TestChange(t *testing.T) {
	for ratio, want := range map[float64]string{0.925: "−7.5%", 1.02: "+2.0%", 1: "+0.0%"} {
		if got := change(ratio); got != want {
			t.Errorf("change(%v) = %q, want %q", ratio, got, want)
		}
	}
}

type fakeTokens struct {
	name string
	req  *authenticationv1.TokenRequest
}

func (f *fakeTokens) CreateToken(_ context.Context, name string, tr *authenticationv1.TokenRequest, _ metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	f.name, f.req = name, tr
	return &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "t0k"}}, nil
}

func TestMintPodTokenBindsToThePodAndTheTrainJobsAudience(t *testing.T) {
	f := &fakeTokens{}
	tok, err := mintPodToken(context.Background(), f, reporter{namespace: "ns", pod: "tj-00001-node-0-0-abc", podUID: "uid-1", trainJob: "tj-00001"})
	if err != nil || tok != "t0k" {
		t.Fatalf("token %q, %v", tok, err)
	}
	spec := f.req.Spec
	if f.name != "default" || len(spec.Audiences) != 1 || spec.Audiences[0] != wire.Audience("ns", "tj-00001") {
		t.Errorf("service account %q, audiences %v; want default and the TrainJob's audience", f.name, spec.Audiences)
	}
	if ref := spec.BoundObjectRef; ref == nil || ref.Kind != "Pod" || ref.Name != "tj-00001-node-0-0-abc" || ref.UID != "uid-1" {
		t.Errorf("bound to %+v, want the pod", ref)
	}
}

// TestLoadReportsOverOneTrustedReusedConnectionPool runs the load generator against a
// TLS server whose certificate names example.com: the URL's host is kept as the TLS
// server name while every request goes to the server's address, each pod reports on its
// ticks with its own token, and connections are reused.
func TestLoadReportsOverOneTrustedReusedConnectionPool(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req wire.UpdateTrainJobStatusRequest
		if r.Host != "example.com" || json.Unmarshal(body, &req) != nil || req.TrainerStatus == nil {
			http.Error(w, "bad report", http.StatusUnprocessableEntity)
			return
		}
		mu.Lock()
		seen[r.Header.Get("Authorization")]++
		mu.Unlock()
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	client, dials, err := newReportClient(caPEM, srv.Listener.Addr().String(), 8)
	if err != nil {
		t.Fatal(err)
	}
	reps := make([]reporter, 8)
	for i := range reps {
		reps[i] = reporter{namespace: "ns", pod: name(i), url: "https://example.com" + wire.Path("ns", "tj"), token: name(i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 550*time.Millisecond)
	defer cancel()
	gen := startLoad(ctx, client, reps, 100*time.Millisecond, time.Second)
	<-ctx.Done()
	logs := gen.wait()
	srv.Close() // waits for the handlers: seen is final
	if gen.firstError() != "" {
		t.Fatalf("first error: %s", gen.firstError())
	}
	for i, pod := range logs {
		if len(pod) < 3 || len(pod) > 6 || !pod[0].First || pod[1].First {
			t.Errorf("pod %d: %d reports (first flags %v, %v); want 5 or so at 100 ms over 550 ms, only the first marked", i, len(pod), len(pod) > 0 && pod[0].First, len(pod) > 1 && pod[1].First)
		}
		for _, l := range pod {
			if l.Code != http.StatusOK {
				t.Errorf("pod %d: report answered %d", i, l.Code)
			}
		}
		// A report cut off by the end is answered but not logged.
		if got := seen["Bearer "+name(i)]; got != len(pod) && got != len(pod)+1 {
			t.Errorf("pod %d: server saw %d reports with its token, the pod logged %d", i, got, len(pod))
		}
	}
	// Phases: pod i reports i/8 of the interval after the start, never before.
	if at := logs[4][0].At; at < 0.05 || at > 0.2 {
		t.Errorf("pod 4's first report at %.3f s, want at 0.05 s (and scheduling delay)", at)
	}
	if n := dials.Load(); n > 8 {
		t.Errorf("%d connections dialled for 8 pods reporting 5 times each: not reused", n)
	}
}

func TestWriteProgressPlotWritesSVGAndPNG(t *testing.T) {
	dir := t.TempDir()
	start := time.Unix(1000, 0)
	r := progressResult()
	r.Progress.WithReports.start = start.Add(7 * time.Second)
	r.Progress.WithReports.latencies = []float64{0.3, 0.5, 0.9}
	r.Progress.WithoutReports.latencies = []float64{0.2, 0.4, 0.8}
	r.Progress.WithoutReportsAfter.latencies = []float64{0.25, 0.45, 0.85}
	logs := [][]reportLog{{{At: 0.1, Latency: 0.002, Code: 200, First: true}, {At: 1.1, Latency: 0.001, Code: 200}, {At: 2.1, Latency: 0.001, Code: 200}}}
	points := []seriesPoint{{At: start}, {At: start.Add(time.Second), Reports: 800, Writes: 200}, {At: start.Add(2 * time.Second), Reports: 1600, Writes: 200}}
	tl := &timeline{progress: newProgressTimeline(start, logs, points, r.Progress)}
	if len(tl.progress.accepted) != 2 || tl.progress.burstStart != 7 || tl.progress.burstEnd != 9.7 || len(tl.progress.after) != 3 || tl.progress.wantWrites != 20 {
		t.Errorf("timeline = %+v", tl.progress)
	}
	if err := writePlot(dir+"/plot.svg", r, tl); err != nil {
		t.Fatal(err)
	}
	for name, magic := range map[string]string{"plot.svg": "<?xml", "plot.png": "\x89PNG"} {
		data, err := os.ReadFile(dir + "/" + name)
		if err != nil || !strings.HasPrefix(string(data), magic) {
			t.Errorf("%s: %v, starts %q; want a %q file", name, err, string(data[:min(len(data), 8)]), magic)
		}
	}
}
