package bench

// Figures shared by the modes, computed from what measure saw: admission, controller,
// stage and machine figures, percentiles and rounding.

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/trainyard/trainyard/pkg/metrics"
)

// percentile returns the p-th percentile (0–100) of sorted xs by the
// nearest-rank method; NaN for none.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func admissionFigures(created burstResult, seen *arrivals, n int) *Admission {
	a := &Admission{CreateSeconds: round3(created.Seconds()), CreateErrors: created.Errors}
	if created.FirstError != nil {
		a.FirstCreateError = created.FirstError.Error()
	}
	a.TrainJobCreatesPerSecond = round3(float64(n-created.Errors) / created.Seconds())
	var latencies []float64
	var last time.Time
	for i, done := range created.Done {
		at, ok := seen.At(fmt.Sprintf(trainJobNameFmt, i))
		if done.IsZero() || !ok {
			continue
		}
		latencies = append(latencies, at.Sub(done).Seconds())
		if at.After(last) {
			last = at
		}
	}
	sort.Float64s(latencies)
	a.Admitted = len(latencies)
	if a.Admitted == 0 {
		return a
	}
	a.Seconds = round3(last.Sub(created.Start).Seconds())
	a.TrainJobsPerSecond = round3(float64(a.Admitted) / a.Seconds)
	a.LatencyP50 = round3(percentile(latencies, 50))
	a.LatencyP99 = round3(percentile(latencies, 99))
	a.LatencyMax = round3(latencies[len(latencies)-1])
	return a
}

// reviewFigures returns the controller's TrainJob admission reviews between two
// scrapes: count and p50/p99 latency, from trainyard_admission_duration_seconds (time
// in the webhook handler; the API server's round trip adds TLS and the network).
func reviewFigures(before, after *Snapshot) *Reviews {
	sel := Labels{metrics.LabelKind: metrics.AdmissionKindTrainJob}
	h := after.Histogram(metrics.AdmissionDurationSeconds, sel).Sub(before.Histogram(metrics.AdmissionDurationSeconds, sel))
	return &Reviews{Count: int(h.Count), P50Seconds: round3(h.Quantile(0.5)), P99Seconds: round3(h.Quantile(0.99))}
}

func controllerFigures(before, after *sample, n int) Controller {
	c := Controller{
		CPUSeconds:   round3(after.procCPU[after.controller] - before.procCPU[after.controller]),
		PeakRSSBytes: after.peakRSS,
		HeapBytes:    int64(after.metrics.Value("go_memstats_heap_inuse_bytes", nil)),
		Requests:     map[string]float64{},
		Errors:       map[string]float64{},
		Retries:      map[string]float64{},
	}
	c.CPUSecondsPer1000 = round3(c.CPUSeconds * 1000 / float64(n))
	reqBefore := before.metrics.ByLabel(metrics.RESTClientRequestsTotal, "method", nil)
	for method, v := range after.metrics.ByLabel(metrics.RESTClientRequestsTotal, "method", nil) {
		if d := v - reqBefore[method]; d > 0 {
			c.Requests[method] = d
			if isWrite(method) {
				c.Writes += d
			}
		}
	}
	c.WritesPerTrainJob = round3(c.Writes / float64(n))
	for _, stage := range after.metrics.LabelValues(metrics.StageErrorsTotal, metrics.LabelStage) {
		for _, reason := range after.metrics.LabelValues(metrics.StageErrorsTotal, metrics.LabelReason) {
			sel := Labels{metrics.LabelStage: stage, metrics.LabelReason: reason}
			if d := after.metrics.Value(metrics.StageErrorsTotal, sel) - before.metrics.Value(metrics.StageErrorsTotal, sel); d > 0 {
				c.Errors[stage+"/"+reason] = d
			}
		}
		sel := Labels{metrics.LabelStage: stage}
		if d := after.metrics.Value(metrics.StageRetriesTotal, sel) - before.metrics.Value(metrics.StageRetriesTotal, sel); d > 0 {
			c.Retries[stage] = d
		}
	}
	// controller-runtime's (upstream's) failed reconciles, by controller.
	reconcileErrs := before.metrics.ByLabel(controllerRuntimeReconcileErrors, controllerRuntimeLabelController, nil)
	for name, v := range after.metrics.ByLabel(controllerRuntimeReconcileErrors, controllerRuntimeLabelController, nil) {
		if d := v - reconcileErrs[name]; d > 0 {
			c.Errors[name+"/reconcile_error"] = d
		}
	}
	// A controller that reads its own writes from a lagging cache sees
	// "not found" for what it just created, or conflicts on stale versions.
	for key, v := range c.Errors {
		if strings.HasSuffix(key, "/"+metrics.ReasonNotFound) || strings.HasSuffix(key, "/"+metrics.ReasonConflict) {
			c.CacheLagErrors += v
		}
	}
	return c
}

func stageFigures(before, after *Snapshot) []Stage {
	var out []Stage
	for _, name := range after.LabelValues(metrics.WorkqueueQueueDurationSeconds, metrics.LabelName) {
		q := after.Histogram(metrics.WorkqueueQueueDurationSeconds, Labels{metrics.LabelName: name}).
			Sub(before.Histogram(metrics.WorkqueueQueueDurationSeconds, Labels{metrics.LabelName: name}))
		s := after.Histogram(metrics.StageDurationSeconds, Labels{metrics.LabelStage: name}).
			Sub(before.Histogram(metrics.StageDurationSeconds, Labels{metrics.LabelStage: name}))
		if s.Count == 0 { // a controller-runtime controller's queue: its reconciles
			sel := Labels{controllerRuntimeLabelController: name}
			s = after.Histogram(controllerRuntimeReconcileTime, sel).Sub(before.Histogram(controllerRuntimeReconcileTime, sel))
		}
		out = append(out, Stage{
			Name: name, Syncs: s.Count,
			QueueP50: round4(q.Quantile(0.5)), QueueP99: round4(q.Quantile(0.99)),
			SyncP50: round4(s.Quantile(0.5)), SyncP99: round4(s.Quantile(0.99)),
		})
	}
	order := []string{"resolve_runtime", "merge_patches", "ml_policy", "gang_scheduling", "dra_claims", "status", "progress", "progress_ca"}
	sort.SliceStable(out, func(i, j int) bool {
		return slices.Index(order, out[i].Name) < slices.Index(order, out[j].Name)
	})
	return out
}

func machineFigures(before, after *sample, cpus int) Machine {
	wall := after.metrics.At.Sub(before.metrics.At).Seconds()
	busy := after.machineCPU - before.machineCPU
	return Machine{WallSeconds: round3(wall), BusyCPUSeconds: round3(busy), Utilisation: round3(busy / (wall * float64(cpus)))}
}

func round3(x float64) float64 { return roundTo(x, 1e3) }

func round4(x float64) float64 { return roundTo(x, 1e4) }

func roundTo(x, scale float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*scale) / scale
}
