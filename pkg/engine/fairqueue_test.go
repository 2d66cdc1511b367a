package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/util/fairlimit"
)

// fairQueue keeps each flow's keys in order and gives every flow with keys waiting one
// turn per round, a flow that starts waiting joining the end of the round.
func TestFairQueueServesFlowsInTurn(t *testing.T) {
	q := newFairQueue(namespaceFlow)
	for _, k := range []string{"a/1", "a/2", "a/3", "b/1", "c/1", "c/2"} {
		q.Push(objectName(k))
	}
	var got []string
	pop := func() { got = append(got, q.Pop().String()) }
	pop()                     // a/1; a goes to the end: b, c, a
	q.Push(objectName("d/1")) // d joins after a
	for q.Len() > 0 {
		pop()
	}
	want := []string{"a/1", "b/1", "c/1", "a/2", "d/1", "c/2", "a/3"}
	if !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
	if held := q.holds(); held != "" {
		t.Errorf("an emptied fairQueue keeps %s", held)
	}
	// A flow that empties and comes back is a new flow, at the end of the round.
	q.Push(objectName("a/4"))
	q.Push(objectName("b/2"))
	q.Push(objectName("a/5"))
	got = nil
	for q.Len() > 0 {
		pop()
	}
	if want := []string{"a/4", "b/2", "a/5"}; !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}

// The flow key is a seam: a queue built with another flowKeyFunc serves those flows.
func TestFairQueueFlowKeyIsPluggable(t *testing.T) {
	byFirstLetter := func(k cache.ObjectName) string { return k.Name[:1] }
	q := newFairQueue(byFirstLetter)
	for _, k := range []string{"ns/x1", "ns/x2", "ns/y1"} {
		q.Push(objectName(k))
	}
	var got []string
	for q.Len() > 0 {
		got = append(got, q.Pop().Name)
	}
	if want := []string{"x1", "y1", "x2"}; !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}

// ring is a FIFO whatever the sequence of pushes and pops, across wrap-arounds and
// growth, holds a buffer of at most twice its peak since it was last empty, and drops a
// large buffer when it empties.
func TestRingIsAFIFO(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r ring[int]
	var model []int
	next, peak := 0, 0
	for step := range 200_000 {
		// Phases of growth and of draining, so the buffer grows and shrinks many times.
		pushBias := 0.3
		if (step/5000)%2 == 0 {
			pushBias = 0.7
		}
		if len(model) == 0 || rng.Float64() < pushBias {
			r.push(next)
			model = append(model, next)
			next++
		} else {
			if got := r.pop(); got != model[0] {
				t.Fatalf("step %d: pop %d, want %d", step, got, model[0])
			}
			model = model[1:]
		}
		if r.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, r.len(), len(model))
		}
		peak = max(peak, len(model))
		if size := len(r.buf); size > ringMinSize && size > 2*peak {
			t.Fatalf("step %d: buffer of %d for a peak of %d elements", step, size, peak)
		}
		if len(model) == 0 {
			if len(r.buf) > ringMinSize {
				t.Fatalf("step %d: an empty ring keeps a buffer of %d", step, len(r.buf))
			}
			peak = 0
		}
	}
	for len(model) > 0 {
		if got := r.pop(); got != model[0] {
			t.Fatalf("drain: pop %d, want %d", got, model[0])
		}
		model = model[1:]
	}
	if len(r.buf) > ringMinSize {
		t.Errorf("an empty ring keeps a buffer of %d", len(r.buf))
	}
}

