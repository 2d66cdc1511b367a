package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/trainyard/trainyard/e2e/cluster"
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
	ControllerEnv   []string  `json:"controllerEnv,omitempty"`
	StartedAt       time.Time `json:"startedAt"`
	CPUs            int       `json:"cpus"`
	GoVersion       string    `json:"goVersion"`

	// Admission: TrainJob created → its JobSet exists (both modes).
	Admission *Admission `json:"admission,omitempty"`
	// Lifecycle: TrainJob created → Complete (lifecycle mode only).
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// Limit: the API server alone, no controller (admission mode only).
	Limit *Limit `json:"limit,omitempty"`
	// Restart: the controller started again with every TrainJob and JobSet present
	// (admission mode with --restart, issue 17).
	Restart *Restart `json:"restart,omitempty"`
	// Progress: the reporting window and the admission bursts (progress mode only).
	// Controller, Stages, Components and Machine then cover the reporting window.
	Progress *Progress `json:"progress,omitempty"`
	// Kueue: the TrainJobs through Kueue (kueue mode only); Admission and Lifecycle
	// are then of the same run, the JobSets they count created suspended.
	Kueue *Kueue `json:"kueue,omitempty"`

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

// Progress figures (issue 14): Pods pods, numNodes for each of the N TrainJobs, each
// POSTing its progress every ReportIntervalSeconds during a window of WindowSeconds.
type Progress struct {
	Pods                  int     `json:"pods"`
	Namespaces            int     `json:"namespaces"`
	ReportIntervalSeconds float64 `json:"reportIntervalSeconds"`
	// WindowSeconds runs from the first report to the window's end (the duration
	// asked, or longer when the burst during it took longer).
	WindowSeconds float64 `json:"windowSeconds"`
	// CreateErrors are the failed creates of the N reporting TrainJobs.
	CreateErrors int `json:"createErrors"`
	// TokenSeconds is how long minting a token for every pod took.
	TokenSeconds float64      `json:"tokenMintSeconds"`
	Client       ReportClient `json:"client"`
	Server       ReportServer `json:"server"`
	Writes       StatusWrites `json:"writes"`
	// The controller's trainerStatus write limits the run had (its defaults): a
	// TrainJob at most once per WritePeriodSeconds, a namespace at most
	// WriteLimitsNSQPS writes/s, the replica WriteLimitsQPS; WriteCeiling is the writes/s
	// they allow for this run's TrainJobs per namespace.
	WritePeriodSeconds float64 `json:"writePeriodSeconds"`
	WriteLimitsQPS     float64 `json:"writeLimitsQPS"`
	WriteLimitsNSQPS   float64 `json:"writeLimitsNamespaceQPS"`
	WriteCeiling       float64 `json:"writeCeilingPerSecond"`
	// PeakRSSBeforeBytes is the controller's peak RSS (VmHWM) when the window started:
	// Controller.PeakRSSBytes above it was reached during the window.
	PeakRSSBeforeBytes int64 `json:"peakRSSBeforeWindowBytes"`
	// Cores is each process's CPU seconds during the window over its length.
	Cores map[string]float64 `json:"cores"`
	// The same burst of suspended TrainJobs before the window (no reports), during it,
	// and after it (no reports).
	WithoutReports      *Burst `json:"admissionWithoutReports,omitempty"`
	WithReports         *Burst `json:"admissionWithReports,omitempty"`
	WithoutReportsAfter *Burst `json:"admissionWithoutReportsAfter,omitempty"`
	// AdmissionRatio is admission throughput with reports over the mean of the bursts
	// without.
	AdmissionRatio float64 `json:"admissionRatio"`
}

