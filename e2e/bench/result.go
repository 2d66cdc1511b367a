package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Result is one run's figures; result.json is this struct. Times are
// seconds, sizes bytes, rates per second.
type Result struct {
	Mode            string    `json:"mode"`
	N               int       `json:"n"`
	Parallelism     int       `json:"parallelism"`
	NumNodes        int32     `json:"numNodes"`
	ControllerQPS   float32   `json:"controllerQPS"`
	ControllerBurst int32     `json:"controllerBurst"`
	ControllerArgs  []string  `json:"controllerArgs,omitempty"`
	StartedAt       time.Time `json:"startedAt"`
	CPUs            int       `json:"cpus"`
	GoVersion       string    `json:"goVersion"`

	// Admission: TrainJob created → its JobSet exists (both modes).
	Admission *Admission `json:"admission,omitempty"`
	// Lifecycle: TrainJob created → Complete (lifecycle mode only).
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Limit: the API server alone, no controller (admission mode only).
	Limit *Limit `json:"limit,omitempty"`

	Controller Controller `json:"controller"`
	Stages     []Stage    `json:"stages"`
	// Components is the CPU seconds each process used between the burst's
	// start and the controller going idle (trainyard, etcd, kube-apiserver, ...).
	Components map[string]float64 `json:"componentCPUSeconds"`
	Machine    Machine            `json:"machine"`

	Targets []Target `json:"targets"`
}

// Admission figures. Latency is per TrainJob: its create call returned → the
// benchmark's watch saw its JobSet.
type Admission struct {
	CreateSeconds            float64 `json:"createSeconds"`
	TrainJobCreatesPerSecond float64 `json:"trainJobCreatesPerSecond"`
	CreateErrors             int     `json:"createErrors"`
	FirstCreateError         string  `json:"firstCreateError,omitempty"`
	Admitted                 int     `json:"admitted"`
	// Seconds runs from the first create sent to the last JobSet seen.
	Seconds            float64 `json:"seconds"`
	TrainJobsPerSecond float64 `json:"trainJobsPerSecond"`
	LatencyP50         float64 `json:"latencyP50"`
	LatencyP99         float64 `json:"latencyP99"`
	LatencyMax         float64 `json:"latencyMax"`
	// Reviews are the controller's admission reviews of the burst's TrainJobs, when
	// the run had webhooks on.
	Reviews *Reviews `json:"reviews,omitempty"`
}

// Reviews are admission reviews (validate + mutate) of TrainJobs: how many, and the
// time the webhook took for each, in seconds.
type Reviews struct {
	Count      int     `json:"count"`
	P50Seconds float64 `json:"p50Seconds"`
	P99Seconds float64 `json:"p99Seconds"`
}

// Lifecycle figures: create returned → Complete (or Failed) seen.
type Lifecycle struct {
	Seconds    float64 `json:"seconds"`
	Finished   int     `json:"finished"`
	Failed     int     `json:"failed"`
	LatencyP50 float64 `json:"latencyP50"`
	LatencyP99 float64 `json:"latencyP99"`
}

// Limit is the physical limit: the API server taking the same creates with
// no controller. TrainJobsPerSecond = N / (TrainJob creates + JobSet creates):
// the best admission rate an API server that must store both can sustain.
type Limit struct {
	TrainJobCreateSeconds    float64 `json:"trainJobCreateSeconds"`
	TrainJobCreatesPerSecond float64 `json:"trainJobCreatesPerSecond"`
	TrainJobCreateErrors     int     `json:"trainJobCreateErrors"`
	JobSetCreateSeconds      float64 `json:"jobSetCreateSeconds"`
	JobSetCreatesPerSecond   float64 `json:"jobSetCreatesPerSecond"`
	JobSetCreateErrors       int     `json:"jobSetCreateErrors"`
	// The same JobSets created with server-side apply, as the controller does.
	JobSetApplySeconds     float64 `json:"jobSetApplySeconds"`
	JobSetAppliesPerSecond float64 `json:"jobSetAppliesPerSecond"`
	JobSetApplyErrors      int     `json:"jobSetApplyErrors"`
	TrainJobsPerSecond     float64 `json:"trainJobsPerSecond"`
	// TrainJobsPerSecondWithApply = N / (TrainJob creates + JobSet applies).
	TrainJobsPerSecondWithApply float64 `json:"trainJobsPerSecondWithApply"`
}

