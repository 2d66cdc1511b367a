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

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// writePeerOutputs writes result.json, report.md and plot.svg (and .png) of a
// peer run into dir.
func writePeerOutputs(dir string, r *PeerResult, timelines map[string]*timeline) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(PeerReport(r)), 0o644); err != nil {
		return err
	}
	return writePeerPlot(filepath.Join(dir, "plot.svg"), r, timelines)
}

// ratio formats Trainyard ÷ upstream from r.Ratios; "–" when there is none.
func ratio(r *PeerResult, key string) string {
	v, ok := r.Ratios[key]
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

// PeerReport renders a peer run as markdown: the targets, then per load every
// figure side by side with the ratio, then every run in the order run.
func PeerReport(r *PeerResult) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Trainyard vs upstream Kubeflow Trainer, side by side (issue 17)\n\n")
	if r.Note != "" {
		w("> **%s**\n\n", r.Note)
	}
	w("%s · %d CPUs · %s · upstream: %s · %d rounds, alternating (Trainyard, upstream, …) · %d creates in flight · both controllers' client QPS %g / burst %d · numNodes %d\n\n",
		r.StartedAt.Format(time.RFC3339), r.CPUs, r.GoVersion, r.Upstream, r.Rounds, r.Parallelism, r.ControllerQPS, r.ControllerBurst, r.NumNodes)
	w("One local control plane; each run starts a fresh controller process and creates its TrainJobs in a namespace of its own, " +
		"deleted (and gone) before the next run. Admission: TrainJob created → JobSet exists, the JobSet controller off; " +
		"lifecycle: TrainJob created → Complete, everything on; through Kueue: the same to Complete, every TrainJob submitted to a LocalQueue of real Kueue " +
		"whose ClusterQueue (one per run) admits a quota of them at a time. Neither controller's webhooks are registered (Kueue's are). Ratios are Trainyard ÷ upstream; " +
		"figures are means over the rounds, peaks the highest.\n\n")
	w("![admission throughput by run, and latency](plot.svg)\n\n")
	targetsTable(w, r.Targets)
	w("\n## Ratios (Trainyard ÷ upstream)\n\n| ratio | value |\n|---|---|\n")
	keys := make([]string, 0, len(r.Ratios))
	for k := range r.Ratios {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w("| `%s` | %.3f |\n", k, r.Ratios[k])
	}
	if len(r.RSSSlopes) > 0 {
		w("\n## Peak RSS growth per 1,000 TrainJobs (with their JobSets)\n\n| sizes | Trainyard | upstream |\n|---|---|---|\n")
		for _, sl := range r.RSSSlopes {
			w("| %d → %d | %.1f MiB | %.1f MiB |\n", sl.From, sl.To, sl.Trainyard/(1<<20), sl.Upstream/(1<<20))
		}
	}
	for _, l := range r.Loads {
		peerLoadReport(w, r, l)
	}
	return b.String()
}

