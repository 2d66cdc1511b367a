package helm

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// The controller replaced under load, as Pods: a failover (the leader Pod deleted) and
// a rolling upgrade (helm upgrade to another image tag), each while TrainJobs are
// created through the chart's webhooks. TrainJobs are created suspended, so that each
// gets its JobSet (suspended) without running pods on the real node's 2 cores.

var jobSets = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// leaseName is the chart's default leaderElection.leaseName.
const leaseName = "trainyard-controller"

// creator creates suspended TrainJobs in ns, one at a time, until stopped or n are
// created (n ≤ 0: until stopped), recording every refusal.
type creator struct {
	l       *leg
	ns      string
	prefix  string
	mu      sync.Mutex
	created []string
	refused []string
	stop    chan struct{}
	done    chan struct{}
}

func startCreating(l *leg, ns, prefix string, n int) *creator {
	cr := &creator{l: l, ns: ns, prefix: prefix, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(cr.done)
		for i := 0; n <= 0 || i < n; i++ {
			select {
			case <-cr.stop:
				return
			default:
			}
			name := fmt.Sprintf("%s-%03d", prefix, i)
			tj := training.ShellTrainJob(cr.ns, name, "torch-distributed", 1, "true")
			tj.Spec.Suspend = ptr.To(true)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := cr.l.trainers.TrainerV1alpha1().TrainJobs(cr.ns).Create(ctx, tj, metav1.CreateOptions{})
			cancel()
			cr.mu.Lock()
			if err != nil {
				cr.refused = append(cr.refused, name+": "+err.Error())
			} else {
				cr.created = append(cr.created, name)
			}
			cr.mu.Unlock()
			if n <= 0 {
				time.Sleep(50 * time.Millisecond) // a steady stream while the rollout runs
			}
		}
	}()
	return cr
}

func (cr *creator) count() int {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return len(cr.created) + len(cr.refused)
}

// finish stops the loop, waits for it and returns what it created; a refusal fails
// the test.
func (cr *creator) finish(t *testing.T) []string {
	t.Helper()
	select {
	case <-cr.stop:
	default:
		close(cr.stop)
	}
	<-cr.done
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if len(cr.refused) > 0 {
		t.Errorf("%d of %d creates refused, e.g. %s", len(cr.refused), len(cr.created)+len(cr.refused), cr.refused[0])
	}
	return cr.created
}

// waitEachHasOneJobSet waits until every TrainJob of names has exactly one JobSet
// (named as it, controlled by it, suspended) and the condition Suspended=True, and
// fails naming those that do not.
func (l *leg) waitEachHasOneJobSet(t *testing.T, ns string, names []string) {
	t.Helper()
	cluster.Eventually(t, 3*time.Minute, fmt.Sprintf("each of %d TrainJobs with one suspended JobSet and Suspended=True", len(names)), func(ctx context.Context) (bool, string) {
		list, err := l.c.Dynamic().Resource(jobSets).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		owned := map[string]int{}
		for _, js := range list.Items {
			for _, ref := range js.GetOwnerReferences() {
				if ref.Kind == "TrainJob" && ref.Controller != nil && *ref.Controller {
					owned[ref.Name]++
				}
			}
		}
		tjs, err := l.trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		suspended := map[string]bool{}
		for _, tj := range tjs.Items {
			suspended[tj.Name] = meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobSuspended)
		}
		var missing, doubled, unsuspended []string
		for _, n := range names {
			switch {
			case owned[n] == 0:
				missing = append(missing, n)
			case owned[n] > 1:
				doubled = append(doubled, n)
			}
			if !suspended[n] {
				unsuspended = append(unsuspended, n)
			}
		}
		if len(doubled) > 0 {
			t.Fatalf("TrainJobs with more than one JobSet: %v", doubled)
		}
		return len(missing) == 0 && len(unsuspended) == 0, fmt.Sprintf("%d without a JobSet (%s), %d not Suspended=True", len(missing), first(missing), len(unsuspended))
	})
}

func first(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return s[0]
}

