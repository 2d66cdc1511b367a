package bench

// TTL mode (issue 40): what ttlSecondsAfterFinished costs the controller with N finished
// TrainJobs, and how late it deletes them. The controller keeps no timer per TrainJob:
// the status stage returns each expiry as the pass's requeue, held by the stage queue's
// client-go delaying queue (docs/compatibility.md#ttl-and-run-policy). The run: N
// TrainJobs admitted with the JobSet controller off; the benchmark marks every JobSet
// Completed, as the JobSet controller would, so every TrainJob turns Complete with its
// completionTime; the idle controller sampled; every TrainJob given a TTL whose expiries
// fall, spread evenly, in a window a few minutes later; the idle controller sampled again
// with the N TTLs pending; then every deletion timed against its expiry.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetconstants "sigs.k8s.io/jobset/pkg/constants"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// ModeTTL gives N finished TrainJobs a ttlSecondsAfterFinished and measures the
// controller with and without them pending, and how late each deletion comes (issue
// 40): see runner.runTTL.
const ModeTTL = "ttl"

// DefaultTTLIdleWindow is how long TTL mode samples the idle controller, without and
// with the TTLs pending.
const DefaultTTLIdleWindow = time.Minute

const (
	// ttlDeleteShare is the share of the API server's measured create rate (the burst's
	// TrainJob creates per second, the controller applying JobSets meanwhile) at which
	// the expiries are scheduled: a TTL deletion is one DELETE and garbage collection
	// deletes the JobSet, two writes per TrainJob as an admission is, so the half leaves
	// the API server room and the lateness measures the controller, not a backlog.
	ttlDeleteShare = 0.5
	// ttlMinSpan is the shortest span the expiries are spread over (small smoke runs).
	ttlMinSpan = 30 * time.Second
	// ttlPatchAllowance × the TrainJob creates' time is the time allowed for the TTL
	// patches when the expiries are planned: as many writes of TrainJobs into the same
	// store (at 50,000, 143 s of patches against 146 s of creates).
	ttlPatchAllowance = 1.5
	// ttlGCWait is how long the run waits, after the last TTL deletion, for garbage
	// collection to delete the JobSets. kube-controller-manager's collector deletes at
	// its client's pace (20 QPS by default, about three requests a JobSet), far below
	// the TTL deletions' rate at 50,000: the run reports how many it deleted and its
	// rate rather than wait an hour.
	ttlGCWait = 2 * time.Minute
	// ttlSettle is allowed after the patches for the controller to go idle, and
	// ttlMargin kept between the end of the second idle window and the first expiry.
	ttlSettle, ttlMargin = 20 * time.Second, 15 * time.Second
	// ttlMinWindow is the shortest idle window measured. When the patches ran so long
	// that less is left before the first expiry, the window with the TTLs pending is
	// left out (a target missed) and the deletions are measured all the same.
	ttlMinWindow = 10 * time.Second
)

// TTL mode's targets.
const (
	// targetTTLLatenessP99Seconds bounds the p99 of deletion → expiry: issue 9's
	// admission p99, the same one API write after one event (here the delaying queue's).
	targetTTLLatenessP99Seconds = targetP99Seconds
	// targetTTLHeapPer1000 bounds the controller's live heap per 1,000 pending TTLs: a
	// tenth of the 5.1 MiB of RSS per 1,000 TrainJobs the controller costs at all
	// (docs/design/memory.md), for one delaying-queue entry each (137 B measured alone).
	targetTTLHeapPer1000 = 512 << 10
	// targetTTLIdleMillicores bounds what the pending TTLs add to the idle controller's
	// CPU: 1% of a core (the delaying queue's one goroutine sleeps until the earliest).
	targetTTLIdleMillicores = 10.0
	// targetTTLRSSBytes at targetTTLRSSAtN TrainJobs: docs/design/memory.md's ≤ 400 MiB
	// at 50,000.
	targetTTLRSSBytes = 400 << 20
	targetTTLRSSAtN   = 50000
)

