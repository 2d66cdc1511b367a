package kueue

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetinformers "sigs.k8s.io/jobset/client-go/informers/externalversions"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerinformers "github.com/trainyard/trainyard/pkg/clientset/informers/externalversions"
)

// TestKueue runs one Trainyard controller (webhooks on, as `make run`) for its
// subtests, which run in parallel, each on its own queue, flavor and node.
func TestKueue(t *testing.T) {
	ctrlproc.Start(t, cluster.Shared(t), controllerBinary)

	t.Run("QueuedTrainJobAdmittedWhenQuotaFrees", testQueuedTrainJobAdmittedWhenQuotaFrees)
	t.Run("BurstNeverExceedsQuota", testBurstNeverExceedsQuota)
	t.Run("PreemptionByHigherPriority", testPreemptionByHigherPriority)
	t.Run("PodsReadyNotEvicted", testPodsReadyNotEvicted)
	t.Run("TopologyGatesReachThePods", testTopologyGatesReachThePods)
	t.Run("MultiKueue", testMultiKueue)
}

// testQueuedTrainJobAdmittedWhenQuotaFrees: with quota for one TrainJob, a second one
// waits suspended (its JobSet, if any, suspended; no pod) while the first runs, is
// admitted once the first completes, and both land on the flavor's node with the node
// selector and toleration of Kueue's runtime patch in their JobSet and pods.
func testQueuedTrainJobAdmittedWhenQuotaFrees(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 8*time.Second)
	ctx := context.Background()

	first := e.createTrainJob(t, e.trainJob("first", 1))
	e.waitPodsRunning(t, first.Name, 1)
	e.waitSDKRunning(t, first.Name)
	second := e.createTrainJob(t, e.trainJob("second", 1))

	// At creation Kueue's webhook suspended it and gave it an (empty) patch.
	if !ptr.Deref(second.Spec.Suspend, false) || kueuePatch(second) == nil {
		t.Fatalf("created TrainJob: suspend %v, runtimePatches %+v; want suspended with Kueue's patch", ptr.Deref(second.Spec.Suspend, false), second.Spec.RuntimePatches)
	}
	// While the first one runs, the second waits: its Workload has no quota, it stays
	// suspended, and nothing of it runs.
	cluster.Eventually(t, 30*time.Second, "second TrainJob's Workload pending", func(ctx context.Context) (bool, string) {
		wl, err := e.workload(ctx, second)
		if err != nil || wl == nil {
			return false, fmt.Sprintf("workload %v, %v", wl, err)
		}
		conds := cluster.Conditions(wl)
		return slices.ContainsFunc(conds, func(c metav1.Condition) bool { return c.Type == "QuotaReserved" && c.Status == metav1.ConditionFalse }),
			fmt.Sprintf("conditions %+v", conds)
	})
	e.checkWaiting(t, second.Name)

	e.waitCondition(t, first.Name, trainer.TrainJobComplete, 90*time.Second)
	e.waitCondition(t, second.Name, trainer.TrainJobComplete, 90*time.Second)

	for _, name := range []string{first.Name, second.Name} {
		tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p := kueuePatch(tj); p == nil || p.TrainingRuntimeSpec == nil || p.TrainingRuntimeSpec.Template == nil ||
			p.TrainingRuntimeSpec.Template.Spec == nil || len(p.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs) == 0 {
			t.Errorf("TrainJob %s: Kueue's runtime patch %+v has no replicated job", name, p)
		}
		// Kueue reads jobsStatus: active > 0 keeps a stopped TrainJob's patch (Stop waits
		// for 0), succeeded counts the pods it reclaims.
		if len(tj.Status.JobsStatus) != 1 || ptr.Deref(tj.Status.JobsStatus[0].Active, -1) != 0 || ptr.Deref(tj.Status.JobsStatus[0].Succeeded, 0) != 1 {
			t.Errorf("TrainJob %s: jobsStatus %s, want one job with active 0 and succeeded 1", name, jobsStatusString(tj.Status.JobsStatus))
		}
		js, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(js.Spec.Suspend, false) {
			t.Errorf("JobSet %s still suspended", name)
		}
		for _, rj := range js.Spec.ReplicatedJobs {
			e.checkPlacement(t, "JobSet "+name+" replicatedJob "+rj.Name, rj.Template.Spec.Template.Spec)
		}
		pods, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + name})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			t.Errorf("TrainJob %s has no pods", name)
		}
		for _, pod := range pods.Items {
			e.checkPlacement(t, "pod "+pod.Name, pod.Spec)
			if pod.Spec.NodeName != e.node {
				t.Errorf("pod %s ran on %q, want the flavor's node %s", pod.Name, pod.Spec.NodeName, e.node)
			}
		}
	}
}

