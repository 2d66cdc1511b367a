package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/trainyard/trainyard/pkg/metrics"
)

var fourStages = []string{"resolve", "merge", "policy", "status"}

func TestNewValidates(t *testing.T) {
	stage := func(name string) Stage { return &fakeStage{name: name} }
	cases := map[string]struct {
		stages  []Stage
		opts    []Option
		wantErr []string // substrings; nil means valid
	}{
		"valid": {
			stages: []Stage{stage("a"), stage("b")},
			opts:   []Option{WithWorkers(map[string]int{"b": 3}), WithRateLimit(RateLimit{BaseDelay: time.Second})},
		},
		"no stages": {wantErr: []string{"no stages"}},
		"nil stage": {
			stages:  []Stage{stage("a"), nil},
			wantErr: []string{"stage 1 is nil"},
		},
		"empty and duplicate names, all reported": {
			stages:  []Stage{stage("a"), stage(""), stage("a")},
			wantErr: []string{"stage 1 has an empty name", `stage 2: duplicate name "a"`},
		},
		"workers for unknown stage": {
			stages:  []Stage{stage("a")},
			opts:    []Option{WithWorkers(map[string]int{"typo": 2})},
			wantErr: []string{`unknown stage "typo"`},
		},
		"zero workers": {
			stages:  []Stage{stage("a")},
			opts:    []Option{WithWorkers(map[string]int{"a": 0})},
			wantErr: []string{`stage "a": 0 workers`},
		},
		"max delay below base delay": {
			stages:  []Stage{stage("a")},
			opts:    []Option{WithRateLimit(RateLimit{BaseDelay: time.Minute, MaxDelay: time.Second})},
			wantErr: []string{"MaxDelay 1s is less than BaseDelay 1m0s"},
		},
		"negative rate": {
			stages:  []Stage{stage("a")},
			opts:    []Option{WithRateLimit(RateLimit{QPS: -1})},
			wantErr: []string{"QPS -1 is negative"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := New(tc.stages, tc.opts...)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("New: unexpected error: %v", err)
				}
				// Nothing else will stop the queues' goroutines.
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				if err := p.Run(ctx); err != nil {
					t.Errorf("Run: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("New: got no error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// TestRouting checks which stages a key visits, and in which order, depending
// on where it enters. A sentinel key sent through every stage afterwards marks
// the end: each stage has one FIFO worker, so any visit the key under test
// gets happens before the sentinel reaches the last stage.
func TestRouting(t *testing.T) {
	cases := map[string]struct {
		enqueue func(p *Pipeline, k cache.ObjectName)
		want    []string
	}{
		"EnqueueFirst runs every stage in order": {
			enqueue: func(p *Pipeline, k cache.ObjectName) { p.EnqueueFirst(k) },
			want:    fourStages,
		},
		"Enqueue on the first stage": {
			enqueue: func(p *Pipeline, k cache.ObjectName) { p.Enqueue("resolve", k) },
			want:    fourStages,
		},
		"Enqueue on a middle stage runs it and the later ones": {
			enqueue: func(p *Pipeline, k cache.ObjectName) { p.Enqueue("policy", k) },
			want:    []string{"policy", "status"},
		},
		"status-only event never reaches earlier stages": {
			enqueue: func(p *Pipeline, k cache.ObjectName) { p.Enqueue("status", k) },
			want:    []string{"status"},
		},
		"EnqueueAfter delays, then runs from that stage": {
			enqueue: func(p *Pipeline, k cache.ObjectName) { p.EnqueueAfter("merge", k, time.Millisecond) },
			want:    []string{"merge", "policy", "status"},
		},
		"unknown stage drops the key": {
			enqueue: func(p *Pipeline, k cache.ObjectName) { p.Enqueue("no-such-stage", k) },
			want:    nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec := newRecorder()
			p := mustNew(t, rec.stagesFor(continueAll, fourStages...))
			run(t, p)

			k, sentinel := key("tj"), key("sentinel")
			tc.enqueue(p, k)
			if len(tc.want) > 0 {
				rec.waitFor(t, tc.want[len(tc.want)-1], k)
			}
			p.EnqueueFirst(sentinel)
			rec.waitFor(t, "status", sentinel)

			if diff := cmp.Diff(tc.want, rec.stagesOf(k)); diff != "" {
				t.Errorf("stages that synced the key (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(fourStages, rec.stagesOf(sentinel)); diff != "" {
				t.Errorf("stages that synced the sentinel (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestResultCodes checks the queue consequence of each result the middle of
// three stages can return on its first sync of a key (it returns Continue
// afterwards).
func TestResultCodes(t *testing.T) {
	boom := errors.New("boom")
	cases := map[string]struct {
		result     Result
		err        error
		want       []string
		wantResult string // result label of the first sync
		wantErrors float64
	}{
		"Continue hands off": {
			result: Continue(), want: []string{"first", "middle", "last"}, wantResult: metrics.ResultContinue,
		},
		"WaitForEvent drops": {
			result: WaitForEvent(), want: []string{"first", "middle"}, wantResult: metrics.ResultWaitForEvent,
		},
		"Terminal drops": {
			result: Terminal(), want: []string{"first", "middle"}, wantResult: metrics.ResultTerminal,
		},
		"Retry syncs the same stage again": {
			result: Retry(), want: []string{"first", "middle", "middle", "last"}, wantResult: metrics.ResultRetry,
		},
		"RequeueAfter syncs the same stage again": {
			result: RequeueAfter(time.Millisecond), want: []string{"first", "middle", "middle", "last"}, wantResult: metrics.ResultRequeueAfter,
		},
		"Restart goes back to the first stage": {
			result: Restart(), want: []string{"first", "middle", "first", "middle", "last"}, wantResult: metrics.ResultRestart,
		},
		"an error means Retry whatever the code": {
			result: Terminal(), err: boom, want: []string{"first", "middle", "middle", "last"}, wantResult: metrics.ResultRetry, wantErrors: 1,
		},
		"RequeueAfter without a delay is a retried error, not a hot loop": {
			result: RequeueAfter(0), want: []string{"first", "middle", "middle", "last"}, wantResult: metrics.ResultRetry, wantErrors: 1,
		},
		"an unknown code is a retried error": {
			result: Result{Code: Code(42)}, want: []string{"first", "middle", "middle", "last"}, wantResult: metrics.ResultRetry, wantErrors: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			rec := newRecorder()
			var calls atomic.Int32
			p := mustNew(t, []Stage{
				rec.stage("first", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
				rec.stage("middle", func(_ context.Context, k cache.ObjectName) (Result, error) {
					if k == key("tj") && calls.Add(1) == 1 {
						return tc.result, tc.err
					}
					return Continue(), nil
				}),
				rec.stage("last", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
			}, WithMetrics(metrics.New(reg)), WithRateLimit(RateLimit{BaseDelay: time.Millisecond}))
			stop := run(t, p)

			k, sentinel := key("tj"), key("sentinel")
			p.EnqueueFirst(k)
			rec.waitFor(t, tc.want[len(tc.want)-1], k)
			p.EnqueueFirst(sentinel)
			rec.waitFor(t, "last", sentinel)
			stop()

			if diff := cmp.Diff(tc.want, rec.stagesOf(k)); diff != "" {
				t.Errorf("stages that synced the key (-want,+got):\n%s", diff)
			}
			got := gather(t, reg)
			if n := got[syncs("middle", tc.wantResult)]; n < 1 {
				t.Errorf("%s = %v, want at least 1", syncs("middle", tc.wantResult), n)
			}
			if n := got[stageErrors("middle", metrics.ReasonInternal)]; n != tc.wantErrors {
				t.Errorf("%s = %v, want %v", stageErrors("middle", metrics.ReasonInternal), n, tc.wantErrors)
			}
		})
	}
}

// TestOneWorkerPerKey checks the workqueue's per-stage exclusivity: while one
// worker is inside Sync for a key, the other idle workers never pick the same
// key up, however often it is enqueued, and the enqueues coalesce into a
// single re-run.
func TestOneWorkerPerKey(t *testing.T) {
	hot := key("hot")
	release := make(chan struct{})
	var active, maxActive, hotSyncs atomic.Int32
	rec := newRecorder()
	p := mustNew(t, []Stage{rec.stage("only", func(_ context.Context, k cache.ObjectName) (Result, error) {
		if k != hot {
			return WaitForEvent(), nil
		}
		n := active.Add(1)
		defer active.Add(-1)
		for m := maxActive.Load(); n > m && !maxActive.CompareAndSwap(m, n); m = maxActive.Load() {
		}
		if hotSyncs.Add(1) == 1 {
			<-release
		}
		return WaitForEvent(), nil
	})}, WithWorkers(map[string]int{"only": 4}))
	run(t, p)

	p.EnqueueFirst(hot)
	rec.waitFor(t, "only", hot)

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				p.EnqueueFirst(hot)
			}
		})
	}
	wg.Wait()
	// Idle workers exist and take other keys meanwhile.
	for i := range 3 {
		p.EnqueueFirst(key(fmt.Sprint("other-", i)))
		rec.waitFor(t, "only", key(fmt.Sprint("other-", i)))
	}

	close(release)
	rec.waitFor(t, "only", hot) // the one coalesced re-run
	p.EnqueueFirst(key("sentinel"))
	rec.waitFor(t, "only", key("sentinel"))

	if got := maxActive.Load(); got != 1 {
		t.Errorf("max concurrent syncs of one key = %d, want 1", got)
	}
	if got := hotSyncs.Load(); got != 2 {
		t.Errorf("syncs of the key = %d, want 2 (in flight + one coalesced re-run)", got)
	}
}

func TestRestartFromStage(t *testing.T) {
	cases := map[string]struct {
		restartAt string
		want      []string
	}{
		"from the first stage": {restartAt: "resolve", want: []string{"resolve", "resolve", "merge", "policy", "status"}},
		"from a middle stage":  {restartAt: "policy", want: []string{"resolve", "merge", "policy", "resolve", "merge", "policy", "status"}},
		"from the last stage":  {restartAt: "status", want: []string{"resolve", "merge", "policy", "status", "resolve", "merge", "policy", "status"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var restarted atomic.Bool
			rec := newRecorder()
			p := mustNew(t, rec.stagesFor(func(stage string, _ cache.ObjectName) (Result, error) {
				if stage == tc.restartAt && restarted.CompareAndSwap(false, true) {
					return Restart(), nil
				}
				return Continue(), nil
			}, fourStages...))
			stop := run(t, p)

			k := key("tj")
			p.EnqueueFirst(k)
			for range 2 {
				rec.waitFor(t, "status", k)
				if tc.restartAt != "status" {
					break
				}
			}
			stop()
			if diff := cmp.Diff(tc.want, rec.stagesOf(k)); diff != "" {
				t.Errorf("stages that synced the key (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestRestartOnNewGeneration plays the scenario Restart exists for: the
// TrainJob's spec changes after stage 1 built a plan, stage 2 finds the plan
// stale and restarts, and the key runs again from stage 1 with a fresh plan.
func TestRestartOnNewGeneration(t *testing.T) {
	type plan struct{ generation int64 }
	const uid = types.UID("6f1c")
	var (
		plans      Plans[plan]
		generation atomic.Int64 // the TrainJob's metadata.generation, as a lister would show it
		bumped     atomic.Bool
		lastSaw    atomic.Int64
	)
	generation.Store(1)

	rec := newRecorder()
	p := mustNew(t, []Stage{
		rec.stage("resolve", func(_ context.Context, k cache.ObjectName) (Result, error) {
			g := generation.Load()
			plans.Put(k, uid, g, &plan{generation: g})
			return Continue(), nil
		}),
		rec.stage("merge", func(_ context.Context, k cache.ObjectName) (Result, error) {
			if bumped.CompareAndSwap(false, true) {
				generation.Add(1) // a spec update lands between stage 1 and stage 2
			}
			if _, ok := plans.Get(k, uid, generation.Load()); !ok {
				return Restart(), nil
			}
			return Continue(), nil
		}),
		rec.stage("status", func(_ context.Context, k cache.ObjectName) (Result, error) {
			pl, ok := plans.Get(k, uid, generation.Load())
			if !ok {
				return Restart(), nil
			}
			lastSaw.Store(pl.generation)
			return Continue(), nil
		}),
	})
	stop := run(t, p)

	k := key("tj")
	p.EnqueueFirst(k)
	rec.waitFor(t, "status", k)
	stop()

	want := []string{"resolve", "merge", "resolve", "merge", "status"}
	if diff := cmp.Diff(want, rec.stagesOf(k)); diff != "" {
		t.Errorf("stages that synced the key (-want,+got):\n%s", diff)
	}
	if got := lastSaw.Load(); got != 2 {
		t.Errorf("last stage used a plan of generation %d, want 2", got)
	}
}

// TestRequeueAfter checks that RequeueAfter(d) is AddAfter(key, d) and that the
// key comes back exactly when the clock reaches d, not before.
func TestRequeueAfter(t *testing.T) {
	const delay = 5 * time.Second
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var syncTimes []time.Time // written by the single worker of "poll", read after waitFor
	var mu sync.Mutex
	rec := newRecorder()
	p := mustNew(t, []Stage{
		rec.stage("poll", func(context.Context, cache.ObjectName) (Result, error) {
			mu.Lock()
			defer mu.Unlock()
			syncTimes = append(syncTimes, clk.Now())
			if len(syncTimes) == 1 {
				return RequeueAfter(delay), nil
			}
			return Continue(), nil
		}),
		rec.stage("status", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
	}, WithClock(clk))
	calls := recordQueue(t, p, "poll")
	run(t, p)
	idle := 2 * idleWaitersPerQueue
	awaitWaiters(t, clk, idle)

	k := key("tj")
	start := clk.Now()
	p.EnqueueFirst(k)
	rec.waitFor(t, "poll", k)

	if diff := cmp.Diff(queueCall{Op: "AddAfter", Key: k, After: delay}, nextCall(t, calls)); diff != "" {
		t.Fatalf("queue call (-want,+got):\n%s", diff)
	}
	awaitWaiters(t, clk, idle+1)
	clk.Step(delay - time.Millisecond)
	rec.expectNoVisit(t, 100*time.Millisecond)
	clk.Step(time.Millisecond)
	rec.waitFor(t, "poll", k)
	rec.waitFor(t, "status", k)

	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]time.Time{start, start.Add(delay)}, syncTimes); diff != "" {
		t.Errorf("sync times (-want,+got):\n%s", diff)
	}
}

func TestRateLimiterBackoff(t *testing.T) {
	cases := map[string]struct {
		rateLimit RateLimit
		want      []time.Duration
	}{
		"defaults: 5ms doubling, capped at 5m": {
			want: []time.Duration{
				5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond,
				80 * time.Millisecond, 160 * time.Millisecond, 320 * time.Millisecond, 640 * time.Millisecond,
				1280 * time.Millisecond, 2560 * time.Millisecond, 5120 * time.Millisecond, 10240 * time.Millisecond,
				20480 * time.Millisecond, 40960 * time.Millisecond, 81920 * time.Millisecond, 163840 * time.Millisecond,
				5 * time.Minute, 5 * time.Minute, 5 * time.Minute,
			},
		},
		"custom base and cap": {
			rateLimit: RateLimit{BaseDelay: time.Second, MaxDelay: 10 * time.Second},
			want:      []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			limiter := tc.rateLimit.withDefaults().newRateLimiter(testingclock.NewFakePassiveClock(time.Now()))
			k, other := key("tj"), key("other")
			var got []time.Duration
			for range tc.want {
				got = append(got, limiter.When(k))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("delays (-want,+got):\n%s", diff)
			}
			if n := limiter.NumRequeues(k); n != len(tc.want) {
				t.Errorf("NumRequeues = %d, want %d", n, len(tc.want))
			}
			if d := limiter.When(other); d != tc.want[0] {
				t.Errorf("another key's first delay = %v, want %v: backoff is per key", d, tc.want[0])
			}
			limiter.Forget(k)
			if d := limiter.When(k); d != tc.want[0] {
				t.Errorf("delay after Forget = %v, want %v", d, tc.want[0])
			}
		})
	}
}

func TestRateLimiterBucketSpreadsRetryStorms(t *testing.T) {
	limiter := RateLimit{QPS: 1, Burst: 2}.withDefaults().newRateLimiter(testingclock.NewFakePassiveClock(time.Now()))
	for i := range 2 {
		if d := limiter.When(key(fmt.Sprint("burst-", i))); d != 5*time.Millisecond {
			t.Errorf("key %d within the burst: delay %v, want the 5ms per-key backoff", i, d)
		}
	}
	if d := limiter.When(key("over-burst")); d != time.Second {
		t.Errorf("key beyond the burst at 1 qps: delay %v, want 1s", d)
	}
}

// One namespace's retry storm (a policy denying its JobSets: every key failing again
// and again) takes its own namespace's tokens only: a key of another namespace retries
// after its per-key backoff, not behind the storm (issue 15: with one bucket for every
// key, 1,000 retries at 10 qps put the next namespace's first retry 90 s out).
func TestRateLimiterBucketIsPerNamespace(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter := DefaultRateLimit().newRateLimiter(clk)
	for i := range 1000 {
		limiter.When(cache.NewObjectName("denied", fmt.Sprint("tj-", i)))
	}
	if d := limiter.When(cache.NewObjectName("denied", "one-more")); d != 90100*time.Millisecond {
		t.Errorf("the storming namespace's next retry: delay %v, want 90.1s (the 901st reservation past the burst of 100, at 10 qps)", d)
	}
	if d := limiter.When(cache.NewObjectName("team-b", "tj")); d != 5*time.Millisecond {
		t.Errorf("another namespace's first retry: delay %v, want the 5ms per-key backoff", d)
	}
}

// Buckets of namespaces that have stopped retrying are dropped once full again, so
// the limiter holds no state per namespace that has not retried for a while.
func TestNamespaceBucketsDropIdleNamespaces(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newNamespaceBuckets(10, 100, clk)
	for i := range 50 {
		b.When(cache.NewObjectName(fmt.Sprint("ns-", i), "tj"))
	}
	if n := b.namespaces(); n != 50 {
		t.Fatalf("%d buckets after retries in 50 namespaces, want 50", n)
	}
	clk.SetTime(clk.Now().Add(sweepEvery))
	b.When(cache.NewObjectName("ns-0", "tj"))
	if n := b.namespaces(); n != 1 {
		t.Errorf("%d buckets a minute later with one namespace retrying, want 1 (full buckets dropped)", n)
	}
}

// TestRetryBackoff drives a stage that always fails and checks, on a fake
// clock, that each retry comes exactly when the backoff says: growing
// exponentially, then capped.
func TestRetryBackoff(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	var syncTimes []time.Time
	rec := newRecorder()
	p := mustNew(t, []Stage{rec.stage("flaky", func(context.Context, cache.ObjectName) (Result, error) {
		mu.Lock()
		syncTimes = append(syncTimes, clk.Now())
		mu.Unlock()
		return Result{}, errors.New("API server unavailable")
	})}, WithClock(clk), WithMetrics(metrics.New(reg)),
		WithRateLimit(RateLimit{BaseDelay: 100 * time.Millisecond, MaxDelay: 800 * time.Millisecond}))
	calls := recordQueue(t, p, "flaky")
	stop := run(t, p)
	awaitWaiters(t, clk, idleWaitersPerQueue)

	k := key("tj")
	p.EnqueueFirst(k)
	rec.waitFor(t, "flaky", k)
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 800 * ms}
	for i, d := range want {
		if diff := cmp.Diff(queueCall{Op: "AddRateLimited", Key: k}, nextCall(t, calls)); diff != "" {
			t.Fatalf("queue call (-want,+got):\n%s", diff)
		}
		if n := p.byName["flaky"].queue.NumRequeues(k); n != i+1 {
			t.Errorf("NumRequeues after failure %d = %d, want %d", i+1, n, i+1)
		}
		awaitWaiters(t, clk, idleWaitersPerQueue+1)
		clk.Step(d - time.Millisecond)
		rec.expectNoVisit(t, 50*time.Millisecond)
		clk.Step(time.Millisecond)
		rec.waitFor(t, "flaky", k)
	}
	nextCall(t, calls) // the last failure's requeue
	stop()

	mu.Lock()
	defer mu.Unlock()
	var gaps []time.Duration
	for i := 1; i < len(syncTimes); i++ {
		gaps = append(gaps, syncTimes[i].Sub(syncTimes[i-1]))
	}
	if diff := cmp.Diff(want, gaps); diff != "" {
		t.Errorf("delays between syncs (-want,+got):\n%s", diff)
	}
	expectMetrics(t, reg, map[string]float64{
		syncs("flaky", metrics.ResultRetry):            6,
		durationCount("flaky", metrics.ResultRetry):    6,
		`trainyard_stage_retries_total{stage="flaky"}`: 6,
		stageErrors("flaky", metrics.ReasonInternal):   6,
	})
}

// TestPanicIsRecoveredAndRetried checks that a panicking Sync neither kills
// the worker nor the process: the key is retried, and other keys keep flowing.
func TestPanicIsRecoveredAndRetried(t *testing.T) {
	reg := prometheus.NewRegistry()
	var panicked atomic.Bool
	rec := newRecorder()
	p := mustNew(t, []Stage{
		rec.stage("policy", func(_ context.Context, k cache.ObjectName) (Result, error) {
			if k == key("bad") && panicked.CompareAndSwap(false, true) {
				var m map[string]int
				//lint:ignore SA5000 a real runtime panic, not just panic("...")
				m["nil map"]++
			}
			return Continue(), nil
		}),
		rec.stage("status", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
	}, WithMetrics(metrics.New(reg)), WithRateLimit(RateLimit{BaseDelay: time.Millisecond}))
	stop := run(t, p)

	p.EnqueueFirst(key("bad"))
	p.EnqueueFirst(key("good"))
	rec.waitFor(t, "status", key("good"))
	rec.waitFor(t, "status", key("bad"))
	stop()

	if diff := cmp.Diff([]string{"policy", "policy", "status"}, rec.stagesOf(key("bad"))); diff != "" {
		t.Errorf("stages that synced the panicking key (-want,+got):\n%s", diff)
	}
	expectMetrics(t, reg, map[string]float64{
		`trainyard_stage_panics_total{stage="policy"}`: 1,
		stageErrors("policy", metrics.ReasonInternal):  1,
		syncs("policy", metrics.ResultRetry):           1,
		syncs("policy", metrics.ResultContinue):        2,
		`trainyard_stage_inflight{stage="policy"}`:     0,
	})
}

// TestShutdown checks that Run, once cancelled, stops taking keys, waits for
// the in-flight Sync, skips what is still queued, returns in bounded time and
// leaves no goroutine behind.
func TestShutdown(t *testing.T) {
	cases := map[string]struct {
		// sync is the in-flight Sync; it returns when release is closed or
		// ctx is done, as the case decides.
		sync        func(ctx context.Context, release <-chan struct{}) (Result, error)
		waitRelease bool // Run must not return before release is closed
	}{
		"a Sync that honours ctx returns early": {
			sync: func(ctx context.Context, _ <-chan struct{}) (Result, error) {
				<-ctx.Done()
				return Result{}, ctx.Err()
			},
		},
		"a Sync that ignores ctx is waited for": {
			sync: func(_ context.Context, release <-chan struct{}) (Result, error) {
				<-release
				return Continue(), nil
			},
			waitRelease: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			reg := prometheus.NewRegistry()
			release := make(chan struct{})
			started := make(chan struct{})
			var finished atomic.Bool
			rec := newRecorder()
			p := mustNew(t, []Stage{
				rec.stage("slow", func(ctx context.Context, k cache.ObjectName) (Result, error) {
					if k != key("in-flight") {
						return Continue(), nil
					}
					close(started)
					defer finished.Store(true)
					return tc.sync(ctx, release)
				}),
				rec.stage("next", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
			}, WithMetrics(metrics.New(reg)))

			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()

			p.EnqueueFirst(key("in-flight"))
			<-started
			p.EnqueueFirst(key("queued")) // behind the in-flight key: one worker
			cancel()

			if tc.waitRelease {
				select {
				case <-done:
					t.Fatal("Run returned while a Sync was still in flight")
				case <-time.After(100 * time.Millisecond):
				}
				close(release)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(timeout):
				t.Fatalf("Run did not return within %v of cancellation", timeout)
			}
			if !finished.Load() {
				t.Error("Run returned before the in-flight Sync finished")
			}
			if got := rec.stagesOf(key("queued")); len(got) != 0 {
				t.Errorf("a key still queued at shutdown was synced by %v", got)
			}
			if got := gather(t, reg)[stageErrors("slow", metrics.ReasonInternal)]; got != 0 {
				t.Errorf("a Sync interrupted by shutdown counted as %v errors, want 0", got)
			}

			p.EnqueueFirst(key("late")) // must be a no-op, not a panic or a leak
			if err := p.Run(context.Background()); err == nil {
				t.Error("second Run: got nil error")
			}
			expectGoroutinesBack(t, before)
		})
	}
}

// expectGoroutinesBack waits until the goroutine count is back to before. The
// 2 s limit is well under the delaying queue's 10 s heartbeat, so a timer
// goroutine left to die at its next heartbeat counts as leaked.
func expectGoroutinesBack(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		now := runtime.NumGoroutine()
		if now <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines leaked:\n%s", now-before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMetrics checks stage and queue metrics after a known set of syncs.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec := newRecorder()
	p := mustNew(t, []Stage{
		rec.stage("resolve", func(context.Context, cache.ObjectName) (Result, error) { return Continue(), nil }),
		rec.stage("gang", func(_ context.Context, k cache.ObjectName) (Result, error) {
			if k == key("waiting") {
				return WaitForEvent(), nil
			}
			return Continue(), nil
		}),
		rec.stage("status", func(context.Context, cache.ObjectName) (Result, error) { return Terminal(), nil }),
	}, WithMetrics(metrics.New(reg)), WithWorkers(map[string]int{"resolve": 2, "status": 3}))
	stop := run(t, p)

	p.EnqueueFirst(key("running"))
	p.EnqueueFirst(key("waiting"))
	rec.waitFor(t, "status", key("running"))
	rec.waitFor(t, "gang", key("waiting"))
	stop() // every recording is done once Run has returned

	expectMetrics(t, reg, map[string]float64{
		syncs("resolve", metrics.ResultContinue):      2,
		syncs("resolve", metrics.ResultRetry):         0,
		syncs("gang", metrics.ResultContinue):         1,
		syncs("gang", metrics.ResultWaitForEvent):     1,
		syncs("status", metrics.ResultTerminal):       1,
		syncs("status", metrics.ResultContinue):       0,
		durationCount("resolve", "continue"):          2,
		durationCount("gang", "wait_for_event"):       1,
		durationCount("status", "terminal"):           1,
		`workqueue_adds_total{name="resolve"}`:        2,
		`workqueue_adds_total{name="gang"}`:           2,
		`workqueue_adds_total{name="status"}`:         1,
		`workqueue_depth{name="status"}`:              0,
		`trainyard_stage_workers{stage="resolve"}`:    2,
		`trainyard_stage_workers{stage="gang"}`:       1,
		`trainyard_stage_workers{stage="status"}`:     3,
		`trainyard_stage_inflight{stage="resolve"}`:   0,
		`trainyard_stage_retries_total{stage="gang"}`: 0,
	})
}

// TestSyncContextLogger checks that Sync gets a logger naming the stage and
// the TrainJob.
func TestSyncContextLogger(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	synced := make(chan struct{})
	p := mustNew(t, []Stage{&fakeStage{name: "resolve", sync: func(ctx context.Context, _ cache.ObjectName) (Result, error) {
		klog.FromContext(ctx).Info("Resolved")
		close(synced)
		return WaitForEvent(), nil
	}}})
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	p.EnqueueFirst(key("tj"))
	<-synced
	cancel()
	<-done

	var found bool
	for _, entry := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if entry.Message != "Resolved" {
			continue
		}
		found = true
		// The values are attached lazily (withLazyValues): they arrive with the entry.
		want := []any{"stage", "resolve", "trainJob", klog.KRef("team-a", "tj")}
		if diff := cmp.Diff(want, append(entry.WithKVList, entry.ParameterKVList...)); diff != "" {
			t.Errorf("logger values (-want,+got):\n%s", diff)
		}
	}
	if !found {
		t.Error("the Sync's log entry was not recorded")
	}
}

func TestEnqueueUnknownStageIsLogged(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	p := mustNew(t, []Stage{&fakeStage{name: "resolve"}}, WithLogger(logger))
	run(t, p)

	p.Enqueue("reslove", key("tj"))
	p.EnqueueAfter("reslove", key("tj"), time.Second)

	if got := p.Len("reslove"); got != 0 {
		t.Errorf("Len of an unknown stage = %d, want 0", got)
	}
	var errs int
	for _, entry := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if entry.Type == ktesting.LogError && strings.Contains(entry.Message, "unknown stage") {
			errs++
		}
	}
	if errs != 2 {
		t.Errorf("logged %d errors about the unknown stage, want 2", errs)
	}
}

func TestStagesAndLen(t *testing.T) {
	p := mustNew(t, newRecorder().stagesFor(continueAll, fourStages...))
	got := p.Stages()
	if diff := cmp.Diff(fourStages, got); diff != "" {
		t.Errorf("Stages() (-want,+got):\n%s", diff)
	}
	got[0] = "mutated"
	if p.Stages()[0] != fourStages[0] {
		t.Error("Stages() returned the pipeline's own slice")
	}

	// Not running yet: keys wait.
	p.Enqueue("policy", key("a"))
	p.Enqueue("policy", key("b"))
	p.Enqueue("policy", key("a")) // coalesced
	if got := p.Len("policy"); got != 2 {
		t.Errorf("Len(policy) = %d, want 2", got)
	}
	if got := p.Len("resolve"); got != 0 {
		t.Errorf("Len(resolve) = %d, want 0", got)
	}
	run(t, p)
}

func TestCodeString(t *testing.T) {
	got := map[Code]string{}
	for c := CodeContinue; c <= CodeRestart+1; c++ {
		got[c] = c.String()
	}
	want := map[Code]string{
		CodeContinue:     "continue",
		CodeRequeueAfter: "requeue_after",
		CodeWaitForEvent: "wait_for_event",
		CodeRetry:        "retry",
		CodeTerminal:     "terminal",
		CodeRestart:      "restart",
		CodeRestart + 1:  "Code(6)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Code.String (-want,+got):\n%s", diff)
	}
}

// expectMetrics compares the named samples of reg with want.
func expectMetrics(t *testing.T, reg prometheus.Gatherer, want map[string]float64) {
	t.Helper()
	all := gather(t, reg)
	got := map[string]float64{}
	for name := range want {
		v, ok := all[name]
		if !ok {
			t.Errorf("series %s not exported", name)
			continue
		}
		got[name] = v
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want,+got):\n%s", diff)
	}
}

// gather returns every sample of reg as "name{label="value",...}" → value,
// with histograms as their _count.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			id := "{" + strings.Join(labels, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[mf.GetName()+id] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[mf.GetName()+id] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()+"_count"+id] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func syncs(stage, result string) string {
	return fmt.Sprintf("trainyard_stage_syncs_total{result=%q,stage=%q}", result, stage)
}

func durationCount(stage, result string) string {
	return fmt.Sprintf("trainyard_stage_duration_seconds_count{result=%q,stage=%q}", result, stage)
}

func stageErrors(stage, reason string) string {
	return fmt.Sprintf("trainyard_stage_errors_total{reason=%q,stage=%q}", reason, stage)
}

// A single-stage pipeline sharing the metrics (the progress server's) leaves the
// in-flight gauges to the TrainJob pipeline: it has no keys past a first stage.
func TestSingleStagePipelineLeavesTheInFlightGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	noop := func(context.Context, cache.ObjectName) (Result, error) { return WaitForEvent(), nil }
	if _, err := New([]Stage{&fakeStage{name: "resolve", sync: noop}, &fakeStage{name: "status", sync: noop}},
		WithMetrics(m), WithMaxInFlight(7)); err != nil {
		t.Fatal(err)
	}
	if _, err := New([]Stage{&fakeStage{name: "progress", sync: noop}}, WithMetrics(m)); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == metrics.PipelineMaxKeysInFlight {
			if got := f.GetMetric()[0].GetGauge().GetValue(); got != 7 {
				t.Errorf("%s = %v, want 7 (the TrainJob pipeline's bound)", metrics.PipelineMaxKeysInFlight, got)
			}
			return
		}
	}
	t.Errorf("%s not exported", metrics.PipelineMaxKeysInFlight)
}
