package bench

// Measurement shared by the modes: one timed burst against a running controller
// (measure), and the samples of the controller's /metrics and the processes' CPU taken
// around it (sampler).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
)

// measured is one burst against a running controller: what measure saw.
type measured struct {
	created               burstResult
	jobSetsSeen, finished *arrivals
	allArrived            time.Time
	before, after         *sample
	peakHeap              int64
	failed                int
	timeline              *timeline
	n                     int
	lifecycle, idle       bool
}

// measure creates n TrainJobs in namespace ns (which must exist) as one burst
// against the running controller ctrl, waits until each has its JobSet (or,
// with lifecycle, is Complete or Failed), then until the controller is idle
// (for at most idleLimit; 0: no limit), and returns what it saw. With
// Config.CPUProfile it also takes the controller's CPU and heap profiles.
// Errors: every create failed, the wait timed out, a scrape failed.
func (r *runner) measure(ctx context.Context, ctrl *controllerProcess, ns string, n int, lifecycle bool, idleLimit time.Duration) (*measured, error) {
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	jobSetsSeen, err := watchArrivals(watchCtx, r.jobsets.JobsetV1alpha2().RESTClient(), "jobsets", ns, &jobsetv1alpha2.JobSet{},
		func(obj any) (string, bool) { return obj.(*jobsetv1alpha2.JobSet).Name, true })
	if err != nil {
		return nil, err
	}
	finished, err := watchArrivals(watchCtx, r.trainers.TrainerV1alpha1().RESTClient(), "trainjobs", ns, &trainer.TrainJob{},
		func(obj any) (string, bool) {
			tj := obj.(*trainer.TrainJob)
			return tj.Name, meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) ||
				meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed)
		})
	if err != nil {
		return nil, err
	}

	sampler := newSampler(ctrl, r.cluster.ComponentPids())
	before, err := sampler.take(ctx)
	if err != nil {
		return nil, err
	}
	peakHeap := sampler.watchHeap(watchCtx)
	profiled := r.startProfile(ctx, ctrl)
	mode := ModeAdmission
	if lifecycle {
		mode = ModeLifecycle
	}
	r.say("%s: creating %d TrainJobs with %d in flight (%s)", ctrl.Name, n, r.cfg.Parallelism, mode)
	created := burst(ctx, n, r.cfg.Parallelism, r.createTrainJob(ns))
	if created.Errors == n {
		return nil, fmt.Errorf("every TrainJob create failed: %w", created.FirstError)
	}
	r.say("created in %.1fs (%d errors)", created.Seconds(), created.Errors)

	target, waitFor := jobSetsSeen, "JobSets"
	if lifecycle {
		target, waitFor = finished, "finished TrainJobs"
	}
	want := n - created.Errors
	if err := waitCount(ctx, r.cfg.Timeout, target, want, func(got int) { r.say("%d/%d %s", got, want, waitFor) }); err != nil {
		return nil, err
	}
	m := &measured{created: created, jobSetsSeen: jobSetsSeen, finished: finished, allArrived: time.Now(), before: before, n: n, lifecycle: lifecycle}
	if m.after, m.idle, err = sampler.untilIdle(ctx, idleLimit); err != nil {
		return nil, err
	}
	if m.idle {
		r.say("%s idle; %s", ctrl.Name, m.after.describe())
	} else {
		r.say("%s not idle after %s; %s", ctrl.Name, idleLimit, m.after.describe())
	}
	if err := r.finishProfile(ctx, ctrl, profiled); err != nil {
		return nil, err
	}
	m.peakHeap = peakHeap()
	if lifecycle {
		if m.failed, err = r.countFailed(ctx, ns); err != nil {
			return nil, err
		}
	}
	m.timeline = newTimeline(created, jobSetsSeen, finished, mode)
	return m, nil
}

// startProfile starts, with Config.CPUProfile, the controller's CPU profile of that
// long into <OutDir>/cpu.pprof; the channel receives its outcome (at once nil without).
func (r *runner) startProfile(ctx context.Context, ctrl *controllerProcess) <-chan error {
	profiled := make(chan error, 1)
	if r.cfg.CPUProfile > 0 {
		go func() { profiled <- ctrl.CPUProfile(ctx, r.cfg.CPUProfile, filepath.Join(r.cfg.OutDir, "cpu.pprof")) }()
	} else {
		profiled <- nil
	}
	return profiled
}

// finishProfile waits for the CPU profile of startProfile and, with
// Config.CPUProfile, writes the controller's heap profile into <OutDir>/heap.pprof.
// Errors: either profile failed.
func (r *runner) finishProfile(ctx context.Context, ctrl *controllerProcess, profiled <-chan error) error {
	if err := <-profiled; err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	if r.cfg.CPUProfile > 0 {
		if err := ctrl.HeapProfile(ctx, filepath.Join(r.cfg.OutDir, "heap.pprof")); err != nil {
			return fmt.Errorf("heap profile: %w", err)
		}
	}
	return nil
}