// TTL is TTL mode's figures (issue 40). Times are seconds, sizes bytes, rates per
// second. Result.Controller, Stages, Components and Machine cover the deletion phase:
// from just before the first expiry until the controller is idle after the last JobSet
// is gone.
type TTL struct {
	// Finished is how many TrainJobs turned Complete with a completionTime once the
	// benchmark marked their JobSets Completed (JobSetPatchSeconds for the N status
	// patches, CompleteSeconds from their start to the last Complete seen).
	Finished           int     `json:"finished"`
	JobSetPatchSeconds float64 `json:"jobSetPatchSeconds"`
	JobSetPatchErrors  int     `json:"jobSetPatchErrors"`
	CompleteSeconds    float64 `json:"completeSeconds"`

	// Without is the idle controller with the N finished TrainJobs and no TTL; With the
	// same with every TTL set and none expired.
	Without *TTLWindow `json:"without"`
	With    *TTLWindow `json:"with"`

	// PatchSeconds, PatchesPerSecond, PatchErrors and FirstPatchError are the N merge
	// patches of spec.ttlSecondsAfterFinished. PatchController is the controller from
	// their start until it was idle again, PatchIdleSeconds later, after
	// PatchStatusSyncs syncs of the status stage.
	PatchSeconds     float64    `json:"patchSeconds"`
	PatchesPerSecond float64    `json:"patchesPerSecond"`
	PatchErrors      int        `json:"patchErrors"`
	FirstPatchError  string     `json:"firstPatchError,omitempty"`
	PatchController  Controller `json:"patchController"`
	PatchIdleSeconds float64    `json:"patchIdleSeconds"`
	PatchStatusSyncs float64    `json:"patchStatusSyncs"`

	// The plan: the expiries spread evenly over SpanSeconds, ScheduledPerSecond of
	// them, ttlDeleteShare × CreatesPerSecond (the run's TrainJob creates); the first
	// LeadSeconds after the patches began, LastPatchToFirstExpiry after they ended.
	CreatesPerSecond       float64 `json:"createsPerSecond"`
	ScheduledPerSecond     float64 `json:"scheduledPerSecond"`
	SpanSeconds            float64 `json:"spanSeconds"`
	LeadSeconds            float64 `json:"leadSeconds"`
	LastPatchToFirstExpiry float64 `json:"lastPatchToFirstExpirySeconds"`

	Deletions Deletions `json:"deletions"`
	// JobSetsDeleted is how many of the TrainJobs' JobSets garbage collection deleted
	// by ttlGCWait after the last TTL deletion, GCPerSecond its rate from its first
	// deletion to its last, GCLag* the seconds from a TrainJob's DELETED event to its
	// JobSet's.
	JobSetsDeleted int     `json:"jobSetsDeleted"`
	GCPerSecond    float64 `json:"gcPerSecond"`
	GCLagP50       float64 `json:"gcLagP50"`
	GCLagP99       float64 `json:"gcLagP99"`
	GCLagMax       float64 `json:"gcLagMax"`
	// DeletionIdleSeconds runs from the deletion phase's start (just before the first
	// expiry) until the controller was idle after the last JobSet was deleted.
	DeletionIdleSeconds float64 `json:"deletionIdleSeconds"`
}

// TTLWindow is the idle controller sampled over a window: its CPU, its RSS every
// second, and after a forced garbage collection at the window's end its live heap.
type TTLWindow struct {
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpuSeconds"`
	// Millicores is CPUSeconds per second of the window, × 1000.
	Millicores float64 `json:"millicores"`
	// RSSBytes is the median of VmRSS sampled every second.
	RSSBytes int64 `json:"rssBytes"`
	// HeapAllocBytes, HeapInuseBytes and HeapObjects are go_memstats_heap_alloc_bytes
	// (the bytes of the objects), go_memstats_heap_inuse_bytes (of the spans holding
	// them) and go_memstats_heap_objects right after runtime.GC (the controller's
	// /debug/pprof/heap?gc=1): the live heap, free of the window's garbage.
	HeapAllocBytes int64   `json:"heapAllocBytes"`
	HeapInuseBytes int64   `json:"heapInuseBytes"`
	HeapObjects    float64 `json:"heapObjects"`
	Goroutines     float64 `json:"goroutines"`
	// Requests are the controller's API requests in the window, by method.
	Requests map[string]float64 `json:"requests"`
}