// baseline is the bursts without reports averaged: throughput, CPU and the machine's
// load; the burst before alone when there is no burst after; nil with neither.
func (p *Progress) baseline() *Burst {
	bs := make([]*Burst, 0, 2)
	for _, b := range []*Burst{p.WithoutReports, p.WithoutReportsAfter} {
		if b != nil {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		return nil
	}
	out := &Burst{Components: map[string]float64{}}
	k := float64(len(bs))
	for _, b := range bs {
		out.Admission.TrainJobsPerSecond += b.Admission.TrainJobsPerSecond / k
		for name, v := range b.Components {
			out.Components[name] += v / k
		}
		out.Machine.WallSeconds += b.Machine.WallSeconds / k
		out.Machine.BusyCPUSeconds += b.Machine.BusyCPUSeconds / k
		out.Machine.Utilisation += b.Machine.Utilisation / k
	}
	return out
}

// ReportClient is what the reporting pods saw. Latency is per report, seconds, from
// sending to the end of the response, over the answered reports; the first report of
// each pod waits for its TokenReview, the later ones find it cached.
type ReportClient struct {
	Sent              int     `json:"sent"`
	SentPerSecond     float64 `json:"sentPerSecond"`
	Accepted          int     `json:"accepted"`
	AcceptedPerSecond float64 `json:"acceptedPerSecond"`
	// Refused counts the answers other than 200, by status code.
	Refused         map[string]int `json:"refused"`
	TransportErrors int            `json:"transportErrors"`
	FirstError      string         `json:"firstError,omitempty"`
	// Skipped counts the ticks a pod missed by being a whole interval late.
	Skipped         int     `json:"skipped"`
	LatencyP50      float64 `json:"latencyP50"`
	LatencyP99      float64 `json:"latencyP99"`
	LatencyMax      float64 `json:"latencyMax"`
	FirstLatencyP99 float64 `json:"firstReportLatencyP99"`
	LaterLatencyP99 float64 `json:"laterReportsLatencyP99"`
	// Connections is the connections the pods' shared transport dialled.
	Connections int `json:"connections"`
}

// ReportServer is the progress server's counters during the window.
type ReportServer struct {
	Reports  float64            `json:"reports"`
	Accepted float64            `json:"accepted"`
	Rejected map[string]float64 `json:"rejected"`
	// TokenReviews counts the decisions made by a TokenReview, by result; CachedTokens
	// those the review cache answered.
	TokenReviews  map[string]float64 `json:"tokenReviews"`
	CachedTokens  float64            `json:"cachedTokenDecisions"`
	CacheHitRatio float64            `json:"tokenCacheHitRatio"`
	Coalesced     float64            `json:"coalesced"`
	Dropped       map[string]float64 `json:"dropped"`
	// DurationP50 and DurationP99 are the handler's time per report, seconds.
	DurationP50 float64 `json:"durationP50"`
	DurationP99 float64 `json:"durationP99"`
}

// StatusWrites are the trainerStatus writes during the window: the controller's
// counters, and what the benchmark's watch of the reporting TrainJobs saw.
type StatusWrites struct {
	Succeeded float64 `json:"succeeded"`
	Failed    float64 `json:"failed"`
	PerSecond float64 `json:"perSecond"`
	// PerTrainJobPerPeriod = Succeeded / TrainJobs / (window / period). Each TrainJob's
	// first write comes at once, so over a short window this may exceed 1 with no
	// TrainJob written twice in a period: LaterPerTrainJobPerPeriod leaves the first
	// writes out, and is at most 1 when the period holds.
	PerTrainJobPerPeriod      float64 `json:"perTrainJobPerPeriod"`
	LaterPerSecond            float64 `json:"laterPerSecond"`
	LaterPerTrainJobPerPeriod float64 `json:"laterPerTrainJobPerPeriod"`
	TrainJobs                 int     `json:"trainJobs"`
	// Written TrainJobs had trainerStatus written at least once; NeverWritten none.
	Written      int `json:"written"`
	NeverWritten int `json:"neverWritten"`
	// Observed is the trainerStatus changes the watch saw; MinGapSeconds the shortest
	// time between two of one TrainJob; ShortGaps how many were shorter than the period
	// less GapToleranceSeconds: the controller starts a TrainJob's writes a period
	// apart, and the watch sees each when it lands, a round trip later (1 s for the
	// watch's delivery jitter plus the progress stage's sync p99).
	Observed            int     `json:"observed"`
	MinGapSeconds       float64 `json:"minGapSeconds"`
	ShortGaps           int     `json:"shortGaps"`
	GapToleranceSeconds float64 `json:"gapToleranceSeconds"`
	// Age of the written TrainJobs' trainerStatus.lastUpdatedTime at the window's end.
	AgeP50 float64 `json:"ageP50"`
	AgeP99 float64 `json:"ageP99"`
	AgeMax float64 `json:"ageMax"`
}

// Burst is one admission burst of progress mode: TrainJob created → JobSet exists.
type Burst struct {
	Namespace string `json:"namespace"`
	// StartSeconds is when the burst started, from the reporting window's start (0
	// for the burst without reports).
	StartSeconds float64   `json:"startSeconds,omitempty"`
	Admission    Admission `json:"admission"`
	// Components is the CPU seconds of each process from the first create to the last
	// JobSet seen.
	Components map[string]float64 `json:"componentCPUSeconds"`
	// Machine is how busy the machine was over the same span.
	Machine Machine `json:"machine"`

	start     time.Time
	latencies []float64
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
	// Issue 17: a restart with this many TrainJobs present is ready this fast.
	targetRestartSeconds = 60.0
	targetRestartAtN     = 50000
	// Issue 14: admission throughput drops by less than this while pods report.
	targetProgressAdmissionDrop = 0.1
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
	if k := r.Kueue; r.Mode == ModeKueue && k != nil {
		ts = append(ts, kueueTargets(r, k)...)
	}
	if p := r.Progress; r.Mode == ModeProgress && p != nil {
		w := p.Writes
		add("trainerStatus writes per TrainJob per period", fmt.Sprintf("≤ 1 per %.0f s (≤ %.1f writes/s)", p.WritePeriodSeconds, float64(w.TrainJobs)/p.WritePeriodSeconds),
			fmt.Sprintf("%.2f beyond each TrainJob's first write (%.1f writes/s); %.2f with it (%.1f/s); shortest gap between two writes of one TrainJob %.1f s",
				w.LaterPerTrainJobPerPeriod, w.LaterPerSecond, w.PerTrainJobPerPeriod, w.PerSecond, w.MinGapSeconds),
			w.LaterPerTrainJobPerPeriod <= 1 && w.ShortGaps == 0, writeBound(r))
		if base := p.baseline(); base != nil && p.WithReports != nil {
			measured := fmt.Sprintf("%.0f/s vs %.0f/s (%s)", p.WithReports.Admission.TrainJobsPerSecond, base.Admission.TrainJobsPerSecond, change(p.AdmissionRatio))
			if p.WithoutReportsAfter != nil {
				measured = fmt.Sprintf("%.0f/s vs %.0f/s without: %.0f/s before, %.0f/s after (%s)", p.WithReports.Admission.TrainJobsPerSecond,
					base.Admission.TrainJobsPerSecond, p.WithoutReports.Admission.TrainJobsPerSecond, p.WithoutReportsAfter.Admission.TrainJobsPerSecond, change(p.AdmissionRatio))
			}
			add("admission throughput with reports vs without", fmt.Sprintf("drop < %.0f%%", targetProgressAdmissionDrop*100), measured,
				p.AdmissionRatio > 1-targetProgressAdmissionDrop,
				joinNotes(fmt.Sprintf("%d suspended TrainJobs each; %.0f reports/s accepted during the window", r.Progress.WithReports.Admission.Admitted, p.Client.AcceptedPerSecond),
					machineBound(p)))
		}
	}
	if rs := r.Restart; rs != nil {
		add("writes during a restart", "0", fmt.Sprintf("%.0f (%s)", rs.Writes, methods(rs.Requests, true)), rs.Writes == 0,
			fmt.Sprintf("a fresh process with %d TrainJobs and their JobSets present", rs.TrainJobs))
		note := ""
		if r.N < targetRestartAtN {
			note = fmt.Sprintf("the target is for N = %d; this run has N = %d", targetRestartAtN, r.N)
		}
		if !rs.Idle {
			note = joinNotes(note, fmt.Sprintf("not idle within %s", restartIdleLimit))
		}
		add("restart ready (caches synced, pipeline idle)", fmt.Sprintf("≤ %.0f s at N = %d", targetRestartSeconds, targetRestartAtN),
			fmt.Sprintf("%.1f s (caches synced at %.1f s)", rs.IdleSeconds, rs.ReadySeconds), rs.Idle && rs.IdleSeconds <= targetRestartSeconds, note)
	}
	add("failed syncs from the controller's cache lag", "0", fmt.Sprintf("%.0f", c.CacheLagErrors), c.CacheLagErrors == 0, "stage errors with reason not_found or conflict")
	errs := 0
	if r.Admission != nil {
		errs = r.Admission.CreateErrors
	}
	if p := r.Progress; p != nil {
		errs += p.CreateErrors
		for _, b := range []*Burst{p.WithoutReports, p.WithReports, p.WithoutReportsAfter} {
			if b != nil {
				errs += b.Admission.CreateErrors
			}
		}
		failed := p.Client.Sent - p.Client.Accepted
		add("errors", "0", fmt.Sprintf("%d create errors, %.0f failed syncs, %d reports not accepted, %.0f failed trainerStatus writes", errs, sum(c.Errors), failed, p.Writes.Failed),
			errs == 0 && sum(c.Errors) == 0 && failed == 0 && p.Writes.Failed == 0, p.Client.FirstError)
	} else if k := r.Kueue; k != nil {
		failed := 0
		if r.Lifecycle != nil {
			failed = r.Lifecycle.Failed
		}
		add("errors", "0", fmt.Sprintf("%d create errors, %.0f failed syncs, %d Failed TrainJobs, %d not suspended by Kueue at creation", errs, sum(c.Errors), failed, k.NotSuspendedAtCreate),
			errs == 0 && sum(c.Errors) == 0 && failed == 0 && k.NotSuspendedAtCreate == 0, "")
	} else {
		add("errors", "0", fmt.Sprintf("%d create errors, %.0f failed syncs", errs, sum(c.Errors)), errs == 0 && sum(c.Errors) == 0, "")
	}
	rssNote := ""
	if r.N < targetRSSAtN {
		rssNote = fmt.Sprintf("the target is for N = %d; this run has N = %d", targetRSSAtN, r.N)
	}
	add("controller peak RSS", fmt.Sprintf("≤ %d MiB at N = %d", targetRSSBytes>>20, targetRSSAtN), fmt.Sprintf("%.1f MiB at N = %d", float64(c.PeakRSSBytes)/(1<<20), r.N),
		c.PeakRSSBytes <= targetRSSBytes, rssNote)
	return ts
}

// writeBound says what bounds the trainerStatus write rate: the write limits, when
// they allow fewer writes than one per TrainJob per period; empty otherwise.
func writeBound(r *Result) string {
	p := r.Progress
	want := float64(p.Writes.TrainJobs) / p.WritePeriodSeconds
	if p.WriteCeiling <= 0 || p.WriteCeiling >= want {
		return ""
	}
	return fmt.Sprintf("bounded by the controller's write limits: %d TrainJobs in %d namespaces would take %.0f writes/s at one per period; "+
		"%.0f/s per namespace and %.0f/s per replica allow %.0f/s, so each TrainJob is written about every %.0f s (%d never written in the window)",
		p.Writes.TrainJobs, p.Namespaces, want, p.WriteLimitsNSQPS, p.WriteLimitsQPS, p.WriteCeiling, float64(p.Writes.TrainJobs)/p.WriteCeiling, p.Writes.NeverWritten)
}

// machineBound explains an admission burst slowed by the reports' CPU on a saturated
// machine: the burst with reports ran with the machine ≥ 90% busy, and the reporting
// pods' client (this process) and the controller used more CPU than in the burst
// without, on the cores the API server admits with. Empty otherwise.
func machineBound(p *Progress) string {
	wo, wi := p.baseline(), p.WithReports
	if wi.Machine.Utilisation < 0.9 {
		return ""
	}
	client := wi.Components["bench (this process)"] - wo.Components["bench (this process)"]
	ctrl := wi.Components["trainyard"] - wo.Components["trainyard"]
	other := func(b *Burst) float64 { return b.Machine.BusyCPUSeconds - sum(b.Components) }
	return fmt.Sprintf("bounded by the machine's cores: %.0f%% busy with reports (%.0f%% without); over the burst the reporting pods' client, "+
		"which runs on the same cores here (on other nodes in a cluster), used %+.1f CPU s and the controller %+.1f CPU s against the burst without, "+
		"other processes on the machine %.1f CPU s (%.1f without); kube-apiserver %.1f CPU s (%.1f without)",
		wi.Machine.Utilisation*100, wo.Machine.Utilisation*100, client, ctrl, other(wi), other(wo),
		wi.Components["kube-apiserver"], wo.Components["kube-apiserver"])
}

// change formats a ratio as a signed percent change: 0.93 → "−7.0%".
func change(ratio float64) string {
	d := (ratio - 1) * 100
	if d < 0 {
		return fmt.Sprintf("−%.1f%%", -d)
	}
	return fmt.Sprintf("+%.1f%%", d)
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
		r.StartedAt.Format(time.RFC3339), r.CPUs, r.GoVersion, r.Parallelism, r.ControllerQPS, r.ControllerBurst, strings.Join(slices.Concat(r.ControllerEnv, r.ControllerArgs), " ")+" ", r.NumNodes)
	if p := r.Progress; p != nil {
		w("%d pods (%d TrainJobs × numNodes %d, in %d namespaces, kept Running) report every %g s for %.1f s; the controller's progress server on 127.0.0.1 with its default write limits\n\n",
			p.Pods, p.Writes.TrainJobs, r.NumNodes, p.Namespaces, p.ReportIntervalSeconds, p.WindowSeconds)
		w("![reports and writes over time, latency](plot.svg)\n\n")
	} else if k := r.Kueue; k != nil {
		w("Kueue %s with its TrainJob integration and webhooks; one ResourceFlavor, a ClusterQueue with a nominal quota of %d pods "+
			"(%d TrainJobs of numNodes %d at a time), a LocalQueue every TrainJob names (label %s); "+
			"each pod succeeds %s after it runs (kwok); one burst of creates, then every TrainJob run to Complete; "+
			"the API server keeps an audit log (level Metadata) of the writes to TrainJobs and JobSets, for who writes what\n\n",
			k.Version, k.QuotaPods, k.Quota, r.NumNodes, cluster.KueueQueueNameLabel, cluster.DefaultPodCompleteDelay)
		w("![TrainJobs through Kueue over time, running at once, latency](plot.svg)\n\n")
	} else {
		w("![admissions over time and latency](plot.svg)\n\n")
	}
	w("## Targets\n\n| | target | measured | met | note |\n|---|---|---|---|---|\n")
	for _, t := range r.Targets {
		met := "yes"
		if !t.Met {
			met = "**no**"
		}
		w("| %s | %s | %s | %s | %s |\n", t.Name, t.Target, t.Measured, met, t.Note)
	}
	if a := r.Admission; a != nil {
		if r.Kueue != nil {
			w("\n## Admission (TrainJob created → JobSet exists, suspended while Kueue queues the TrainJob)\n\n")
		} else {
			w("\n## Admission (TrainJob created → JobSet exists)\n\n")
		}
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
	if rs := r.Restart; rs != nil {
		w("\n## Restart (a fresh controller process, %d TrainJobs and their JobSets present)\n\n", rs.TrainJobs)
		w("- caches synced (/readyz) in %.2f s; pipeline idle in %.2f s", rs.ReadySeconds, rs.IdleSeconds)
		if !rs.Idle {
			w(" (**not idle** within %s)", restartIdleLimit)
		}
		w("\n- API requests: %s; **writes %.0f**; syncs: %s; failed syncs: %s\n", methods(rs.Requests, false), rs.Writes, methods(rs.Syncs, false), methods(rs.Errors, false))
		w("- peak RSS during the relist %.1f MiB; Go heap in use: peak %.1f MiB; CPU %.2f s\n",
			float64(rs.PeakRSSBytes)/(1<<20), float64(rs.PeakHeapBytes)/(1<<20), rs.CPUSeconds)
	}
	if l := r.Lifecycle; l != nil {
		w("\n## Lifecycle (TrainJob created → Complete)\n\n")
		w("- %d finished (%d Failed) in %.1f s; latency p50 %.2f s, p99 %.2f s\n", l.Finished, l.Failed, l.Seconds, l.LatencyP50, l.LatencyP99)
	}
	if p := r.Progress; p != nil {
		progressReport(w, r, p)
	}
	if k := r.Kueue; k != nil {
		kueueReport(w, r, k)
	}
	c := r.Controller
	if p := r.Progress; p != nil {
		w("\n## Controller (during the reporting window)\n\n")
		w("- CPU %.2f s over %.1f s: **%.2f cores**; peak RSS %.1f MiB (%.1f MiB when the window started); Go heap in use: peak %.1f MiB (the whole run), at the end %.1f MiB\n",
			c.CPUSeconds, p.WindowSeconds, p.Cores["trainyard"], float64(c.PeakRSSBytes)/(1<<20), float64(p.PeakRSSBeforeBytes)/(1<<20),
			float64(c.PeakHeapBytes)/(1<<20), float64(c.HeapBytes)/(1<<20))
		w("- API requests: %s (TokenReviews are POSTs; the burst's JobSet applies and status patches are in too)\n", methods(c.Requests, false))
	} else {
		w("\n## Controller\n\n")
		w("- CPU %.2f s (%.2f s per 1,000 TrainJobs); peak RSS %.1f MiB; Go heap in use: peak %.1f MiB, at the end %.1f MiB\n",
			c.CPUSeconds, c.CPUSecondsPer1000, float64(c.PeakRSSBytes)/(1<<20), float64(c.PeakHeapBytes)/(1<<20), float64(c.HeapBytes)/(1<<20))
		w("- API requests: %s; per TrainJob: %s; writes per TrainJob %.3f\n", methods(c.Requests, false), perTrainJob(c.Requests, r.N), c.WritesPerTrainJob)
	}
	w("- failed syncs: %s; retries: %s\n", methods(c.Errors, false), methods(c.Retries, false))
	w("\n| stage | syncs | queue p50 | queue p99 | sync p50 | sync p99 |\n|---|---|---|---|---|---|\n")
	for _, s := range r.Stages {
		w("| %s | %.0f | %s | %s | %s | %s |\n", s.Name, s.Syncs, ms(s.QueueP50), ms(s.QueueP99), ms(s.SyncP50), ms(s.SyncP99))
	}
	span := "burst start → controller idle"
	if r.Progress != nil {
		span = "the reporting window, its burst included"
	}
	w("\n## Where the CPU went (seconds, %s; machine utilisation %.0f%% of %d cores over %.1f s)\n\n",
		span, r.Machine.Utilisation*100, r.CPUs, r.Machine.WallSeconds)
	names := byValue(r.Components)
	if p := r.Progress; p != nil {
		w("| process | CPU s | cores |\n|---|---|---|\n")
		for _, n := range names {
			w("| %s | %.2f | %.2f |\n", n, r.Components[n], p.Cores[n])
		}
		if other := otherCPU(r); other > 0 {
			w("| other processes on the machine | %.2f | %.2f |\n", other, other/r.Machine.WallSeconds)
		}
		return b.String()
	}
	w("| process | CPU s |\n|---|---|\n")
	for _, n := range names {
		w("| %s | %.2f |\n", n, r.Components[n])
	}
	if other := otherCPU(r); other > 0 {
		w("| other processes on the machine | %.2f |\n", other)
	}
	return b.String()
}

// otherCPU is the machine's busy CPU seconds that none of the run's processes used:
// other work on a shared machine, and the kernel's.
func otherCPU(r *Result) float64 {
	return r.Machine.BusyCPUSeconds - sum(r.Components)
}

// byValue returns m's keys, largest value first (ties by name).
func byValue(m map[string]float64) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	return names
}

