package faults

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
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
// the controller; its JobSet's write, watched by the test), and during A's burst the API
// server is what is loaded. So the test splits B's time at the API server's audit
// timestamps (see way): the API server's parts, and the controller's part — from the
// TrainJob's create completed to the controller's JobSet write received — the part
// the stage queues govern.
//
// Measured on a shared 2-core machine: see e2e/README.md#the-2-bound-of-issue-43. With
// the flow key nil (one FIFO per stage) 2.1 s and 2.9 s at 3,000, a failure.
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
		user    = "trainyard-burst"
		// duringMax is the bound for B during the burst, and the one asserted.
		// Its other bound, 2× B alone (7–13 ms here), is logged with B's time split, not
		// asserted: B's own create call during the burst alone exceeds it
		// (e2e/README.md#the-2-bound-of-issue-43).
		duringMax = 2 * time.Second
		samples   = 5
	)
	e := newEnv(t)
	audit := e.auditFromNow(t)
	ctrl := e.startController(t, "", user)
	busy, quiet := e.namespace(t), e.namespace(t)
	// B's own clients and A's: B's create and watch never wait behind A's creates in a
	// client-side rate limiter, and A's creates are bounded by the API server only.
	b, a := newEnvQPS(t, 50, 100), newEnvQPS(t, 5000, 10000)

	// B alone: a warm-up TrainJob (the controller's first apply), then five; the one
	// of median time kept.
	b.timeToJobSet(t, quiet, "alone-warmup", 30*time.Second)
	alones := make([]*way, samples)
	for i := range alones {
		alones[i] = b.timeToJobSet(t, quiet, fmt.Sprintf("alone-%d", i), 30*time.Second)
	}

	waitedBefore := ctrl.Metric(t, "rest_client_rate_limiter_duration_seconds_sum")
	requestsBefore := ctrl.Metric(t, "rest_client_rate_limiter_duration_seconds_count")
	burst := a.startBurstClients(busy, n, 0, clients)
	burst.waitCreated(n / 3)
	into, createdAtB := time.Since(burst.start), burst.created.Load()
	during := b.timeToJobSet(t, quiet, "during-burst", 2*time.Minute)
	// A's TrainJobs still without a JobSet when B had its own: the backlog B did not
	// wait behind.
	aJobSets := e.jobSetCount(context.Background(), t, busy)
	createdAtJobSet := burst.created.Load()
	burstTook := burst.wait(t, 5*time.Minute)
	allStart := time.Now()
	final := e.waitAllJobSets(t, busy, n, 10*time.Minute)
	waited := ctrl.Metric(t, "rest_client_rate_limiter_duration_seconds_sum") - waitedBefore
	requests := ctrl.Metric(t, "rest_client_rate_limiter_duration_seconds_count") - requestsBefore
	expectExact(t, final, n)
	ty, err := e.count(context.Background(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	expectExact(t, ty, 1+samples+1)
	events := readAudit(t, audit)
	for _, w := range append(alones, during) {
		w.fromAudit(t, events, user)
	}

	slices.SortFunc(alones, func(x, y *way) int { return int(x.total() - y.total()) })
	alone := alones[samples/2]
	t.Logf("B alone: %v to its JobSet (median of %v); %s",
		alone.total().Round(time.Millisecond), roundAll(totals(alones)), alone)
	t.Logf("B during A's burst of %d (%d clients; B created %v into it, %d of A's created): %v to its JobSet; %s; then %d of A's created, %d with their JobSet (%d waiting)",
		n, clients, into.Round(10*time.Millisecond), createdAtB, during.total().Round(time.Millisecond), during,
		createdAtJobSet, aJobSets, createdAtJobSet-int64(aJobSets))
	t.Logf("A's burst: %d created in %v (%.0f/s, %d retried), all with their JobSets %v after the burst began (%v after the last create); the controller's requests waited %.1f ms on average in its client-side rate limiter (%.0f requests)",
		n, burstTook.Round(100*time.Millisecond), float64(n)/burstTook.Seconds(), burst.retries.Load(),
		time.Since(burst.start).Round(100*time.Millisecond), time.Since(allStart).Round(100*time.Millisecond),
		1000*waited/max(requests, 1), requests)
	t.Logf("B during the burst / B alone: %.1f× (limit %v); the controller's part %.0f× (%.1f ms during, %.1f ms alone)",
		during.total().Seconds()/alone.total().Seconds(), duringMax, during.controller().Seconds()/alone.controller().Seconds(),
		float64(during.controller())/1e6, float64(alone.controller())/1e6)
	if during.total() > duringMax {
		t.Errorf("during A's burst, B's JobSet appeared %v after its create, more than %v (%v alone): B waited behind A's keys",
			during.total().Round(time.Millisecond), duringMax, alone.total().Round(time.Millisecond))
	}
}

// way is one TrainJob's way from its create call to its JobSet's watch event, as
// instants of the machine's one clock: the test's (its calls and watches) and the API
// server's audit log (microseconds). Consecutive instants split the way into parts
// that add up to its total.
type way struct {
	ns, name string
	// start and called: the create call's start and return; jobSetAdded: the JobSet's
	// Added event at the test's watch; trainJobSeen: the TrainJob's Added event at a
	// watch of TrainJobs in all namespaces, as the controller's informer has, opened
	// right before the create.
	start, called, jobSetAdded, trainJobSeen time.Time
	// watchLost says why trainJobSeen is unknown: the watch closed before the event.
	watchLost string
	// From the audit log: the TrainJob create's response completed (created); the
	// controller's JobSet write received (applyReceived) and completed (applied).
	created, applyReceived, applied time.Time
}

func (w *way) total() time.Duration { return w.jobSetAdded.Sub(w.start) }

// controller is the time from the API server completing the TrainJob's create to it
// receiving the controller's JobSet write: the watch event to the controller, its
// stages and its client-side rate limiter.
func (w *way) controller() time.Duration { return w.applyReceived.Sub(w.created) }

// String is the way's split, in milliseconds.
func (w *way) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
	seen := "its TrainJob's event at a watch of all namespaces " + ms(w.trainJobSeen.Sub(w.created)) + " ms after the create"
	if w.trainJobSeen.IsZero() {
		seen = "its TrainJob's event at a watch of all namespaces not seen: " + w.watchLost
	}
	return fmt.Sprintf("create call to its response %s ms + the controller %s ms (%s) + its JobSet write %s ms + the JobSet's event to the test %s ms (the create call returned after %s ms)",
		ms(w.created.Sub(w.start)), ms(w.controller()), seen,
		ms(w.applied.Sub(w.applyReceived)), ms(w.jobSetAdded.Sub(w.applied)), ms(w.called.Sub(w.start)))
}

