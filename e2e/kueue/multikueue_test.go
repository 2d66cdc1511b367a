package kueue

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"
	jobsetinformers "sigs.k8s.io/jobset/client-go/informers/externalversions"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	trainerinformers "github.com/trainyard/trainyard/pkg/clientset/informers/externalversions"
)

// multiKueueManagedBy is the spec.managedBy Kueue's webhook gives a TrainJob whose
// ClusterQueue dispatches through MultiKueue.
const multiKueueManagedBy = "kueue.x-k8s.io/multikueue"

// testMultiKueue: the package's cluster is a MultiKueue manager and a second local
// control plane, with its own Kueue and Trainyard, its worker. A TrainJob submitted on
// the manager gets managedBy kueue.x-k8s.io/multikueue from Kueue, and the manager's
// Trainyard never touches it: no JobSet, no write of its own (managedFields). Kueue
// creates it on the worker, where Trainyard runs it to Complete, and copies its status
// back to the manager's TrainJob.
func testMultiKueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	worker, workerJobSets, workerTrainers := startWorker(t)
	kubeconfig, err := os.ReadFile(worker.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}

	e := newEnv(t, 1, 3*time.Second, func(e *env, _, clusterQueue map[string]any) {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: e.ns, Namespace: cluster.KueueNamespace},
			Data:       map[string][]byte{"kubeconfig": kubeconfig},
		}
		if _, err := e.c.Client().CoreV1().Secrets(cluster.KueueNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the worker's kubeconfig Secret: %v", err)
		}
		t.Cleanup(func() {
			_ = e.c.Client().CoreV1().Secrets(cluster.KueueNamespace).Delete(context.Background(), e.ns, metav1.DeleteOptions{})
		})
		e.create(t, cluster.KueueMultiKueueClusterGVR, "", e.ns, map[string]any{"spec": map[string]any{
			"clusterSource": map[string]any{"kubeConfig": map[string]any{"locationType": "Secret", "location": e.ns}},
		}})
		e.create(t, cluster.KueueMultiKueueConfigGVR, "", e.ns, map[string]any{"spec": map[string]any{"clusters": []any{e.ns}}})
		e.create(t, cluster.KueueAdmissionCheckGVR, "", e.ns, map[string]any{"spec": map[string]any{
			"controllerName": multiKueueManagedBy,
			"parameters":     map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": e.ns},
		}})
		clusterQueue["admissionChecksStrategy"] = map[string]any{"admissionChecks": []any{map[string]any{"name": e.ns}}}
	})
	// The worker's side: the same namespace, queue and runtime, its own quota.
	w := &env{c: worker, ns: e.ns, trainers: workerTrainers, jobsets: workerJobSets}
	if _, err := worker.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.create(t, cluster.KueueResourceFlavorGVR, "", e.ns, map[string]any{"spec": map[string]any{}})
	w.create(t, cluster.KueueClusterQueueGVR, "", e.ns, map[string]any{"spec": map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{"cpu"},
			"flavors":          []any{map[string]any{"name": e.ns, "resources": []any{map[string]any{"name": "cpu", "nominalQuota": "1"}}}},
		}},
	}})
	w.create(t, cluster.KueueLocalQueueGVR, e.ns, queueName, map[string]any{"spec": map[string]any{"clusterQueue": e.ns}})
	w.waitQueueActive(t)
	w.createRuntime(t, runtimeName, 3*time.Second, nil)
	managerJobSets := e.watchJobSets(t)
	workerWriters := w.watchWriters(t)

	tj := e.createTrainJob(t, e.trainJob("dispatched", 1))

	if got := ptr.Deref(tj.Spec.ManagedBy, ""); got != multiKueueManagedBy {
		t.Fatalf("created TrainJob's managedBy %q, want %q from Kueue's webhook", got, multiKueueManagedBy)
	}
	w.waitCondition(t, tj.Name, trainer.TrainJobComplete, 2*time.Minute)
	if _, err := workerJobSets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, tj.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the worker's JobSet: %v", err)
	}
	e.waitCondition(t, tj.Name, trainer.TrainJobComplete, time.Minute) // copied back by Kueue

	if seen := managerJobSets(); len(seen) > 0 {
		t.Errorf("JobSets on the manager: %v, want none", seen)
	}
	managed, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, tj.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if writers := trainyardWriters(managed); len(writers) > 0 {
		t.Errorf("the manager's Trainyard wrote the TrainJob: managedFields of %v", writers)
	}
	// On the worker Trainyard did write it, under the names looked for above (the
	// worker's copy is deleted once the manager's finishes, hence the watch).
	if len(workerWriters()) == 0 {
		t.Errorf("the worker's TrainJob was never written by Trainyard's field managers")
	}
	t.Logf("manager TrainJob conditions %v, worker's written by Trainyard as %v", conditionTypes(managed.Status.Conditions), workerWriters())
}

// watchWriters watches the namespace's TrainJobs until the test ends and returns a
// func listing Trainyard's managedFields entries seen on any of them.
func (e *env) watchWriters(t *testing.T) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	informer := trainerinformers.NewSharedInformerFactoryWithOptions(e.trainers, 0, trainerinformers.WithNamespace(e.ns)).Trainer().V1alpha1().TrainJobs().Informer()
	record := func(obj any) {
		if tj, ok := obj.(*trainer.TrainJob); ok {
			mu.Lock()
			defer mu.Unlock()
			for _, w := range trainyardWriters(tj) {
				seen[w] = true
			}
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }})
	go informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("TrainJob cache did not sync")
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(maps.Keys(seen))
	}
}

// trainyardWriters lists the managedFields entries of tj that Trainyard's field
// managers (user agent "trainyard…", the progress server's "trainer-status") own.
func trainyardWriters(tj *trainer.TrainJob) []string {
	var out []string
	for _, f := range tj.ManagedFields {
		if strings.HasPrefix(f.Manager, "trainyard") || f.Manager == "trainer-status" {
			out = append(out, f.Manager+"/"+f.Subresource)
		}
	}
	return out
}

// startWorker starts a one-node cluster with Kueue and a Trainyard controller beside
// the package's, stopped when the test ends.
func startWorker(t *testing.T) (*cluster.Cluster, jobsetclient.Interface, trainerclient.Interface) {
	t.Helper()
	opts := cluster.TestOptions("kueue-worker")
	opts.Kueue, opts.Nodes = true, 1
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	worker, err := cluster.Up(ctx, opts)
	if err != nil {
		t.Fatalf("starting the worker cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := worker.Down(); err != nil {
			t.Errorf("stopping the worker cluster: %v", err)
		}
	})
	ctrlproc.Start(t, worker, controllerBinary)
	jobsets, err := jobsetclient.NewForConfig(worker.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	trainers, err := trainerclient.NewForConfig(worker.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return worker, jobsets, trainers
}

// watchJobSets watches the namespace's JobSets until the test ends and returns a func
// listing every one seen.
func (e *env) watchJobSets(t *testing.T) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var (
		mu   sync.Mutex
		seen []string
	)
	informer := jobsetinformers.NewSharedInformerFactoryWithOptions(e.jobsets, 0, jobsetinformers.WithNamespace(e.ns)).Jobset().V1alpha2().JobSets().Informer()
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if js, ok := obj.(*jobsetv1alpha2.JobSet); ok {
			mu.Lock()
			seen = append(seen, js.Name)
			mu.Unlock()
		}
	}})
	go informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("JobSet cache did not sync")
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func conditionTypes(conds []metav1.Condition) []string {
	var out []string
	for _, c := range conds {
		out = append(out, c.Type+"="+string(c.Status))
	}
	return out
}
