package bench

// Lifecycle mode (issue 9): the burst of admission.go run to Complete with everything
// on; its figures, targets and report section.

import (
	"fmt"
	"sort"
	"time"
)

func lifecycleFigures(created burstResult, finished *arrivals, allDone time.Time) *Lifecycle {
	l := &Lifecycle{Seconds: round3(allDone.Sub(created.Start).Seconds())}
	var latencies []float64
	for i, done := range created.Done {
		if at, ok := finished.At(fmt.Sprintf(trainJobNameFmt, i)); ok && !done.IsZero() {
			latencies = append(latencies, at.Sub(done).Seconds())
		}
	}
	sort.Float64s(latencies)
	l.Finished = len(latencies)
	l.LatencyP50 = round3(percentile(latencies, 50))
	l.LatencyP99 = round3(percentile(latencies, 99))
	return l
}

// lifecycleTargets states issue 9's lifecycle targets: writes per TrainJob to
// Complete, and every TrainJob finished, none Failed.
func lifecycleTargets(ts *targetList, r *Result) {
	c := r.Controller
	ts.add("API writes per TrainJob to Complete", fmt.Sprintf("≤ %.0f", targetLifecycleWrites), fmt.Sprintf("%.3f (%s)", c.WritesPerTrainJob, methods(c.Requests, true)),
		c.WritesPerTrainJob <= targetLifecycleWrites, "every write counts: JobSet apply, status patches, events")
	ts.add("TrainJobs finished", fmt.Sprint(r.N), fmt.Sprintf("%d (%d Failed)", r.Lifecycle.Finished, r.Lifecycle.Failed),
		r.Lifecycle.Finished == r.N && r.Lifecycle.Failed == 0, "")
}

// lifecycleReport renders the lifecycle section: TrainJobs finished and latency to
// Complete.
func lifecycleReport(w func(string, ...any), l *Lifecycle) {
	w("\n## Lifecycle (TrainJob created → Complete)\n\n")
	w("- %d finished (%d Failed) in %.1f s; latency p50 %.2f s, p99 %.2f s\n", l.Finished, l.Failed, l.Seconds, l.LatencyP50, l.LatencyP99)
}