// fill sets res's Admission, Lifecycle, Controller, Stages, Components and
// Machine from m.
func (m *measured) fill(res *Result) {
	res.Admission = admissionFigures(m.created, m.jobSetsSeen, m.n)
	if m.lifecycle {
		res.Lifecycle = lifecycleFigures(m.created, m.finished, m.allArrived)
		res.Lifecycle.Failed = m.failed
	}
	res.Controller = controllerFigures(m.before, m.after, m.n)
	res.Controller.PeakHeapBytes = max(m.peakHeap, res.Controller.HeapBytes)
	res.Stages = stageFigures(m.before.metrics, m.after.metrics)
	res.Components = m.after.componentCPU(m.before)
	res.Machine = machineFigures(m.before, m.after, res.CPUs)
}

// waitCount polls until a holds want names, reporting progress every 10s.
func waitCount(ctx context.Context, timeout time.Duration, a *arrivals, want int, progress func(int)) error {
	last := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if time.Since(last) > 10*time.Second {
			progress(a.Len())
			last = time.Now()
		}
		return a.Len() >= want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d arrivals (have %d): %w", want, a.Len(), err)
	}
	return nil
}

// sample is the controller's metrics and the processes' CPU at one moment.
type sample struct {
	// controller names the controller's process in procCPU.
	controller string
	metrics    *Snapshot
	procCPU    map[string]float64
	machineCPU float64
	peakRSS    int64
	// quietSince is, in a sample untilIdle returns idle, when the quiet spell began:
	// the first sample that saw no request since the one before and no busy worker.
	// The controller went idle at most a scrape period before.
	quietSince time.Time
}

func (s *sample) describe() string {
	return fmt.Sprintf("controller CPU %.2fs, peak RSS %.1f MiB", s.procCPU[s.controller], float64(s.peakRSS)/(1<<20))
}

func (s *sample) componentCPU(before *sample) map[string]float64 {
	out := map[string]float64{}
	for name, v := range s.procCPU {
		out[name] = round3(v - before.procCPU[name])
	}
	return out
}

type sampler struct {
	ctrl *controllerProcess
	pids map[string]int
}

func newSampler(ctrl *controllerProcess, components map[string]int) *sampler {
	// The benchmark's own watches decode every JobSet and TrainJob on the same cores:
	// its CPU is part of what the controller competes with, and not in the limit.
	pids := map[string]int{ctrl.Name: ctrl.Pid(), "bench (this process)": os.Getpid()}
	for name, pid := range components {
		pids[name] = pid
	}
	return &sampler{ctrl: ctrl, pids: pids}
}

func (s *sampler) take(ctx context.Context) (*sample, error) {
	m, err := s.ctrl.Scrape(ctx)
	if err != nil {
		return nil, err
	}
	out := &sample{controller: s.ctrl.Name, metrics: m, procCPU: map[string]float64{}}
	for name, pid := range s.pids {
		if cpu, err := ProcCPUSeconds(pid); err == nil {
			out.procCPU[name] = cpu
		}
	}
	if out.machineCPU, err = MachineCPUSeconds(); err != nil {
		return nil, err
	}
	if out.peakRSS, err = ProcPeakRSSBytes(s.ctrl.Pid()); err != nil {
		return nil, err
	}
	return out, nil
}

// watchHeap scrapes the controller's heap in use every second until ctx ends; the
// returned func gives the highest value seen so far (bytes). The heap peaks during
// the burst, while plans wait and watch events are decoded, not at the end.
func (s *sampler) watchHeap(ctx context.Context) func() int64 {
	var peak atomic.Int64
	go func() {
		for {
			if m, err := s.ctrl.Scrape(ctx); err == nil {
				v := int64(m.Value("go_memstats_heap_inuse_bytes", nil))
				for cur := peak.Load(); v > cur && !peak.CompareAndSwap(cur, v); cur = peak.Load() {
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return peak.Load
}

// untilIdle samples every second until the controller has made no API
// request, has no key queued and no worker busy for three samples in a row
// (status updates are batched for a second, so a shorter quiet spell could
// cut off its last writes), and returns the last sample, its quietSince set,
// and true. Busy
// workers are Trainyard's trainyard_stage_inflight or controller-runtime's
// controller_runtime_active_workers (upstream's). With limit > 0 it stops
// after that long and returns the last sample and false: a controller that
// keeps requeueing is never idle.
func (s *sampler) untilIdle(ctx context.Context, limit time.Duration) (*sample, bool, error) {
	var prev float64 = -1
	var quietSince time.Time
	quiet := 0
	start := time.Now()
	for {
		cur, err := s.take(ctx)
		if err != nil {
			return nil, false, err
		}
		requests := cur.metrics.Value(metrics.RESTClientRequestsTotal, nil)
		busy := cur.metrics.Value(metrics.WorkqueueDepth, nil) + cur.metrics.Value(metrics.StageInflight, nil) +
			cur.metrics.Value(controllerRuntimeActiveWorkers, nil)
		if requests == prev && busy == 0 {
			if quiet == 0 {
				quietSince = cur.metrics.At
			}
			quiet++
		} else {
			quiet = 0
		}
		if quiet >= 3 {
			cur.quietSince = quietSince
			return cur, true, nil
		}
		if limit > 0 && time.Since(start) >= limit {
			return cur, false, nil
		}
		prev = requests
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(idleScrapePeriod):
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
