package kueue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetinformers "sigs.k8s.io/jobset/client-go/informers/externalversions"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerinformers "github.com/trainyard/trainyard/pkg/clientset/informers/externalversions"
)

// testPreemptionByHigherPriority: quota for one TrainJob, preemption of lower
// priority within the ClusterQueue. A running low-priority TrainJob is preempted by
// a high-priority one: Kueue suspends it, Trainyard suspends its JobSet and reports
// jobsStatus active 0, Kueue then clears its runtime patch (it waits for active 0);
// the preemptor runs and completes, and the victim is admitted again, resumed with a
// new patch, and completes.
func testPreemptionByHigherPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 30*time.Second, func(_ *env, _, clusterQueue map[string]any) {
		clusterQueue["preemption"] = map[string]any{"withinClusterQueue": "LowerPriority"}
	})
	e.createRuntime(t, "short", 5*time.Second, nil)
	for name, value := range map[string]int64{"low": 100, "high": 1000} {
		e.create(t, cluster.KueueWorkloadPriorityClassGVR, "", e.ns+"-"+name, map[string]any{"value": value})
	}
	stops := e.watchVictim(t, "victim")

	victimJob := e.trainJob("victim", 1)
	victimJob.Labels[cluster.KueuePriorityClassLabel] = e.ns + "-low"
	victim := e.createTrainJob(t, victimJob)
	e.waitPodsRunning(t, victim.Name, 1)

	preemptorJob := e.trainJob("preemptor", 1)
	preemptorJob.Labels[cluster.KueuePriorityClassLabel] = e.ns + "-high"
	preemptorJob.Spec.RuntimeRef.Name = "short"
	preemptor := e.createTrainJob(t, preemptorJob)

	e.waitCondition(t, preemptor.Name, trainer.TrainJobComplete, 2*time.Minute)
	stopped := stops()
	if !stopped.suspended || !stopped.jobSetSuspended || !stopped.inactive || !stopped.patchCleared {
		t.Errorf("victim while preempted: TrainJob suspended %v, JobSet suspended %v, jobsStatus active 0 %v, Kueue's patch cleared %v; want all",
			stopped.suspended, stopped.jobSetSuspended, stopped.inactive, stopped.patchCleared)
	}
	victimAfter, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(context.Background(), victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if meta.IsStatusConditionTrue(victimAfter.Status.Conditions, trainer.TrainJobComplete) {
		t.Errorf("the victim completed before the preemptor: conditions %+v", victimAfter.Status.Conditions)
	}

	// The victim is admitted again once the preemptor is done; its pods run 30 s,
	// from their new start.
	e.waitCondition(t, victim.Name, trainer.TrainJobComplete, 3*time.Minute)
	js, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(context.Background(), victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rj := range js.Spec.ReplicatedJobs {
		e.checkPlacement(t, "re-admitted JobSet "+victim.Name+" replicatedJob "+rj.Name, rj.Template.Spec.Template.Spec)
	}
}

// victimStops is what was seen of a TrainJob while Kueue stopped it.
type victimStops struct {
	suspended       bool // spec.suspend true after it ran
	jobSetSuspended bool // its JobSet suspended after it ran
	inactive        bool // jobsStatus with every active 0 while suspended
	patchCleared    bool // Kueue's patch without replicatedJobs while suspended, after it ran
}

// watchVictim watches the TrainJob name and its JobSet until the test ends and
// returns a func reporting what was seen after it first ran (its JobSet unsuspended).
func (e *env) watchVictim(t *testing.T, name string) func() victimStops {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var (
		mu   sync.Mutex
		ran  bool
		seen victimStops
	)
	jsInformer := jobsetinformers.NewSharedInformerFactoryWithOptions(e.jobsets, 0, jobsetinformers.WithNamespace(e.ns)).Jobset().V1alpha2().JobSets().Informer()
	onJobSet := func(obj any) {
		js, ok := obj.(*jobsetv1alpha2.JobSet)
		if !ok || js.Name != name {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !ptr.Deref(js.Spec.Suspend, false) {
			ran = true
		} else if ran {
			seen.jobSetSuspended = true
		}
	}
	_, _ = jsInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onJobSet, UpdateFunc: func(_, obj any) { onJobSet(obj) }})
	tjInformer := trainerinformers.NewSharedInformerFactoryWithOptions(e.trainers, 0, trainerinformers.WithNamespace(e.ns)).Trainer().V1alpha1().TrainJobs().Informer()
	onTrainJob := func(obj any) {
		tj, ok := obj.(*trainer.TrainJob)
		if !ok || tj.Name != name {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !ran || !ptr.Deref(tj.Spec.Suspend, false) {
			return
		}
		seen.suspended = true
		inactive := len(tj.Status.JobsStatus) > 0
		for _, st := range tj.Status.JobsStatus {
			inactive = inactive && ptr.Deref(st.Active, 0) == 0
		}
		seen.inactive = seen.inactive || inactive
		if p := kueuePatch(tj); p != nil && (p.TrainingRuntimeSpec == nil || p.TrainingRuntimeSpec.Template == nil ||
			p.TrainingRuntimeSpec.Template.Spec == nil || len(p.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs) == 0) {
			seen.patchCleared = true
		}
	}
	_, _ = tjInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onTrainJob, UpdateFunc: func(_, obj any) { onTrainJob(obj) }})
	go jsInformer.Run(ctx.Done())
	go tjInformer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), jsInformer.HasSynced, tjInformer.HasSynced) {
		t.Fatal("watch caches did not sync")
	}
	return func() victimStops {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// podsReadyTimeout is Kueue's waitForPodsReady timeout in this package's cluster:
// every admitted TrainJob's pods must all be ready that long after its admission, or
// Kueue evicts it. It needs Trainyard's jobsStatus ready counts to see them.
const podsReadyTimeout = 20 * time.Second

// testPodsReadyNotEvicted: with waitForPodsReady on, a two-node TrainJob whose pods
// become ready and run past the timeout is not evicted: Kueue sees its pods ready
// through jobsStatus (ready + succeeded against the JobSet's replicas), marks the
// Workload PodsReady, and the TrainJob runs once, to Complete.
func testPodsReadyNotEvicted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, podsReadyTimeout+20*time.Second)
	stops := e.watchVictim(t, "ready")
	tj := e.trainJob("ready", 1)
	tj.Spec.Trainer.NumNodes = ptr.To[int32](2)
	tj = e.createTrainJob(t, tj)

	cluster.Eventually(t, podsReadyTimeout, "Workload PodsReady within Kueue's timeout", func(ctx context.Context) (bool, string) {
		wl, err := e.workload(ctx, tj)
		if err != nil || wl == nil {
			return false, fmt.Sprintf("workload %v, %v", wl, err)
		}
		conds := cluster.Conditions(wl)
		return meta.IsStatusConditionTrue(conds, "PodsReady"), fmt.Sprintf("conditions %+v", conds)
	})
	e.waitCondition(t, tj.Name, trainer.TrainJobComplete, 2*time.Minute)

	if seen := stops(); seen.suspended || seen.jobSetSuspended {
		t.Errorf("TrainJob suspended (%v) or its JobSet suspended (%v) after it started: evicted", seen.suspended, seen.jobSetSuspended)
	}
	wl, err := e.workload(context.Background(), tj)
	if err != nil || wl == nil {
		t.Fatalf("workload %v, %v", wl, err)
	}
	if conds := cluster.Conditions(wl); meta.IsStatusConditionTrue(conds, "Evicted") {
		t.Errorf("Workload evicted: %+v", conds)
	}
}