// One namespace's burst does not hold another in a stage queue: with 500 keys of team-a
// waiting in a stage, a key of team-b added after them is synced second, not 501st
// (issue 43). The stage is reached directly (Enqueue), so the in-flight gate, which is
// fair already, plays no part.
func TestStageQueueServesNamespacesInTurn(t *testing.T) {
	gate := cache.NewObjectName("team-a", "gate")
	release := make(chan struct{})
	var mu sync.Mutex
	var order []cache.ObjectName
	done := make(chan struct{})
	const burst = 500
	p := mustNew(t, []Stage{&fakeStage{name: "status", sync: func(_ context.Context, k cache.ObjectName) (Result, error) {
		if k == gate {
			<-release
			return WaitForEvent(), nil
		}
		mu.Lock()
		defer mu.Unlock()
		order = append(order, k)
		if len(order) == burst+1 {
			close(done)
		}
		return WaitForEvent(), nil
	}}}, WithMaxInFlight(0))
	run(t, p)

	p.Enqueue("status", gate)
	deadline := time.Now().Add(timeout)
	for p.Len("status") != 0 { // the one worker holds the gate key
		if time.Now().After(deadline) {
			t.Fatal("the gate key was not taken")
		}
		time.Sleep(time.Millisecond)
	}
	for i := range burst {
		p.Enqueue("status", cache.NewObjectName("team-a", fmt.Sprint("burst-", i)))
	}
	quiet := cache.NewObjectName("team-b", "first")
	p.Enqueue("status", quiet)
	close(release)
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatal("timed out waiting for the burst to be synced")
	}
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(order, quiet); i != 1 {
		t.Errorf("team-b's key was synced at position %d of %d, want 1 (right after team-a's oldest)", i, len(order))
	}
	var burstOrder []cache.ObjectName
	for _, k := range order {
		if k.Namespace == "team-a" {
			burstOrder = append(burstOrder, k)
		}
	}
	for i, k := range burstOrder {
		if want := cache.NewObjectName("team-a", fmt.Sprint("burst-", i)); k != want {
			t.Fatalf("team-a's key %d synced was %v, want %v: one namespace's keys keep their order", i, k, want)
		}
	}
}

// queueKinds builds a stage queue over client-go's FIFO and over the fair queue, the
// way the pipeline builds it, so that a test can check they behave alike.
var queueKinds = map[string]flowKeyFunc{"fifo": nil, "fair": namespaceFlow}

func newTestStageQueue(clk *testingclock.FakeClock, reg *prometheus.Registry, flowKey flowKeyFunc) workqueue.TypedRateLimitingInterface[cache.ObjectName] {
	return newStageQueue("stage", config{
		rateLimit: RateLimit{BaseDelay: time.Second, MaxDelay: 4 * time.Second, QPS: 1000, Burst: 1000},
		clock:     clk,
		metrics:   metrics.New(reg),
		flowKey:   flowKey,
	})
}

// getNow takes a key that must be waiting, failing instead of blocking if none is.
func getNow(t *testing.T, q workqueue.TypedRateLimitingInterface[cache.ObjectName]) cache.ObjectName {
	t.Helper()
	if q.Len() == 0 {
		t.Fatal("Get: no key waiting")
	}
	k, shutdown := q.Get()
	if shutdown {
		t.Fatal("Get: the queue is shutting down")
	}
	return k
}