// checkWaiting checks that a TrainJob Kueue has not admitted has a suspended JobSet
// or none, and no pod.
func (e *env) checkWaiting(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !ptr.Deref(tj.Spec.Suspend, false) {
		t.Errorf("TrainJob %s unsuspended while the quota is used", name)
	}
	if js, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, name, metav1.GetOptions{}); err == nil && !ptr.Deref(js.Spec.Suspend, false) {
		t.Errorf("JobSet %s of a waiting TrainJob is not suspended", name)
	}
	pods, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) > 0 {
		t.Errorf("waiting TrainJob %s has %d pods", name, len(pods.Items))
	}
}

// checkPlacement checks that a pod spec carries the flavor's node selector and
// toleration, which only Kueue's runtime patch puts there.
func (e *env) checkPlacement(t *testing.T, what string, spec corev1.PodSpec) {
	t.Helper()
	if spec.NodeSelector[labelPool] != e.ns {
		t.Errorf("%s: nodeSelector %v, want %s=%s from Kueue's patch", what, spec.NodeSelector, labelPool, e.ns)
	}
	want := corev1.Toleration{Key: labelPool, Operator: corev1.TolerationOpEqual, Value: e.ns, Effect: corev1.TaintEffectNoSchedule}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.MatchToleration(&want) }) {
		t.Errorf("%s: tolerations %+v, want %+v from Kueue's patch", what, spec.Tolerations, want)
	}
}

// waitPodsRunning waits until n pods of the TrainJob's JobSet are Running.
func (e *env) waitPodsRunning(t *testing.T, name string, n int) {
	t.Helper()
	cluster.Eventually(t, 60*time.Second, fmt.Sprintf("%d running pods of TrainJob %s", n, name), func(ctx context.Context) (bool, string) {
		pods, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + name})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n, fmt.Sprintf("%d of %d pods running", running, len(pods.Items))
	})
}

// waitSDKRunning waits until the Python SDK's get_job() would report the running
// TrainJob name Running after Kueue admitted it: by the SDK's rule (encoded and cited in
// e2e/trainjob/sdkstatus_test.go), a TrainJob with any condition is Created, so a
// running one must have none — Kueue's resume removes the Suspended condition
// (docs/compatibility.md#suspended-condition; kubeflow/sdk #803).
func (e *env) waitSDKRunning(t *testing.T, name string) {
	t.Helper()
	cluster.Eventually(t, 30*time.Second, fmt.Sprintf("TrainJob %s without conditions while it runs", name), func(ctx context.Context) (bool, string) {
		tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(tj.Status.Conditions) == 0, fmt.Sprintf("conditions %+v", tj.Status.Conditions)
	})
}

// burstSize and burstQuota: quota for exactly burstQuota one-core TrainJobs, and a
// burst of burstSize of them (the 50).
const (
	burstSize  = 50
	burstQuota = 5
)

// testBurstNeverExceedsQuota: quota for exactly burstQuota concurrent TrainJobs and a
// burst of burstSize: never more than burstQuota pods Running, nor JobSets
// unsuspended and unfinished, at once, and every TrainJob completes.
func testBurstNeverExceedsQuota(t *testing.T) {
	t.Parallel()
	e := newEnv(t, burstQuota, 2*time.Second)
	peaks := e.watchConcurrency(t)
	resumes := e.watchResumeLatency(t)

	start := time.Now()
	for i := range burstSize {
		e.createTrainJob(t, e.trainJob(fmt.Sprintf("burst-%02d", i), 1))
	}
	created := time.Since(start)
	cluster.Eventually(t, 8*time.Minute, fmt.Sprintf("%d TrainJobs Complete", burstSize), func(ctx context.Context) (bool, string) {
		list, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		complete := 0
		for _, tj := range list.Items {
			for _, c := range tj.Status.Conditions {
				if c.Type == trainer.TrainJobComplete && c.Status == metav1.ConditionTrue {
					complete++
				}
			}
		}
		return complete == burstSize, fmt.Sprintf("%d of %d complete", complete, len(list.Items))
	})
	pods, jobSets := peaks()
	t.Logf("%d TrainJobs created in %s, all Complete after %s; at most %d pods Running and %d JobSets active at once (quota %d)",
		burstSize, created.Round(time.Millisecond), time.Since(start).Round(time.Second), pods, jobSets, burstQuota)
	if pods > burstQuota || jobSets > burstQuota {
		t.Errorf("at most %d pods Running and %d JobSets active at once, want at most %d (the quota)", pods, jobSets, burstQuota)
	}
	if pods == 0 {
		t.Errorf("no pod was ever seen Running")
	}
	if lat := resumes(); len(lat) != burstSize {
		t.Errorf("%d TrainJobs seen resumed with their JobSet, want %d", len(lat), burstSize)
	} else {
		t.Logf("Kueue's unsuspend of a TrainJob → its JobSet unsuspended (as watched): p50 %s, p99 %s, max %s",
			nearestRank(lat, 0.5), nearestRank(lat, 0.99), lat[len(lat)-1].Round(time.Millisecond))
	}
}