// fromAudit fills the way's audit instants from events: the successful create of its
// TrainJob, and the first successful write of its JobSet by user. The test fails when
// either is missing.
func (w *way) fromAudit(t *testing.T, events []cluster.AuditEvent, user string) {
	t.Helper()
	for _, ev := range events {
		if !ev.Succeeded() || ev.ObjectRef == nil || ev.ObjectRef.Namespace != w.ns || ev.ObjectRef.Name != w.name || ev.ObjectRef.Subresource != "" {
			continue
		}
		switch {
		case ev.ObjectRef.Resource == "trainjobs" && ev.Verb == "create":
			w.created = ev.StageTimestamp
		case ev.ObjectRef.Resource == "jobsets" && ev.User.Username == user && w.applyReceived.IsZero():
			w.applyReceived, w.applied = ev.RequestReceivedTimestamp, ev.StageTimestamp
		}
	}
	if w.created.IsZero() || w.applyReceived.IsZero() {
		t.Fatalf("the audit log has no create of TrainJob %s/%s or no write of its JobSet by %s", w.ns, w.name, user)
	}
}

func totals(ws []*way) []time.Duration {
	out := make([]time.Duration, len(ws))
	for i, w := range ws {
		out[i] = w.total()
	}
	return out
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

// timeToJobSet creates TrainJob name in ns and returns its way to its JobSet, the
// audit instants left to fill (way.fromAudit). The test fails when the create fails, a
// watch breaks, or the JobSet does not appear within timeout.
func (e *env) timeToJobSet(t *testing.T, ns, name string, timeout time.Duration) *way {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	jobSets := e.watchJobSet(t, ctx, ns, name)
	defer jobSets.Stop()
	trainJobs := e.watchTrainJobsFromNow(t, ctx)
	defer trainJobs.Stop()
	// The watch of all namespaces only tells where the controller's part begins: if
	// the API server closes it (a watcher too slow for the burst's events is closed),
	// the way says so instead of failing the test.
	seen := make(chan seenEvent, 1)
	go func() {
		last := "closed by the API server"
		for ev := range trainJobs.ResultChan() {
			if ev.Type == watch.Error {
				last = fmt.Sprintf("error %v", ev.Object)
				continue
			}
			if tj, ok := ev.Object.(*trainer.TrainJob); ok && ev.Type == watch.Added && tj.Namespace == ns && tj.Name == name {
				seen <- seenEvent{at: time.Now()}
				return
			}
		}
		seen <- seenEvent{lost: last}
	}()

	w := &way{ns: ns, name: name, start: time.Now()}
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, trainJob(ns, name), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating TrainJob %s/%s: %v", ns, name, err)
	}
	w.called = time.Now()
	for w.jobSetAdded.IsZero() {
		select {
		case ev, ok := <-jobSets.ResultChan():
			switch {
			case !ok:
				t.Fatalf("the watch of JobSet %s/%s closed before it appeared", ns, name)
			case ev.Type == watch.Error:
				t.Fatalf("watching JobSet %s/%s: %v", ns, name, ev.Object)
			case ev.Type == watch.Added:
				w.jobSetAdded = time.Now()
			}
		case <-ctx.Done():
			t.Fatalf("no JobSet %s/%s within %v of its TrainJob's create", ns, name, timeout)
		}
	}
	select {
	case ev := <-seen:
		w.trainJobSeen, w.watchLost = ev.at, ev.lost
	case <-ctx.Done():
		w.watchLost = fmt.Sprintf("no event within %v", timeout)
	}
	return w
}

// seenEvent is when a watch of all namespaces delivered a TrainJob's Added event, or
// why it did not.
type seenEvent struct {
	at   time.Time
	lost string
}

// watchJobSet watches JobSet ns/name from now on, failing the test when it cannot.
func (e *env) watchJobSet(t *testing.T, ctx context.Context, ns, name string) watch.Interface {
	t.Helper()
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
	return w
}

// watchTrainJobsFromNow watches the TrainJobs of all namespaces, as the controller's
// informer does, from now on: from the resource version of a list of one item, so
// that the watch does not replay the TrainJobs that exist. It fails the test when it
// cannot.
func (e *env) watchTrainJobsFromNow(t *testing.T, ctx context.Context) watch.Interface {
	t.Helper()
	tjs := e.trainers.TrainerV1alpha1().TrainJobs(metav1.NamespaceAll)
	list, err := tjs.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatalf("listing TrainJobs: %v", err)
	}
	w, err := tjs.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watching TrainJobs: %v", err)
	}
	return w
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