func peerLoadReport(w func(string, ...any), r *PeerResult, l PeerLoad) {
	ty, up := l.Trainyard, l.Upstream
	suffix, rate, lat := "_"+fmt.Sprint(l.N), "admission_throughput", "admission"
	title := fmt.Sprintf("Admission, N = %d (TrainJob created → JobSet exists)", l.N)
	switch l.Mode {
	case ModeLifecycle:
		suffix, rate, lat = "", "lifecycle_throughput", "lifecycle"
		title = fmt.Sprintf("Lifecycle, N = %d (TrainJob created → Complete)", l.N)
	case ModeKueue:
		suffix, rate, lat = "", "kueue_throughput", "kueue"
		title = fmt.Sprintf("Through Kueue %s, N = %d (TrainJob created → Complete, quota %d TrainJobs)", cluster.KueueSource.Version, l.N, kueueQuota(l))
	}
	key := func(figure string) string {
		switch l.Mode {
		case ModeLifecycle:
			return "lifecycle_" + figure
		case ModeKueue:
			return "kueue_" + figure
		}
		return figure + suffix
	}
	w("\n## %s\n\n| figure | Trainyard | upstream | Trainyard ÷ upstream |\n|---|---|---|---|\n", title)
	row := func(name, a, b, ratio string) { w("| %s | %s | %s | %s |\n", name, a, b, ratio) }
	unit := "admitted"
	if l.Mode != ModeAdmission {
		unit = "finished"
	}
	row("**throughput** (TrainJobs "+unit+"/s)", fmt.Sprintf("%.1f", ty.Throughput), fmt.Sprintf("%.1f", up.Throughput), ratio(r, rate+suffix))
	row("latency p50", fmt.Sprintf("%.3f s", ty.LatencyP50), fmt.Sprintf("%.3f s", up.LatencyP50), ratio(r, lat+"_p50"+suffix))
	row("latency p99", fmt.Sprintf("%.3f s", ty.LatencyP99), fmt.Sprintf("%.3f s", up.LatencyP99), ratio(r, lat+"_p99"+suffix))
	row("writes per TrainJob", fmt.Sprintf("%.3f", ty.WritesPerTrainJob), fmt.Sprintf("%.3f", up.WritesPerTrainJob), ratio(r, key("writes_per_trainjob")))
	var verbs []string
	for _, m := range []map[string]float64{ty.RequestsPerTrainJob, up.RequestsPerTrainJob} {
		for v := range m {
			if !slices.Contains(verbs, v) {
				verbs = append(verbs, v)
			}
		}
	}
	sort.Strings(verbs)
	for _, v := range verbs {
		a, b := ty.RequestsPerTrainJob[v], up.RequestsPerTrainJob[v]
		rr := "–"
		if b != 0 {
			rr = fmt.Sprintf("%.2f×", a/b)
		}
		row("&nbsp;&nbsp;"+v+" requests per TrainJob", fmt.Sprintf("%.3f", a), fmt.Sprintf("%.3f", b), rr)
	}
	row("failed syncs (per run)", fmt.Sprintf("%.1f", ty.FailedSyncs), fmt.Sprintf("%.1f", up.FailedSyncs), "–")
	row("errors (failed creates, Failed TrainJobs; per run)", fmt.Sprintf("%.1f", ty.Errors), fmt.Sprintf("%.1f", up.Errors), "–")
	row("**controller CPU per 1,000**", fmt.Sprintf("%.2f s", ty.ControllerCPU), fmt.Sprintf("%.2f s", up.ControllerCPU), ratio(r, key("controller_cpu_per_1000")))
	row("kube-apiserver CPU per 1,000", fmt.Sprintf("%.2f s", ty.APIServerCPU), fmt.Sprintf("%.2f s", up.APIServerCPU), ratio(r, key("apiserver_cpu_per_1000")))
	row("etcd CPU per 1,000", fmt.Sprintf("%.2f s", ty.EtcdCPU), fmt.Sprintf("%.2f s", up.EtcdCPU), ratio(r, key("etcd_cpu_per_1000")))
	row("**control plane (apiserver + etcd) CPU per 1,000**", fmt.Sprintf("%.2f s", ty.ControlPlaneCPU), fmt.Sprintf("%.2f s", up.ControlPlaneCPU), ratio(r, key("control_plane_cpu_per_1000")))
	row("**peak RSS**", mib(ty.PeakRSSBytes), mib(up.PeakRSSBytes), ratio(r, key("peak_rss")))
	row("peak Go heap in use", mib(ty.PeakHeapBytes), mib(up.PeakHeapBytes), ratio(r, key("peak_heap")))
	row("machine busy CPU per 1,000 (every process)", fmt.Sprintf("%.2f s", ty.MachineBusyCPU), fmt.Sprintf("%.2f s", up.MachineBusyCPU), "–")
	if l.Mode == ModeKueue {
		row("**Kueue's unsuspend → JobSet unsuspended p50**", fmt.Sprintf("%.3f s", ty.UnsuspendToJobSetUnsuspendedP50), fmt.Sprintf("%.3f s", up.UnsuspendToJobSetUnsuspendedP50), ratio(r, "kueue_unsuspend_to_jobset_unsuspended_p50"))
		row("**Kueue's unsuspend → JobSet unsuspended p99**", fmt.Sprintf("%.3f s", ty.UnsuspendToJobSetUnsuspendedP99), fmt.Sprintf("%.3f s", up.UnsuspendToJobSetUnsuspendedP99), ratio(r, "kueue_unsuspend_to_jobset_unsuspended_p99"))
		row("end to end (first create → last Complete)", fmt.Sprintf("%.1f s", ty.EndToEndSeconds), fmt.Sprintf("%.1f s", up.EndToEndSeconds), ratio(r, "kueue_end_to_end_seconds"))
		row("Kueue's CPU per 1,000", fmt.Sprintf("%.2f s", ty.KueueCPU), fmt.Sprintf("%.2f s", up.KueueCPU), ratio(r, "kueue_kueue_cpu_per_1000"))
		writesByClientTable(w, ty.WritesByClient, up.WritesByClient)
	}
	if lim := l.Limit; lim != nil {
		w("\nAPI server alone (no controller, after Trainyard's last run): %d TrainJob creates %.0f/s, the JobSets created %.0f/s, server-side applied %.0f/s; "+
			"**limit %.0f TrainJobs/s** with the applies (%.0f/s with creates).\n",
			l.N, lim.TrainJobCreatesPerSecond, lim.JobSetCreatesPerSecond, lim.JobSetAppliesPerSecond, lim.TrainJobsPerSecondWithApply, lim.TrainJobsPerSecond)
	}
	peerRunsTable(w, l)
}