// leaseHolder returns the pod name of the Lease's holder ("" if none).
func (l *leg) leaseHolder(ctx context.Context) (string, error) {
	lease, err := l.c.Client().CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	pod, _, _ := strings.Cut(holder, "_")
	return pod, nil
}

// testFailover deletes the leader Pod while 200 TrainJobs are created: a follower
// takes the Lease (the time is logged beside the chart's leaseDuration, 15 s, the worst
// case when a leader dies without releasing it), no create is refused, and every
// TrainJob gets exactly one JobSet and reaches Suspended=True.
func testFailover(t *testing.T, l *leg) {
	ctx := context.Background()
	leader, err := l.leaseHolder(ctx)
	if err != nil || leader == "" {
		t.Fatalf("no leader: %q, %v", leader, err)
	}
	ns := cluster.NewNamespace(t, l.c)
	cr := startCreating(l, ns, "failover", 200)
	cluster.Eventually(t, time.Minute, "50 creates sent", func(context.Context) (bool, string) {
		return cr.count() >= 50, fmt.Sprintf("%d sent", cr.count())
	})
	deleted := time.Now()
	if err := l.c.Client().CoreV1().Pods(namespace).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next string
	cluster.Eventually(t, time.Minute, "a new leader", func(ctx context.Context) (bool, string) {
		next, err = l.leaseHolder(ctx)
		if err != nil {
			return false, err.Error()
		}
		return next != "" && next != leader, "holder " + next
	})
	t.Logf("leader %s deleted after %d creates; %s leads %s later (chart leaseDuration 15s, retryPeriod 2s)", leader, 50, next, time.Since(deleted).Round(100*time.Millisecond))
	<-cr.done
	names := cr.finish(t)
	if len(names) != 200 {
		t.Errorf("%d TrainJobs created, want 200", len(names))
	}
	l.waitEachHasOneJobSet(t, ns, names)
	l.waitReplicasReady(t, 2)
}

// drainWindow is when a controller Pod was seen terminating: from its first poll with a
// deletionTimestamp to its first poll without it in the list (zero if still there).
type drainWindow struct{ from, to time.Time }

// drainWatch records the drain windows of the release's Pods, polling every 250 ms,
// and calls draining with each Pod when it is first seen terminating.
type drainWatch struct {
	stopCh   chan struct{}
	done     chan struct{}
	windows  map[string]drainWindow
	draining func(corev1.Pod)
}

func watchDrains(l *leg, draining func(corev1.Pod)) *drainWatch {
	d := &drainWatch{stopCh: make(chan struct{}), done: make(chan struct{}), windows: map[string]drainWindow{}, draining: draining}
	go func() {
		defer close(d.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			pods, err := l.c.Client().CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
			if err == nil {
				now, seen := time.Now(), map[string]bool{}
				for _, p := range pods.Items {
					seen[p.Name] = true
					if _, ok := d.windows[p.Name]; !ok && p.DeletionTimestamp != nil {
						d.windows[p.Name] = drainWindow{from: now}
						d.draining(p)
					}
				}
				for name, w := range d.windows {
					if !seen[name] && w.to.IsZero() {
						w.to = now
						d.windows[name] = w
					}
				}
			}
			select {
			case <-d.stopCh:
				return
			case <-tick.C:
			}
		}
	}()
	return d
}

// stop ends the watch and returns the windows by Pod name.
func (d *drainWatch) stop() map[string]drainWindow {
	close(d.stopCh)
	<-d.done
	return d.windows
}

