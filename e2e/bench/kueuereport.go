package bench

// Kueue mode's figures, targets, report section and plot (issue 16), from what
// kueueRecorder saw and the API server's audit log.

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// Kueue is Kueue mode's figures (Result.Kueue). Times are seconds; each per-TrainJob
// time is between two moments the benchmark's watches saw (so the watches' delivery,
// milliseconds on loopback, is included).
type Kueue struct {
	// Version is the Kueue release the run used.
	Version string `json:"kueueVersion"`
	// Quota is the ClusterQueue's quota in TrainJobs, QuotaPods its nominal quota of
	// pods (Quota × numNodes): Kueue admits a TrainJob while its numNodes pods fit.
	Quota     int `json:"quota"`
	QuotaPods int `json:"quotaPods"`
	// Seconds runs from the first create sent to the last TrainJob seen Complete or
	// Failed; TrainJobsPerSecond is Finished over it.
	Seconds            float64 `json:"seconds"`
	Finished           int     `json:"finished"`
	TrainJobsPerSecond float64 `json:"trainJobsPerSecond"`
	// SuspendedAtCreate counts the TrainJobs first seen suspended (Kueue's webhook
	// suspends a queued TrainJob at creation); NotSuspendedAtCreate the others, which
	// ran without waiting for Kueue.
	SuspendedAtCreate    int `json:"suspendedAtCreate"`
	NotSuspendedAtCreate int `json:"notSuspendedAtCreate"`
	// Unsuspended counts the TrainJobs seen suspended, then unsuspended: admitted by
	// Kueue, which sets spec.suspend=false in an update of its own.
	Unsuspended int `json:"unsuspended"`
	// JobSetsBeforeUnsuspend counts those whose JobSet was seen before Kueue's unsuspend:
	// Trainyard creates a suspended TrainJob's JobSet suspended, as upstream does.
	JobSetsBeforeUnsuspend int `json:"jobSetsBeforeUnsuspend"`
	// QueueWait is TrainJob created (the create returned) → Kueue's unsuspend seen.
	QueueWait Latency `json:"queueWait"`
	// UnsuspendToJobSet is Kueue's unsuspend → the JobSet seen existing, 0 for a JobSet
	// that existed before (JobSetsBeforeUnsuspend).
	UnsuspendToJobSet Latency `json:"unsuspendToJobSet"`
	// UnsuspendToJobSetUnsuspended is Kueue's unsuspend → the JobSet seen with
	// spec.suspend false: Trainyard's resume, what lets the TrainJob's pods be created.
	UnsuspendToJobSetUnsuspended Latency `json:"unsuspendToJobSetUnsuspended"`
	// UnsuspendToFinished is Kueue's unsuspend → Complete or Failed seen (the pods run
	// for cluster.DefaultPodCompleteDelay of it).
	UnsuspendToFinished Latency `json:"unsuspendToFinished"`
	// The most seen at once: TrainJobs unsuspended and not finished, JobSets unsuspended
	// and without a terminal state, pods Running. Each watch delivers its kind's events
	// in the order the API server stored them, so each peak is exact for its kind.
	PeakTrainJobs int `json:"peakTrainJobs"`
	PeakJobSets   int `json:"peakJobSets"`
	PeakPods      int `json:"peakPods"`
	// WritesPerTrainJob are the successful writes to the run's TrainJobs and JobSets
	// (and their subresources) by client ("trainyard", "kueue", "jobset": the user
	// agent's first word) and "verb resource[/subresource]", over N, from the API
	// server's audit log: who writes what. Events and other kinds are not in it.
	WritesPerTrainJob map[string]map[string]float64 `json:"writesPerTrainJobByClient,omitempty"`
}

// Latency is a distribution in seconds: how many samples, p50 and p99 (nearest rank)
// and the highest.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// latencyOf sorts xs and summarises it; the zero Latency for none.
func latencyOf(xs []float64) Latency {
	if len(xs) == 0 {
		return Latency{}
	}
	sort.Float64s(xs)
	return Latency{Count: len(xs), P50: round3(percentile(xs, 50)), P99: round3(percentile(xs, 99)), Max: round3(xs[len(xs)-1])}
}

