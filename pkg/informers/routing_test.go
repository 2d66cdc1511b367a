package informers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetfake "sigs.k8s.io/jobset/client-go/clientset/versioned/fake"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

const (
	build  = "build"
	status = "status"
	// sentinelNS holds the objects the harness uses to flush an informer's handler.
	sentinelNS = "sentinel"
	timeout    = 10 * time.Second
)

// route is one Router.Enqueue call.
type route struct {
	Stage string
	Key   cache.ObjectName
}

func (r route) String() string { return r.Stage + ":" + r.Key.String() }

// fakeRouter records the routed keys.
type fakeRouter struct {
	mu     sync.Mutex
	routes []route
}

func (r *fakeRouter) Enqueue(stage string, key cache.ObjectName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes = append(r.routes, route{stage, key})
}

// EnqueueAfter records the route like Enqueue; delays are not modelled.
func (r *fakeRouter) EnqueueAfter(stage string, key cache.ObjectName, _ time.Duration) {
	r.Enqueue(stage, key)
}

func (r *fakeRouter) snapshot() []route {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.routes)
}

func (r *fakeRouter) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes = nil
}

// deletions records the keys passed to onDelete.
// keyLog records the keys a Hooks function was called with.
type keyLog struct {
	mu   sync.Mutex
	keys []cache.ObjectName
}

func (d *keyLog) add(key cache.ObjectName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keys = append(d.keys, key)
}

func (d *keyLog) snapshot() []cache.ObjectName {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.keys)
}

// harness runs the real informers, with Route's handlers, on fake clientsets.
//
// Asserting that an event routes nowhere needs no sleep: each informer delivers its
// events to a handler in order, so after an action the harness makes one more change
// to the same informer (a sentinel) whose route is known, waits for that route, and
// then everything the action routed has been recorded.
type harness struct {
	ctx     context.Context
	trainer *trainerfake.Clientset
	jobsets *jobsetfake.Clientset
	in      *Informers
	router  *fakeRouter
	deleted *keyLog // Hooks.Deleted
	updated *keyLog // Hooks.Updated
	// jobSetsDeleted are the JobSets Hooks.JobSetDeleted was called with.
	jobSetsDeleted *keyLog
	// sentinels counts sentinel changes, to name them.
	sentinels int
}

// watchStarted makes client's watches register with its tracker before they are
// counted, so that nothing created after waitForWatches is missed (the fake tracker has
// no resourceVersion to resume from).
type watchStarted struct {
	mu      sync.Mutex
	started map[string]int
}

func (w *watchStarted) install(fake *clienttesting.Fake, tracker clienttesting.ObjectTracker) {
	fake.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := action.(clienttesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		wi, err := tracker.Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		w.mu.Lock()
		w.started[action.GetResource().Resource]++
		w.mu.Unlock()
		return true, wi, nil
	})
}

