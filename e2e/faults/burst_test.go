package faults

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestBurstDoesNotDelayAnotherNamespace (issue 43): tenant A creates a burst of
// TrainJobs (-faults.tenantburst, 3,000 by default) from 64 concurrent clients; once a
// third of it exists, tenant B creates one TrainJob. Every stage's queue serves the
// namespaces in turn (pkg/engine/fairqueue.go,
// docs/design/architecture.md#fair-queuing-in-every-stage), so B's key waits for about
// one of A's keys per stage, not for the hundreds of A's keys queued ahead of it: B's
// JobSet must appear within 2 s of B's create; its time alone (measured first, by the
// same controller, with nothing else to do) is logged beside it. With one
// FIFO per stage, B waited behind up to 500 of A's keys in each stage (issue 43
// measured 8–9 s with `make run`).
//
// Measured on a shared 2-core machine: B alone 7–13 ms; during the burst 0.15–0.62 s,
// 1.06 s inside a full `make check` (at 10,000: 0.34 s, alone 10 ms); with the flow key
// nil (one FIFO per stage) 2.1 s and 2.9 s, a failure. The test takes 20–25 s, A's deletion included; 1m20s at 10,000.
func TestBurstDoesNotDelayAnotherNamespace(t *testing.T) {
	timed(t)
	const (
		clients = 64
		// duringMax is the bound for B during the burst, and the one asserted.
		// Its other bound, 2× B alone (7–13 ms here), is logged, not asserted: during the
		// burst the cores run the API server, etcd, the controller and 64 clients at
		// once, so each step on B's way to its JobSet (the TrainJob's watch event behind
		// A's in the informer, a freed in-flight slot, one of A's keys ahead in each
		// stage, the apply, the JobSet's watch event) also waits for a core and for the
		// API server. Measured with fair stages: 0.15–0.62 s alone on the machine, 1.06 s
		// inside a full `make check` (a bound of 2× alone + 1 s failed there); behind one
		// FIFO per stage: 2.07 s and 2.90 s alone on the machine, a failure.
		duringMax = 2 * time.Second
	)
	n := *tenantBurst
	e := newEnv(t)
	e.startController(t, "", "trainyard-burst")
	busy, quiet := e.namespace(t), e.namespace(t)
	// B's own clients and A's: B's create and watch never wait behind A's creates in a
	// client-side rate limiter, and A's creates are bounded by the API server only.
	b, a := newEnvQPS(t, 50, 100), newEnvQPS(t, 5000, 10000)

	// B alone: a warm-up TrainJob (the controller's first apply), then five, the
	// median kept.
	b.timeToJobSet(t, quiet, "alone-warmup", 30*time.Second)
	var alones []time.Duration
	for i := range 5 {
		d, _ := b.timeToJobSet(t, quiet, fmt.Sprintf("alone-%d", i), 30*time.Second)
		alones = append(alones, d)
	}
	slices.Sort(alones)
	alone := alones[len(alones)/2]

	burst := a.startBurstClients(busy, n, 0, clients)
	burst.waitCreated(n / 3)
	into, createdAtB := time.Since(burst.start), burst.created.Load()
	during, create := b.timeToJobSet(t, quiet, "during-burst", 2*time.Minute)
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
	expectExact(t, ty, 7)

	t.Logf("B alone: its JobSet %v after its create (median of %v)", alone.Round(time.Millisecond), roundAll(alones))
	t.Logf("B during A's burst of %d (%d clients; B created %v into it, %d of A's created): its JobSet %v after its create (the create call %v); then %d of A's created, %d with their JobSet (%d waiting)",
		n, clients, into.Round(10*time.Millisecond), createdAtB, during.Round(time.Millisecond), create.Round(time.Millisecond),
		createdAtJobSet, aJobSets, createdAtJobSet-int64(aJobSets))
	t.Logf("A's burst: %d created in %v (%.0f/s, %d retried), all with their JobSets %v after the burst began (%v after the last create)",
		n, burstTook.Round(100*time.Millisecond), float64(n)/burstTook.Seconds(), burst.retries.Load(),
		time.Since(burst.start).Round(100*time.Millisecond), time.Since(allStart).Round(100*time.Millisecond))
	t.Logf("B during the burst / B alone: %.1f×; limit %v", during.Seconds()/alone.Seconds(), duringMax)
	if during > duringMax {
		t.Errorf("during A's burst, B's JobSet appeared %v after its create, more than %v (%v alone): B waited behind A's keys",
			during.Round(time.Millisecond), duringMax, alone.Round(time.Millisecond))
	}
}

// timeToJobSet creates TrainJob name in ns and returns how long from the create call
// until its JobSet exists (watched from before the create), and how long the create
// call itself took; the test fails after timeout.
func (e *env) timeToJobSet(t *testing.T, ns, name string, timeout time.Duration) (toJobSet, create time.Duration) {
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
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, trainJob(ns, name), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating TrainJob %s/%s: %v", ns, name, err)
	}
	create = time.Since(start)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			switch {
			case !ok:
				t.Fatalf("the watch of JobSet %s/%s closed before it appeared", ns, name)
			case ev.Type == watch.Error:
				t.Fatalf("watching JobSet %s/%s: %v", ns, name, ev.Object)
			case ev.Type == watch.Added:
				return time.Since(start), create
			}
		case <-ctx.Done():
			t.Fatalf("no JobSet %s/%s within %v of its TrainJob's create", ns, name, timeout)
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
