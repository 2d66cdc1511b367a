package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
)

// runtimeName is the TrainingRuntime every TrainJob of the suite refers to.
const runtimeName = "torch"

// env is one test's view of the package cluster.
type env struct {
	c        *cluster.Cluster
	trainers trainerclient.Interface
	jobsets  jobsetclient.Interface
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvQPS(t, 300, 600) // the burst's creates and the checks' lists
}

// newEnvQPS is newEnv with clients of their own, limited to qps (burst).
func newEnvQPS(t *testing.T, qps float32, burst int) *env {
	t.Helper()
	c := cluster.Shared(t)
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = qps, burst
	trainers, err := trainerclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	jobsets, err := jobsetclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{c: c, trainers: trainers, jobsets: jobsets}
}

// namespace creates a namespace for the test with the torch runtime in it.
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	return e.namespaceWith(t, torchRuntime)
}

// namespaceWith creates a namespace for the test with the runtime runtime(ns) in it,
// named runtimeName.
func (e *env) namespaceWith(t *testing.T, runtime func(ns string) *trainer.TrainingRuntime) string {
	t.Helper()
	ns := cluster.NewNamespace(t, e.c)
	// Runs before the namespace's deletion: see deleteTrainJobs.
	t.Cleanup(func() { e.deleteTrainJobs(t, ns) })
	if _, err := e.trainers.TrainerV1alpha1().TrainingRuntimes(ns).Create(context.Background(), runtime(ns), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating TrainingRuntime %s/%s: %v", ns, runtimeName, err)
	}
	return ns
}

// deleteTrainJobs deletes the TrainJobs of ns and waits until they are gone (their
// JobSets are garbage-collected after them). Left to the namespace's deletion, the
// TrainJobs of a test would linger while the namespace terminates, and the next test's
// controller, which watches every namespace, would retry their JobSet writes (403:
// the namespace is being terminated) for minutes: those retries fill the pipeline's
// shared retry budget (10/s) and delay every other retry behind them, so the next
// test's figures would depend on the one before it.
func (e *env) deleteTrainJobs(t *testing.T, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tjs := e.trainers.TrainerV1alpha1().TrainJobs(ns)
	if err := tjs.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Errorf("deleting the TrainJobs of %s: %v", ns, err)
		return
	}
	for ctx.Err() == nil {
		list, err := tjs.List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil && len(list.Items) == 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("the TrainJobs of %s are not gone within a minute", ns)
}

// torchRuntime is a TrainingRuntime shaped like upstream's torch-distributed: one
// replicatedJob, a JobSet and nothing else per TrainJob.
func torchRuntime(ns string) *trainer.TrainingRuntime {
	return &trainer.TrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: runtimeName, Namespace: ns},
		Spec: trainer.TrainingRuntimeSpec{
			MLPolicy: &trainer.MLPolicy{NumNodes: ptr.To[int32](1), MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}},
			Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
				ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
					Name: "node",
					Template: batchv1.JobTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{trainer.LabelTrainJobAncestor: trainer.AncestorTrainer}},
						Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
							Name: trainer.ContainerNode, Image: "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
						}}}}},
					},
				}},
			}},
		},
	}
}