// Deletions is the TTL deletions against their expiries. Lateness is per TrainJob: the
// benchmark's watch received its DELETED event → its expiry (Complete's
// lastTransitionTime + its TTL, as the controller computes it).
type Deletions struct {
	Expected    int     `json:"expected"`
	Deleted     int     `json:"deleted"`
	LatenessP50 float64 `json:"latenessP50"`
	LatenessP99 float64 `json:"latenessP99"`
	LatenessMax float64 `json:"latenessMax"`
	LatenessMin float64 `json:"latenessMin"`
	// Seconds runs from the first deletion seen to the last; PerSecond is the rate the
	// API server achieved over it.
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"perSecond"`
	// AfterLastExpiry is the last deletion seen → the last expiry.
	AfterLastExpiry float64 `json:"afterLastExpirySeconds"`
}

// runTTL is Run's TTL mode on a cluster without the JobSet controller or pods.
func (r *runner) runTTL(ctx context.Context) (*Result, error) {
	res := newResult(r.cfg)
	if err := r.installRuntime(ctx); err != nil {
		return nil, err
	}
	if err := r.createNamespace(ctx, benchNamespace); err != nil {
		return nil, err
	}
	ctrl, _, err := r.startController(ctx)
	if err != nil {
		return nil, err
	}
	defer ctrl.Stop()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rec, err := r.watchTTL(watchCtx, benchNamespace)
	if err != nil {
		return nil, err
	}
	s := newSampler(ctrl, r.cluster.ComponentPids())
	peakHeap := s.watchHeap(watchCtx)

	m, err := r.measure(ctx, ctrl, benchNamespace, r.cfg.N, false, 0)
	if err != nil {
		return nil, err
	}
	m.fill(res)
	t := &TTL{CreatesPerSecond: res.Admission.TrainJobCreatesPerSecond}
	res.TTL = t
	names := createdNames(m.created)
	finished, err := r.completeJobSets(ctx, rec, names, t)
	if err != nil {
		return nil, err
	}

	if _, _, err := s.untilIdle(ctx, 0); err != nil {
		return nil, err
	}
	r.say("idle window without TTLs (%s)", r.cfg.IdleWindow)
	if t.Without, err = r.ttlWindow(ctx, ctrl, s, r.cfg.IdleWindow, "heap-without-ttl.pprof"); err != nil {
		return nil, err
	}

	expiries, err := r.patchTTLs(ctx, s, names, finished, m.created.Seconds(), t)
	if err != nil {
		return nil, err
	}
	first, _ := expiryRange(expiries)
	if room := time.Until(first) - ttlMargin; room < ttlMinWindow {
		r.say("no idle window with the TTLs pending: %s left before the first expiry", room.Round(time.Second))
	} else {
		window := min(r.cfg.IdleWindow, room)
		r.say("idle window with %d TTLs pending (%s; the first expires in %s)", len(names), window.Round(time.Second), time.Until(first).Round(time.Second))
		if t.With, err = r.ttlWindow(ctx, ctrl, s, window, "heap-with-ttl.pprof"); err != nil {
			return nil, err
		}
	}
	// The deletion phase starts after the window's forced garbage collection.
	start, err := s.take(ctx)
	if err != nil {
		return nil, err
	}

	deleted, err := r.waitTTLDeletions(ctx, rec, names, expiries, t)
	if err != nil {
		return nil, err
	}
	// Garbage collection may still be deleting JobSets, each an event for the controller.
	end, _, err := s.untilIdle(ctx, ttlGCWait)
	if err != nil {
		return nil, fmt.Errorf("waiting for the controller to go idle after the deletions: %w", err)
	}
	t.DeletionIdleSeconds = round3(end.quietSince.Sub(start.metrics.At).Seconds())
	res.Controller = controllerFigures(start, end, len(names))
	res.Controller.PeakHeapBytes = max(peakHeap(), res.Controller.HeapBytes)
	res.Stages = stageFigures(start.metrics, end.metrics)
	res.Components = end.componentCPU(start)
	res.Machine = machineFigures(start, end, res.CPUs)
	r.timeline = &timeline{ttl: newTTLTimeline(expiries, deleted, rec.jobSetDeletions(names))}
	res.Targets = evaluateTargets(res)
	return res, nil
}

// createdNames returns the names of the TrainJobs whose create succeeded, in index order.
func createdNames(created burstResult) []string {
	var names []string
	for i, done := range created.Done {
		if !done.IsZero() {
			names = append(names, fmt.Sprintf(trainJobNameFmt, i))
		}
	}
	return names
}

// completeJobSets marks the JobSet of every TrainJob of names Completed through its
// status subresource, as the JobSet controller does once every Job succeeded
// (terminalState and a Completed condition with its reason and message), with
// Config.Parallelism patches in flight, and waits until every TrainJob is Complete with
// a completionTime. It returns each one's finish time (Complete's lastTransitionTime,
// which the controller's TTL counts from), in the order of names. Errors: a patch
// failed, or the wait timed out.
func (r *runner) completeJobSets(ctx context.Context, rec *ttlRecorder, names []string, t *TTL) ([]time.Time, error) {
	r.say("marking %d JobSets Completed", len(names))
	client := r.jobsets.JobsetV1alpha2().JobSets(benchNamespace)
	patched := burst(ctx, len(names), r.cfg.Parallelism, func(ctx context.Context, i int) error {
		body, err := completedJobSetPatch(metav1.Now())
		if err != nil {
			return err
		}
		_, err = client.Patch(ctx, names[i], types.MergePatchType, body, metav1.PatchOptions{}, "status")
		return err
	})
	t.JobSetPatchSeconds, t.JobSetPatchErrors = round3(patched.Seconds()), patched.Errors
	if patched.Errors > 0 {
		return nil, fmt.Errorf("%d of %d JobSet status patches failed: %w", patched.Errors, len(names), patched.FirstError)
	}
	if err := waitCount(ctx, r.cfg.Timeout, rec.completed, len(names), func(n int) { r.say("%d/%d TrainJobs Complete", n, len(names)) }); err != nil {
		return nil, err
	}
	t.Finished = rec.completed.Len()
	t.CompleteSeconds = round3(time.Since(patched.Start).Seconds())
	r.say("%d TrainJobs Complete in %.1fs", t.Finished, t.CompleteSeconds)
	finished := make([]time.Time, len(names))
	for i, name := range names {
		finished[i] = rec.finishedAt(name)
	}
	return finished, nil
}

// completedJobSetPatch is the merge patch of a JobSet's status that the JobSet
// controller's completion amounts to, with the condition's time at.
func completedJobSetPatch(at metav1.Time) ([]byte, error) {
	return json.Marshal(map[string]any{"status": map[string]any{
		"terminalState": string(jobsetv1alpha2.JobSetCompleted),
		"conditions": []metav1.Condition{{
			Type: string(jobsetv1alpha2.JobSetCompleted), Status: metav1.ConditionTrue,
			Reason: jobsetconstants.AllJobsCompletedReason, Message: jobsetconstants.AllJobsCompletedMessage,
			LastTransitionTime: at.Rfc3339Copy(),
		}},
	}})
}

// patchTTLs plans the expiries (planExpiries: spread over ttlSpan from a first expiry
// that leaves room for the patches, ttlPatchAllowance × the creates' time
// (createSeconds), the settle and the idle window), patches every
// TrainJob's spec.ttlSecondsAfterFinished accordingly with Config.Parallelism in flight,
// waits until the controller is idle, and records the patches and the controller's
// work for them in t. It returns each TrainJob's expiry, in the order of names.
// Errors: a patch failed, or a scrape.
func (r *runner) patchTTLs(ctx context.Context, s *sampler, names []string, finished []time.Time, createSeconds float64, t *TTL) ([]time.Time, error) {
	span := ttlSpan(len(names), t.CreatesPerSecond)
	lead := time.Duration(ttlPatchAllowance*createSeconds*float64(time.Second)) + ttlSettle + r.cfg.IdleWindow + ttlMargin
	before, err := s.take(ctx)
	if err != nil {
		return nil, err
	}
	first := time.Now().Add(lead)
	ttls, expiries, err := planExpiries(finished, first, span)
	if err != nil {
		return nil, err
	}
	t.SpanSeconds, t.LeadSeconds = round3(span.Seconds()), round3(lead.Seconds())
	t.ScheduledPerSecond = round3(float64(len(names)) / span.Seconds())
	r.say("setting %d TTLs: expiries from %s over %s (%.0f/s)", len(names), first.Format(time.TimeOnly), span.Round(time.Second), t.ScheduledPerSecond)
	client := r.trainers.TrainerV1alpha1().TrainJobs(benchNamespace)
	patched := burst(ctx, len(names), r.cfg.Parallelism, func(ctx context.Context, i int) error {
		body := fmt.Appendf(nil, `{"spec":{"ttlSecondsAfterFinished":%d}}`, ttls[i])
		_, err := client.Patch(ctx, names[i], types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
	t.PatchSeconds, t.PatchErrors = round3(patched.Seconds()), patched.Errors
	t.PatchesPerSecond = round3(float64(len(names)-patched.Errors) / patched.Seconds())
	earliest, _ := expiryRange(expiries)
	t.LastPatchToFirstExpiry = round3(earliest.Sub(patched.End).Seconds())
	if patched.Errors > 0 {
		t.FirstPatchError = patched.FirstError.Error()
		return nil, fmt.Errorf("%d of %d TTL patches failed: %w", patched.Errors, len(names), patched.FirstError)
	}
	after, _, err := s.untilIdle(ctx, 0)
	if err != nil {
		return nil, err
	}
	t.PatchController = controllerFigures(before, after, len(names))
	t.PatchIdleSeconds = round3(after.quietSince.Sub(patched.Start).Seconds())
	t.PatchStatusSyncs = after.metrics.Histogram(metrics.StageDurationSeconds, Labels{metrics.LabelStage: "status"}).
		Sub(before.metrics.Histogram(metrics.StageDurationSeconds, Labels{metrics.LabelStage: "status"})).Count
	r.say("%d TTLs set in %.1fs; controller idle after %.1fs, %.2f CPU s, writes %s", len(names), t.PatchSeconds, t.PatchIdleSeconds,
		t.PatchController.CPUSeconds, methods(t.PatchController.Requests, true))
	return expiries, nil
}

// expiryRange returns the earliest and the latest of expiries (not empty). The plan's
// are nearly sorted: each is up to a second after its planned instant, whole seconds
// from its finish time.
func expiryRange(expiries []time.Time) (earliest, latest time.Time) {
	return slices.MinFunc(expiries, time.Time.Compare), slices.MaxFunc(expiries, time.Time.Compare)
}

// ttlSpan is how long the expiries of n TrainJobs are spread over: n at ttlDeleteShare ×
// createsPerSecond, at least ttlMinSpan.
func ttlSpan(n int, createsPerSecond float64) time.Duration {
	if createsPerSecond <= 0 {
		return ttlMinSpan
	}
	return max(ttlMinSpan, time.Duration(float64(n)/(ttlDeleteShare*createsPerSecond)*float64(time.Second)).Round(time.Second))
}

// planExpiries gives TrainJob i, finished at finished[i] (whole seconds, as serialized),
// the TTL in whole seconds that puts its expiry at or just after first + span × i/n, and
// returns the TTLs and the expiries (finished[i] + TTL) in order. Errors: a finish time
// after its planned expiry (first must be in the future), or a TTL beyond int32.
func planExpiries(finished []time.Time, first time.Time, span time.Duration) ([]int32, []time.Time, error) {
	n := len(finished)
	ttls, expiries := make([]int32, n), make([]time.Time, n)
	for i, at := range finished {
		target := first.Add(time.Duration(float64(span) * float64(i) / float64(n)))
		seconds := math.Ceil(target.Sub(at).Seconds())
		if seconds < 0 || seconds > math.MaxInt32 {
			return nil, nil, fmt.Errorf("TrainJob %d finished at %s: a TTL of %.0f s to expire at %s is not a ttlSecondsAfterFinished (0 to %d)",
				i, at.Format(time.RFC3339), seconds, target.Format(time.RFC3339), math.MaxInt32)
		}
		ttls[i] = int32(seconds)
		expiries[i] = at.Add(time.Duration(ttls[i]) * time.Second)
	}
	return ttls, expiries, nil
}

// ttlWindow samples the idle controller for length: its CPU and API requests between
// the window's two samples, its VmRSS every second; then it forces a garbage collection
// by taking a heap profile into <OutDir>/heapFile and reads the live heap. It returns
// the window's figures. Errors: a scrape or the profile failed.
func (r *runner) ttlWindow(ctx context.Context, ctrl *controllerProcess, s *sampler, length time.Duration, heapFile string) (*TTLWindow, error) {
	start, err := s.take(ctx)
	if err != nil {
		return nil, err
	}
	var rss []float64
	for deadline := time.Now().Add(length); time.Now().Before(deadline); {
		if v, err := ProcRSSBytes(ctrl.Pid()); err == nil {
			rss = append(rss, float64(v))
		}
		if err := sleepCtx(ctx, min(time.Second, time.Until(deadline))); err != nil {
			return nil, err
		}
	}
	end, err := s.take(ctx)
	if err != nil {
		return nil, err
	}
	if err := ctrl.HeapProfile(ctx, filepath.Join(r.cfg.OutDir, heapFile)); err != nil {
		return nil, fmt.Errorf("forcing a garbage collection: %w", err)
	}
	collected, err := ctrl.Scrape(ctx)
	if err != nil {
		return nil, err
	}
	w := windowFigures(start, end, collected, rss)
	r.say("%.0f s: %.1f millicores, RSS %s, live heap %s (%.0f objects, %s in use), %.0f goroutines, requests %s",
		w.Seconds, w.Millicores, mib(w.RSSBytes), mib(w.HeapAllocBytes), w.HeapObjects, mib(w.HeapInuseBytes), w.Goroutines, methods(w.Requests, false))
	return w, nil
}

// windowFigures returns the window from start to end: the controller's CPU and API
// requests between them, the median of rss (bytes), and the heap and goroutines of
// collected, a scrape right after a garbage collection.
func windowFigures(start, end *sample, collected *Snapshot, rss []float64) *TTLWindow {
	w := &TTLWindow{
		Seconds:        round3(end.metrics.At.Sub(start.metrics.At).Seconds()),
		CPUSeconds:     round3(end.procCPU[end.controller] - start.procCPU[end.controller]),
		HeapAllocBytes: int64(collected.Value("go_memstats_heap_alloc_bytes", nil)),
		HeapInuseBytes: int64(collected.Value("go_memstats_heap_inuse_bytes", nil)),
		HeapObjects:    collected.Value("go_memstats_heap_objects", nil),
		Goroutines:     collected.Value("go_goroutines", nil),
		Requests:       map[string]float64{},
	}
	if w.Seconds > 0 {
		w.Millicores = round3(w.CPUSeconds / w.Seconds * 1000)
	}
	sorted := slices.Sorted(slices.Values(rss))
	if len(sorted) > 0 {
		w.RSSBytes = int64(percentile(sorted, 50))
	}
	before := start.metrics.ByLabel(metrics.RESTClientRequestsTotal, "method", nil)
	for method, v := range end.metrics.ByLabel(metrics.RESTClientRequestsTotal, "method", nil) {
		if d := v - before[method]; d > 0 {
			w.Requests[method] = d
		}
	}
	return w
}

// waitTTLDeletions waits until every TrainJob of names is deleted (for the span of the
// expiries plus Config.Timeout), then for garbage collection to delete their JobSets
// (at most ttlGCWait more), and records the deletions against the expiries and
// garbage collection's work in t. It returns when each TrainJob's deletion was seen,
// in the order of names (zero: not seen). Errors: the TrainJobs' wait timed out, or
// ctx ended.
func (r *runner) waitTTLDeletions(ctx context.Context, rec *ttlRecorder, names []string, expiries []time.Time, t *TTL) ([]time.Time, error) {
	_, last := expiryRange(expiries)
	r.say("waiting for %d TTL deletions (the last expires at %s)", len(names), last.Format(time.TimeOnly))
	err := waitCount(ctx, time.Until(last)+r.cfg.Timeout, rec.deleted, len(names), func(n int) { r.say("%d/%d TrainJobs deleted", n, len(names)) })
	if err != nil {
		return nil, err
	}
	deleted := rec.deletions(names)
	t.Deletions = deletionFigures(expiries, deleted)
	d := t.Deletions
	r.say("%d deleted; lateness p50 %.3fs, p99 %.3fs, max %.3fs", d.Deleted, d.LatenessP50, d.LatenessP99, d.LatenessMax)
	err = waitCount(ctx, ttlGCWait, rec.jobSetsDeleted, len(names), func(n int) { r.say("%d/%d JobSets deleted", n, len(names)) })
	if ctx.Err() != nil {
		return nil, err
	}
	jobSets := rec.jobSetDeletions(names)
	lag := gcLags(deleted, jobSets)
	t.JobSetsDeleted = len(lag)
	t.GCPerSecond = perSecond(jobSets)
	t.GCLagP50, t.GCLagP99 = round3(percentile(lag, 50)), round3(percentile(lag, 99))
	if len(lag) > 0 {
		t.GCLagMax = round3(lag[len(lag)-1])
	}
	r.say("%d of %d JobSets deleted by garbage collection (%.1f/s)", t.JobSetsDeleted, len(names), t.GCPerSecond)
	return deleted, nil
}

// perSecond is the rate of the instants seen in ats (zero: not seen): their number
// less one over the time from the first to the last; 0 for fewer than two.
func perSecond(ats []time.Time) float64 {
	var first, last time.Time
	n := 0
	for _, at := range ats {
		if at.IsZero() {
			continue
		}
		n++
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	if n < 2 || !last.After(first) {
		return 0
	}
	return round3(float64(n-1) / last.Sub(first).Seconds())
}

// deletionFigures returns the deletions seen (deleted[i], zero when not seen) against
// the expiries (expiries[i]).
func deletionFigures(expiries, deleted []time.Time) Deletions {
	d := Deletions{Expected: len(expiries)}
	var late []float64
	var firstDel, lastDel time.Time
	for i, at := range deleted {
		if at.IsZero() {
			continue
		}
		late = append(late, at.Sub(expiries[i]).Seconds())
		if firstDel.IsZero() || at.Before(firstDel) {
			firstDel = at
		}
		if at.After(lastDel) {
			lastDel = at
		}
	}
	d.Deleted = len(late)
	if d.Deleted == 0 {
		return d
	}
	sort.Float64s(late)
	d.LatenessP50, d.LatenessP99 = round3(percentile(late, 50)), round3(percentile(late, 99))
	d.LatenessMin, d.LatenessMax = round3(late[0]), round3(late[len(late)-1])
	d.Seconds = round3(lastDel.Sub(firstDel).Seconds())
	d.PerSecond = perSecond(deleted)
	_, lastExpiry := expiryRange(expiries)
	d.AfterLastExpiry = round3(lastDel.Sub(lastExpiry).Seconds())
	return d
}

// gcLags returns, sorted, the seconds from each TrainJob's deletion seen to its JobSet's
// (both seen: garbage collection's lag with the watch's).
func gcLags(trainJobs, jobSets []time.Time) []float64 {
	var lag []float64
	for i, at := range jobSets {
		if !at.IsZero() && !trainJobs[i].IsZero() {
			lag = append(lag, at.Sub(trainJobs[i]).Seconds())
		}
	}
	sort.Float64s(lag)
	return lag
}

// ttlRecorder records, from watches of one namespace's TrainJobs and JobSets, when each
// TrainJob was first seen Complete with a completionTime and its finish time, and when
// each TrainJob and each JobSet was deleted (receive times).
type ttlRecorder struct {
	completed, deleted, jobSetsDeleted *arrivals
	mu                                 sync.Mutex
	finished                           map[string]time.Time
}

func (k *ttlRecorder) finishedAt(name string) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.finished[name]
}

// deletions and jobSetDeletions return the deletion times of names' TrainJobs and
// JobSets in order (zero: not seen).
func (k *ttlRecorder) deletions(names []string) []time.Time { return arrivalTimes(k.deleted, names) }

func (k *ttlRecorder) jobSetDeletions(names []string) []time.Time {
	return arrivalTimes(k.jobSetsDeleted, names)
}

func arrivalTimes(a *arrivals, names []string) []time.Time {
	out := make([]time.Time, len(names))
	for i, name := range names {
		out[i], _ = a.At(name)
	}
	return out
}

func (k *ttlRecorder) onTrainJob(obj any) {
	tj, ok := obj.(*trainer.TrainJob)
	if !ok || tj.Status.CompletionTime == nil || !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) {
		return
	}
	at, _ := trainjob.FinishedAt(&tj.Status)
	k.mu.Lock()
	if _, seen := k.finished[tj.Name]; !seen {
		k.finished[tj.Name] = at
	}
	k.mu.Unlock()
	k.completed.record(tj.Name, time.Now())
}

// watchTTL starts watches of namespace ns's TrainJobs and JobSets that record into the
// returned ttlRecorder until ctx ends; it returns once they have synced.
func (r *runner) watchTTL(ctx context.Context, ns string) (*ttlRecorder, error) {
	k := &ttlRecorder{completed: newArrivals(), deleted: newArrivals(), jobSetsDeleted: newArrivals(), finished: map[string]time.Time{}}
	onDelete := func(a *arrivals) func(obj any) {
		return func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, err := meta.Accessor(obj); err == nil {
				a.record(m.GetName(), time.Now())
			}
		}
	}
	err := startInformer(ctx, r.trainers.TrainerV1alpha1().RESTClient(), "trainjobs", ns, &trainer.TrainJob{}, cache.ResourceEventHandlerFuncs{
		AddFunc: k.onTrainJob, UpdateFunc: func(_, obj any) { k.onTrainJob(obj) }, DeleteFunc: onDelete(k.deleted),
	})
	if err != nil {
		return nil, err
	}
	err = startInformer(ctx, r.jobsets.JobsetV1alpha2().RESTClient(), "jobsets", ns, &jobsetv1alpha2.JobSet{}, cache.ResourceEventHandlerFuncs{
		DeleteFunc: onDelete(k.jobSetsDeleted),
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// ttlTargets states issue 40's scale targets: every TrainJob deleted, on time; what
// the pending TTLs cost the idle controller; the writes of setting the TTLs and of the
// deletions; every JobSet deleted by garbage collection; the peak RSS at 50,000.
func ttlTargets(ts *targetList, r *Result, t *TTL) {
	d, c := t.Deletions, r.Controller
	ts.add("TrainJobs deleted by their TTL", fmt.Sprint(d.Expected), fmt.Sprint(d.Deleted), d.Deleted == d.Expected && d.Expected == r.N, "")
	ts.add("TTL deletion lateness p99", fmt.Sprintf("≤ %.0f s", targetTTLLatenessP99Seconds),
		fmt.Sprintf("%.3f s (p50 %.3f s, max %.3f s)", d.LatenessP99, d.LatenessP50, d.LatenessMax),
		d.Deleted > 0 && d.LatenessP99 <= targetTTLLatenessP99Seconds,
		fmt.Sprintf("expiries scheduled at %.0f/s, %.1f × the API server's TrainJob create rate in this run (%.0f/s): each deletion is a DELETE and garbage collection's JobSet delete; "+
			"lateness = DELETED watch event − (Complete's time + TTL)", t.ScheduledPerSecond, ttlDeleteShare, t.CreatesPerSecond))
	if t.With == nil {
		ts.add("the idle controller with the TTLs pending", "measured", "not measured", false,
			fmt.Sprintf("the TTL patches took %.0f s, more than the %.0f s allowed: no room was left before the first expiry", t.PatchSeconds, t.LeadSeconds))
	}
	if a, b := t.Without, t.With; a != nil && b != nil {
		n := float64(max(d.Expected, 1))
		heap := float64(b.HeapAllocBytes-a.HeapAllocBytes) * 1000 / n
		rss := float64(b.RSSBytes-a.RSSBytes) * 1000 / n
		ts.add("live heap per 1,000 pending TTLs", fmt.Sprintf("≤ %.1f MiB", float64(targetTTLHeapPer1000)/(1<<20)),
			fmt.Sprintf("%.3f MiB, %.0f B a TrainJob (RSS %+.3f MiB)", heap/(1<<20), heap/1000, rss/(1<<20)), heap <= targetTTLHeapPer1000,
			fmt.Sprintf("after a forced garbage collection: %s with the TTLs pending, %s without", mib(b.HeapAllocBytes), mib(a.HeapAllocBytes)))
		writes := 0.0
		for method, v := range b.Requests {
			if isWrite(method) {
				writes += v
			}
		}
		ts.add("API writes while the TTLs pend", "0", fmt.Sprintf("%.0f in %.0f s", writes, b.Seconds), writes == 0,
			fmt.Sprintf("requests with the TTLs pending: %s; without: %s (the idle controller rechecks unserved APIs in discovery every 30 s)", methods(b.Requests, false), methods(a.Requests, false)))
		ts.add("idle CPU with the TTLs pending", fmt.Sprintf("≤ without + %.0f millicores", targetTTLIdleMillicores),
			fmt.Sprintf("%.1f millicores (without: %.1f)", b.Millicores, a.Millicores), b.Millicores <= a.Millicores+targetTTLIdleMillicores, "")
	}
	p := t.PatchController
	ts.add("writes to set the TTLs of finished TrainJobs", "0", fmt.Sprintf("%.0f (%s)", p.Writes, methods(p.Requests, true)), p.Writes == 0,
		fmt.Sprintf("%.0f status syncs, %.2f CPU s for %d patches", t.PatchStatusSyncs, p.CPUSeconds, d.Expected))
	ts.add("API writes per TrainJob at deletion", "1 (DELETE)", fmt.Sprintf("%.3f (%s)", c.WritesPerTrainJob, methods(c.Requests, true)),
		c.Writes == c.Requests["DELETE"] && c.WritesPerTrainJob <= 1, "")
	gcNote := "background propagation: kube-controller-manager's garbage collector (20 client QPS by default, as here) deletes them"
	if t.JobSetsDeleted < d.Expected && t.GCPerSecond > 0 {
		gcNote += fmt.Sprintf("; at %.1f/s the other %d take %.0f min more", t.GCPerSecond, d.Expected-t.JobSetsDeleted, float64(d.Expected-t.JobSetsDeleted)/t.GCPerSecond/60)
	}
	ts.add("JobSets deleted by garbage collection", fmt.Sprint(d.Expected),
		fmt.Sprintf("%d by %s after the last TTL deletion, %.1f/s (TrainJob deleted → JobSet deleted p50 %.1f s, p99 %.1f s)", t.JobSetsDeleted, ttlGCWait, t.GCPerSecond, t.GCLagP50, t.GCLagP99),
		t.JobSetsDeleted == d.Expected, gcNote)
	note := ""
	if r.N < targetTTLRSSAtN {
		note = fmt.Sprintf("the target is for N = %d; this run has N = %d", targetTTLRSSAtN, r.N)
	}
	ts.add("controller peak RSS", fmt.Sprintf("≤ %d MiB at N = %d", targetTTLRSSBytes>>20, targetTTLRSSAtN), fmt.Sprintf("%s at N = %d", mib(c.PeakRSSBytes), r.N),
		c.PeakRSSBytes <= targetTTLRSSBytes, joinNotes(note, "docs/design/memory.md's target at 50,000; the whole run's peak, admission included"))
}

// ttlReport renders TTL mode's sections: the TrainJobs finished, the idle controller
// without and with the TTLs pending, the patches, and the deletions.
func ttlReport(w func(string, ...any), r *Result, t *TTL) {
	w("\n## Finished TrainJobs\n\n")
	w("- every JobSet marked Completed by the benchmark (status patches, as the JobSet controller writes them; no JobSet controller and no pods in this cluster): %.2f s, %d errors\n",
		t.JobSetPatchSeconds, t.JobSetPatchErrors)
	w("- %d TrainJobs Complete with a completionTime %.2f s after the first patch\n", t.Finished, t.CompleteSeconds)
	if t.Without != nil && t.With != nil {
		n := float64(max(t.Deletions.Expected, 1))
		a, b := t.Without, t.With
		w("\n## The idle controller, without and with %d TTLs pending\n\n", t.Deletions.Expected)
		w("| | without TTLs | with the TTLs pending | difference | per 1,000 TrainJobs |\n|---|---|---|---|---|\n")
		w("| window | %.0f s | %.0f s | | |\n", a.Seconds, b.Seconds)
		w("| CPU | %.1f millicores (%.2f s) | %.1f millicores (%.2f s) | %+.1f millicores | |\n", a.Millicores, a.CPUSeconds, b.Millicores, b.CPUSeconds, b.Millicores-a.Millicores)
		w("| RSS (median of 1 s samples) | %s | %s | %+.2f MiB | %+.3f MiB |\n", mib(a.RSSBytes), mib(b.RSSBytes),
			float64(b.RSSBytes-a.RSSBytes)/(1<<20), float64(b.RSSBytes-a.RSSBytes)/(1<<20)*1000/n)
		w("| Go live heap after a forced GC (heap_alloc) | %s | %s | %+.2f MiB | %+.3f MiB |\n", mib(a.HeapAllocBytes), mib(b.HeapAllocBytes),
			float64(b.HeapAllocBytes-a.HeapAllocBytes)/(1<<20), float64(b.HeapAllocBytes-a.HeapAllocBytes)/(1<<20)*1000/n)
		w("| Go heap spans in use after a forced GC (heap_inuse) | %s | %s | %+.2f MiB | %+.3f MiB |\n", mib(a.HeapInuseBytes), mib(b.HeapInuseBytes),
			float64(b.HeapInuseBytes-a.HeapInuseBytes)/(1<<20), float64(b.HeapInuseBytes-a.HeapInuseBytes)/(1<<20)*1000/n)
		w("| heap objects after a forced GC | %.0f | %.0f | %+.0f | %+.1f |\n", a.HeapObjects, b.HeapObjects, b.HeapObjects-a.HeapObjects, (b.HeapObjects-a.HeapObjects)*1000/n)
		w("| goroutines | %.0f | %.0f | %+.0f | |\n", a.Goroutines, b.Goroutines, b.Goroutines-a.Goroutines)
		w("| API requests | %s | %s | | |\n", methods(a.Requests, false), methods(b.Requests, false))
	}
	p := t.PatchController
	w("\n## Setting the TTLs (merge patches of spec.ttlSecondsAfterFinished)\n\n")
	w("- %d patches in %.2f s (%.0f/s, %d errors); the controller idle %.2f s after the first: %.0f status syncs, CPU %.2f s (%.2f s per 1,000), API requests %s\n",
		t.Deletions.Expected, t.PatchSeconds, t.PatchesPerSecond, t.PatchErrors, t.PatchIdleSeconds, t.PatchStatusSyncs, p.CPUSeconds, p.CPUSecondsPer1000, methods(p.Requests, false))
	w("- expiries spread evenly over %.0f s (%.0f/s scheduled: %.1f × the %.0f TrainJob creates/s of this run's burst), the first %.0f s after the last patch\n",
		t.SpanSeconds, t.ScheduledPerSecond, ttlDeleteShare, t.CreatesPerSecond, t.LastPatchToFirstExpiry)
	d := t.Deletions
	w("\n## Deletions (lateness: the DELETED watch event − Complete's time + TTL)\n\n")
	w("- **%d of %d deleted**; lateness p50 **%.3f s**, p99 **%.3f s**, max %.3f s (min %.3f s)\n", d.Deleted, d.Expected, d.LatenessP50, d.LatenessP99, d.LatenessMax, d.LatenessMin)
	w("- first to last deletion %.1f s: %.1f deletes/s achieved against %.1f/s scheduled; the last %.2f s after the last expiry\n", d.Seconds, d.PerSecond, t.ScheduledPerSecond, d.AfterLastExpiry)
	w("- %d JobSets deleted by garbage collection by %s after the last TTL deletion, %.1f/s; TrainJob deleted → JobSet deleted p50 %.2f s, p99 %.2f s, max %.2f s\n",
		t.JobSetsDeleted, ttlGCWait, t.GCPerSecond, t.GCLagP50, t.GCLagP99, t.GCLagMax)
	w("- the controller idle %.1f s after the deletion phase began (its figures below)\n", t.DeletionIdleSeconds)
}

// ttlTimeline is what TTL mode plots: offsets in seconds from the first expiry of every
// expiry, TrainJob deletion and JobSet deletion (sorted), and the lateness (sorted).
type ttlTimeline struct {
	expiries, deleted, jobSetsDeleted, lateness []float64
}

// newTTLTimeline returns the timeline of the expiries and the
// TrainJobs' and JobSets' deletions seen (zero: not seen), in the same order.
func newTTLTimeline(expiries, deleted, jobSets []time.Time) *ttlTimeline {
	tl := &ttlTimeline{}
	if len(expiries) == 0 {
		return tl
	}
	first, _ := expiryRange(expiries)
	for i, at := range expiries {
		tl.expiries = append(tl.expiries, at.Sub(first).Seconds())
		if !deleted[i].IsZero() {
			tl.deleted = append(tl.deleted, deleted[i].Sub(first).Seconds())
			tl.lateness = append(tl.lateness, deleted[i].Sub(at).Seconds())
		}
		if !jobSets[i].IsZero() {
			tl.jobSetsDeleted = append(tl.jobSetsDeleted, jobSets[i].Sub(first).Seconds())
		}
	}
	for _, s := range [][]float64{tl.expiries, tl.deleted, tl.jobSetsDeleted, tl.lateness} {
		sort.Float64s(s)
	}
	return tl
}

// writeTTLPlot draws TTL mode's plot: expiries, TrainJob and JobSet deletions over
// time, and the lateness distribution.
func writeTTLPlot(path string, r *Result, tl *ttlTimeline) error {
	over := plot.New()
	over.Title.Text = fmt.Sprintf("%d TTL deletions over time", r.N)
	over.X.Label.Text = "seconds since the first expiry"
	over.Y.Label.Text = "TrainJobs"
	over.Legend.Top, over.Legend.Left = true, true
	for i, s := range []namedSeries{{"TTL expired", tl.expiries}, {"TrainJob deleted", tl.deleted}, {"JobSet deleted (garbage collection)", tl.jobSetsDeleted}} {
		if err := addLine(over, s.name, cumulative(s.xs), i, i == 0); err != nil {
			return err
		}
	}
	over.Add(plotter.NewGrid())
	lat, err := latencyPanel("% of TrainJobs deleted at or below", 100, 3, []namedSeries{{"deletion − expiry", tl.lateness}})
	if err != nil {
		return err
	}
	return drawTiles(path, 28*vg.Centimeter, 10*vg.Centimeter, over, lat)
}