// The stage queue keeps client-go's workqueue contract over the fair storage: adds of a
// waiting key coalesce, a key being processed is not handed out again until Done, and
// then once; AddRateLimited waits the limiter's delay and counts requeues until Forget;
// AddAfter waits its delay; the queue metrics count the same. Each step runs on both
// storages and must give the same answers.
func TestStageQueueKeepsWorkqueueSemantics(t *testing.T) {
	for kind, flowKey := range queueKinds {
		t.Run(kind, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Now())
			reg := prometheus.NewRegistry()
			q := newTestStageQueue(clk, reg, flowKey)
			defer q.ShutDown()
			a1, a2, b1 := objectName("a/1"), objectName("a/2"), objectName("b/1")

			// Coalescing: a key waiting is queued once.
			q.Add(a1)
			q.Add(a1)
			q.Add(a2)
			if q.Len() != 2 {
				t.Fatalf("Len after adding a/1 twice and a/2: %d, want 2", q.Len())
			}
			// Never two workers: a key added while processed waits for Done.
			k := getNow(t, q)
			if k != a1 {
				t.Fatalf("Get: %v, want a/1", k)
			}
			q.Add(a1)
			if q.Len() != 1 {
				t.Fatalf("Len with a/1 processing and added again: %d, want 1 (a/2 only)", q.Len())
			}
			if k := getNow(t, q); k != a2 {
				t.Fatalf("Get: %v, want a/2", k)
			}
			q.Done(a2)
			if q.Len() != 0 {
				t.Fatalf("Len before a/1 is Done: %d, want 0", q.Len())
			}
			q.Done(a1)
			if q.Len() != 1 {
				t.Fatalf("Len after a/1 is Done with an add pending: %d, want 1", q.Len())
			}
			if k := getNow(t, q); k != a1 {
				t.Fatalf("Get: %v, want a/1 again", k)
			}
			q.Done(a1)

			// Rate-limited requeues: 1 s, then 2 s, counted until Forget.
			awaitWaiters(t, clk, idleWaitersPerQueue)
			q.AddRateLimited(b1)
			q.AddRateLimited(a1)
			if n := q.NumRequeues(b1); n != 1 {
				t.Fatalf("NumRequeues(b/1): %d, want 1", n)
			}
			awaitWaiters(t, clk, idleWaitersPerQueue+1)
			if q.Len() != 0 {
				t.Fatalf("Len before the backoff passed: %d, want 0", q.Len())
			}
			clk.Step(time.Second)
			waitLen(t, q, 2)
			got := []cache.ObjectName{getNow(t, q), getNow(t, q)}
			slices.SortFunc(got, func(x, y cache.ObjectName) int { return cmpString(x.String(), y.String()) })
			if !slices.Equal(got, []cache.ObjectName{a1, b1}) {
				t.Fatalf("after the backoff: %v, want a/1 and b/1", got)
			}
			q.Done(a1)
			q.Done(b1)
			q.Forget(a1)
			if n := q.NumRequeues(a1); n != 0 {
				t.Fatalf("NumRequeues(a/1) after Forget: %d, want 0", n)
			}
			awaitWaiters(t, clk, idleWaitersPerQueue)
			q.AddRateLimited(b1) // second failure: 2 s
			awaitWaiters(t, clk, idleWaitersPerQueue+1)
			clk.Step(time.Second)
			time.Sleep(10 * time.Millisecond)
			if q.Len() != 0 {
				t.Fatalf("b/1 back after 1 s of a 2 s backoff")
			}
			awaitWaiters(t, clk, idleWaitersPerQueue+1)
			clk.Step(time.Second)
			waitLen(t, q, 1)
			if k := getNow(t, q); k != b1 {
				t.Fatalf("Get: %v, want b/1", k)
			}
			q.Done(b1)

			// AddAfter waits its delay; an Add meanwhile does not wait.
			awaitWaiters(t, clk, idleWaitersPerQueue)
			q.AddAfter(a2, 3*time.Second)
			awaitWaiters(t, clk, idleWaitersPerQueue+1)
			clk.Step(2 * time.Second)
			time.Sleep(10 * time.Millisecond)
			if q.Len() != 0 {
				t.Fatal("a/2 back before its 3 s delay")
			}
			awaitWaiters(t, clk, idleWaitersPerQueue+1)
			clk.Step(time.Second)
			waitLen(t, q, 1)
			if k := getNow(t, q); k != a2 {
				t.Fatalf("Get: %v, want a/2", k)
			}
			q.Done(a2)

			expectMetrics(t, reg, map[string]float64{
				`workqueue_adds_total{name="stage"}`:    7, // a/1, a/2, a/1, a/1+b/1 retried, b/1, a/2
				`workqueue_retries_total{name="stage"}`: 4, // three AddRateLimited, one AddAfter
				`workqueue_depth{name="stage"}`:         0,
			})
		})
	}
}

// ShutDown and ShutDownWithDrain behave as client-go's: after ShutDown, Get hands out
// nothing more and Add is ignored; ShutDownWithDrain waits for the keys being processed.
func TestStageQueueShutDown(t *testing.T) {
	for kind, flowKey := range queueKinds {
		t.Run(kind, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Now())
			q := newTestStageQueue(clk, prometheus.NewRegistry(), flowKey)
			q.Add(objectName("a/1"))
			q.Add(objectName("b/1"))
			k := getNow(t, q)

			drained := make(chan struct{})
			go func() {
				q.ShutDownWithDrain()
				close(drained)
			}()
			deadline := time.Now().Add(timeout)
			for !q.ShuttingDown() {
				if time.Now().After(deadline) {
					t.Fatal("ShutDownWithDrain did not begin")
				}
				time.Sleep(time.Millisecond)
			}
			q.Add(objectName("c/1")) // ignored
			select {
			case <-drained:
				t.Fatal("ShutDownWithDrain returned while a key was being processed")
			case <-time.After(50 * time.Millisecond):
			}
			// The waiting key is still handed out while draining (client-go's rule).
			if k2, shutdown := q.Get(); shutdown || k2 == k {
				t.Fatalf("Get while draining: %v, %v; want the other waiting key", k2, shutdown)
			} else {
				q.Done(k2)
			}
			q.Done(k)
			select {
			case <-drained:
			case <-time.After(timeout):
				t.Fatal("ShutDownWithDrain did not return once every key was Done")
			}
			if _, shutdown := q.Get(); !shutdown {
				t.Fatal("Get after shutdown: want shutdown")
			}
			q.ShutDown()
		})
	}
}