func (l Latency) String() string {
	return fmt.Sprintf("p50 %.3f s, p99 %.3f s, max %.3f s (%d)", l.P50, l.P99, l.Max, l.Count)
}

// peak is the highest running count that changes reach from 0, applied in order.
func peak(changes []countChange) int {
	cur, top := 0, 0
	for _, c := range changes {
		cur += c.delta
		top = max(top, cur)
	}
	return top
}

// kueueFigures computes Kueue mode's figures from the burst's creates and what the
// watches recorded, for a quota of quota TrainJobs of numNodes pods each.
func kueueFigures(created burstResult, rec kueueRecord, quota int, numNodes int32) *Kueue {
	k := &Kueue{
		Version: cluster.KueueSource.Version, Quota: quota, QuotaPods: quota * int(numNodes),
		PeakTrainJobs: peak(rec.runningTrainJobs), PeakJobSets: peak(rec.activeJobSets), PeakPods: peak(rec.runningPods),
	}
	var queueWait, toJobSet, toResumed, toFinished []float64
	var last time.Time
	for i, done := range created.Done {
		tj, ok := rec.trainJobs[fmt.Sprintf(trainJobNameFmt, i)]
		if done.IsZero() || !ok || !tj.seen {
			continue
		}
		if tj.suspendedAtCreate {
			k.SuspendedAtCreate++
		} else {
			k.NotSuspendedAtCreate++
		}
		if !tj.finished.IsZero() {
			k.Finished++
			if tj.finished.After(last) {
				last = tj.finished
			}
		}
		if tj.unsuspended.IsZero() {
			continue
		}
		k.Unsuspended++
		queueWait = append(queueWait, max(tj.unsuspended.Sub(done).Seconds(), 0))
		if !tj.jobSet.IsZero() {
			if !tj.jobSet.After(tj.unsuspended) {
				k.JobSetsBeforeUnsuspend++
			}
			toJobSet = append(toJobSet, max(tj.jobSet.Sub(tj.unsuspended).Seconds(), 0))
		}
		if !tj.jobSetUnsuspended.IsZero() {
			toResumed = append(toResumed, max(tj.jobSetUnsuspended.Sub(tj.unsuspended).Seconds(), 0))
		}
		if !tj.finished.IsZero() {
			toFinished = append(toFinished, max(tj.finished.Sub(tj.unsuspended).Seconds(), 0))
		}
	}
	k.QueueWait, k.UnsuspendToJobSet = latencyOf(queueWait), latencyOf(toJobSet)
	k.UnsuspendToJobSetUnsuspended, k.UnsuspendToFinished = latencyOf(toResumed), latencyOf(toFinished)
	if k.Finished > 0 {
		k.Seconds = round3(last.Sub(created.Start).Seconds())
		k.TrainJobsPerSecond = round3(float64(k.Finished) / k.Seconds)
	}
	return k
}

// kueueWrites counts the successful writes of audit events in namespace ns by client
// (the user agent up to its first "/") and "verb resource[/subresource]", divided by n.
func kueueWrites(events []cluster.AuditEvent, ns string, n int) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Namespace != ns || !e.Succeeded() {
			continue
		}
		client, _, _ := strings.Cut(e.UserAgent, "/")
		what := e.Verb + " " + e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			what += "/" + e.ObjectRef.Subresource
		}
		if out[client] == nil {
			out[client] = map[string]float64{}
		}
		out[client][what]++
	}
	for _, byWhat := range out {
		for what, v := range byWhat {
			byWhat[what] = round3(v / float64(max(n, 1)))
		}
	}
	return out
}

