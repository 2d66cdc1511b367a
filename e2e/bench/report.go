package bench

// report.md of Run's modes: the header, the targets, each mode's sections (beside the
// mode's code), the controller, the stages and where the CPU went; and the formatting
// helpers the reports share.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/trainyard/trainyard/e2e/cluster"
)

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

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
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