func (w *watchStarted) all(resources ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range resources {
		if w.started[r] == 0 {
			return false
		}
	}
	return true
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	h := &harness{
		ctx:     ctx,
		trainer: trainerfake.NewSimpleClientset(),
		jobsets: jobsetfake.NewSimpleClientset(),
		router:  &fakeRouter{},
		deleted: &keyLog{},
		updated: &keyLog{},

		jobSetsDeleted: &keyLog{},
	}
	watches := &watchStarted{started: map[string]int{}}
	watches.install(&h.trainer.Fake, h.trainer.Tracker())
	watches.install(&h.jobsets.Fake, h.jobsets.Tracker())

	in, err := New(h.trainer, h.jobsets, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.in = in
	if err := in.Route(logger, h.router, Routes{Build: build, Status: status}, Hooks{
		Updated:       func(tj *trainer.TrainJob) { h.updated.add(cache.MetaObjectToName(tj)) },
		Deleted:       h.deleted.add,
		JobSetDeleted: func(js *jobsetv1alpha2.JobSet) { h.jobSetsDeleted.add(cache.MetaObjectToName(js)) },
	}); err != nil {
		t.Fatal(err)
	}
	in.Start(ctx)
	t.Cleanup(func() {
		cancel()
		in.Shutdown()
	})
	if !in.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	if !in.HasSynced() {
		t.Fatal("HasSynced false after WaitForCacheSync")
	}
	h.poll(t, "watches to start", func() bool {
		return watches.all("trainjobs", "trainingruntimes", "clustertrainingruntimes", "jobsets")
	})

	// The TrainJobs the runtime sentinels route.
	h.createTrainJob(t, utiltesting.MakeTrainJob(sentinelNS, "by-trainingruntime").RuntimeRef(trainer.TrainingRuntimeKind, "sentinel").Obj())
	h.createTrainJob(t, utiltesting.MakeTrainJob(sentinelNS, "by-clustertrainingruntime").RuntimeRef(trainer.ClusterTrainingRuntimeKind, "sentinel").Obj())
	h.expect(t, nil,
		route{build, cache.ObjectName{Namespace: sentinelNS, Name: "by-trainingruntime"}},
		route{build, cache.ObjectName{Namespace: sentinelNS, Name: "by-clustertrainingruntime"}})
	if _, err := h.trainer.TrainerV1alpha1().TrainingRuntimes(sentinelNS).Create(ctx, utiltesting.MakeTrainingRuntime(sentinelNS, "sentinel"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.trainer.TrainerV1alpha1().ClusterTrainingRuntimes().Create(ctx, utiltesting.MakeClusterTrainingRuntime("sentinel"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil,
		route{build, cache.ObjectName{Namespace: sentinelNS, Name: "by-trainingruntime"}},
		route{build, cache.ObjectName{Namespace: sentinelNS, Name: "by-clustertrainingruntime"}})
	return h
}

func (h *harness) poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(h.ctx, 5*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// expect waits until the recorded routes include every route of until, then asserts
// that the rest are exactly want (in any order) and clears the record.
func (h *harness) expect(t *testing.T, want []route, until ...route) {
	t.Helper()
	var got []route
	h.poll(t, fmt.Sprintf("routes %v", until), func() bool {
		got = h.router.snapshot()
		rest := slices.Clone(got)
		for _, u := range until {
			i := slices.Index(rest, u)
			if i < 0 {
				return false
			}
			rest = slices.Delete(rest, i, i+1)
		}
		got = rest
		return true
	})
	h.router.reset()
	sortRoutes := func(rs []route) []route {
		rs = slices.Clone(rs)
		slices.SortFunc(rs, func(a, b route) int { return strings.Compare(a.String(), b.String()) })
		return rs
	}
	if diff := cmp.Diff(sortRoutes(want), sortRoutes(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
}

// flushTrainJobs makes a TrainJob change that routes to build, and returns its route.
func (h *harness) flushTrainJobs(t *testing.T) route {
	t.Helper()
	h.sentinels++
	name := fmt.Sprintf("flush-%d", h.sentinels)
	h.createTrainJob(t, utiltesting.MakeTrainJob(sentinelNS, name).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "none").Obj())
	return route{build, cache.ObjectName{Namespace: sentinelNS, Name: name}}
}

// flushJobSets makes a JobSet change that routes to status, and returns its route.
func (h *harness) flushJobSets(t *testing.T) route {
	t.Helper()
	h.sentinels++
	name := fmt.Sprintf("flush-%d", h.sentinels)
	owner := utiltesting.MakeTrainJob(sentinelNS, name).Obj()
	h.createJobSet(t, utiltesting.MakeJobSet(sentinelNS, name).ControlledBy(owner).Obj())
	return route{status, cache.ObjectName{Namespace: sentinelNS, Name: name}}
}

// flushTrainingRuntimes bumps the sentinel TrainingRuntime's generation, which routes
// its TrainJob to build, and returns that route.
func (h *harness) flushTrainingRuntimes(t *testing.T) route {
	t.Helper()
	rts := h.trainer.TrainerV1alpha1().TrainingRuntimes(sentinelNS)
	rt, err := rts.Get(h.ctx, "sentinel", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt.Generation++
	if _, err := rts.Update(h.ctx, rt, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return route{build, cache.ObjectName{Namespace: sentinelNS, Name: "by-trainingruntime"}}
}

// flushClusterTrainingRuntimes is flushTrainingRuntimes for ClusterTrainingRuntimes.
func (h *harness) flushClusterTrainingRuntimes(t *testing.T) route {
	t.Helper()
	ctrs := h.trainer.TrainerV1alpha1().ClusterTrainingRuntimes()
	rt, err := ctrs.Get(h.ctx, "sentinel", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt.Generation++
	if _, err := ctrs.Update(h.ctx, rt, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return route{build, cache.ObjectName{Namespace: sentinelNS, Name: "by-clustertrainingruntime"}}
}

func (h *harness) createTrainJob(t *testing.T, tj *trainer.TrainJob) {
	t.Helper()
	if _, err := h.trainer.TrainerV1alpha1().TrainJobs(tj.Namespace).Create(h.ctx, tj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) createJobSet(t *testing.T, js *jobsetv1alpha2.JobSet) {
	t.Helper()
	if _, err := h.jobsets.JobsetV1alpha2().JobSets(js.Namespace).Create(h.ctx, js, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) getTrainJob(t *testing.T, ns, name string) *trainer.TrainJob {
	t.Helper()
	tj, err := h.trainer.TrainerV1alpha1().TrainJobs(ns).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tj
}

func TestRouteTrainJobs(t *testing.T) {
	h := newHarness(t)
	ctx := h.ctx
	tjs := h.trainer.TrainerV1alpha1().TrainJobs("team-a")
	llm := cache.ObjectName{Namespace: "team-a", Name: "llm"}

	// Creation: build.
	h.createTrainJob(t, utiltesting.MakeTrainJob("team-a", "llm").Obj())
	h.expect(t, nil, route{build, llm})

	// Status update (same generation): nowhere.
	tj := h.getTrainJob(t, "team-a", "llm")
	tj.Status.Conditions = []metav1.Condition{utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, "Suspended", "x")}
	tj.Status.Conditions[0].LastTransitionTime = metav1.Now()
	if _, err := tjs.UpdateStatus(ctx, tj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil, h.flushTrainJobs(t))

	// Metadata update (same generation): nowhere.
	tj = h.getTrainJob(t, "team-a", "llm")
	tj.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "q"}
	if _, err := tjs.Update(ctx, tj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil, h.flushTrainJobs(t))

	// Spec update (new generation): build.
	tj = h.getTrainJob(t, "team-a", "llm")
	tj.Spec.Suspend = new(bool)
	tj.Generation++
	if _, err := tjs.Update(ctx, tj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, []route{{build, llm}}, h.flushTrainJobs(t))

	// Spec update of a finished TrainJob: the status stage, which keeps its Suspended
	// condition following spec.suspend; nothing is rebuilt.
	tj = h.getTrainJob(t, "team-a", "llm")
	tj.Status.Conditions = append(tj.Status.Conditions, utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "done"))
	if _, err := tjs.UpdateStatus(ctx, tj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil, h.flushTrainJobs(t))
	tj = h.getTrainJob(t, "team-a", "llm")
	tj.Spec.Suspend = ptr.To(true)
	tj.Generation++
	if _, err := tjs.Update(ctx, tj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, []route{{status, llm}}, h.flushTrainJobs(t))

	// Every update, routed or not, reaches Hooks.Updated.
	if diff := cmp.Diff(slices.Repeat([]cache.ObjectName{llm}, 5), h.updated.snapshot()); diff != "" {
		t.Errorf("Hooks.Updated keys, one per update (-want +got):\n%s", diff)
	}

	// Deletion: Hooks.Deleted, no route.
	if err := tjs.Delete(ctx, "llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil, h.flushTrainJobs(t))
	if diff := cmp.Diff([]cache.ObjectName{llm}, h.deleted.snapshot()); diff != "" {
		t.Errorf("Hooks.Deleted keys (-want +got):\n%s", diff)
	}
}

func TestRouteRuntimes(t *testing.T) {
	h := newHarness(t)
	ctx := h.ctx
	key := func(ns, name string) cache.ObjectName { return cache.ObjectName{Namespace: ns, Name: name} }

	// TrainJobs referencing various runtimes, some of them waiting for theirs.
	for _, tj := range []*trainer.TrainJob{
		utiltesting.MakeTrainJob("team-a", "tr-1").RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj(),
		utiltesting.MakeTrainJob("team-a", "tr-2").RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj(),
		utiltesting.MakeTrainJob("team-b", "tr-other-ns").RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj(),
		utiltesting.MakeTrainJob("team-a", "tr-other-name").RuntimeRef(trainer.TrainingRuntimeKind, "jax").Obj(),
		utiltesting.MakeTrainJob("team-a", "ctr-defaulted").RuntimeRef("", "torch").Obj(),
		utiltesting.MakeTrainJob("team-b", "ctr").RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj(),
		utiltesting.MakeTrainJob("team-a", "unsupported").RuntimeRef("Foo", "torch").Obj(),
	} {
		h.createTrainJob(t, tj)
	}
	h.expect(t, nil,
		route{build, key("team-a", "tr-1")}, route{build, key("team-a", "tr-2")},
		route{build, key("team-b", "tr-other-ns")}, route{build, key("team-a", "tr-other-name")},
		route{build, key("team-a", "ctr-defaulted")}, route{build, key("team-b", "ctr")},
		route{build, key("team-a", "unsupported")})

	// TrainingRuntime team-a/torch appears: its two TrainJobs in team-a build.
	trs := h.trainer.TrainerV1alpha1().TrainingRuntimes("team-a")
	if _, err := trs.Create(ctx, utiltesting.MakeTrainingRuntime("team-a", "torch"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, []route{{build, key("team-a", "tr-1")}, {build, key("team-a", "tr-2")}}, h.flushTrainingRuntimes(t))

	// Updated without a spec change (labels): nothing.
	tr, err := trs.Get(ctx, "torch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr.Labels = map[string]string{"trainer.kubeflow.org/framework": "torch"}
	if _, err := trs.Update(ctx, tr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil, h.flushTrainingRuntimes(t))

	// Spec change (new generation): its TrainJobs build again.
	tr.Generation++
	if _, err := trs.Update(ctx, tr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, []route{{build, key("team-a", "tr-1")}, {build, key("team-a", "tr-2")}}, h.flushTrainingRuntimes(t))

	// A runtime nobody references: nothing.
	if _, err := trs.Create(ctx, utiltesting.MakeTrainingRuntime("team-a", "unused"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil, h.flushTrainingRuntimes(t))

	// ClusterTrainingRuntime torch appears: the TrainJobs referencing it, kind defaulted
	// or explicit, in any namespace.
	ctrs := h.trainer.TrainerV1alpha1().ClusterTrainingRuntimes()
	if _, err := ctrs.Create(ctx, utiltesting.MakeClusterTrainingRuntime("torch"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, []route{{build, key("team-a", "ctr-defaulted")}, {build, key("team-b", "ctr")}}, h.flushClusterTrainingRuntimes(t))

	ctr, err := ctrs.Get(ctx, "torch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr.Annotations = map[string]string{"note": "x"}
	if _, err := ctrs.Update(ctx, ctr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil, h.flushClusterTrainingRuntimes(t))

	// Runtime deletions route nowhere (running TrainJobs keep their JobSet).
	if err := ctrs.Delete(ctx, "torch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil, h.flushClusterTrainingRuntimes(t))
}

func TestRouteJobSets(t *testing.T) {
	h := newHarness(t)
	ctx := h.ctx
	jss := h.jobsets.JobsetV1alpha2().JobSets("team-a")
	owner := utiltesting.MakeTrainJob("team-a", "llm").Obj()
	llm := cache.ObjectName{Namespace: "team-a", Name: "llm"}

	// Controlled by a TrainJob: add, update and delete go to status with the TrainJob's
	// key, never to build.
	h.createJobSet(t, utiltesting.MakeJobSet("team-a", "llm-jobset").ControlledBy(owner).Obj())
	h.expect(t, nil, route{status, llm})

	js, err := jss.Get(ctx, "llm-jobset", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js.Status.ReplicatedJobsStatus = []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1}}
	if _, err := jss.UpdateStatus(ctx, js, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, []route{{status, llm}}, h.flushJobSets(t))

	if err := jss.Delete(ctx, "llm-jobset", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, []route{{status, llm}}, h.flushJobSets(t))

	// Not controlled by a TrainJob: nothing.
	h.createJobSet(t, utiltesting.MakeJobSet("team-a", "foreign").Obj())
	notController := utiltesting.MakeJobSet("team-a", "owned").Obj()
	notController.OwnerReferences = []metav1.OwnerReference{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "llm", UID: owner.UID}}
	h.createJobSet(t, notController)
	h.expect(t, nil, h.flushJobSets(t))
	if err := jss.Delete(ctx, "foreign", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect(t, nil, h.flushJobSets(t))
	if got := h.deleted.snapshot(); len(got) != 0 {
		t.Errorf("onDelete called for JobSets: %v", got)
	}
	// Hooks.JobSetDeleted: the deleted JobSet a TrainJob controlled, not the foreign one.
	if diff := cmp.Diff([]cache.ObjectName{{Namespace: "team-a", Name: "llm-jobset"}}, h.jobSetsDeleted.snapshot()); diff != "" {
		t.Errorf("Hooks.JobSetDeleted JobSets (-want +got):\n%s", diff)
	}
}

// TestRouteJobSetRestarts: a JobSet restart (status.restarts up) whose pods mount the
// TrainJob's create-only Secrets also goes to build, through the trimmed cache — the
// rebuilt plan creates a deleted Secret again, which the controller cannot see — and a
// JobSet mounting only the runtime's own Secrets, or an update that is no restart, to
// status only.
func TestRouteJobSetRestarts(t *testing.T) {
	h := newHarness(t)
	jss := h.jobsets.JobsetV1alpha2().JobSets("team-a")
	llm := cache.ObjectName{Namespace: "team-a", Name: "llm"}
	h.createJobSet(t, fullJobSet()) // mounts llm-mpi-ssh-auth-<suffix> and hf-token
	h.expect(t, nil, route{status, llm})
	tokenOnly := fullJobSet()
	tokenOnly.Name = "plain"
	tokenOnly.OwnerReferences[0].Name = "plain"
	tokenOnly.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec.Volumes = tokenOnly.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec.Volumes[1:]
	h.createJobSet(t, tokenOnly)
	plain := cache.ObjectName{Namespace: "team-a", Name: "plain"}
	h.expect(t, nil, route{status, plain})

	bump := func(name string, restarts int32) {
		t.Helper()
		js, err := jss.Get(h.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		js.Status.Restarts = restarts
		if _, err := jss.UpdateStatus(h.ctx, js, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bump("llm", 1)
	h.expect(t, []route{{status, llm}}, route{build, llm}, h.flushJobSets(t))
	bump("llm", 1) // an update without a restart
	h.expect(t, []route{{status, llm}}, h.flushJobSets(t))
	bump("plain", 1)
	h.expect(t, []route{{status, plain}}, h.flushJobSets(t))
}

// TestJobSetCacheIsTrimmed: the JobSet informer caches JobSets through TrimJobSet.
func TestJobSetCacheIsTrimmed(t *testing.T) {
	h := newHarness(t)
	h.createJobSet(t, fullJobSet())
	h.expect(t, nil, route{status, cache.ObjectName{Namespace: "team-a", Name: "llm"}})

	got, err := h.in.JobSetLister.JobSets("team-a").Get("llm")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := TrimJobSet(fullJobSet())
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cached JobSet (-want +got):\n%s", diff)
	}
}

// TestTrainerCachesStripClientMetadata: the TrainJob and runtime informers cache their
// objects through StripClientMetadata.
func TestTrainerCachesStripClientMetadata(t *testing.T) {
	h := newHarness(t)
	applied := map[string]string{corev1.LastAppliedConfigAnnotation: `{"kind":"TrainJob"}`, "team": "a"}
	tj := utiltesting.MakeTrainJob("team-a", "applied").Obj()
	tj.Annotations = maps.Clone(applied)
	h.createTrainJob(t, tj)
	llm := cache.ObjectName{Namespace: "team-a", Name: "applied"}
	h.expect(t, []route{{build, llm}}, h.flushTrainJobs(t))

	got, err := h.in.TrainJobLister.TrainJobs("team-a").Get("applied")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"team": "a"}, got.Annotations); diff != "" {
		t.Errorf("cached TrainJob's annotations (-want +got):\n%s", diff)
	}

	rts := h.trainer.TrainerV1alpha1().ClusterTrainingRuntimes()
	rt := utiltesting.MakeClusterTrainingRuntime("applied")
	rt.Annotations = maps.Clone(applied)
	if _, err := rts.Create(h.ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.poll(t, "the ClusterTrainingRuntime in the cache", func() bool {
		cached, err := h.in.ClusterTrainingRuntimeLister.Get("applied")
		return err == nil && cmp.Equal(map[string]string{"team": "a"}, cached.Annotations)
	})
}

func TestRouteNeedsBothStages(t *testing.T) {
	in, err := New(trainerfake.NewSimpleClientset(), jobsetfake.NewSimpleClientset(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	logger, _ := ktesting.NewTestContext(t)
	for _, routes := range []Routes{{Build: build}, {Status: status}, {}} {
		if err := in.Route(logger, &fakeRouter{}, routes, Hooks{}); err == nil {
			t.Errorf("Route(%+v) succeeded, want an error", routes)
		}
	}
}

// TestHandlersTombstones calls the handlers directly with the tombstones a delete
// event carries when the watch missed the deletion.
func TestHandlersTombstones(t *testing.T) {
	tj := utiltesting.MakeTrainJob("team-a", "llm").Obj()
	js := utiltesting.MakeJobSet("team-a", "llm").ControlledBy(tj).Obj()
	llm := cache.ObjectName{Namespace: "team-a", Name: "llm"}

	cases := map[string]struct {
		call        func(h *handlers)
		wantRoutes  []route
		wantDeleted []cache.ObjectName
		// wantJobSets are the JobSets Hooks.JobSetDeleted is called with.
		wantJobSets []cache.ObjectName
	}{
		"TrainJob": {
			call:        func(h *handlers) { h.deleteTrainJob(tj) },
			wantDeleted: []cache.ObjectName{llm},
		},
		"TrainJob tombstone": {
			call:        func(h *handlers) { h.deleteTrainJob(cache.DeletedFinalStateUnknown{Key: "team-a/llm", Obj: tj}) },
			wantDeleted: []cache.ObjectName{llm},
		},
		"tombstone of something else": {
			call: func(h *handlers) { h.deleteTrainJob(cache.DeletedFinalStateUnknown{Key: "team-a/llm", Obj: "garbage"}) },
		},
		"JobSet tombstone": {
			call:        func(h *handlers) { h.jobSetDeleted(cache.DeletedFinalStateUnknown{Key: "team-a/llm", Obj: js}) },
			wantRoutes:  []route{{status, llm}},
			wantJobSets: []cache.ObjectName{llm},
		},
		"foreign JobSet tombstone": {
			call: func(h *handlers) {
				h.jobSetDeleted(cache.DeletedFinalStateUnknown{Key: "team-a/x", Obj: utiltesting.MakeJobSet("team-a", "x").Obj()})
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			r, d, jss := &fakeRouter{}, &keyLog{}, &keyLog{}
			hooks := Hooks{Deleted: d.add, JobSetDeleted: func(js *jobsetv1alpha2.JobSet) { jss.add(cache.MetaObjectToName(js)) }}
			tc.call(&handlers{router: r, routes: Routes{Build: build, Status: status}, hooks: hooks, logger: logger})
			if diff := cmp.Diff(tc.wantRoutes, r.snapshot()); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDeleted, d.snapshot()); diff != "" {
				t.Errorf("Hooks.Deleted keys (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantJobSets, jss.snapshot()); diff != "" {
				t.Errorf("Hooks.JobSetDeleted JobSets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandlersRuntimeFanOut calls the runtime handlers directly over a TrainJob indexer
// seeded with the real indexer function and a JobSet cache: a runtime event reaches
// only the TrainJobs that reference the runtime and that the change may still affect.
func TestHandlersRuntimeFanOut(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{IndexRuntimeRef: indexByRuntimeRef})
	jobSets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	torch := func(ns, name string) *utiltesting.TrainJobWrapper {
		return utiltesting.MakeTrainJob(ns, name).RuntimeRef(trainer.TrainingRuntimeKind, "torch")
	}
	done := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "x"}
	}
	running := torch("team-a", "running").UID("uid-running").Obj()
	suspended := torch("team-a", "suspended").UID("uid-suspended").Suspend(true).Obj()
	blocked := torch("team-a", "blocked").Obj()
	for _, tj := range []runtime.Object{
		torch("team-a", "a").Obj(),
		torch("team-b", "b").Obj(),
		utiltesting.MakeTrainJob("team-a", "c").RuntimeRef("", "torch").Obj(),
		utiltesting.MakeTrainJob("team-b", "d").RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj(),
		torch("team-a", "queued").Suspend(true).Obj(),
		torch("team-a", "complete").Condition(done(trainer.TrainJobComplete)).Obj(),
		torch("team-a", "failed").Condition(done(trainer.TrainJobFailed)).Obj(),
		torch("team-a", "multikueue").ManagedBy("kueue.x-k8s.io/multikueue").Obj(),
		torch("team-a", "deleting").Deleting(time.Unix(1, 0)).Obj(),
		running, suspended, blocked,
	} {
		if err := indexer.Add(tj); err != nil {
			t.Fatal(err)
		}
	}
	for _, js := range []*jobsetv1alpha2.JobSet{
		utiltesting.MakeJobSet("team-a", "running").ControlledBy(running).Suspend(false).Obj(),
		utiltesting.MakeJobSet("team-a", "suspended").ControlledBy(suspended).Suspend(true).Obj(),
		utiltesting.MakeJobSet("team-a", "blocked").Obj(), // someone else's
	} {
		if err := jobSets.Add(js); err != nil {
			t.Fatal(err)
		}
	}
	tr := utiltesting.MakeTrainingRuntime("team-a", "torch")
	trNew := tr.DeepCopy()
	trNew.Generation = 2
	ctr := utiltesting.MakeClusterTrainingRuntime("torch")
	ctrSame := ctr.DeepCopy()
	ctrSame.Labels = map[string]string{"x": "y"}
	key := func(ns, name string) cache.ObjectName { return cache.ObjectName{Namespace: ns, Name: name} }
	// Not started (no JobSet), queued or not: what a runtime change still affects.
	unstarted := []route{{build, key("team-a", "a")}, {build, key("team-a", "queued")}}

	cases := map[string]struct {
		call func(h *handlers)
		want []route
	}{
		"TrainingRuntime added": {
			call: func(h *handlers) { h.addRuntime(tr) },
			want: unstarted,
		},
		"ClusterTrainingRuntime added": {
			call: func(h *handlers) { h.addRuntime(ctr) },
			want: []route{{build, key("team-a", "c")}, {build, key("team-b", "d")}},
		},
		"TrainingRuntime spec changed": {
			call: func(h *handlers) { h.updateRuntime(tr, trNew) },
			want: unstarted,
		},
		"ClusterTrainingRuntime metadata changed": {
			call: func(h *handlers) { h.updateRuntime(ctr, ctrSame) },
		},
		"not a runtime": {
			call: func(h *handlers) { h.addRuntime(utiltesting.MakeTrainJob("team-a", "a").Obj()) },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			r := &fakeRouter{}
			h := &handlers{in: &Informers{TrainJobs: indexerInformer{indexer: indexer}, JobSetLister: jobsetlisters.NewJobSetLister(jobSets)},
				router: r, routes: Routes{Build: build, Status: status}, logger: logger}
			tc.call(h)
			got := r.snapshot()
			slices.SortFunc(got, func(a, b route) int { return strings.Compare(a.String(), b.String()) })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
		})
	}
}

// indexerInformer is a SharedIndexInformer that only has an indexer: the handlers
// read nothing else.
type indexerInformer struct {
	cache.SharedIndexInformer
	indexer cache.Indexer
}

func (i indexerInformer) GetIndexer() cache.Indexer { return i.indexer }

// delayRouter records the delay of every route.
type delayRouter map[string]time.Duration

func (r delayRouter) Enqueue(stage string, key cache.ObjectName) { r[stage+":"+key.String()] = 0 }
func (r delayRouter) EnqueueAfter(stage string, key cache.ObjectName, d time.Duration) {
	r[stage+":"+key.String()] = d
}

// TestJobSetUpdatesAreBatched: JobSet updates reach the status stage after
// StatusBatchPeriod (a burst costs one status write); creations, deletions and the
// update that finishes the JobSet at once.
func TestJobSetUpdatesAreBatched(t *testing.T) {
	owner := utiltesting.MakeTrainJob("team-a", "llm").UID("uid-llm").Obj()
	js := utiltesting.MakeJobSet("team-a", "llm").ControlledBy(owner).Obj()
	finished := func(condType jobsetv1alpha2.JobSetConditionType) *jobsetv1alpha2.JobSet {
		out := js.DeepCopy()
		out.Status.Conditions = []metav1.Condition{{Type: string(condType), Status: metav1.ConditionTrue}}
		return out
	}
	completed, failed := finished(jobsetv1alpha2.JobSetCompleted), finished(jobsetv1alpha2.JobSetFailed)
	for name, tc := range map[string]struct {
		call func(h *handlers)
		want time.Duration
	}{
		"add":                    {func(h *handlers) { h.ownedChanged(js) }, 0},
		"update":                 {func(h *handlers) { h.ownedUpdated(js, js) }, StatusBatchPeriod},
		"update to Completed":    {func(h *handlers) { h.ownedUpdated(js, completed) }, 0},
		"update to Failed":       {func(h *handlers) { h.ownedUpdated(js, failed) }, 0},
		"update after Completed": {func(h *handlers) { h.ownedUpdated(completed, completed) }, StatusBatchPeriod},
		"delete":                 {func(h *handlers) { h.ownedChanged(js) }, 0},
	} {
		t.Run(name, func(t *testing.T) {
			r := delayRouter{}
			tc.call(&handlers{router: r, routes: Routes{Build: build, Status: status}})
			if got, ok := r[status+":team-a/llm"]; !ok || got != tc.want {
				t.Errorf("routes %v, want status:team-a/llm after %v", r, tc.want)
			}
		})
	}
}

// TestTrainJobAddRoutesBuiltToStatus: a TrainJob whose JobSet was built from its current
// generation goes to the status stage on add (a controller restart rebuilds nothing);
// any other goes to the build stage.
func TestTrainJobAddRoutesBuiltToStatus(t *testing.T) {
	tj := utiltesting.MakeTrainJob("team-a", "llm").UID("uid-llm").Generation(3).Obj()
	other := utiltesting.MakeTrainJob("team-a", "llm").UID("uid-other").Obj()
	generation := func(g string) *utiltesting.JobSetWrapper {
		return utiltesting.MakeJobSet("team-a", "llm").ControlledBy(tj).Annotation(objectkeys.AnnotationTrainJobGeneration, g)
	}
	for name, tc := range map[string]struct {
		jobSet *jobsetv1alpha2.JobSet
		want   string
	}{
		"no JobSet":                              {nil, build},
		"JobSet of the current generation":       {generation("3").Obj(), status},
		"JobSet of an older generation":          {generation("2").Obj(), build},
		"JobSet without the annotation":          {utiltesting.MakeJobSet("team-a", "llm").ControlledBy(tj).Obj(), build},
		"someone else's JobSet, same generation": {utiltesting.MakeJobSet("team-a", "llm").ControlledBy(other).Annotation(objectkeys.AnnotationTrainJobGeneration, "3").Obj(), build},
		"finished, its JobSet deleted":           {nil, status},
	} {
		t.Run(name, func(t *testing.T) {
			jobSets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if tc.jobSet != nil {
				if err := jobSets.Add(tc.jobSet); err != nil {
					t.Fatal(err)
				}
			}
			r := delayRouter{}
			h := &handlers{in: &Informers{JobSetLister: jobsetlisters.NewJobSetLister(jobSets)}, router: r, routes: Routes{Build: build, Status: status}}
			tj := tj
			if strings.HasPrefix(name, "finished") {
				tj = tj.DeepCopy()
				tj.Status.Conditions = []metav1.Condition{utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "done")}
			}
			h.addTrainJob(tj)
			if _, ok := r[tc.want+":team-a/llm"]; !ok || len(r) != 1 {
				t.Errorf("routes %v, want only %s:team-a/llm", r, tc.want)
			}
		})
	}
}