// progressReport renders progress mode's sections: the reports as the pods and the
// server saw them, the trainerStatus writes, and the two admission bursts.
func progressReport(w func(string, ...any), r *Result, p *Progress) {
	cl, sv, wr := p.Client, p.Server, p.Writes
	w("\n## Progress reports (%d pods every %g s, %.1f s)\n\n", p.Pods, p.ReportIntervalSeconds, p.WindowSeconds)
	w("- pods: %d reports sent (%.0f/s), **%d accepted (%.0f/s)**, refused: %s, transport errors %d, ticks skipped %d; %d connections dialled (shared keep-alive transport)\n",
		cl.Sent, cl.SentPerSecond, cl.Accepted, cl.AcceptedPerSecond, counts(cl.Refused), cl.TransportErrors, cl.Skipped, cl.Connections)
	w("- latency (sent → response read): p50 %s, **p99 %s**, max %s; each pod's first report (TokenReview) p99 %s, later reports (cached) p99 %s\n",
		ms(cl.LatencyP50), ms(cl.LatencyP99), ms(cl.LatencyMax), ms(cl.FirstLatencyP99), ms(cl.LaterLatencyP99))
	w("- server: %.0f reports, %.0f accepted, rejected: %s; in the handler p50 %s, p99 %s\n",
		sv.Reports, sv.Accepted, methods(sv.Rejected, false), ms(sv.DurationP50), ms(sv.DurationP99))
	w("- tokens: %.0f TokenReviews (%s), %.0f decisions from the cache: hit ratio %.2f%%; %d tokens minted in %.1f s beforehand\n",
		sum(sv.TokenReviews), methods(sv.TokenReviews, false), sv.CachedTokens, sv.CacheHitRatio*100, p.Pods, p.TokenSeconds)
	w("- coalesced %.0f; dropped: %s\n", sv.Coalesced, methods(sv.Dropped, false))
	w("\n## trainerStatus writes (period %.0f s)\n\n", p.WritePeriodSeconds)
	w("- %.0f writes (%.0f failed): **%.1f writes/s**, %.2f per TrainJob per period; beyond each TrainJob's first write %.1f/s, **%.2f per TrainJob per period**\n",
		wr.Succeeded, wr.Failed, wr.PerSecond, wr.PerTrainJobPerPeriod, wr.LaterPerSecond, wr.LaterPerTrainJobPerPeriod)
	w("- write limits: %.0f/s per namespace, %.0f/s per replica: a ceiling of %.1f writes/s for %d TrainJobs in %d namespaces (one per period would be %.1f/s)\n",
		p.WriteLimitsNSQPS, p.WriteLimitsQPS, p.WriteCeiling, wr.TrainJobs, p.Namespaces, float64(wr.TrainJobs)/p.WritePeriodSeconds)
	w("- watched: %d changes; %d of %d TrainJobs written, %d never; shortest gap between two writes of one TrainJob %.1f s, %d under %.1f s "+
		"(the period runs from the start of a write, the watch sees it land: %.1f s allowed for the watch's jitter and the write's round trip, the progress stage's sync p99)\n",
		wr.Observed, wr.Written, wr.TrainJobs, wr.NeverWritten, wr.MinGapSeconds, wr.ShortGaps, p.WritePeriodSeconds-wr.GapToleranceSeconds, wr.GapToleranceSeconds)
	w("- age of trainerStatus.lastUpdatedTime at the window's end: p50 %.1f s, p99 %.1f s, max %.1f s\n", wr.AgeP50, wr.AgeP99, wr.AgeMax)
	if p.WithReports == nil || p.baseline() == nil {
		return
	}
	type column struct {
		title string
		b     *Burst
	}
	cols := []column{{"without reports, before", p.WithoutReports}, {"with reports", p.WithReports}, {"without reports, after", p.WithoutReportsAfter}}
	cols = slices.DeleteFunc(cols, func(c column) bool { return c.b == nil })
	row := func(name string, cell func(b *Burst) string) {
		w("| %s |", name)
		for _, c := range cols {
			w(" %s |", cell(c.b))
		}
		w("\n")
	}
	w("\n## Admission with and without reports (%d suspended TrainJobs each, created → JobSet exists)\n\n|", p.WithReports.Admission.Admitted)
	for _, c := range cols {
		w(" | %s", c.title)
	}
	w(" |\n|---|%s\n", strings.Repeat("---|", len(cols)))
	row("namespace", func(b *Burst) string {
		if b == p.WithReports {
			return fmt.Sprintf("%s (from %.1f s into the window)", b.Namespace, b.StartSeconds)
		}
		return b.Namespace
	})
	row("created in", func(b *Burst) string {
		return fmt.Sprintf("%.2f s (%d errors)", b.Admission.CreateSeconds, b.Admission.CreateErrors)
	})
	row("admitted", func(b *Burst) string { return fmt.Sprintf("%d in %.2f s", b.Admission.Admitted, b.Admission.Seconds) })
	row("**throughput**", func(b *Burst) string {
		if b == p.WithReports {
			return fmt.Sprintf("**%.0f TrainJobs/s** (%s)", b.Admission.TrainJobsPerSecond, change(p.AdmissionRatio))
		}
		return fmt.Sprintf("**%.0f TrainJobs/s**", b.Admission.TrainJobsPerSecond)
	})
	row("latency p50 / p99", func(b *Burst) string {
		return fmt.Sprintf("%.3f / %.3f s", b.Admission.LatencyP50, b.Admission.LatencyP99)
	})
	for _, n := range byValue(p.WithReports.Components) {
		if slices.IndexFunc(cols, func(c column) bool { return c.b.Components[n] >= 0.01 }) < 0 {
			continue
		}
		row(n+" CPU", func(b *Burst) string { return fmt.Sprintf("%.2f s", b.Components[n]) })
	}
	row("machine busy", func(b *Burst) string {
		return fmt.Sprintf("%.0f%% of %d cores over %.1f s", b.Machine.Utilisation*100, r.CPUs, b.Machine.WallSeconds)
	})
	row("other processes' CPU", func(b *Burst) string {
		return fmt.Sprintf("%.2f s", b.Machine.BusyCPUSeconds-sum(b.Components))
	})
}

// counts formats integer counts by key, sorted by key; "none" when empty.
func counts(m map[string]int) string {
	f := make(map[string]float64, len(m))
	for k, v := range m {
		f[k] = float64(v)
	}
	return methods(f, false)
}

func ms(seconds float64) string { return fmt.Sprintf("%.1f ms", seconds*1000) }
