package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// ModeKueue runs N TrainJobs through real Kueue (cluster.KueueSource) with quota for
// Config.Quota of them at a time, each to Complete, and measures Trainyard under it
// (issue 16): see runner.runKueue.
const ModeKueue = "kueue"

// DefaultKueueQuota is Kueue mode's quota in TrainJobs (issue 16: 200 at a time).
const DefaultKueueQuota = 200

// kueueQueue names the benchmark's ResourceFlavor, ClusterQueue and LocalQueue (in
// benchNamespace).
const kueueQueue = "bench"

// Issue 16's target for Kueue's unsuspend → JobSet unsuspended: issue 9's admission
// p99 (targetP99Seconds); issue 16 sets none of its own.
const targetKueueResumeP99Seconds = targetP99Seconds

// runKueue is Kueue mode on a cluster running Kueue: a ResourceFlavor, a ClusterQueue
// with quota for Config.Quota TrainJobs of numNodes pods (in pods), a LocalQueue in
// benchNamespace, the controller, then the N TrainJobs of measure, each submitted to
// the LocalQueue, run to Complete while kueueRecorder watches what Kueue and Trainyard
// do to them.
func (r *runner) runKueue(ctx context.Context) (*Result, error) {
	res := newResult(r.cfg)
	if err := r.installRuntime(ctx); err != nil {
		return nil, err
	}
	if err := r.createNamespace(ctx, benchNamespace); err != nil {
		return nil, err
	}
	quotaPods := r.cfg.Quota * int(r.cfg.NumNodes)
	if err := r.createKueueQueue(ctx, benchNamespace, kueueQueue, quotaPods); err != nil {
		return nil, err
	}
	r.say("Kueue %s: ClusterQueue %s with quota %d pods (%d TrainJobs of %d pods), LocalQueue %s/%s",
		cluster.KueueSource.Version, kueueQueue, quotaPods, r.cfg.Quota, r.cfg.NumNodes, benchNamespace, kueueQueue)
	ctrl, _, err := r.startController(ctx)
	if err != nil {
		return nil, err
	}
	defer ctrl.Stop()

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rec, err := r.watchKueue(watchCtx, benchNamespace)
	if err != nil {
		return nil, err
	}
	r.queueName = kueueQueue
	m, err := r.measure(ctx, ctrl, benchNamespace, r.cfg.N, true, 0)
	if err != nil {
		return nil, err
	}
	stopWatch()
	m.fill(res)
	if r.cfg.Webhooks {
		res.Admission.Reviews = reviewFigures(m.before.metrics, m.after.metrics)
	}
	record := rec.record()
	res.Kueue = kueueFigures(m.created, record, r.cfg.Quota, r.cfg.NumNodes)
	events, err := cluster.ReadAuditLog(r.cluster.AuditLogPath())
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	res.Kueue.WritesPerTrainJob = kueueWrites(events, benchNamespace, r.cfg.N)
	r.timeline = m.timeline
	r.timeline.kueue = newKueueTimeline(m.created.Start, record)
	res.Targets = evaluateTargets(res)
	r.say("Kueue: %d finished in %.1f s; at most %d TrainJobs running (quota %d); unsuspend → JobSet unsuspended %s",
		res.Kueue.Finished, res.Kueue.Seconds, res.Kueue.PeakTrainJobs, res.Kueue.Quota, res.Kueue.UnsuspendToJobSetUnsuspended)
	return res, nil
}