// Controller figures, from its /metrics and /proc.
type Controller struct {
	CPUSeconds        float64 `json:"cpuSeconds"`
	CPUSecondsPer1000 float64 `json:"cpuSecondsPer1000TrainJobs"`
	// PeakRSSBytes is the process's VmHWM: the peak over its whole life.
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	// HeapBytes is go_memstats_heap_inuse_bytes at the end of the run; PeakHeapBytes
	// the highest value scraped (every second) during it.
	HeapBytes     int64 `json:"heapInuseBytes"`
	PeakHeapBytes int64 `json:"peakHeapInuseBytes"`
	// Requests counts API requests by HTTP method during the run.
	Requests          map[string]float64 `json:"requests"`
	Writes            float64            `json:"writes"`
	WritesPerTrainJob float64            `json:"writesPerTrainJob"`
	// Errors counts failed syncs by "stage/reason"; Retries rate-limited
	// requeues by stage; CacheLagErrors the not_found and conflict errors.
	Errors         map[string]float64 `json:"errors"`
	Retries        map[string]float64 `json:"retries"`
	CacheLagErrors float64            `json:"cacheLagErrors"`
}

// Stage is one pipeline stage's queue wait and sync time percentiles
// (seconds), estimated from the controller's histograms.
type Stage struct {
	Name     string  `json:"name"`
	Syncs    float64 `json:"syncs"`
	QueueP50 float64 `json:"queueP50"`
	QueueP99 float64 `json:"queueP99"`
	SyncP50  float64 `json:"syncP50"`
	SyncP99  float64 `json:"syncP99"`
}

// Machine is how busy the whole machine was during the run.
type Machine struct {
	WallSeconds    float64 `json:"wallSeconds"`
	BusyCPUSeconds float64 `json:"busyCPUSeconds"`
	// Utilisation is busy CPU / (wall × cores): near 1 means CPU-bound.
	Utilisation float64 `json:"utilisation"`
}

// Target is one of issue 9's targets against this run.
type Target struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	Note     string `json:"note,omitempty"`
}

// Issue 9's targets.
const (
	targetThroughputRatio = 0.8
	targetP99Seconds      = 5.0
	targetAdmissionWrites = 1.0
	targetLifecycleWrites = 3.0
	targetCPUPer1000      = 1.5
	targetRSSBytes        = 150 << 20
	targetRSSAtN          = 10000
)

// evaluateTargets states each target that this run's mode measures.
func evaluateTargets(r *Result) []Target {
	var ts []Target
	add := func(name, target, measured string, met bool, note string) {
		ts = append(ts, Target{Name: name, Target: target, Measured: measured, Met: met, Note: note})
	}
	c := r.Controller
	if r.Mode == ModeAdmission && r.Admission != nil && r.Limit != nil {
		ratio := r.Admission.TrainJobsPerSecond / r.Limit.TrainJobsPerSecond
		tjRatio := r.Admission.TrainJobsPerSecond / r.Limit.TrainJobCreatesPerSecond
		add("admission throughput", fmt.Sprintf("≥ %.1f × limit", targetThroughputRatio),
			fmt.Sprintf("%.0f/s = %.2f × %.0f/s", r.Admission.TrainJobsPerSecond, ratio, r.Limit.TrainJobsPerSecond),
			ratio >= targetThroughputRatio,
			joinNotes(apiServerBound(r), fmt.Sprintf("limit = N / (raw TrainJob creates + raw JobSet creates); against the limit with the JobSets server-side applied, as the controller must (%.0f/s), the ratio is %.2f; against TrainJob creates alone (%.0f/s) %.2f",
				r.Limit.TrainJobsPerSecondWithApply, r.Admission.TrainJobsPerSecond/r.Limit.TrainJobsPerSecondWithApply, r.Limit.TrainJobCreatesPerSecond, tjRatio)))
		add("admission latency p99", fmt.Sprintf("≤ %.0f s", targetP99Seconds), fmt.Sprintf("%.2f s", r.Admission.LatencyP99),
			r.Admission.LatencyP99 <= targetP99Seconds, apiServerBound(r))
		add("API writes per TrainJob at admission", fmt.Sprintf("%.1f", targetAdmissionWrites), fmt.Sprintf("%.3f (%s)", c.WritesPerTrainJob, methods(c.Requests, true)),
			c.WritesPerTrainJob <= targetAdmissionWrites, "")
		add("controller CPU per 1,000 TrainJobs", fmt.Sprintf("≤ %.1f s", targetCPUPer1000), fmt.Sprintf("%.2f s", c.CPUSecondsPer1000),
			c.CPUSecondsPer1000 <= targetCPUPer1000, "")
	}
	if r.Mode == ModeLifecycle && r.Lifecycle != nil {
		add("API writes per TrainJob to Complete", fmt.Sprintf("≤ %.0f", targetLifecycleWrites), fmt.Sprintf("%.3f (%s)", c.WritesPerTrainJob, methods(c.Requests, true)),
			c.WritesPerTrainJob <= targetLifecycleWrites, "every write counts: JobSet apply, status patches, events")
		add("TrainJobs finished", fmt.Sprint(r.N), fmt.Sprintf("%d (%d Failed)", r.Lifecycle.Finished, r.Lifecycle.Failed),
			r.Lifecycle.Finished == r.N && r.Lifecycle.Failed == 0, "")
	}
	add("failed syncs from the controller's cache lag", "0", fmt.Sprintf("%.0f", c.CacheLagErrors), c.CacheLagErrors == 0, "stage errors with reason not_found or conflict")
	errs := 0
	if r.Admission != nil {
		errs = r.Admission.CreateErrors
	}
	add("errors", "0", fmt.Sprintf("%d create errors, %.0f failed syncs", errs, sum(c.Errors)), errs == 0 && sum(c.Errors) == 0, "")
	rssNote := ""
	if r.N < targetRSSAtN {
		rssNote = fmt.Sprintf("the target is for N = %d; this run has N = %d", targetRSSAtN, r.N)
	}
	add("controller peak RSS", fmt.Sprintf("≤ %d MiB at N = %d", targetRSSBytes>>20, targetRSSAtN), fmt.Sprintf("%.1f MiB at N = %d", float64(c.PeakRSSBytes)/(1<<20), r.N),
		c.PeakRSSBytes <= targetRSSBytes, rssNote)
	return ts
}

