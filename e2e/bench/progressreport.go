package bench

// Progress mode's targets, report sections and plot (issue 14).

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

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
	burstsTable(w, r, p)
}

// burstsTable renders the admission bursts without and with reports side by side:
// throughput, latency, each process's CPU and how busy the machine was.
func burstsTable(w func(string, ...any), r *Result, p *Progress) {
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

// progressTimeline is what progress mode plots: rates over the reporting window
// (offsets in seconds from its start) and the latency distributions.
type progressTimeline struct {
	// accepted is reports answered 200 per second of the window, by the second sent.
	accepted plotter.XYs
	// received and writes are the server's reports and trainerStatus writes per
	// second, between consecutive scrapes.
	received, writes plotter.XYs
	// burstStart and burstEnd bound the admission burst during the window.
	burstStart, burstEnd float64
	// wantWrites is one write per TrainJob per period; ceiling what the write limits allow.
	wantWrites, ceiling float64
	// Latencies, sorted, in seconds.
	reports, before, with, after []float64
}

func newProgressTimeline(start time.Time, logs [][]reportLog, points []seriesPoint, p *Progress) *progressTimeline {
	tl := &progressTimeline{wantWrites: float64(p.Writes.TrainJobs) / p.WritePeriodSeconds, ceiling: p.WriteCeiling}
	perSecond := map[int]float64{}
	last := 0
	for _, pod := range logs {
		for _, l := range pod {
			if l.Code != 0 {
				tl.reports = append(tl.reports, l.Latency)
			}
			if l.Code == 200 {
				s := int(l.At)
				perSecond[s]++
				last = max(last, s)
			}
		}
	}
	// The last second is cut short by the window's end: left out.
	for s := 0; s < last; s++ {
		tl.accepted = append(tl.accepted, plotter.XY{X: float64(s) + 0.5, Y: perSecond[s]})
	}
	tl.received, tl.writes = seriesRates(start, points)
	if b := p.WithReports; b != nil {
		tl.burstStart = b.start.Sub(start).Seconds()
		tl.burstEnd = tl.burstStart + b.Admission.Seconds
		tl.with = b.latencies
	}
	if b := p.WithoutReports; b != nil {
		tl.before = b.latencies
	}
	if b := p.WithoutReportsAfter; b != nil {
		tl.after = b.latencies
	}
	sort.Float64s(tl.reports)
	return tl
}

// seriesRates turns cumulative counter scrapes into per-second rates of reports and
// writes between consecutive scrapes, placed at the midpoint, in seconds from start.
func seriesRates(start time.Time, points []seriesPoint) (reports, writes plotter.XYs) {
	for i := 1; i < len(points); i++ {
		a, b := points[i-1], points[i]
		dt := b.At.Sub(a.At).Seconds()
		if dt <= 0 {
			continue
		}
		x := a.At.Sub(start).Seconds() + dt/2
		reports = append(reports, plotter.XY{X: x, Y: (b.Reports - a.Reports) / dt})
		writes = append(writes, plotter.XY{X: x, Y: (b.Writes - a.Writes) / dt})
	}
	return reports, writes
}

// writeProgressPlot draws three panels: reports per second over the window (as the
// pods saw them accepted and as the server received them), trainerStatus writes per
// second with one per TrainJob per period and the write limits' ceiling, and the
// latency distributions (log scale) of the reports and of the two admission bursts.
func writeProgressPlot(path string, r *Result, tl *progressTimeline) error {
	span := func(xys plotter.XYs) (lo, hi float64) {
		if len(xys) == 0 {
			return 0, 1
		}
		return xys[0].X, xys[len(xys)-1].X
	}
	flat := func(y float64, xys plotter.XYs) plotter.XYs {
		lo, hi := span(xys)
		return plotter.XYs{{X: lo, Y: y}, {X: hi, Y: y}}
	}

	reports := plot.New()
	reports.Title.Text = fmt.Sprintf("progress reports of %d pods", r.Progress.Pods)
	reports.X.Label.Text = "seconds since the first report"
	reports.Y.Label.Text = "reports/s"
	reports.Legend.Top = false
	if err := addLine(reports, "accepted (pods)", tl.accepted, 0, false); err != nil {
		return err
	}
	if err := addLine(reports, "received (server)", tl.received, 1, true); err != nil {
		return err
	}
	reports.Y.Min = 0
	reports.Add(plotter.NewGrid())

	writes := plot.New()
	writes.Title.Text = "trainerStatus writes"
	writes.X.Label.Text = "seconds since the first report"
	writes.Y.Label.Text = "writes/s"
	writes.Legend.Top = true
	if err := addLine(writes, "writes", tl.writes, 2, false); err != nil {
		return err
	}
	if err := addLine(writes, fmt.Sprintf("1 per TrainJob per %.0f s", r.Progress.WritePeriodSeconds), flat(tl.wantWrites, tl.writes), 3, true); err != nil {
		return err
	}
	if tl.ceiling < tl.wantWrites {
		if err := addLine(writes, "write limits' ceiling", flat(tl.ceiling, tl.writes), 4, true); err != nil {
			return err
		}
	}
	top := max(tl.wantWrites, maxY(tl.writes)) * 1.1
	if tl.burstEnd > tl.burstStart {
		if err := addLine(writes, "admission burst", plotter.XYs{{X: tl.burstStart, Y: top}, {X: tl.burstEnd, Y: top}}, 5, false); err != nil {
			return err
		}
	}
	writes.Y.Min, writes.Y.Max = 0, top*1.5 // room for the legend above the curves
	writes.Add(plotter.NewGrid())

	lat, err := latencyPanel("% at or below", 300, 0, []namedSeries{
		{"reports", tl.reports}, {"admission, before", tl.before}, {"admission, with reports", tl.with}, {"admission, after", tl.after}})
	if err != nil {
		return err
	}
	return drawTiles(path, 36*vg.Centimeter, 10*vg.Centimeter, reports, writes, lat)
}

func maxY(xys plotter.XYs) float64 {
	m := 0.0
	for _, p := range xys {
		m = max(m, p.Y)
	}
	return m
}

// Issue 14's target: admission throughput drops by less than this while pods report.
const targetProgressAdmissionDrop = 0.1

// progressTargets states issue 14's targets: at most one trainerStatus write per
// TrainJob per period, and admission throughput with reports within
// targetProgressAdmissionDrop of the bursts without.
func progressTargets(ts *targetList, r *Result, p *Progress) {
	w := p.Writes
	ts.add("trainerStatus writes per TrainJob per period", fmt.Sprintf("≤ 1 per %.0f s (≤ %.1f writes/s)", p.WritePeriodSeconds, float64(w.TrainJobs)/p.WritePeriodSeconds),
		fmt.Sprintf("%.2f beyond each TrainJob's first write (%.1f writes/s); %.2f with it (%.1f/s); shortest gap between two writes of one TrainJob %.1f s",
			w.LaterPerTrainJobPerPeriod, w.LaterPerSecond, w.PerTrainJobPerPeriod, w.PerSecond, w.MinGapSeconds),
		w.LaterPerTrainJobPerPeriod <= 1 && w.ShortGaps == 0, writeBound(r))
	if base := p.baseline(); base != nil && p.WithReports != nil {
		measured := fmt.Sprintf("%.0f/s vs %.0f/s (%s)", p.WithReports.Admission.TrainJobsPerSecond, base.Admission.TrainJobsPerSecond, change(p.AdmissionRatio))
		if p.WithoutReportsAfter != nil {
			measured = fmt.Sprintf("%.0f/s vs %.0f/s without: %.0f/s before, %.0f/s after (%s)", p.WithReports.Admission.TrainJobsPerSecond,
				base.Admission.TrainJobsPerSecond, p.WithoutReports.Admission.TrainJobsPerSecond, p.WithoutReportsAfter.Admission.TrainJobsPerSecond, change(p.AdmissionRatio))
		}
		ts.add("admission throughput with reports vs without", fmt.Sprintf("drop < %.0f%%", targetProgressAdmissionDrop*100), measured,
			p.AdmissionRatio > 1-targetProgressAdmissionDrop,
			joinNotes(fmt.Sprintf("%d suspended TrainJobs each; %.0f reports/s accepted during the window", r.Progress.WithReports.Admission.Admitted, p.Client.AcceptedPerSecond),
				machineBound(p)))
	}
}

// progressErrorsTarget states progress mode's errors target: errs failed creates of
// the run's burst, those of the reporting TrainJobs and of the admission bursts, failed
// syncs, reports not accepted and failed trainerStatus writes.
func progressErrorsTarget(ts *targetList, r *Result, p *Progress, errs int) {
	c := r.Controller
	errs += p.CreateErrors
	for _, b := range []*Burst{p.WithoutReports, p.WithReports, p.WithoutReportsAfter} {
		if b != nil {
			errs += b.Admission.CreateErrors
		}
	}
	failed := p.Client.Sent - p.Client.Accepted
	ts.add("errors", "0", fmt.Sprintf("%d create errors, %.0f failed syncs, %d reports not accepted, %.0f failed trainerStatus writes", errs, sum(c.Errors), failed, p.Writes.Failed),
		errs == 0 && sum(c.Errors) == 0 && failed == 0 && p.Writes.Failed == 0, p.Client.FirstError)
}

// progressHeader renders what progress mode set up (pods, reports, namespaces) and
// its plot.
func progressHeader(w func(string, ...any), r *Result, p *Progress) {
	w("%d pods (%d TrainJobs × numNodes %d, in %d namespaces, kept Running) report every %g s for %.1f s; the controller's progress server on 127.0.0.1 with its default write limits\n\n",
		p.Pods, p.Writes.TrainJobs, r.NumNodes, p.Namespaces, p.ReportIntervalSeconds, p.WindowSeconds)
	w("![reports and writes over time, latency](plot.svg)\n\n")
}

// progressControllerReport renders the controller's figures during the reporting
// window: CPU as cores, memory, and its requests, TokenReviews included.
func progressControllerReport(w func(string, ...any), r *Result, p *Progress) {
	c := r.Controller
	w("\n## Controller (during the reporting window)\n\n")
	w("- CPU %.2f s over %.1f s: **%.2f cores**; peak RSS %.1f MiB (%.1f MiB when the window started); Go heap in use: peak %.1f MiB (the whole run), at the end %.1f MiB\n",
		c.CPUSeconds, p.WindowSeconds, p.Cores["trainyard"], float64(c.PeakRSSBytes)/(1<<20), float64(p.PeakRSSBeforeBytes)/(1<<20),
		float64(c.PeakHeapBytes)/(1<<20), float64(c.HeapBytes)/(1<<20))
	w("- API requests: %s (TokenReviews are POSTs; the burst's JobSet applies and status patches are in too)\n", methods(c.Requests, false))
}

// progressCPUTable renders each process's CPU during the window, names in order, as
// seconds and cores, and the machine's other processes.
func progressCPUTable(w func(string, ...any), r *Result, p *Progress, names []string) {
	w("| process | CPU s | cores |\n|---|---|---|\n")
	for _, n := range names {
		w("| %s | %.2f | %.2f |\n", n, r.Components[n], p.Cores[n])
	}
	if other := otherCPU(r); other > 0 {
		w("| other processes on the machine | %.2f | %.2f |\n", other, other/r.Machine.WallSeconds)
	}
}