// userKubeconfig is a kubeconfig for a controller process that the audit log names
// user (a cluster admin).
func (e *env) userKubeconfig(t *testing.T, user string) string {
	t.Helper()
	path, err := e.c.UserKubeconfig(user, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// startController runs a controller without admission (a killed process must not leave
// a webhook that refuses every TrainJob write) as user, its log named after name.
func (e *env) startController(t *testing.T, name, user string, args ...string) *ctrlproc.Process {
	t.Helper()
	return ctrlproc.Run(t, e.c, ctrlproc.Config{
		Binary: controllerBinary, Name: name, Kubeconfig: e.userKubeconfig(t, user),
		Args: append([]string{ctrlproc.NoAdmission, "--kube-api-qps=200", "--kube-api-burst=400"}, args...),
	})
}

// burst creates n TrainJobs named tj-0000... in ns from a background goroutine, 16 at a
// time as users and queue controllers would (startBurstClients: another count), at most
// one per pace (0: no pace). A create that fails (the API server is
// down, a connection is cut) is tried again until it succeeds or finds its TrainJob
// already created by an earlier try whose answer was lost.
type burst struct {
	n       int
	created atomic.Int64
	done    chan struct{}
	start   time.Time
	end     time.Time // valid once done is closed
	retries atomic.Int64
}

func (e *env) startBurst(ns string, n int, pace time.Duration) *burst {
	return e.startBurstClients(ns, n, pace, 16)
}

// startBurstClients is startBurst with clients creates at a time.
func (e *env) startBurstClients(ns string, n int, pace time.Duration, clients int) *burst {
	b := &burst{n: n, done: make(chan struct{}), start: time.Now()}
	tjs := e.trainers.TrainerV1alpha1().TrainJobs(ns)
	go func() {
		defer close(b.done)
		var wg sync.WaitGroup
		sem := make(chan struct{}, clients)
		var tick <-chan time.Time
		if pace > 0 {
			ticker := time.NewTicker(pace)
			defer ticker.Stop()
			tick = ticker.C
		}
		for i := range n {
			if tick != nil {
				<-tick
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				tj := trainJob(ns, trainJobName(i))
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := tjs.Create(ctx, tj, metav1.CreateOptions{})
					cancel()
					if err == nil || apierrors.IsAlreadyExists(err) {
						break
					}
					b.retries.Add(1)
					time.Sleep(200 * time.Millisecond)
				}
				b.created.Add(1)
			})
		}
		wg.Wait()
		b.end = time.Now()
	}()
	return b
}

// waitCreated blocks until at least k TrainJobs of the burst exist.
func (b *burst) waitCreated(k int) {
	for int(b.created.Load()) < k {
		select {
		case <-b.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// wait blocks until every TrainJob of the burst exists, failing the test after timeout.
func (b *burst) wait(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	select {
	case <-b.done:
		return b.end.Sub(b.start)
	case <-time.After(timeout):
		t.Fatalf("burst: %d of %d TrainJobs created within %s", b.created.Load(), b.n, timeout)
		return 0
	}
}

func trainJobName(i int) string { return fmt.Sprintf("tj-%04d", i) }

func trainJob(ns, name string) *trainer.TrainJob {
	return &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: runtimeName, APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.TrainingRuntimeKind)},
			Trainer:    &trainer.Trainer{NumNodes: ptr.To[int32](1), Command: []string{"torchrun", "train.py"}},
		},
	}
}

// tally is what the JobSets of a namespace say about its TrainJobs.
type tally struct {
	trainJobs int
	// withJobSet counts the TrainJobs with at least one JobSet controlled by them.
	withJobSet int
	// lost lists the TrainJobs with no JobSet.
	lost []string
	// duplicates counts the JobSets beyond the first one of each TrainJob.
	duplicates int
	// foreign lists the JobSets with no controller owner reference to a TrainJob of
	// the namespace (by UID), or not named after it.
	foreign []string
}

func (ty tally) String() string {
	return fmt.Sprintf("%d/%d TrainJobs with a JobSet, lost %d, duplicates %d, foreign %d",
		ty.withJobSet, ty.trainJobs, len(ty.lost), ty.duplicates, len(ty.foreign))
}