// A key is never handed to two workers at once, whatever the storage: workers take
// keys while a producer keeps re-adding keys of a few namespaces.
func TestStageQueueNeverHandsOutAKeyTwice(t *testing.T) {
	for kind, flowKey := range queueKinds {
		t.Run(kind, func(t *testing.T) {
			q := newStageQueue("stage", config{rateLimit: DefaultRateLimit(), clock: testingclock.NewFakeClock(time.Now()),
				metrics: metrics.New(prometheus.NewRegistry()), flowKey: flowKey})
			var mu sync.Mutex
			inFlight := map[cache.ObjectName]bool{}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for range 8 {
				wg.Go(func() {
					for {
						k, shutdown := q.Get()
						if shutdown {
							return
						}
						mu.Lock()
						if inFlight[k] {
							select {
							case errs <- fmt.Errorf("%v handed to two workers at once", k):
							default:
							}
						}
						inFlight[k] = true
						mu.Unlock()
						time.Sleep(time.Microsecond)
						mu.Lock()
						delete(inFlight, k)
						mu.Unlock()
						q.Done(k)
					}
				})
			}
			rng := rand.New(rand.NewPCG(3, 4))
			for range 20_000 {
				q.Add(cache.NewObjectName(fmt.Sprint("ns-", rng.IntN(3)), fmt.Sprint("k-", rng.IntN(10))))
			}
			q.ShutDownWithDrain()
			q.ShutDown()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// Randomized against client-go's FIFO: a random sequence of Add, Get and Done (several
// workers, keys of several namespaces) runs on a stage queue over each storage, each
// checked against a model of client-go's workqueue contract. The queue must always agree
// with the model on how many keys wait, hand out only a key the model says waits, never
// one being processed, and in the end have processed every key exactly once per dirty
// period (an add to a key not already waiting to be processed). Client-go's FIFO passing
// the same check is what says the model is client-go's; the two differ only in order.
func TestStageQueueMatchesWorkqueueContractRandomized(t *testing.T) {
	for seed := range uint64(30) {
		for kind, flowKey := range queueKinds {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, kind), func(t *testing.T) {
				checkWorkqueueContract(t, flowKey, seed)
			})
		}
	}
}

func checkWorkqueueContract(t *testing.T, flowKey flowKeyFunc, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 43))
	nsCount, keyCount := 1+rng.IntN(5), 1+rng.IntN(30)
	q := newTestStageQueue(testingclock.NewFakeClock(time.Now()), prometheus.NewRegistry(), flowKey)
	defer q.ShutDown()

	// The model: waiting (dirty and not processing: in the queue), processing, dirty
	// while processing, and how many dirty periods each key had.
	waiting := map[cache.ObjectName]bool{}
	processing := map[cache.ObjectName]bool{}
	redirty := map[cache.ObjectName]bool{}
	periods := map[cache.ObjectName]int{}
	gets := map[cache.ObjectName]int{}
	for step := range 3000 {
		switch op := rng.IntN(3); {
		case op == 0: // Add
			k := cache.NewObjectName(fmt.Sprint("ns-", rng.IntN(nsCount)), fmt.Sprint("k-", rng.IntN(keyCount)))
			q.Add(k)
			if !waiting[k] && !redirty[k] {
				periods[k]++
				if processing[k] {
					redirty[k] = true
				} else {
					waiting[k] = true
				}
			}
		case op == 1 && len(waiting) > 0: // Get
			k := getNow(t, q)
			if !waiting[k] {
				t.Fatalf("step %d: handed out %v, which does not wait", step, k)
			}
			if processing[k] {
				t.Fatalf("step %d: handed out %v while it is processed", step, k)
			}
			delete(waiting, k)
			processing[k] = true
			gets[k]++
		case op == 2 && len(processing) > 0: // Done of a random key being processed
			ks := make([]cache.ObjectName, 0, len(processing))
			for k := range processing {
				ks = append(ks, k)
			}
			slices.SortFunc(ks, func(x, y cache.ObjectName) int { return cmpString(x.String(), y.String()) })
			k := ks[rng.IntN(len(ks))]
			q.Done(k)
			delete(processing, k)
			if redirty[k] {
				delete(redirty, k)
				waiting[k] = true
			}
		}
		if q.Len() != len(waiting) {
			t.Fatalf("step %d: Len %d, model %d", step, q.Len(), len(waiting))
		}
	}
	// Drain: finish what is processed, then process everything left, once each.
	for k := range processing {
		q.Done(k)
		if redirty[k] {
			waiting[k] = true
		}
	}
	for q.Len() > 0 {
		k := getNow(t, q)
		if !waiting[k] {
			t.Fatalf("drain: handed out %v, which does not wait", k)
		}
		delete(waiting, k)
		gets[k]++
		q.Done(k)
	}
	if len(waiting) != 0 {
		t.Errorf("drained, but the model still has %v waiting", waiting)
	}
	for k, n := range periods {
		if gets[k] != n {
			t.Errorf("%v processed %d times, in %d dirty periods", k, gets[k], n)
		}
	}
}