// watchResumeLatency watches the namespace's TrainJobs and JobSets until the test
// ends and returns a func giving, sorted, for each TrainJob seen unsuspended whose
// JobSet was then seen unsuspended, the time between the two (both as this watch saw
// them): how long Trainyard takes to act on Kueue's unsuspend.
func (e *env) watchResumeLatency(t *testing.T) func() []time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var (
		mu                   sync.Mutex
		unsuspended, resumed = map[string]time.Time{}, map[string]time.Time{}
	)
	first := func(m map[string]time.Time, name string) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := m[name]; !ok {
			m[name] = time.Now()
		}
	}
	tjInformer := trainerinformers.NewSharedInformerFactoryWithOptions(e.trainers, 0, trainerinformers.WithNamespace(e.ns)).Trainer().V1alpha1().TrainJobs().Informer()
	onTrainJob := func(obj any) {
		if tj, ok := obj.(*trainer.TrainJob); ok && !ptr.Deref(tj.Spec.Suspend, false) {
			first(unsuspended, tj.Name)
		}
	}
	_, _ = tjInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onTrainJob, UpdateFunc: func(_, obj any) { onTrainJob(obj) }})
	jsInformer := jobsetinformers.NewSharedInformerFactoryWithOptions(e.jobsets, 0, jobsetinformers.WithNamespace(e.ns)).Jobset().V1alpha2().JobSets().Informer()
	onJobSet := func(obj any) {
		if js, ok := obj.(*jobsetv1alpha2.JobSet); ok && !ptr.Deref(js.Spec.Suspend, false) {
			first(resumed, js.Name)
		}
	}
	_, _ = jsInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onJobSet, UpdateFunc: func(_, obj any) { onJobSet(obj) }})
	go tjInformer.Run(ctx.Done())
	go jsInformer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), tjInformer.HasSynced, jsInformer.HasSynced) {
		t.Fatal("watch caches did not sync")
	}
	return func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		var out []time.Duration
		for name, at := range unsuspended {
			if r, ok := resumed[name]; ok {
				out = append(out, max(r.Sub(at), 0))
			}
		}
		slices.Sort(out)
		return out
	}
}

// nearestRank is the q-quantile (0 < q ≤ 1) of sorted by the nearest-rank method.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)].Round(time.Millisecond)
}

// watchConcurrency watches the namespace's pods and JobSets until the test ends and
// returns a func reporting the most pods Running, and the most JobSets unsuspended
// and not finished, seen at once.
func (e *env) watchConcurrency(t *testing.T) func() (pods, jobSets int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var (
		mu                      sync.Mutex
		running, active         = map[string]bool{}, map[string]bool{}
		maxRunning, maxActiveJS int
	)
	track := func(set map[string]bool, peak *int, key string, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			set[key] = true
		} else {
			delete(set, key)
		}
		*peak = max(*peak, len(set))
	}
	podInformer := informers.NewSharedInformerFactoryWithOptions(e.c.Client(), 0, informers.WithNamespace(e.ns)).Core().V1().Pods().Informer()
	onPod := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			track(running, &maxRunning, p.Name, p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil)
		}
	}
	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, obj any) { onPod(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				track(running, &maxRunning, p.Name, false)
			}
		},
	})
	jsInformer := jobsetinformers.NewSharedInformerFactoryWithOptions(e.jobsets, 0, jobsetinformers.WithNamespace(e.ns)).Jobset().V1alpha2().JobSets().Informer()
	onJobSet := func(obj any) {
		if js, ok := obj.(*jobsetv1alpha2.JobSet); ok {
			track(active, &maxActiveJS, js.Name, !ptr.Deref(js.Spec.Suspend, false) && js.Status.TerminalState == "")
		}
	}
	_, _ = jsInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onJobSet, UpdateFunc: func(_, obj any) { onJobSet(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if js, ok := obj.(*jobsetv1alpha2.JobSet); ok {
				track(active, &maxActiveJS, js.Name, false)
			}
		},
	})
	go podInformer.Run(ctx.Done())
	go jsInformer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced, jsInformer.HasSynced) {
		t.Fatal("watch caches did not sync")
	}
	return func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return maxRunning, maxActiveJS
	}
}

func jobsStatusString(statuses []trainer.JobStatus) string {
	var parts []string
	for _, st := range statuses {
		parts = append(parts, fmt.Sprintf("{%s active %d ready %d succeeded %d failed %d}", st.Name,
			ptr.Deref(st.Active, -1), ptr.Deref(st.Ready, -1), ptr.Deref(st.Succeeded, -1), ptr.Deref(st.Failed, -1)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
