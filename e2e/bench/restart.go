package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/trainyard/trainyard/pkg/metrics"
)

// restartIdleLimit bounds the wait for a restarted controller to go idle.
const restartIdleLimit = 10 * time.Minute

// Issue 17's restart target: with targetRestartAtN TrainJobs present, ready within
// targetRestartSeconds.
const (
	targetRestartSeconds = 60.0
	targetRestartAtN     = 50000
)

// Restart is a controller restart with every TrainJob of the burst and its JobSet
// present (issue 17, item 2; admission mode with Config.Restart): the controller that
// admitted them is stopped and a fresh process started against the same objects.
// Times are seconds from the new process's start, sizes bytes.
type Restart struct {
	// TrainJobs is how many TrainJobs (each with its JobSet) were present.
	TrainJobs int `json:"trainJobs"`
	// ReadySeconds runs until /readyz answered 200: every informer's cache synced.
	ReadySeconds float64 `json:"readySeconds"`
	// IdleSeconds runs until the pipeline was seen idle: no key queued, no worker busy
	// and no API request since the previous sample, 1 s before (so it went idle at most
	// 1 s earlier); Idle is false when that did not happen within restartIdleLimit, and
	// IdleSeconds is then the time waited.
	IdleSeconds float64 `json:"idleSeconds"`
	Idle        bool    `json:"idle"`
	// Requests are the new process's API requests by method until idle; Writes the
	// POST, PUT, PATCH and DELETE among them (the target is 0: every JobSet and status
	// is already what the controller wants).
	Requests map[string]float64 `json:"requests"`
	Writes   float64            `json:"writes"`
	// Syncs are the syncs each stage ran until idle: every TrainJob is synced once
	// per stage as its informer lists it.
	Syncs map[string]float64 `json:"syncs"`
	// Errors are failed syncs by stage/reason.
	Errors map[string]float64 `json:"errors"`
	// PeakRSSBytes is the new process's VmHWM when idle: the relist's peak.
	// PeakHeapBytes is the highest Go heap in use scraped every second.
	PeakRSSBytes  int64 `json:"peakRSSBytes"`
	PeakHeapBytes int64 `json:"peakHeapBytes"`
	// CPUSeconds is the new process's CPU until idle.
	CPUSeconds float64 `json:"cpuSeconds"`
}

// measureRestart starts the controller binary again with args (the stopped one's
// extra flags) while the n TrainJobs it admitted and their JobSets are present, waits
// until it is ready and idle, and measures it (Restart); it stops the process before
// returning. Errors: it did not start or become ready, or a scrape failed.
func (r *runner) measureRestart(ctx context.Context, n int, args []string) (*Restart, error) {
	r.say("restart: starting the controller again with %d TrainJobs and their JobSets present", n)
	start := time.Now()
	ctrl, err := startControllerProcess(ctx, r.binary, r.cluster.Kubeconfig(), filepath.Join(r.cfg.OutDir, "logs", "trainyard-restart.log"),
		r.cfg.QPS, r.cfg.Burst, false, r.cfg.ControllerEnv, args...)
	if err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	defer ctrl.Stop()
	ready := time.Since(start)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	s := newSampler(ctrl, nil)
	peakHeap := s.watchHeap(watchCtx)
	last, idle, err := s.untilIdle(ctx, restartIdleLimit)
	if err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	res := &Restart{
		TrainJobs: n, ReadySeconds: round3(ready.Seconds()), Idle: idle,
		IdleSeconds:  round3(last.metrics.At.Sub(start).Seconds()),
		Requests:     last.metrics.ByLabel(metrics.RESTClientRequestsTotal, "method", nil),
		Errors:       map[string]float64{},
		Syncs:        map[string]float64{},
		PeakRSSBytes: last.peakRSS, CPUSeconds: round3(last.procCPU[ctrl.Name]),
	}
	if idle {
		res.IdleSeconds = round3(last.quietSince.Sub(start).Seconds())
	}
	res.PeakHeapBytes = max(peakHeap(), int64(last.metrics.Value("go_memstats_heap_inuse_bytes", nil)))
	for method, v := range res.Requests {
		if isWrite(method) {
			res.Writes += v
		}
	}
	for _, stage := range last.metrics.LabelValues(metrics.StageDurationSeconds, metrics.LabelStage) {
		if h := last.metrics.Histogram(metrics.StageDurationSeconds, Labels{metrics.LabelStage: stage}); h.Count > 0 {
			res.Syncs[stage] = h.Count
		}
	}
	for _, stage := range last.metrics.LabelValues(metrics.StageErrorsTotal, metrics.LabelStage) {
		for _, reason := range last.metrics.LabelValues(metrics.StageErrorsTotal, metrics.LabelReason) {
			if v := last.metrics.Value(metrics.StageErrorsTotal, Labels{metrics.LabelStage: stage, metrics.LabelReason: reason}); v > 0 {
				res.Errors[stage+"/"+reason] = v
			}
		}
	}
	r.say("restart: ready in %.1fs, idle in %.1fs; %.0f writes; peak RSS %.1f MiB", res.ReadySeconds, res.IdleSeconds, res.Writes, float64(res.PeakRSSBytes)/(1<<20))
	return res, nil
}

// restartTargets states issue 17's restart targets: no writes, and ready (caches
// synced, pipeline idle) within targetRestartSeconds.
func restartTargets(ts *targetList, r *Result, rs *Restart) {
	ts.add("writes during a restart", "0", fmt.Sprintf("%.0f (%s)", rs.Writes, methods(rs.Requests, true)), rs.Writes == 0,
		fmt.Sprintf("a fresh process with %d TrainJobs and their JobSets present", rs.TrainJobs))
	note := ""
	if r.N < targetRestartAtN {
		note = fmt.Sprintf("the target is for N = %d; this run has N = %d", targetRestartAtN, r.N)
	}
	if !rs.Idle {
		note = joinNotes(note, fmt.Sprintf("not idle within %s", restartIdleLimit))
	}
	ts.add("restart ready (caches synced, pipeline idle)", fmt.Sprintf("≤ %.0f s at N = %d", targetRestartSeconds, targetRestartAtN),
		fmt.Sprintf("%.1f s (caches synced at %.1f s)", rs.IdleSeconds, rs.ReadySeconds), rs.Idle && rs.IdleSeconds <= targetRestartSeconds, note)
}

// restartReport renders the restart's section.
func restartReport(w func(string, ...any), rs *Restart) {
	w("\n## Restart (a fresh controller process, %d TrainJobs and their JobSets present)\n\n", rs.TrainJobs)
	w("- caches synced (/readyz) in %.2f s; pipeline idle in %.2f s", rs.ReadySeconds, rs.IdleSeconds)
	if !rs.Idle {
		w(" (**not idle** within %s)", restartIdleLimit)
	}
	w("\n- API requests: %s; **writes %.0f**; syncs: %s; failed syncs: %s\n", methods(rs.Requests, false), rs.Writes, methods(rs.Syncs, false), methods(rs.Errors, false))
	w("- peak RSS during the relist %.1f MiB; Go heap in use: peak %.1f MiB; CPU %.2f s\n",
		float64(rs.PeakRSSBytes)/(1<<20), float64(rs.PeakHeapBytes)/(1<<20), rs.CPUSeconds)
}