// count lists ns's TrainJobs and JobSets and matches them by controller owner reference.
func (e *env) count(ctx context.Context, ns string) (tally, error) {
	tjs, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return tally{}, err
	}
	jss, err := e.jobsets.JobsetV1alpha2().JobSets(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return tally{}, err
	}
	owned := map[types.UID]int{}
	byUID := map[types.UID]string{}
	for _, tj := range tjs.Items {
		byUID[tj.UID] = tj.Name
	}
	ty := tally{trainJobs: len(tjs.Items)}
	for _, js := range jss.Items {
		ref := metav1.GetControllerOf(&js)
		if ref == nil || ref.Kind != trainer.TrainJobKind || byUID[ref.UID] != js.Name {
			ty.foreign = append(ty.foreign, js.Name)
			continue
		}
		owned[ref.UID]++
	}
	for _, tj := range tjs.Items {
		switch n := owned[tj.UID]; {
		case n == 0:
			ty.lost = append(ty.lost, tj.Name)
		default:
			ty.withJobSet++
			ty.duplicates += n - 1
		}
	}
	slices.Sort(ty.lost)
	return ty, nil
}

// waitAllJobSets waits until each of the want TrainJobs of ns has its JobSet and returns
// the final tally; the test fails after timeout, naming a few TrainJobs still without
// one.
func (e *env) waitAllJobSets(t *testing.T, ns string, want int, timeout time.Duration) tally {
	t.Helper()
	var last tally
	cluster.Eventually(t, timeout, fmt.Sprintf("%d TrainJobs of %s with their JobSet", want, ns), func(ctx context.Context) (bool, string) {
		ty, err := e.count(ctx, ns)
		if err != nil {
			return false, err.Error()
		}
		last = ty
		return ty.trainJobs == want && ty.withJobSet == want, ty.String() + "; first lost: " + strings.Join(first(ty.lost, 5), ", ")
	})
	return last
}

// expectExact fails the test unless every TrainJob has exactly one JobSet and no JobSet
// is foreign.
func expectExact(t *testing.T, ty tally, want int) {
	t.Helper()
	if ty.trainJobs != want || ty.withJobSet != want || len(ty.lost) != 0 || ty.duplicates != 0 || len(ty.foreign) != 0 {
		t.Errorf("want %d TrainJobs each with exactly one JobSet it controls; got %s (lost %v, foreign %v)",
			want, ty, first(ty.lost, 10), first(ty.foreign, 10))
	}
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// rng returns the suite's random source, logging its seed.
func rng(t *testing.T) *rand.Rand {
	t.Helper()
	s := *seed
	if s == 0 {
		s = time.Now().UnixNano()
	}
	t.Logf("seed %d (repeat with -faults.seed=%d)", s, s)
	return rand.New(rand.NewPCG(uint64(s), 0))
}

// timed logs how long the test took, for the suite's budget.
func timed(t *testing.T) {
	start := time.Now()
	t.Cleanup(func() { t.Logf("%s took %s", t.Name(), time.Since(start).Round(100*time.Millisecond)) })
}

// auditFromNow returns a reader of the API server's audit log past the events already
// in it (earlier tests'), so that a test reads and counts its own only.
func (e *env) auditFromNow(t *testing.T) *cluster.AuditLogReader {
	t.Helper()
	r := cluster.NewAuditLogReader(e.c.AuditLogPath())
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	return r
}

// readAudit returns the events r has not returned yet.
func readAudit(t *testing.T, r *cluster.AuditLogReader) []cluster.AuditEvent {
	t.Helper()
	events, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// settleAfterOutage makes the test, when it ends, wait until kube-controller-manager
// serves new namespaces again (their default ServiceAccount appears, which
// cluster.NewNamespace waits 30 s for): after an API server or etcd outage its
// informers resume only when client-go's reflector backoff allows, up to a minute, and
// the next test must not pay for this one's outage.
func (e *env) settleAfterOutage(t *testing.T) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		nss := e.c.Client().CoreV1().Namespaces()
		ns, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-settle-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("creating a namespace after the outage: %v", err)
			return
		}
		defer func() { _ = nss.Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) }()
		for {
			if _, err := e.c.Client().CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
				t.Logf("kube-controller-manager served a new namespace %s after the test", time.Since(start).Round(100*time.Millisecond))
				return
			}
			select {
			case <-ctx.Done():
				t.Errorf("kube-controller-manager did not create the default ServiceAccount of a new namespace within 3 min of the outage")
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
}
