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