// waitReplicasReady waits until the Deployment has want updated, ready replicas and
// no old one left.
func (l *leg) waitReplicasReady(t *testing.T, want int32) {
	t.Helper()
	cluster.Eventually(t, 3*time.Minute, fmt.Sprintf("%d ready replicas", want), func(ctx context.Context) (bool, string) {
		dep, err := l.c.Client().AppsV1().Deployments(namespace).Get(ctx, release, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := dep.Status
		return s.ObservedGeneration == dep.Generation && s.UpdatedReplicas == want && s.ReadyReplicas == want && s.Replicas == want,
			fmt.Sprintf("%+v\n%s", s, l.describeControllerPods())
	})
}

// testUpgrade runs `helm upgrade` to a second image tag while TrainJobs are created
// without pause and four trainers report progress every 0.6 s, their final reports
// spread over the rollout (12–36 s after they start, the upgrade beginning a few
// seconds after): the Deployment rolls both replicas, no create is refused, every
// TrainJob created before, during and after gets its one JobSet, and each trainer's
// last report answered 200 is its status, also one a draining replica answered (how
// many final reports were sent while an old replica drained is logged). Beside them, the
// test reports for one sleeping TrainJob per old replica straight to that replica's Pod
// IP from the moment it starts terminating until it stops answering, and the last
// report each answered 200 must be in its TrainJob's status (drainreports_test.go):
// what a replica held in memory when it stopped is written. Then the CRD upgrade
// step the chart README documents (`helm show crds | kubectl apply --server-side`) is
// applied over the existing TrainJobs, which keep their number and specs.
func testUpgrade(t *testing.T, l *leg) {
	ctx := context.Background()
	const tag = "0.1.0-upgrade"
	l.pushImage(t, imageLayout(), tag)
	direct := createDrainTargets(t, l)
	reports := startReporters(t, l, []time.Duration{12 * time.Second, 20 * time.Second, 28 * time.Second, 36 * time.Second})
	direct.prepare(t)
	drains := watchDrains(l, direct.draining)
	ns := cluster.NewNamespace(t, l.c)
	cr := startCreating(l, ns, "upgrade", 0)
	cluster.Eventually(t, time.Minute, "20 creates sent", func(context.Context) (bool, string) {
		return cr.count() >= 20, fmt.Sprintf("%d sent", cr.count())
	})
	start := time.Now()
	l.helm(t, "upgrade", release, l.chartDir(), "--namespace", namespace, "--reuse-values", "--set", "image.tag="+tag, "--wait", "--timeout", installTimeout.String())
	l.waitReplicasReady(t, 2)
	t.Logf("helm upgrade --wait and the rollout: %s", time.Since(start).Round(100*time.Millisecond))
	pods, err := l.c.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && !strings.Contains(p.Spec.Containers[0].Image, ":"+tag+"@") {
			t.Errorf("pod %s runs %s after the upgrade, want tag %s", p.Name, p.Spec.Containers[0].Image, tag)
		}
	}
	l.checkPodsRunPushedImage(t, pods.Items)
	time.Sleep(2 * time.Second) // creates against the new replicas only
	names := cr.finish(t)
	t.Logf("%d TrainJobs created across the upgrade", len(names))
	l.waitEachHasOneJobSet(t, ns, names)
	direct.verify(t)
	reports.verify(t)
	windows := drains.stop()
	for name, sent := range reports.finals {
		for pod, w := range windows {
			if !sent.Before(w.from) && (w.to.IsZero() || !sent.After(w.to)) {
				t.Logf("%s's final report was sent at %s, while the old replica %s drained (%s to %s): in the status", name, sent.Format(time.StampMilli), pod, w.from.Format(time.StampMilli), w.to.Format(time.StampMilli))
			}
		}
	}

	before, err := l.trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crds := l.helm(t, "show", "crds", l.chartDir())
	out, err := l.kubectlStdin(crds, "apply", "--server-side", "--force-conflicts", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl apply of the chart's CRDs: %v\n%s", err, out)
	}
	t.Logf("CRD upgrade step: %s", strings.TrimSpace(out))
	after, err := l.trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before.Items) {
		t.Fatalf("%d TrainJobs after the CRD upgrade, %d before", len(after.Items), len(before.Items))
	}
	specs := map[string]trainer.TrainJobSpec{}
	for _, tj := range before.Items {
		specs[tj.Name] = tj.Spec
	}
	for _, tj := range after.Items {
		if was, ok := specs[tj.Name]; !ok || !apiequality.Semantic.DeepEqual(was, tj.Spec) {
			t.Errorf("TrainJob %s changed across the CRD upgrade:\nbefore %+v\nafter  %+v", tj.Name, was, tj.Spec)
		}
	}
}