// kueueTargets states issue 16's targets for Kueue mode against r: no more TrainJobs
// running than the quota, Trainyard's writes per TrainJob against lifecycle mode's
// target, Kueue's unsuspend → JobSet unsuspended p99, and every TrainJob finished.
func kueueTargets(r *Result, k *Kueue) []Target {
	c := r.Controller
	reached := fmt.Sprintf("the quota was reached: %d TrainJobs at once", k.PeakTrainJobs)
	if k.PeakTrainJobs < k.Quota {
		reached = fmt.Sprintf("the quota was never reached (at most %d of %d)", k.PeakTrainJobs, k.Quota)
	}
	failed := 0
	if r.Lifecycle != nil {
		failed = r.Lifecycle.Failed
	}
	return []Target{{
		Name:     "TrainJobs running at once",
		Target:   fmt.Sprintf("≤ the quota: %d TrainJobs (%d pods)", k.Quota, k.QuotaPods),
		Measured: fmt.Sprintf("%d TrainJobs, %d JobSets, %d pods", k.PeakTrainJobs, k.PeakJobSets, k.PeakPods),
		Met:      k.PeakTrainJobs <= k.Quota && k.PeakJobSets <= k.Quota && k.PeakPods <= k.QuotaPods,
		Note:     joinNotes("the most seen at once: TrainJobs unsuspended and not finished, JobSets unsuspended and not finished, pods Running", reached),
	}, {
		Name:     "API writes per TrainJob to Complete",
		Target:   fmt.Sprintf("≤ %.0f (lifecycle mode's target)", targetLifecycleWrites),
		Measured: fmt.Sprintf("%.3f (%s)", c.WritesPerTrainJob, methods(c.Requests, true)),
		Met:      c.WritesPerTrainJob <= targetLifecycleWrites,
		Note: "Trainyard's writes only (Kueue's are its own): a queued TrainJob's JobSet is written twice, created suspended and then resumed, " +
			"and its status follows the JobSet's counts (jobsStatus, which Kueue reads) from suspended to succeeded; who writes what is under \"Through Kueue\"",
	}, {
		Name:     "Kueue's unsuspend → JobSet unsuspended p99",
		Target:   fmt.Sprintf("≤ %.0f s", targetKueueResumeP99Seconds),
		Measured: fmt.Sprintf("%.3f s (p50 %.3f s, max %.3f s)", k.UnsuspendToJobSetUnsuspended.P99, k.UnsuspendToJobSetUnsuspended.P50, k.UnsuspendToJobSetUnsuspended.Max),
		Met:      k.UnsuspendToJobSetUnsuspended.Count == k.Unsuspended && k.Unsuspended > 0 && k.UnsuspendToJobSetUnsuspended.P99 <= targetKueueResumeP99Seconds,
		Note: fmt.Sprintf("issue 9's admission p99 target (issue 16 sets none); %d of %d unsuspended TrainJobs' JobSets seen unsuspended",
			k.UnsuspendToJobSetUnsuspended.Count, k.Unsuspended),
	}, {
		Name:     "TrainJobs finished",
		Target:   fmt.Sprintf("%d, each suspended by Kueue at creation", r.N),
		Measured: fmt.Sprintf("%d (%d Failed); %d suspended at creation", k.Finished, failed, k.SuspendedAtCreate),
		Met:      k.Finished == r.N && failed == 0 && k.SuspendedAtCreate == r.N,
	}}
}

// kueueReport renders Kueue mode's section.
func kueueReport(w func(string, ...any), r *Result, k *Kueue) {
	w("\n## Through Kueue %s (quota %d TrainJobs = %d pods)\n\n", k.Version, k.Quota, k.QuotaPods)
	failed := 0
	if r.Lifecycle != nil {
		failed = r.Lifecycle.Failed
	}
	w("- %d TrainJobs finished (%d Failed) in %.1f s from the first create to the last Complete: **%.2f TrainJobs/s**\n",
		k.Finished, failed, k.Seconds, k.TrainJobsPerSecond)
	w("- %d suspended at creation by Kueue's webhook (%d not); %d unsuspended by Kueue (admitted)\n",
		k.SuspendedAtCreate, k.NotSuspendedAtCreate, k.Unsuspended)
	w("- running at once, at most: **%d TrainJobs** (unsuspended, not finished), %d JobSets (unsuspended, not finished), %d pods Running; the quota: %d TrainJobs, %d pods\n",
		k.PeakTrainJobs, k.PeakJobSets, k.PeakPods, k.Quota, k.QuotaPods)
	w("- queue wait, TrainJob created → Kueue's unsuspend: %s\n", k.QueueWait)
	w("- Trainyard creates the JobSet of a suspended TrainJob suspended, as upstream does: %d of %d JobSets existed before Kueue's unsuspend. "+
		"Kueue's unsuspend → **JobSet exists**: %s (0 for those)\n", k.JobSetsBeforeUnsuspend, k.Unsuspended, k.UnsuspendToJobSet)
	w("- Kueue's unsuspend → **JobSet unsuspended** (Trainyard's resume, after which the Jobs' pods are created): %s\n", k.UnsuspendToJobSetUnsuspended)
	w("- Kueue's unsuspend → Complete (pods run %s of it): %s\n", cluster.DefaultPodCompleteDelay, k.UnsuspendToFinished)
	if cpu, ok := r.Components[cluster.Kueue]; ok {
		w("- Kueue's CPU %.2f s (%.2f s per 1,000 TrainJobs), Trainyard's %.2f s\n", cpu, cpu*1000/float64(max(r.N, 1)), r.Components[controllerTrainyard])
	}
	if len(k.WritesPerTrainJob) > 0 {
		w("\nWho writes a TrainJob and its JobSet, per TrainJob (the API server's audit log; events and other kinds are not in it):\n\n")
		w("| client | writes | by verb and resource |\n|---|---|---|\n")
		for _, client := range slices.Sorted(maps.Keys(k.WritesPerTrainJob)) {
			w("| %s | %.3f | %s |\n", client, sum(k.WritesPerTrainJob[client]), perWhat(k.WritesPerTrainJob[client]))
		}
	}
}

