package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// TestControllerKilledDuringBurst SIGKILLs the controller three times at random points
// of a burst of TrainJobs (-faults.burst, default 2,000), starting a fresh process after
// each kill as a Deployment would. Whatever each process had in flight — a JobSet
// apply sent but not answered, a status patch half-way — the last one finds it: every
// TrainJob ends with exactly one JobSet it controls, none is lost, none duplicated.
// The kill points are drawn from -faults.seed: after a random count of created
// TrainJobs, plus a random delay under a second.
func TestControllerKilledDuringBurst(t *testing.T) {
	timed(t)
	e := newEnv(t)
	ns := e.namespace(t)
	n := *burstSize
	created, converged, final := e.killThreeTimes(t, ns, n, rng(t))
	t.Logf("%d TrainJobs created in %s; the last JobSet %s after the last TrainJob; %s",
		n, created.Round(100*time.Millisecond), converged.Round(100*time.Millisecond), final)
	t.Logf("lost %d, duplicates %d", len(final.lost), final.duplicates)
}

// TestControllerKilledDuringMPIBurst is TestControllerKilledDuringBurst with 500 MPI
// TrainJobs, each of which has side objects besides its JobSet — the hostfile
// ConfigMap (server-side applied) and the SSH Secret (create-only): after three kills
// each TrainJob controls exactly one of each, none duplicated, none missing.
func TestControllerKilledDuringMPIBurst(t *testing.T) {
	timed(t)
	const n = 500
	e := newEnv(t)
	ns := e.namespaceWith(t, mpiRuntime)
	_, converged, final := e.killThreeTimes(t, ns, n, rng(t))
	var sides sideObjects
	var err error
	ctx := t.Context()
	if sides, err = e.countSideObjects(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ConfigMap", "Secret"} {
		if got := sides.controlled[kind]; len(got) != n {
			t.Errorf("%d TrainJobs control a %s, want %d", len(got), kind, n)
		}
		for uid, k := range sides.controlled[kind] {
			if k != 1 {
				t.Errorf("TrainJob %s controls %d %ss, want 1", uid, k, kind)
			}
		}
	}
	if len(sides.stale) != 0 {
		t.Errorf("side objects controlled by no TrainJob of the namespace: %v", first(sides.stale, 10))
	}
	t.Logf("the last JobSet %s after the last TrainJob; %s; side objects: %d ConfigMaps and %d Secrets of %d TrainJobs, duplicates %d, stale %d",
		converged.Round(100*time.Millisecond), final, sides.total["ConfigMap"], sides.total["Secret"], n, sides.duplicates(), len(sides.stale))
}

// killThreeTimes runs a controller while it creates n TrainJobs in ns, SIGKILLs it
// three times at points drawn from r (after a random count of created TrainJobs, plus
// a random delay under a second), starting a new process after each kill. It waits
// until every TrainJob has its JobSet, checks that each has exactly one, and returns
// how long the creates took, how long after the last one the last JobSet came, and
// the final tally.
func (e *env) killThreeTimes(t *testing.T, ns string, n int, r *rand.Rand) (created, converged time.Duration, final tally) {
	t.Helper()
	kills := make([]int, 3)
	for i := range kills {
		kills[i] = n/10 + r.IntN(n*8/10)
	}
	slices.Sort(kills)

	ctrl := e.startController(t, "run0", "trainyard")
	b := e.startBurst(ns, n, 0)
	var restarts []time.Duration
	for i, at := range kills {
		b.waitCreated(at)
		delay := time.Duration(r.IntN(1000)) * time.Millisecond
		time.Sleep(delay)
		k := b.created.Load()
		ctrl.Kill(t)
		killed := time.Now()
		ctrl = e.startController(t, fmt.Sprintf("run%d", i+1), "trainyard")
		restarts = append(restarts, time.Since(killed).Round(100*time.Millisecond))
		t.Logf("kill %d: after %d TrainJobs created (+%s); the next process was ready %s later", i+1, k, delay, restarts[i])
	}
	created = b.wait(t, 5*time.Minute)
	e.waitAllJobSets(t, ns, n, 5*time.Minute)
	converged = time.Since(b.end)
	// Nothing more comes: a duplicate made late would show now.
	time.Sleep(2 * time.Second)
	final, err := e.count(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	expectExact(t, final, n)
	if exited, err := ctrl.Exited(); exited {
		t.Errorf("the last controller process exited: %v (log: %s)", err, ctrl.LogPath)
	}
	return created, converged, final
}

// sideObjects counts the ConfigMaps and Secrets of a namespace by the TrainJob that
// controls them.
type sideObjects struct {
	// controlled maps a kind to the count of objects each TrainJob (by UID) controls.
	controlled map[string]map[types.UID]int
	total      map[string]int
	// stale lists the objects controlled by a TrainJob that does not exist (kind/name).
	stale []string
}

func (s sideObjects) duplicates() int {
	d := 0
	for _, byOwner := range s.controlled {
		for _, k := range byOwner {
			d += k - 1
		}
	}
	return d
}

func (e *env) countSideObjects(ctx context.Context, ns string) (sideObjects, error) {
	tjs, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return sideObjects{}, err
	}
	uids := map[types.UID]bool{}
	for _, tj := range tjs.Items {
		uids[tj.UID] = true
	}
	s := sideObjects{controlled: map[string]map[types.UID]int{}, total: map[string]int{}}
	add := func(kind string, obj metav1.Object) {
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.Kind != trainer.TrainJobKind {
			return // not a TrainJob's (kube-root-ca.crt, ...)
		}
		if !uids[ref.UID] {
			s.stale = append(s.stale, kind+"/"+obj.GetName())
			return
		}
		if s.controlled[kind] == nil {
			s.controlled[kind] = map[types.UID]int{}
		}
		s.controlled[kind][ref.UID]++
		s.total[kind]++
	}
	cms, err := e.c.Client().CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, err
	}
	for i := range cms.Items {
		add("ConfigMap", &cms.Items[i])
	}
	secrets, err := e.c.Client().CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, err
	}
	for i := range secrets.Items {
		add("Secret", &secrets.Items[i])
	}
	return s, nil
}

// mpiRuntime is a TrainingRuntime shaped like upstream's deepspeed-distributed:
// OpenMPI, the launcher run as a node, an SSH Secret mounted and a hostfile ConfigMap
// per TrainJob.
func mpiRuntime(ns string) *trainer.TrainingRuntime {
	pod := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: trainer.ContainerNode, Image: "ghcr.io/kubeflow/trainer/deepspeed-runtime",
	}}}}
	return &trainer.TrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: runtimeName, Namespace: ns},
		Spec: trainer.TrainingRuntimeSpec{
			MLPolicy: &trainer.MLPolicy{NumNodes: ptr.To[int32](1), MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{
				NumProcPerNode:    ptr.To[int32](1),
				MPIImplementation: ptr.To(trainer.MPIImplementationOpenMPI),
				SSHAuthMountPath:  ptr.To("/home/mpiuser/.ssh"),
				RunLauncherAsNode: ptr.To(true),
			}}},
			Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
				ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{
					{Name: "node", Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: pod}}},
					{Name: "launcher",
						DependsOn: []jobsetv1alpha2.DependsOn{{Name: "node", Status: jobsetv1alpha2.DependencyReady}},
						Template: batchv1.JobTemplateSpec{
							ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{trainer.LabelTrainJobAncestor: trainer.AncestorTrainer}},
							Spec:       batchv1.JobSpec{Template: pod},
						}},
				},
			}},
		},
	}
}
