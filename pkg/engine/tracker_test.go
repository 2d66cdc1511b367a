package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// An event for a key that is syncing in a later stage waits for that sync to end — the
// key is never in two stages at once — and is then acted on: the update is not lost.
// This is the Kueue two-step of issue 18: the status stage applies generation 2 while
// generation 3 arrives.
func TestEventDuringSyncIsNotLost(t *testing.T) {
	rec := newRecorder()
	applying := make(chan struct{})
	release := make(chan struct{})
	var statusSyncs atomic.Int32
	stages := []Stage{
		rec.stage("build", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
		rec.stage("status", func(context.Context, cache.ObjectName) (Result, error) {
			if statusSyncs.Add(1) == 1 {
				close(applying)
				<-release
			}
			return WaitForEvent(), nil
		}),
	}
	p := mustNew(t, stages, WithWorkers(map[string]int{"build": 2, "status": 2}))
	run(t, p)
	k := key("llm")
	p.EnqueueFirst(k)
	<-applying
	p.EnqueueFirst(k) // generation 3, while the status stage applies generation 2
	rec.expectNoVisit(t, 50*time.Millisecond)
	if !p.Has(k) {
		t.Error("Has = false for a key syncing in the status stage")
	}
	close(release)
	rec.waitFor(t, "build", k)
	rec.waitFor(t, "build", k)
	rec.waitFor(t, "status", k)
	rec.waitFor(t, "status", k)
	if got, want := rec.stagesOf(k), []string{"build", "status", "build", "status"}; !slices.Equal(got, want) {
		t.Errorf("syncs of %v = %v, want %v", k, got, want)
	}
	waitUntil(t, func() bool { return !p.Has(k) }, "the key leaves the pipeline")
}

// A stage asked for while the key syncs in an earlier stage is visited even when the
// pass stops before it: a JobSet status change is not swallowed by a TrainJob whose
// rebuild waits for its runtime.
func TestPendingStageVisitedWhenPassStops(t *testing.T) {
	rec := newRecorder()
	syncing := make(chan struct{})
	release := make(chan struct{})
	stages := []Stage{
		rec.stage("build", func(context.Context, cache.ObjectName) (Result, error) {
			close(syncing)
			<-release
			return WaitForEvent(), nil // e.g. the runtime is missing
		}),
		rec.stage("plan", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
		rec.stage("status", func(context.Context, cache.ObjectName) (Result, error) { return WaitForEvent(), nil }),
	}
	p := mustNew(t, stages)
	run(t, p)
	k := key("llm")
	p.EnqueueFirst(k)
	<-syncing
	p.Enqueue("status", k)
	close(release)
	rec.waitFor(t, "status", k)
	if got, want := rec.stagesOf(k), []string{"build", "status"}; !slices.Equal(got, want) {
		t.Errorf("syncs of %v = %v, want %v", k, got, want)
	}
}

// An event for a key that waits out a retry backoff in a later stage moves it to the
// event's stage at once; the later stage still syncs it on the way.
func TestEventMovesWaitingKeyEarlier(t *testing.T) {
	rec := newRecorder()
	var fail atomic.Bool
	fail.Store(true)
	stages := []Stage{
		rec.stage("build", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
		rec.stage("status", func(context.Context, cache.ObjectName) (Result, error) {
			if fail.Load() {
				return Retry(), nil
			}
			return WaitForEvent(), nil
		}),
	}
	// A first retry after an hour: only the event can bring the key back in time.
	p := mustNew(t, stages, WithRateLimit(RateLimit{BaseDelay: time.Hour, MaxDelay: time.Hour, QPS: 1000, Burst: 1000}))
	run(t, p)
	k := key("llm")
	p.EnqueueFirst(k)
	rec.waitFor(t, "build", k)
	rec.waitFor(t, "status", k)
	fail.Store(false)
	p.EnqueueFirst(k)
	rec.waitFor(t, "build", k)
	rec.waitFor(t, "status", k)
	waitUntil(t, func() bool { return !p.Has(k) }, "the key leaves the pipeline")
}

// Randomly routed events never make two stages sync one key at the same time, and
// every event is followed by a sync of its stage. The keys are spread over three
// namespaces, so the stage queues' turns (fairQueue) are part of what is checked.
func TestOneStageAtATimePerKey(t *testing.T) {
	spread := func(i int) cache.ObjectName { return cache.NewObjectName(fmt.Sprint("team-", i%3), fmt.Sprint(i)) }
	names := []string{"s0", "s1", "s2", "s3"}
	var (
		mu      sync.Mutex
		active  = map[cache.ObjectName]string{}
		lastRun = map[visit]time.Time{}
		overlap []string
	)
	var stages []Stage
	for i, name := range names {
		stages = append(stages, &fakeStage{name: name, sync: func(_ context.Context, k cache.ObjectName) (Result, error) {
			mu.Lock()
			if other, ok := active[k]; ok {
				overlap = append(overlap, fmt.Sprintf("%v in %s and %s", k, other, name))
			}
			active[k] = name
			lastRun[visit{name, k}] = time.Now()
			mu.Unlock()
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			mu.Lock()
			delete(active, k)
			mu.Unlock()
			switch r := rand.IntN(10); {
			case r < 6 && i < len(names)-1:
				return Continue(), nil
			case r < 7 && i > 0:
				return Restart(), nil
			case r < 8:
				return Retry(), nil
			}
			return WaitForEvent(), nil
		}})
	}
	p := mustNew(t, stages, WithMaxInFlight(3), WithRateLimit(RateLimit{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, QPS: 10000, Burst: 10000}),
		WithWorkers(map[string]int{"s0": 4, "s1": 4, "s2": 4, "s3": 4}))
	run(t, p)
	type event struct {
		visit
		at time.Time
	}
	var events []event
	for range 2000 {
		v := visit{names[rand.IntN(len(names))], spread(rand.IntN(8))}
		events = append(events, event{v, time.Now()})
		if v.Stage == "s0" {
			p.EnqueueFirst(v.Key)
		} else {
			p.Enqueue(v.Stage, v.Key)
		}
		if rand.IntN(4) == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	waitUntil(t, func() bool {
		for i := range 8 {
			if p.Has(spread(i)) {
				return false
			}
		}
		return true
	}, "every key leaves the pipeline")
	mu.Lock()
	defer mu.Unlock()
	if len(overlap) > 0 {
		t.Errorf("a key synced in two stages at once: %v", overlap[:min(5, len(overlap))])
	}
	for _, e := range events {
		if !lastRun[e.visit].After(e.at) {
			t.Errorf("stage %s did not sync %v after the event at %v (last sync %v)", e.Stage, e.Key, e.at, lastRun[e.visit])
		}
	}
}

// A key retrying in a later stage gives up its in-flight slot: keys that keep failing
// do not stop new ones (issue 15's in-flight starvation).
func TestRetryingKeyReleasesItsSlot(t *testing.T) {
	rec := newRecorder()
	stages := []Stage{
		rec.stage("build", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
		rec.stage("status", func(_ context.Context, k cache.ObjectName) (Result, error) {
			if k.Name == "denied" {
				return Retry(), errors.New("admission webhook denied the JobSet")
			}
			return WaitForEvent(), nil
		}),
	}
	p := mustNew(t, stages, WithMaxInFlight(1), WithRateLimit(RateLimit{BaseDelay: 20 * time.Millisecond, MaxDelay: 20 * time.Millisecond, QPS: 1000, Burst: 1000}))
	run(t, p)
	p.EnqueueFirst(key("denied"))
	rec.waitFor(t, "status", key("denied"))
	p.EnqueueFirst(key("healthy"))
	rec.waitFor(t, "status", key("healthy"))
	rec.waitFor(t, "status", key("denied")) // still retried
}

// waitUntil polls cond until it holds.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// With WithMaxInFlight(2) and the last stage holding every key, the first stage syncs
// only two keys; the third is synced once one of them leaves the pipeline.
func TestPipelineBoundsKeysInFlight(t *testing.T) {
	var mu sync.Mutex
	firstSynced := map[string]bool{}
	release := make(chan struct{})
	lastSynced := make(chan string, 10)
	first := &fakeStage{name: "build", sync: func(_ context.Context, k cache.ObjectName) (Result, error) {
		mu.Lock()
		firstSynced[k.Name] = true
		mu.Unlock()
		return Continue(), nil
	}}
	last := &fakeStage{name: "status", sync: func(_ context.Context, k cache.ObjectName) (Result, error) {
		lastSynced <- k.Name
		<-release
		return WaitForEvent(), nil
	}}
	p := mustNew(t, []Stage{first, last}, WithMaxInFlight(2), WithWorkers(map[string]int{"build": 3, "status": 3}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		close(release)
		<-done
	}()

	for _, n := range []string{"a", "b", "c"} {
		p.EnqueueFirst(key(n))
	}
	got := map[string]bool{<-lastSynced: true, <-lastSynced: true}
	time.Sleep(100 * time.Millisecond) // give a third admission the chance to happen wrongly
	mu.Lock()
	synced := len(firstSynced)
	mu.Unlock()
	if synced != 2 {
		t.Fatalf("first stage synced %d keys while 2 were in flight, want 2", synced)
	}
	release <- struct{}{} // one of the two leaves
	third := <-lastSynced
	if got[third] {
		t.Errorf("third key through = %q, want the one that waited", third)
	}
}

// countingQueue is a stage queue that counts, like a rate limiter, each key's
// rate-limited adds until it is forgotten.
type countingQueue struct{ failures map[cache.ObjectName]int }

func (q *countingQueue) Add(cache.ObjectName)                     {}
func (q *countingQueue) AddAfter(cache.ObjectName, time.Duration) {}
func (q *countingQueue) AddRateLimited(k cache.ObjectName)        { q.failures[k]++ }
func (q *countingQueue) Forget(k cache.ObjectName)                { delete(q.failures, k) }

func countingQueues(n int) ([]queue, []*countingQueue) {
	qs, cs := make([]queue, n), make([]*countingQueue, n)
	for i := range n {
		cs[i] = &countingQueue{failures: map[cache.ObjectName]int{}}
		qs[i] = cs[i]
	}
	return qs, cs
}

// A retry that an event overtakes leaves its stage's failure count behind (the key goes
// to the event's stage first); once the key leaves the pipeline, no stage's rate
// limiter remembers it: per-key state lives no longer than the key is in the pipeline.
func TestLeavingKeyIsForgottenByEveryStage(t *testing.T) {
	qs, counts := countingQueues(2)
	tr := newTracker(qs, 0, nil)
	k := key("llm")

	tr.enqueue(1, k)
	tr.begin(1, k)
	tr.finish(1, k, Retry()) // the first failure: backoff
	tr.begin(1, k)
	tr.enqueue(0, k)         // an event while the retry syncs
	tr.finish(1, k, Retry()) // fails again; the event's stage goes first
	if got := counts[1].failures[k]; got != 1 {
		t.Fatalf("stage 1 counts %d failures of %v while it is in the pipeline, want 1", got, k)
	}
	tr.begin(0, k)
	tr.finish(0, k, WaitForEvent()) // e.g. the TrainJob was deleted
	if tr.has(k) {
		t.Fatalf("%v is still in the pipeline", k)
	}
	for i, c := range counts {
		if len(c.failures) != 0 {
			t.Errorf("stage %d's rate limiter remembers %v after the key left the pipeline", i, c.failures)
		}
	}
}

// The parked keys of a burst are let go once they have their slots: the tracker keeps
// no array the size of the burst.
func TestParkedKeysAreLetGo(t *testing.T) {
	qs, _ := countingQueues(1)
	tr := newTracker(qs, 1, nil)
	keys := make([]cache.ObjectName, 10)
	for i := range keys {
		keys[i] = key(fmt.Sprint(i))
		tr.enqueue(0, keys[i])
		tr.begin(0, keys[i]) // the first is admitted, the others parked
	}
	for _, k := range keys {
		tr.finish(0, k, WaitForEvent()) // hands the slot to the next parked key
		if next := slices.Index(keys, k) + 1; next < len(keys) {
			if !tr.begin(0, keys[next]) {
				t.Fatalf("%v did not get the slot %v released", keys[next], k)
			}
		}
	}
	if tr.parked.len() != 0 || tr.parked.q.holds() != "" {
		t.Errorf("parked keeps %d keys and %s after every parked key got a slot, want nothing kept", tr.parked.len(), tr.parked.q.holds())
	}
}

// One namespace's burst does not hold another's keys: with 1,000 keys of team-a waiting
// for a slot, a key of team-b that arrives after them gets the second slot that frees
// (team-a's oldest key had its turn first), not the 1,001st.
func TestParkedKeysAreAdmittedRoundRobinOverNamespaces(t *testing.T) {
	qs, _ := countingQueues(1)
	tr := newTracker(qs, 1, nil)
	inflight := cache.NewObjectName("team-a", "running")
	tr.enqueue(0, inflight)
	if !tr.begin(0, inflight) {
		t.Fatal("the first key did not get the only slot")
	}
	burst := make([]cache.ObjectName, 1000)
	for i := range burst {
		burst[i] = cache.NewObjectName("team-a", fmt.Sprint("burst-", i))
		tr.enqueue(0, burst[i])
		if tr.begin(0, burst[i]) {
			t.Fatalf("%v got a slot while %v holds the only one", burst[i], inflight)
		}
	}
	quiet := cache.NewObjectName("team-b", "first")
	tr.enqueue(0, quiet)
	if tr.begin(0, quiet) {
		t.Fatalf("%v got a slot while %v holds the only one", quiet, inflight)
	}

	// Free slots one at a time and record who gets each.
	var admitted []cache.ObjectName
	holder := inflight
	for len(admitted) < 4 {
		tr.finish(0, holder, WaitForEvent())
		next := slices.IndexFunc(append(burst, quiet), func(k cache.ObjectName) bool {
			st, ok := tr.keys[k]
			return ok && st.admitted && !st.syncing
		})
		if next < 0 {
			t.Fatalf("no parked key got the slot %v released", holder)
		}
		holder = append(burst, quiet)[next]
		if !tr.begin(0, holder) {
			t.Fatalf("%v was handed the slot but may not sync", holder)
		}
		admitted = append(admitted, holder)
	}
	want := []cache.ObjectName{burst[0], quiet, burst[1], burst[2]}
	if !slices.Equal(admitted, want) {
		t.Errorf("slots went to %v, want %v (team-b's key on the second slot, team-a's in order)", admitted, want)
	}
}

// parkedKeys keeps each namespace's keys in order and gives every namespace with keys
// waiting one turn per round, a namespace that starts waiting joining the end of the round.
func TestParkedKeysRoundRobin(t *testing.T) {
	var p parkedKeys
	for _, k := range []cache.ObjectName{
		cache.NewObjectName("a", "1"), cache.NewObjectName("a", "2"), cache.NewObjectName("a", "3"),
		cache.NewObjectName("b", "1"), cache.NewObjectName("c", "1"), cache.NewObjectName("c", "2"),
	} {
		p.push(k)
	}
	var got []string
	pop := func() {
		k, ok := p.pop()
		if !ok {
			t.Fatalf("pop found nothing after %v, with %d keys said to wait", got, p.len())
		}
		got = append(got, k.String())
	}
	pop()                                 // a/1; a goes to the end: b, c, a
	p.push(cache.NewObjectName("d", "1")) // d joins after a
	for p.len() > 0 {
		pop()
	}
	want := []string{"a/1", "b/1", "c/1", "a/2", "d/1", "c/2", "a/3"}
	if !slices.Equal(got, want) {
		t.Errorf("unparked %v, want %v", got, want)
	}
	if _, ok := p.pop(); ok {
		t.Error("pop of an empty parkedKeys returned a key")
	}
	if held := p.q.holds(); held != "" {
		t.Errorf("an emptied parkedKeys keeps %s", held)
	}
}