// perWhat formats per-TrainJob counts by key, sorted by key.
func perWhat(m map[string]float64) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.3f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// kueueTimeline is what Kueue mode plots beyond timeline's curves: offsets in seconds
// from the first create, sorted, and the running counts over time.
type kueueTimeline struct {
	unsuspended, jobSetUnsuspended []float64
	// runningTrainJobs and activeJobSets are the counts after each countChange (thinned).
	runningTrainJobs, activeJobSets []countPoint
	// resume is each TrainJob's Kueue's unsuspend → JobSet unsuspended: seconds, sorted.
	resume []float64
}

// countPoint is a running count from offset X (seconds) on.
type countPoint struct{ X, Y float64 }

func newKueueTimeline(start time.Time, rec kueueRecord) *kueueTimeline {
	tl := &kueueTimeline{
		runningTrainJobs: countSeries(start, rec.runningTrainJobs),
		activeJobSets:    countSeries(start, rec.activeJobSets),
	}
	for _, tj := range rec.trainJobs {
		if tj.unsuspended.IsZero() {
			continue
		}
		tl.unsuspended = append(tl.unsuspended, tj.unsuspended.Sub(start).Seconds())
		if !tj.jobSetUnsuspended.IsZero() {
			tl.jobSetUnsuspended = append(tl.jobSetUnsuspended, tj.jobSetUnsuspended.Sub(start).Seconds())
			tl.resume = append(tl.resume, max(tj.jobSetUnsuspended.Sub(tj.unsuspended).Seconds(), 0))
		}
	}
	for _, s := range [][]float64{tl.unsuspended, tl.jobSetUnsuspended, tl.resume} {
		sort.Float64s(s)
	}
	return tl
}

// countSeries turns ordered changes into the count from each change on, at offsets
// from start, keeping at most maxPoints: beyond that, each run of changes is drawn
// as its highest count, so a peak is never thinned away.
func countSeries(start time.Time, changes []countChange) []countPoint {
	step := stride(len(changes))
	out := make([]countPoint, 0, len(changes)/step+1)
	cur := 0
	for i := 0; i < len(changes); i += step {
		top, x := 0, changes[i].at.Sub(start).Seconds()
		for _, c := range changes[i:min(i+step, len(changes))] {
			cur += c.delta
			top = max(top, cur)
		}
		out = append(out, countPoint{X: x, Y: float64(top)})
	}
	if n := len(changes); step > 1 && n > 0 {
		out = append(out, countPoint{X: changes[n-1].at.Sub(start).Seconds(), Y: float64(cur)})
	}
	return out
}

