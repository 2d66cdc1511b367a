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
)

// Report renders r as the short markdown report: the header, the targets, the
// sections of the run's mode, the controller, its stages and where the CPU went.
func Report(r *Result) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	reportHeader(w, r)
	targetsTable(w, r.Targets)
	if a := r.Admission; a != nil {
		admissionReport(w, r, a)
	}
	if l := r.Limit; l != nil {
		limitReport(w, r, l)
	}
	if rs := r.Restart; rs != nil {
		restartReport(w, rs)
	}
	if l := r.Lifecycle; l != nil {
		lifecycleReport(w, l)
	}
	if p := r.Progress; p != nil {
		progressReport(w, r, p)
	}
	if k := r.Kueue; k != nil {
		kueueReport(w, r, k)
	}
	if t := r.TTL; t != nil {
		ttlReport(w, r, t)
	}
	controllerReport(w, r)
	cpuReport(w, r)
	return b.String()
}

// reportHeader renders the title, the run's settings and the plot, with what
// progress and Kueue mode set up (progressHeader, kueueHeader).
func reportHeader(w func(string, ...any), r *Result) {
	w("# Trainyard scale benchmark: %s, N = %d\n\n", r.Mode, r.N)
	w("%s · %d CPUs · %s · %d creates in flight · controller client QPS %g / burst %d %s· numNodes %d\n\n",
		r.StartedAt.Format(time.RFC3339), r.CPUs, r.GoVersion, r.Parallelism, r.ControllerQPS, r.ControllerBurst, strings.Join(slices.Concat(r.ControllerEnv, r.ControllerArgs), " ")+" ", r.NumNodes)
	if p := r.Progress; p != nil {
		progressHeader(w, r, p)
	} else if k := r.Kueue; k != nil {
		kueueHeader(w, r, k)
	} else if r.TTL != nil {
		w("![TTL expiries and deletions over time, and the lateness](plot.svg)\n\n")
	} else {
		w("![admissions over time and latency](plot.svg)\n\n")
	}
}

// targetsTable renders the targets as a table, a target missed in bold.
func targetsTable(w func(string, ...any), targets []Target) {
	w("## Targets\n\n| | target | measured | met | note |\n|---|---|---|---|---|\n")
	for _, t := range targets {
		met := "yes"
		if !t.Met {
			met = "**no**"
		}
		w("| %s | %s | %s | %s | %s |\n", t.Name, t.Target, t.Measured, met, t.Note)
	}
}

// controllerReport renders the controller's CPU, memory, requests and failed syncs
// (during progress mode's window: progressControllerReport), then its stages' queue
// and sync times.
func controllerReport(w func(string, ...any), r *Result) {
	c := r.Controller
	if p := r.Progress; p != nil {
		progressControllerReport(w, r, p)
	} else {
		if r.TTL != nil {
			w("\n## Controller during the deletions (just before the first expiry → idle after the last JobSet was deleted)\n\n")
		} else {
			w("\n## Controller\n\n")
		}
		w("- CPU %.2f s (%.2f s per 1,000 TrainJobs); peak RSS %.1f MiB; Go heap in use: peak %.1f MiB, at the end %.1f MiB\n",
			c.CPUSeconds, c.CPUSecondsPer1000, float64(c.PeakRSSBytes)/(1<<20), float64(c.PeakHeapBytes)/(1<<20), float64(c.HeapBytes)/(1<<20))
		w("- API requests: %s; per TrainJob: %s; writes per TrainJob %.3f\n", methods(c.Requests, false), perTrainJob(c.Requests, r.N), c.WritesPerTrainJob)
	}
	w("- failed syncs: %s; retries: %s\n", methods(c.Errors, false), methods(c.Retries, false))
	w("\n| stage | syncs | queue p50 | queue p99 | sync p50 | sync p99 |\n|---|---|---|---|---|---|\n")
	for _, s := range r.Stages {
		w("| %s | %.0f | %s | %s | %s | %s |\n", s.Name, s.Syncs, ms(s.QueueP50), ms(s.QueueP99), ms(s.SyncP50), ms(s.SyncP99))
	}
}

// cpuReport renders where the CPU went: each process's CPU seconds, largest first,
// and the machine's other busy CPU (in progress mode with cores: progressCPUTable).
func cpuReport(w func(string, ...any), r *Result) {
	span := "burst start → controller idle"
	if r.Progress != nil {
		span = "the reporting window, its burst included"
	}
	if r.TTL != nil {
		span = "the deletions: just before the first expiry → controller idle"
	}
	w("\n## Where the CPU went (seconds, %s; machine utilisation %.0f%% of %d cores over %.1f s)\n\n",
		span, r.Machine.Utilisation*100, r.CPUs, r.Machine.WallSeconds)
	names := byValue(r.Components)
	if p := r.Progress; p != nil {
		progressCPUTable(w, r, p, names)
		return
	}
	w("| process | CPU s |\n|---|---|\n")
	for _, n := range names {
		w("| %s | %.2f |\n", n, r.Components[n])
	}
	if other := otherCPU(r); other > 0 {
		w("| other processes on the machine | %.2f |\n", other)
	}
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