func waitLen(t *testing.T, q workqueue.TypedRateLimitingInterface[cache.ObjectName], n int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for q.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue Len %d, want %d", q.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// holds says what an empty fairQueue still holds beyond its smallest buffers: "" when
// nothing, so no array the size of a past burst is kept.
func (q *fairQueue) holds() string {
	if q == nil {
		return ""
	}
	var held []string
	if len(q.flows) != 0 {
		held = append(held, fmt.Sprintf("%d flows", len(q.flows)))
	}
	if len(q.turns.buf) > ringMinSize {
		held = append(held, fmt.Sprintf("a turn order of %d", len(q.turns.buf)))
	}
	if q.spare != nil && len(q.spare.keys.buf) > ringMinSize {
		held = append(held, fmt.Sprintf("a spare flow of %d", len(q.spare.keys.buf)))
	}
	return strings.Join(held, ", ")
}

// objectName parses "namespace/name".
func objectName(s string) cache.ObjectName {
	k, err := cache.ParseObjectName(s)
	if err != nil {
		panic(err)
	}
	return k
}

// TestSyncContextCarriesTheKeysFlow: every Sync's context names the key's flow (its
// namespace) for the API clients' rate limiter (fairlimit.WithFlow), so that the
// writes a stage makes for a namespace wait for tokens in that namespace's turn, as its
// keys do in the queues; with no flow key (client-go's FIFO) it names none.
func TestSyncContextCarriesTheKeysFlow(t *testing.T) {
	for name, tc := range map[string]struct {
		opts []Option
		want func(cache.ObjectName) string
	}{
		"namespace":   {want: func(k cache.ObjectName) string { return k.Namespace }},
		"no flow key": {opts: []Option{withFlowKey(nil)}, want: func(cache.ObjectName) string { return "" }},
	} {
		t.Run(name, func(t *testing.T) {
			flows := make(chan string, 4)
			stages := []Stage{&fakeStage{name: "apply", sync: func(ctx context.Context, _ cache.ObjectName) (Result, error) {
				flows <- fairlimit.FlowFrom(ctx)
				return WaitForEvent(), nil
			}}}
			p := mustNew(t, stages, tc.opts...)
			run(t, p)
			for _, k := range []cache.ObjectName{cache.NewObjectName("team-a", "x"), cache.NewObjectName("team-b", "y")} {
				p.EnqueueFirst(k)
				select {
				case got := <-flows:
					if want := tc.want(k); got != want {
						t.Errorf("Sync of %v: flow %q in its context, want %q", k, got, want)
					}
				case <-time.After(timeout):
					t.Fatalf("no Sync of %v within %v", k, timeout)
				}
			}
		})
	}
}