// kueueQuota is the quota of the Kueue load l's runs, in TrainJobs (0 before any run).
func kueueQuota(l PeerLoad) int {
	for _, run := range l.Runs {
		if run.Result != nil && run.Result.Kueue != nil {
			return run.Result.Kueue.Quota
		}
	}
	return 0
}

// writesByClientTable renders who wrote the TrainJobs and JobSets of the Kueue load,
// per TrainJob, by client and by verb and resource, under each controller (the audit
// log; each controller's client appears under its own name).
func writesByClientTable(w func(string, ...any), ty, up map[string]map[string]float64) {
	w("\nWho writes a TrainJob and its JobSet through Kueue, per TrainJob (the API server's audit log; events and other kinds are not in it):\n\n")
	w("| client | with Trainyard | with upstream |\n|---|---|---|\n")
	var clients []string
	for _, m := range []map[string]map[string]float64{ty, up} {
		for c := range m {
			if !slices.Contains(clients, c) {
				clients = append(clients, c)
			}
		}
	}
	sort.Strings(clients)
	cell := func(byWhat map[string]float64) string {
		if len(byWhat) == 0 {
			return "–"
		}
		total := 0.0
		whats := make([]string, 0, len(byWhat))
		for what, v := range byWhat {
			total += v
			whats = append(whats, what)
		}
		sort.Strings(whats)
		parts := make([]string, len(whats))
		for i, what := range whats {
			parts[i] = fmt.Sprintf("%s %.3f", what, byWhat[what])
		}
		return fmt.Sprintf("**%.3f**: %s", total, strings.Join(parts, ", "))
	}
	for _, c := range clients {
		w("| %s | %s | %s |\n", c, cell(ty[c]), cell(up[c]))
	}
}

// peerRunsTable renders every run of load l in the order run, one row each.
func peerRunsTable(w func(string, ...any), l PeerLoad) {
	w("\nEach run, in the order run (drift shows as a trend down a controller's rows):\n\n")
	w("| # | controller | throughput | p50 | p99 | writes/TrainJob | failed syncs | controller CPU s | apiserver CPU s | etcd CPU s | peak RSS | machine busy | idle |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, run := range l.Runs {
		res := run.Result
		tput, p50, p99 := 0.0, 0.0, 0.0
		if lc := res.Lifecycle; lc != nil {
			if lc.Seconds > 0 {
				tput = float64(lc.Finished) / lc.Seconds
			}
			p50, p99 = lc.LatencyP50, lc.LatencyP99
		} else if a := res.Admission; a != nil {
			tput, p50, p99 = a.TrainJobsPerSecond, a.LatencyP50, a.LatencyP99
		}
		idle := "yes"
		if !run.Idle {
			idle = "**no**"
		}
		w("| %d | %s | %.1f/s | %.3f s | %.3f s | %.3f | %.0f | %.2f | %.2f | %.2f | %s | %.0f%% | %s |\n",
			i+1, run.Controller, tput, p50, p99, res.Controller.WritesPerTrainJob, sum(res.Controller.Errors), res.Controller.CPUSeconds,
			res.Components["kube-apiserver"], res.Components["etcd"], mib(res.Controller.PeakRSSBytes), res.Machine.Utilisation*100, idle)
	}
}

