package bench

// The targets of Run's modes (issue 9 and the issues after it): evaluateTargets states
// those of the run's mode, each mode's own beside its code.

import (
	"fmt"
	"strings"
)

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
