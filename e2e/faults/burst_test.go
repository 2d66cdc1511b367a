package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// TestBurstDoesNotDelayAnotherNamespace (issue 43): tenant A creates a burst of
// TrainJobs (-faults.tenantburst: 3,000, then 10,000, a subtest each) from 64
// concurrent clients; once a third of it exists, tenant B creates one TrainJob. Every
// stage's queue serves the namespaces in turn (pkg/engine/fairqueue.go,
// docs/design/architecture.md#fair-queuing-in-every-stage), so B's key waits for about
// one of A's keys per stage, not for the hundreds of A's keys queued ahead of it: B's
// JobSet must appear within 2 s of B's create; its time alone (measured first, by the
// same controller, with nothing else to do) is logged beside it. With one FIFO per
// stage, B waited behind up to 500 of A's keys in each stage (issue 43 measured 8–9 s
// with `make run`).
//
// B's way to its JobSet crosses the API server twice (its TrainJob's create, watched by
// the controller; its JobSet's apply, watched by the test), and during A's burst the API
// server is what is loaded. So the test also times the second crossing for anyone: a
// JobSet of the runtime's shape server-side applied in a namespace of its own, from the
// apply call to its watch event ("a JobSet hop"), alone and right around B's TrainJob;
// and logs B's time beyond its own create call and a JobSet hop: the part the
// controller adds (the TrainJob's watch event to it included), the part fairness
// governs.
//
// Measured on a shared 2-core machine: see e2e/README.md#the-fault-suite. With the flow
// key nil (one FIFO per stage) 2.1 s and 2.9 s at 3,000, a failure.
func TestBurstDoesNotDelayAnotherNamespace(t *testing.T) {
	sizes, err := parseSizes(*tenantBursts)
	if err != nil {
		t.Fatalf("-faults.tenantburst: %v", err)
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("burst=%d", n), func(t *testing.T) { burstBesideAnotherNamespace(t, n) })
	}
}

// burstBesideAnotherNamespace is TestBurstDoesNotDelayAnotherNamespace with a burst of
// n TrainJobs, on a controller of its own.
func burstBesideAnotherNamespace(t *testing.T, n int) {
	timed(t)
	const (
		clients = 64
		// duringMax is the bound for B during the burst, and the one asserted.
		// Its other bound, 2× B alone (7–13 ms here), is logged with B's time beyond
		// the API server's part, not asserted: during the burst the cores run the API server,
		// etcd, the controller and 64 clients at once, so each step on B's way to its
		// JobSet also waits for a core and for the API server
		// (e2e/README.md#the-fault-suite has the figures).
		duringMax = 2 * time.Second
		samples   = 5
	)
	e := newEnv(t)
	e.startController(t, "", "trainyard-burst")
	busy, quiet := e.namespace(t), e.namespace(t)
	// B's own clients and A's: B's create and watch never wait behind A's creates in a
	// client-side rate limiter, and A's creates are bounded by the API server only.
	b, a := newEnvQPS(t, 50, 100), newEnvQPS(t, 5000, 10000)

	// B alone: a warm-up TrainJob (the controller's first apply), then five, the
	// median kept; a JobSet hop after each.
	probe := cluster.NewNamespace(t, e.c)
	b.timeToJobSet(t, quiet, "alone-warmup", 30*time.Second)
	var alones, createsAlone, hopsAlone []time.Duration
	for i := range samples {
		d, c := b.timeToJobSet(t, quiet, fmt.Sprintf("alone-%d", i), 30*time.Second)
		alones, createsAlone = append(alones, d), append(createsAlone, c)
		hopsAlone = append(hopsAlone, b.jobSetHop(t, probe, fmt.Sprintf("hop-alone-%d", i)))
	}
	alone, createAlone, hopAlone := median(alones), median(createsAlone), median(hopsAlone)

	burst := a.startBurstClients(busy, n, 0, clients)
	burst.waitCreated(n / 3)
	into, createdAtB := time.Since(burst.start), burst.created.Load()
	hopsDuring := []time.Duration{b.jobSetHop(t, probe, "hop-before-b")}
	during, create := b.timeToJobSet(t, quiet, "during-burst", 2*time.Minute)
	hopsDuring = append(hopsDuring, b.jobSetHop(t, probe, "hop-after-b"))
	hopDuring := (hopsDuring[0] + hopsDuring[1]) / 2
	// A's TrainJobs still without a JobSet when B had its own: the backlog B did not
	// wait behind.
	aJobSets := e.jobSetCount(context.Background(), t, busy)
	createdAtJobSet := burst.created.Load()
	burstTook := burst.wait(t, 5*time.Minute)
	allStart := time.Now()
	final := e.waitAllJobSets(t, busy, n, 10*time.Minute)
	expectExact(t, final, n)
	ty, err := e.count(context.Background(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	expectExact(t, ty, 1+samples+1)

	t.Logf("B alone: its JobSet %v after its create (median of %v; the create call %v); a JobSet hop %v (median of %v)",
		alone.Round(time.Millisecond), roundAll(alones), createAlone.Round(time.Millisecond), hopAlone.Round(time.Millisecond), roundAll(hopsAlone))
	t.Logf("B during A's burst of %d (%d clients; B created %v into it, %d of A's created): its JobSet %v after its create (the create call %v); JobSet hops around it %v; then %d of A's created, %d with their JobSet (%d waiting)",
		n, clients, into.Round(10*time.Millisecond), createdAtB, during.Round(time.Millisecond), create.Round(time.Millisecond),
		roundAll(hopsDuring), createdAtJobSet, aJobSets, createdAtJobSet-int64(aJobSets))
	t.Logf("A's burst: %d created in %v (%.0f/s, %d retried), all with their JobSets %v after the burst began (%v after the last create)",
		n, burstTook.Round(100*time.Millisecond), float64(n)/burstTook.Seconds(), burst.retries.Load(),
		time.Since(burst.start).Round(100*time.Millisecond), time.Since(allStart).Round(100*time.Millisecond))
	beyondAlone, beyondDuring := max(alone-createAlone-hopAlone, 0), max(during-create-hopDuring, 0)
	t.Logf("B during the burst / B alone: %.1f× (limit %v); beyond its create call and a JobSet hop: %v during, %v alone",
		during.Seconds()/alone.Seconds(), duringMax, beyondDuring.Round(time.Millisecond), beyondAlone.Round(time.Millisecond))
	if during > duringMax {
		t.Errorf("during A's burst, B's JobSet appeared %v after its create, more than %v (%v alone): B waited behind A's keys",
			during.Round(time.Millisecond), duringMax, alone.Round(time.Millisecond))
	}
}

// jobSetHop server-side applies JobSet name, of the suite's runtime's shape, in ns and
// returns how long from the apply call until its watch event arrives: what the API
// server adds at this moment to the controller's second write on a TrainJob's way,
// seen by a watcher. ns holds no TrainJob, so the JobSet is nobody's.
func (e *env) jobSetHop(t *testing.T, ns, name string) time.Duration {
	t.Helper()
	body, err := json.Marshal(&jobsetv1alpha2.JobSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: jobsetv1alpha2.SchemeGroupVersion.String(), Kind: "JobSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       torchRuntime(ns).Spec.Template.Spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	hop, _ := e.untilJobSetAdded(t, ns, name, time.Minute, func(ctx context.Context) error {
		_, err := e.jobsets.JobsetV1alpha2().JobSets(ns).Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "faults-probe", Force: ptr.To(true)})
		return err
	})
	return hop
}