// writePeerPlot draws two panels: admission (or lifecycle) throughput of every
// run in the order run, one line per controller and load, so drift and the
// gap show; and the latency CDFs of each controller's first run of the
// largest admission load.
func writePeerPlot(path string, r *PeerResult, timelines map[string]*timeline) error {
	runs, err := peerRunsPanel(r)
	if err != nil {
		return err
	}
	lat, err := peerLatencyPanel(r, timelines)
	if err != nil {
		return err
	}
	return drawTiles(path, 30*vg.Centimeter, 11*vg.Centimeter, runs, lat)
}

// peerRunsPanel is the panel of every run's throughput (TrainJobs/s) by round, one
// line per load and controller, upstream's dashed. Errors: a point is NaN or infinite.
func peerRunsPanel(r *PeerResult) (*plot.Plot, error) {
	runs := plot.New()
	runs.Title.Text = "throughput of each run, in the order run"
	runs.X.Label.Text = "round"
	runs.Y.Label.Text = "TrainJobs/s"
	runs.Legend.Top = true
	color := 0
	for _, l := range r.Loads {
		for _, name := range []string{controllerTrainyard, controllerUpstream} {
			var xys plotter.XYs
			for _, run := range l.Runs {
				if run.Controller != name {
					continue
				}
				tput := 0.0
				if lc := run.Result.Lifecycle; lc != nil && lc.Seconds > 0 {
					tput = float64(lc.Finished) / lc.Seconds
				} else if a := run.Result.Admission; a != nil && lc == nil {
					tput = a.TrainJobsPerSecond
				}
				xys = append(xys, plotter.XY{X: float64(run.Round), Y: tput})
			}
			if len(xys) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, err
			}
			line.Color, points.Color = plotutil.Color(color), plotutil.Color(color)
			if name == controllerUpstream {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			color++
			runs.Add(line, points)
			runs.Legend.Add(l.Name+" "+name, line, points)
		}
	}
	// Whole rounds on the x axis, and room above the lines for the legend.
	var ticks []plot.Tick
	for round := 1; round <= r.Rounds; round++ {
		ticks = append(ticks, plot.Tick{Value: float64(round), Label: fmt.Sprint(round)})
	}
	runs.X.Tick.Marker = plot.ConstantTicks(ticks)
	runs.X.Min, runs.X.Max = 0.8, float64(r.Rounds)+0.2
	runs.Y.Min = 0
	runs.Y.Max *= 1.6
	runs.Add(plotter.NewGrid())
	return runs, nil
}

// peerLatencyPanel is the panel of the admission latency CDFs (log scale) of each
// controller's first run of the largest admission load. Errors: a point is NaN or
// infinite.
func peerLatencyPanel(r *PeerResult, timelines map[string]*timeline) (*plot.Plot, error) {
	lat := plot.New()
	lat.Title.Text = "admission latency (first round)"
	lat.X.Label.Text = "seconds (log scale)"
	lat.Y.Label.Text = "% of TrainJobs at or below"
	lat.X.Scale = plot.LogScale{}
	lat.X.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.Legend.Top, lat.Legend.Left = true, true // the curves reach 100% right of it
	largest := ""
	for _, l := range r.Loads {
		if l.Mode == ModeAdmission {
			largest = l.Name
		}
	}
	if largest == "" && len(r.Loads) > 0 { // a run of the Kueue load alone: its latency to Complete
		largest = r.Loads[len(r.Loads)-1].Name
		lat.Title.Text = largest + " latency to Complete (first round)"
	}
	for i, name := range []string{controllerTrainyard, controllerUpstream} {
		tl := timelines[largest+"/"+name]
		if tl == nil {
			continue
		}
		xs := positive(tl.latencies)
		if len(xs) == 0 {
			continue
		}
		line, err := plotter.NewLine(cdf(xs))
		if err != nil {
			return nil, err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		lat.Add(line)
		lat.Legend.Add(fmt.Sprintf("%s %s (p50 %.2fs, p99 %.2fs)", largest, name, percentile(xs, 50), percentile(xs, 99)), line)
	}
	lat.Y.Min, lat.Y.Max = 0, 100
	lat.Add(plotter.NewGrid())
	return lat, nil
}
