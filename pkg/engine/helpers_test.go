package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

// timeout bounds every wait for something that must happen; tests never
// sleep for it on success.
const timeout = 10 * time.Second

// fakeStage is a Stage whose Sync is a function.
type fakeStage struct {
	name string
	sync func(ctx context.Context, key cache.ObjectName) (Result, error)
}

func (s *fakeStage) Name() string { return s.name }

func (s *fakeStage) Sync(ctx context.Context, key cache.ObjectName) (Result, error) {
	return s.sync(ctx, key)
}

// visit is one Sync call: which stage saw which key.
type visit struct {
	Stage string
	Key   cache.ObjectName
}

// recorder builds fake stages that record every Sync call, in order, before
// running their own logic.
type recorder struct {
	mu      sync.Mutex
	visits  []visit
	waited  map[visit]int // visits already returned by waitFor
	changed chan struct{} // signalled after each visit
}

func newRecorder() *recorder {
	return &recorder{waited: map[visit]int{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) stage(name string, sync func(context.Context, cache.ObjectName) (Result, error)) Stage {
	return &fakeStage{name: name, sync: func(ctx context.Context, key cache.ObjectName) (Result, error) {
		r.mu.Lock()
		r.visits = append(r.visits, visit{name, key})
		r.mu.Unlock()
		select {
		case r.changed <- struct{}{}:
		default:
		}
		return sync(ctx, key)
	}}
}

// stagesFor returns a fake stage per name, all running sync.
func (r *recorder) stagesFor(sync func(string, cache.ObjectName) (Result, error), names ...string) []Stage {
	var out []Stage
	for _, name := range names {
		out = append(out, r.stage(name, func(_ context.Context, key cache.ObjectName) (Result, error) {
			return sync(name, key)
		}))
	}
	return out
}

// stagesOf returns the stages that synced key, in order.
func (r *recorder) stagesOf(key cache.ObjectName) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, v := range r.visits {
		if v.Key == key {
			out = append(out, v.Stage)
		}
	}
	return out
}

// waitFor blocks until stage syncs key once more than the previous waitFor
// calls for that stage and key have seen.
func (r *recorder) waitFor(t *testing.T, stage string, key cache.ObjectName) {
	t.Helper()
	want := visit{stage, key}
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		n := 0
		for _, v := range r.visits {
			if v == want {
				n++
			}
		}
		if n > r.waited[want] {
			r.waited[want]++
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for stage %q to sync %v", stage, key)
		}
	}
}

// expectNoVisit fails if any Sync happens within d. A negative check can
// only sample a window; d keeps the test fast while catching a wrong delay.
func (r *recorder) expectNoVisit(t *testing.T, d time.Duration) {
	t.Helper()
	r.mu.Lock()
	before := len(r.visits)
	r.mu.Unlock()
	time.Sleep(d)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.visits) != before {
		t.Fatalf("unexpected syncs: %v", r.visits[before:])
	}
}

func continueAll(string, cache.ObjectName) (Result, error) { return Continue(), nil }

// run starts p.Run and returns a function that cancels it and waits for Run
// to return. The function is also registered as a test cleanup.
func run(t *testing.T, p *Pipeline) (stop func()) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(timeout):
				t.Errorf("Run did not return within %v of cancellation", timeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func mustNew(t testing.TB, stages []Stage, opts ...Option) *Pipeline {
	t.Helper()
	p, err := New(stages, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func key(name string) cache.ObjectName { return cache.NewObjectName("team-a", name) }

// queueCall is a call that changed when a key will be synced next.
type queueCall struct {
	Op    string
	Key   cache.ObjectName
	After time.Duration
}

// recordingQueue wraps a stage queue and reports delayed adds, after the
// wrapped call returned: once reported, the key's due time is fixed.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[cache.ObjectName]
	calls chan queueCall
}

// recordQueue replaces the named stage's queue with a recording wrapper. Call
// it before Run.
func recordQueue(t *testing.T, p *Pipeline, stage string) <-chan queueCall {
	t.Helper()
	r, ok := p.byName[stage]
	if !ok {
		t.Fatalf("no stage %q", stage)
	}
	q := &recordingQueue{TypedRateLimitingInterface: r.queue, calls: make(chan queueCall, 100)}
	r.queue = q
	p.keys.queues[r.index] = q
	return q.calls
}

func (q *recordingQueue) AddAfter(key cache.ObjectName, d time.Duration) {
	q.TypedRateLimitingInterface.AddAfter(key, d)
	q.calls <- queueCall{Op: "AddAfter", Key: key, After: d}
}

func (q *recordingQueue) AddRateLimited(key cache.ObjectName) {
	q.TypedRateLimitingInterface.AddRateLimited(key)
	q.calls <- queueCall{Op: "AddRateLimited", Key: key}
}

func nextCall(t *testing.T, calls <-chan queueCall) queueCall {
	t.Helper()
	select {
	case c := <-calls:
		return c
	case <-time.After(timeout):
		t.Fatal("timed out waiting for a delayed add")
		return queueCall{}
	}
}

// idleWaitersPerQueue is how many fake-clock waiters a stage queue holds when
// no delayed add is pending: the delaying queue's heartbeat ticker and the
// queue metrics' refresh ticker.
const idleWaitersPerQueue = 2

// awaitWaiters blocks until clk has exactly n waiters.
//
// The delaying queue's timer loop reads the clock, then arms a timer for
// readyAt-now. A Step between the two arms the timer late, so a test must not
// step until the loop has armed its timer, i.e. the waiter count says so.
// Keeping total fake time under the loop's 10 s heartbeat avoids a second
// such race when the heartbeat re-arms the timer.
func awaitWaiters(t *testing.T, clk *testingclock.FakeClock, n int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for clk.Waiters() != n {
		if time.Now().After(deadline) {
			t.Fatalf("fake clock has %d waiters, want %d", clk.Waiters(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