// writeKueuePlot draws three panels: TrainJobs created, with their JobSet, unsuspended
// by Kueue, with their JobSet unsuspended and Complete over time; TrainJobs and
// JobSets running at once against the quota; and the distributions (log scale) of
// Kueue's unsuspend → JobSet unsuspended and of created → Complete.
func writeKueuePlot(path string, r *Result, tl *timeline) error {
	k := tl.kueue

	over := plot.New()
	over.Title.Text = fmt.Sprintf("%d TrainJobs through Kueue", r.N)
	over.X.Label.Text = "seconds since the first create"
	over.Y.Label.Text = "TrainJobs"
	over.Legend.Top, over.Legend.Left = true, true
	for i, s := range []struct {
		name string
		xs   []float64
	}{{"created", tl.created}, {"JobSet exists", tl.admitted}, {"unsuspended by Kueue", k.unsuspended},
		{"JobSet unsuspended", k.jobSetUnsuspended}, {"Complete", tl.finished}} {
		if err := addLine(over, s.name, cumulative(s.xs), i, false); err != nil {
			return err
		}
	}
	over.Add(plotter.NewGrid())

	running := plot.New()
	running.Title.Text = "running at once"
	running.X.Label.Text = "seconds since the first create"
	running.Y.Label.Text = "TrainJobs"
	running.Legend.Top = true
	steps := func(points []countPoint) plotter.XYs {
		xys := make(plotter.XYs, 0, 2*len(points))
		for i, p := range points {
			if i > 0 {
				xys = append(xys, plotter.XY{X: p.X, Y: points[i-1].Y})
			}
			xys = append(xys, plotter.XY{X: p.X, Y: p.Y})
		}
		return xys
	}
	if err := addLine(running, "TrainJobs unsuspended, not finished", steps(k.runningTrainJobs), 0, false); err != nil {
		return err
	}
	if err := addLine(running, "JobSets unsuspended, not finished", steps(k.activeJobSets), 1, true); err != nil {
		return err
	}
	end := 1.0
	if n := len(tl.finished); n > 0 {
		end = tl.finished[n-1]
	}
	quota := float64(r.Kueue.Quota)
	if err := addLine(running, fmt.Sprintf("quota (%d)", r.Kueue.Quota), plotter.XYs{{X: 0, Y: quota}, {X: end, Y: quota}}, 2, true); err != nil {
		return err
	}
	// Room for the legend above the curves, which may pass the quota.
	running.Y.Min, running.Y.Max = 0, max(quota, float64(r.Kueue.PeakTrainJobs), float64(r.Kueue.PeakJobSets))*1.5
	running.Add(plotter.NewGrid())

	lat, err := latencyPanel("% of TrainJobs at or below", 1000, 3, []namedSeries{
		{"Kueue's unsuspend → JobSet unsuspended", k.resume}, {"created → Complete", tl.finishLatencies}})
	if err != nil {
		return err
	}

	return drawTiles(path, 36*vg.Centimeter, 10*vg.Centimeter, over, running, lat)
}

// kueueErrorsTarget states Kueue mode's errors target: errs failed creates, failed
// syncs, Failed TrainJobs and TrainJobs Kueue's webhook did not suspend at creation.
func kueueErrorsTarget(ts *targetList, r *Result, k *Kueue, errs int) {
	c := r.Controller
	failed := 0
	if r.Lifecycle != nil {
		failed = r.Lifecycle.Failed
	}
	ts.add("errors", "0", fmt.Sprintf("%d create errors, %.0f failed syncs, %d Failed TrainJobs, %d not suspended by Kueue at creation", errs, sum(c.Errors), failed, k.NotSuspendedAtCreate),
		errs == 0 && sum(c.Errors) == 0 && failed == 0 && k.NotSuspendedAtCreate == 0, "")
}

// kueueHeader renders what Kueue mode set up (Kueue, its queues and quota, the audit
// log) and its plot.
func kueueHeader(w func(string, ...any), r *Result, k *Kueue) {
	w("Kueue %s with its TrainJob integration and webhooks; one ResourceFlavor, a ClusterQueue with a nominal quota of %d pods "+
		"(%d TrainJobs of numNodes %d at a time), a LocalQueue every TrainJob names (label %s); "+
		"each pod succeeds %s after it runs (kwok); one burst of creates, then every TrainJob run to Complete; "+
		"the API server keeps an audit log (level Metadata) of the writes to TrainJobs and JobSets, for who writes what\n\n",
		k.Version, k.QuotaPods, k.Quota, r.NumNodes, cluster.KueueQueueNameLabel, cluster.DefaultPodCompleteDelay)
	w("![TrainJobs through Kueue over time, running at once, latency](plot.svg)\n\n")
}