// createKueueQueue creates the ResourceFlavor kueueQueue (unless it exists), the
// ClusterQueue clusterQueue (quotaPods pods, for namespace ns) and, in ns, the
// LocalQueue kueueQueue pointing at it, and waits until Kueue admits from them.
func (r *runner) createKueueQueue(ctx context.Context, ns, clusterQueue string, quotaPods int) error {
	c := r.cluster
	spec := cluster.KueueClusterQueueSpec(ns, kueueQueue, corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(quotaPods), resource.DecimalSI)})
	if _, err := c.CreateKueueObject(ctx, cluster.KueueResourceFlavorGVR, "", kueueQueue, map[string]any{"spec": map[string]any{}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := c.CreateKueueObject(ctx, cluster.KueueClusterQueueGVR, "", clusterQueue, map[string]any{"spec": spec}); err != nil {
		return err
	}
	if _, err := c.CreateKueueObject(ctx, cluster.KueueLocalQueueGVR, ns, kueueQueue, map[string]any{"spec": map[string]any{"clusterQueue": clusterQueue}}); err != nil {
		return err
	}
	return c.WaitKueueQueueActive(ctx, clusterQueue, ns, kueueQueue, time.Minute)
}

// kueueTrainJob is what the watches saw of one TrainJob, as receive times (zero: not
// seen).
type kueueTrainJob struct {
	// seen: the TrainJob watch saw it (its JobSet's watch may be first);
	// suspendedAtCreate: the first state that watch saw had spec.suspend true.
	seen, suspendedAtCreate bool
	// unsuspended is when it was first seen with spec.suspend false after being seen
	// suspended (Kueue's unsuspend); finished when first seen Complete or Failed.
	unsuspended, finished time.Time
	// jobSet is when its JobSet was first seen, jobSetUnsuspended when first seen with
	// spec.suspend false.
	jobSet, jobSetUnsuspended time.Time
}

// countChange is one step of a running count: +1 or -1 at a receive time.
type countChange struct {
	at    time.Time
	delta int
}

// kueueRecord is what kueueRecorder saw, by TrainJob name (a JobSet has its
// TrainJob's name), and the running counts' changes in the order seen.
type kueueRecord struct {
	trainJobs                       map[string]*kueueTrainJob
	runningTrainJobs, activeJobSets []countChange
	runningPods                     []countChange
}

// running tracks which keys are "on" and records each countChange of their number.
type running struct {
	on      map[string]bool
	changes []countChange
}

func (r *running) set(key string, on bool, at time.Time) {
	if r.on[key] == on {
		return
	}
	delta := -1
	if on {
		r.on[key] = true
		delta = 1
	} else {
		delete(r.on, key)
	}
	r.changes = append(r.changes, countChange{at: at, delta: delta})
}

// kueueRecorder records, from watches of one namespace's TrainJobs, JobSets and pods,
// the moments of kueueTrainJob and the running counts.
type kueueRecorder struct {
	mu                   sync.Mutex
	trainJobs            map[string]*kueueTrainJob
	tjs, jobSets, podsOn running
}

func (k *kueueRecorder) trainJob(name string) *kueueTrainJob {
	tj, ok := k.trainJobs[name]
	if !ok {
		tj = &kueueTrainJob{}
		k.trainJobs[name] = tj
	}
	return tj
}

func (k *kueueRecorder) onTrainJob(obj any) {
	tj, ok := obj.(*trainer.TrainJob)
	if !ok {
		return
	}
	now := time.Now()
	suspended := ptr.Deref(tj.Spec.Suspend, false)
	finished := meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) ||
		meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed)
	k.mu.Lock()
	defer k.mu.Unlock()
	rec := k.trainJob(tj.Name)
	if !rec.seen {
		rec.seen, rec.suspendedAtCreate = true, suspended
	}
	if !suspended && rec.suspendedAtCreate && rec.unsuspended.IsZero() {
		rec.unsuspended = now
	}
	if finished && rec.finished.IsZero() {
		rec.finished = now
	}
	k.tjs.set(tj.Name, !suspended && !finished, now)
}

func (k *kueueRecorder) onJobSet(obj any, deleted bool) {
	js, ok := obj.(*jobsetv1alpha2.JobSet)
	if !ok {
		return
	}
	now := time.Now()
	unsuspended := !ptr.Deref(js.Spec.Suspend, false)
	k.mu.Lock()
	defer k.mu.Unlock()
	rec := k.trainJob(js.Name)
	if rec.jobSet.IsZero() {
		rec.jobSet = now
	}
	if unsuspended && rec.jobSetUnsuspended.IsZero() {
		rec.jobSetUnsuspended = now
	}
	k.jobSets.set(js.Name, !deleted && unsuspended && js.Status.TerminalState == "", now)
}

func (k *kueueRecorder) onPod(obj any, deleted bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.podsOn.set(p.Name, !deleted && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil, now)
}

// record returns a copy of what was seen so far.
func (k *kueueRecorder) record() kueueRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := kueueRecord{
		trainJobs:        make(map[string]*kueueTrainJob, len(k.trainJobs)),
		runningTrainJobs: slices.Clone(k.tjs.changes),
		activeJobSets:    slices.Clone(k.jobSets.changes),
		runningPods:      slices.Clone(k.podsOn.changes),
	}
	for name, tj := range k.trainJobs {
		c := *tj
		out.trainJobs[name] = &c
	}
	return out
}

// watchKueue starts watches of namespace ns's TrainJobs, JobSets and pods that record
// into the returned kueueRecorder until ctx ends; it returns once they have synced.
func (r *runner) watchKueue(ctx context.Context, ns string) (*kueueRecorder, error) {
	k := &kueueRecorder{
		trainJobs: map[string]*kueueTrainJob{},
		tjs:       running{on: map[string]bool{}}, jobSets: running{on: map[string]bool{}}, podsOn: running{on: map[string]bool{}},
	}
	// A deleted object arrives as itself, or wrapped when the watch missed the delete.
	unwrap := func(obj any) any {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return d.Obj
		}
		return obj
	}
	handler := func(on func(obj any, deleted bool)) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { on(obj, false) },
			UpdateFunc: func(_, obj any) { on(obj, false) },
			DeleteFunc: func(obj any) { on(unwrap(obj), true) },
		}
	}
	if err := startInformer(ctx, r.trainers.TrainerV1alpha1().RESTClient(), "trainjobs", ns, &trainer.TrainJob{},
		handler(func(obj any, _ bool) { k.onTrainJob(obj) })); err != nil {
		return nil, err
	}
	if err := startInformer(ctx, r.jobsets.JobsetV1alpha2().RESTClient(), "jobsets", ns, &jobsetv1alpha2.JobSet{}, handler(k.onJobSet)); err != nil {
		return nil, err
	}
	if err := startInformer(ctx, r.kube.CoreV1().RESTClient(), "pods", ns, &corev1.Pod{}, handler(k.onPod)); err != nil {
		return nil, err
	}
	return k, nil
}