// parseSizes parses a comma-separated list of positive counts.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive count (want e.g. 3000,10000)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// median returns the middle of ds after sorting a copy (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// timeToJobSet creates TrainJob name in ns and returns how long from the create call
// until its JobSet exists, and how long the create call itself took; the test fails
// after timeout.
func (e *env) timeToJobSet(t *testing.T, ns, name string, timeout time.Duration) (toJobSet, create time.Duration) {
	t.Helper()
	return e.untilJobSetAdded(t, ns, name, timeout, func(ctx context.Context) error {
		_, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, trainJob(ns, name), metav1.CreateOptions{})
		return err
	})
}

// untilJobSetAdded opens a watch of JobSet ns/name, calls write, and returns how long
// from the call until the JobSet's Added event, and how long the call itself took. The
// test fails when write errs, the watch breaks, or no event comes within timeout.
func (e *env) untilJobSetAdded(t *testing.T, ns, name string, timeout time.Duration, write func(context.Context) error) (added, call time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	jss := e.jobsets.JobsetV1alpha2().JobSets(ns)
	sel := "metadata.name=" + name
	list, err := jss.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("listing JobSet %s/%s: %v", ns, name, err)
	}
	w, err := jss.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watching JobSet %s/%s: %v", ns, name, err)
	}
	defer w.Stop()
	start := time.Now()
	if err := write(ctx); err != nil {
		t.Fatalf("writing for JobSet %s/%s: %v", ns, name, err)
	}
	call = time.Since(start)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			switch {
			case !ok:
				t.Fatalf("the watch of JobSet %s/%s closed before it appeared", ns, name)
			case ev.Type == watch.Error:
				t.Fatalf("watching JobSet %s/%s: %v", ns, name, ev.Object)
			case ev.Type == watch.Added:
				return time.Since(start), call
			}
		case <-ctx.Done():
			t.Fatalf("no JobSet %s/%s within %v of the write", ns, name, timeout)
		}
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
