package stages

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

func TestInFlightAdmitLeave(t *testing.T) {
	var reported [2]int
	f := newInFlight(2, func(n, max int) { reported = [2]int{n, max} })
	ctx := context.Background()
	if !f.admit(ctx, key("a")) || !f.admit(ctx, key("b")) {
		t.Fatal("the first two keys must be admitted")
	}
	if !f.admit(ctx, key("a")) {
		t.Fatal("a key in flight must be admitted again without waiting")
	}
	admitted := make(chan bool)
	go func() { admitted <- f.admit(ctx, key("c")) }()
	select {
	case <-admitted:
		t.Fatal("a third key was admitted past the bound")
	case <-time.After(50 * time.Millisecond):
	}
	f.leave(key("zzz")) // never admitted: no room made
	select {
	case <-admitted:
		t.Fatal("leaving an unknown key made room")
	case <-time.After(50 * time.Millisecond):
	}
	f.leave(key("a"))
	if !<-admitted {
		t.Fatal("c not admitted after a left")
	}
	if n := f.len(); n != 2 || reported != [2]int{2, 2} {
		t.Errorf("len = %d, reported %v; want 2 (b, c) of 2", n, reported)
	}

	cancelled, cancel := context.WithCancel(ctx)
	go func() { admitted <- f.admit(cancelled, key("d")) }()
	cancel()
	if <-admitted {
		t.Error("admit returned true after its context ended")
	}
	if unbounded := newInFlight(0, nil); !unbounded.admit(ctx, key("x")) || unbounded.len() != 0 {
		t.Error("max 0 must admit everything and track nothing")
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