// apiServerBound explains a figure that the API server, not the controller, bounds:
// the machine was saturated (≥ 90% of its cores busy) and kube-apiserver + etcd used
// at least four times the controller's CPU, so TrainJobs queued behind the API
// server's own throughput. Empty otherwise.
func apiServerBound(r *Result) string {
	server := r.Components["kube-apiserver"] + r.Components["etcd"]
	ctrl := r.Components["trainyard"]
	if r.Machine.Utilisation < 0.9 || ctrl <= 0 || server < 4*ctrl || r.Limit == nil {
		return ""
	}
	return fmt.Sprintf("bounded by the API server: the machine was %.0f%% busy; kube-apiserver + etcd used %.1f CPU s, the controller %.1f; "+
		"the controller's JobSet writes are server-side applies (raw: %.0f/s) where the limit counts creates (%.0f/s); "+
		"%d TrainJobs at the limit's %.0f/s take ≥ %.1f s however fast the controller is",
		r.Machine.Utilisation*100, server, ctrl, r.Limit.JobSetAppliesPerSecond, r.Limit.JobSetCreatesPerSecond,
		r.N, r.Limit.TrainJobsPerSecond, float64(r.N)/r.Limit.TrainJobsPerSecond)
}

// CompareThroughput adds a target to r: admission throughput no lower than
// (1 - tolerance) × a baseline run's. Issue 9: N = 10,000 within 20% of N = 2,000;
// issue 13: webhooks on within 10% of webhooks off.
func CompareThroughput(r, baseline *Result, tolerance float64) {
	if r.Admission == nil || baseline == nil || baseline.Admission == nil || baseline.Admission.TrainJobsPerSecond == 0 {
		return
	}
	ratio := r.Admission.TrainJobsPerSecond / baseline.Admission.TrainJobsPerSecond
	name := fmt.Sprintf("throughput at N = %d vs N = %d", r.N, baseline.N)
	if r.Admission.Reviews != nil && baseline.Admission.Reviews == nil {
		name = fmt.Sprintf("throughput with webhooks vs without (N = %d, %d)", r.N, baseline.N)
	}
	r.Targets = append(r.Targets, Target{
		Name:     name,
		Target:   fmt.Sprintf("within %.0f%%", tolerance*100),
		Measured: fmt.Sprintf("%.0f/s vs %.0f/s (%.2f×)", r.Admission.TrainJobsPerSecond, baseline.Admission.TrainJobsPerSecond, ratio),
		Met:      ratio >= 1-tolerance,
	})
}

// perTrainJob formats request counts by method divided by n.
func perTrainJob(m map[string]float64, n int) string {
	per := make(map[string]float64, len(m))
	for k, v := range m {
		per[k] = v / float64(max(n, 1))
	}
	keys := make([]string, 0, len(per))
	for k := range per {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.3f", k, per[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// joinNotes joins the non-empty notes with "; ".
func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// methods formats request counts by method, writes only when writesOnly.
func methods(m map[string]float64, writesOnly bool) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !writesOnly || isWrite(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ReadResult reads a result.json.
func ReadResult(path string) (*Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := &Result{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// WriteOutputs (re)writes result.json and report.md of r into dir; plot.svg
// needs the run's timeline and is written by Run.
func WriteOutputs(dir string, r *Result) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(Report(r)), 0o644)
}

func writeOutputs(dir string, r *Result, tl *timeline) error {
	if err := WriteOutputs(dir, r); err != nil {
		return err
	}
	return writePlot(filepath.Join(dir, "plot.svg"), r, tl)
}

// Report renders r as the short markdown report.
func Report(r *Result) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Trainyard scale benchmark: %s, N = %d\n\n", r.Mode, r.N)
	w("%s · %d CPUs · %s · %d creates in flight · controller client QPS %g / burst %d %s· numNodes %d\n\n",
		r.StartedAt.Format(time.RFC3339), r.CPUs, r.GoVersion, r.Parallelism, r.ControllerQPS, r.ControllerBurst, strings.Join(r.ControllerArgs, " ")+" ", r.NumNodes)
	w("![admissions over time and latency](plot.svg)\n\n## Targets\n\n| | target | measured | met | note |\n|---|---|---|---|---|\n")
	for _, t := range r.Targets {
		met := "yes"
		if !t.Met {
			met = "**no**"
		}
		w("| %s | %s | %s | %s | %s |\n", t.Name, t.Target, t.Measured, met, t.Note)
	}
	if a := r.Admission; a != nil {
		w("\n## Admission (TrainJob created → JobSet exists)\n\n")
		w("- %d TrainJobs created in %.2f s (%.0f/s, %d errors)\n", r.N, a.CreateSeconds, a.TrainJobCreatesPerSecond, a.CreateErrors)
		w("- %d admitted in %.2f s: **%.0f TrainJobs/s**\n", a.Admitted, a.Seconds, a.TrainJobsPerSecond)
		w("- latency p50 %.3f s, p99 %.3f s, max %.3f s\n", a.LatencyP50, a.LatencyP99, a.LatencyMax)
		if rv := a.Reviews; rv != nil {
			w("- webhooks on: %d TrainJob admission reviews (validate + mutate), p50 %.4f s, p99 %.4f s in the webhook\n", rv.Count, rv.P50Seconds, rv.P99Seconds)
		}
	}
	if l := r.Limit; l != nil {
		w("\n## Physical limit (API server alone, no controller, same parallelism)\n\n")
		w("- %d TrainJob creates: %.2f s (%.0f/s)\n", r.N, l.TrainJobCreateSeconds, l.TrainJobCreatesPerSecond)
		w("- the produced JobSets created raw: %.2f s (%.0f/s)\n", l.JobSetCreateSeconds, l.JobSetCreatesPerSecond)
		w("- the same JobSets server-side applied (what the controller sends): %.2f s (%.0f/s)\n", l.JobSetApplySeconds, l.JobSetAppliesPerSecond)
		w("- both: **%.0f TrainJobs/s** (%.0f/s with the applies)\n", l.TrainJobsPerSecond, l.TrainJobsPerSecondWithApply)
	}
	if l := r.Lifecycle; l != nil {
		w("\n## Lifecycle (TrainJob created → Complete)\n\n")
		w("- %d finished (%d Failed) in %.1f s; latency p50 %.2f s, p99 %.2f s\n", l.Finished, l.Failed, l.Seconds, l.LatencyP50, l.LatencyP99)
	}
	c := r.Controller
	w("\n## Controller\n\n")
	w("- CPU %.2f s (%.2f s per 1,000 TrainJobs); peak RSS %.1f MiB; Go heap in use: peak %.1f MiB, at the end %.1f MiB\n",
		c.CPUSeconds, c.CPUSecondsPer1000, float64(c.PeakRSSBytes)/(1<<20), float64(c.PeakHeapBytes)/(1<<20), float64(c.HeapBytes)/(1<<20))
	w("- API requests: %s; per TrainJob: %s; writes per TrainJob %.3f\n", methods(c.Requests, false), perTrainJob(c.Requests, r.N), c.WritesPerTrainJob)
	w("- failed syncs: %s; retries: %s\n", methods(c.Errors, false), methods(c.Retries, false))
	w("\n| stage | syncs | queue p50 | queue p99 | sync p50 | sync p99 |\n|---|---|---|---|---|---|\n")
	for _, s := range r.Stages {
		w("| %s | %.0f | %s | %s | %s | %s |\n", s.Name, s.Syncs, ms(s.QueueP50), ms(s.QueueP99), ms(s.SyncP50), ms(s.SyncP99))
	}
	w("\n## Where the CPU went (seconds, burst start → controller idle; machine utilisation %.0f%% of %d cores over %.1f s)\n\n",
		r.Machine.Utilisation*100, r.CPUs, r.Machine.WallSeconds)
	names := make([]string, 0, len(r.Components))
	for n := range r.Components {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return r.Components[names[i]] > r.Components[names[j]] })
	w("| process | CPU s |\n|---|---|\n")
	for _, n := range names {
		w("| %s | %.2f |\n", n, r.Components[n])
	}
	return b.String()
}

func ms(seconds float64) string { return fmt.Sprintf("%.1f ms", seconds*1000) }
