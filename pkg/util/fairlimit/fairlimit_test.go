package fairlimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/flowcontrol"
	clocktesting "k8s.io/utils/clock/testing"
)

// tick is the time between tokens of the test limiters (10 per second).
const tick = 100 * time.Millisecond

// harness drives a Limiter on a fake clock: requests are started one by one (each
// filed before the next starts, so arrival order is known), and the clock is stepped
// one token at a time, recording which requests were given one.
type harness struct {
	t     *testing.T
	clock *clocktesting.FakeClock
	l     *Limiter

	passed []string
	done   chan string
}

func newHarness(t *testing.T, burst int) *harness {
	c := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	return &harness{t: t, clock: c, l: NewWithClock(float32(time.Second/tick), burst, c), done: make(chan string, 1000)}
}

// start makes request id of flow wait, and returns once it waits for a token (or has
// one).
func (h *harness) start(ctx context.Context, flow, id string) {
	h.t.Helper()
	before := h.filed()
	go func() {
		err := h.l.Wait(WithFlow(ctx, flow))
		if err != nil {
			id += " (" + err.Error() + ")"
		}
		h.done <- id
	}()
	deadline := time.Now().Add(5 * time.Second)
	for h.filed() == before {
		if time.Now().After(deadline) {
			h.t.Fatalf("request %s neither waits nor passed", id)
		}
		time.Sleep(time.Millisecond)
	}
}

// filed counts the requests the limiter has seen: waiting, or done.
func (h *harness) filed() int {
	h.l.mu.Lock()
	waiting := len(h.l.slots)
	h.l.mu.Unlock()
	return waiting + len(h.done) + len(h.passed)
}

// takeBurst takes the one token of a harness of burst 1, so that the next request
// waits.
func (h *harness) takeBurst() {
	h.t.Helper()
	h.start(context.Background(), "a", "burst")
	h.collect()
}

// next steps the clock by one token and returns the request that was given it.
func (h *harness) next() string {
	h.t.Helper()
	h.awaitTimer()
	h.clock.Step(tick)
	return h.collect()
}

// awaitTimer waits until the limiter has set its timer for the next slot, if requests
// wait: the fake clock times a timer from when it is set, so a step taken before the
// limiter set it (it does so after handing out a slot, on its own goroutine) would not
// count for it.
func (h *harness) awaitTimer() {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.l.mu.Lock()
		set := h.l.timerSet || len(h.l.slots) == 0
		h.l.mu.Unlock()
		if set {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatal("the limiter set no timer for its waiting requests")
		}
		time.Sleep(time.Millisecond)
	}
}

// collect returns the next request done, failing the test if none is within 5 s.
func (h *harness) collect() string {
	h.t.Helper()
	select {
	case id := <-h.done:
		h.passed = append(h.passed, id)
		return id
	case <-time.After(5 * time.Second):
		h.t.Fatalf("no request done; %v so far", h.passed)
		return ""
	}
}

// noneDone fails the test if a request is done now (after a moment for it to be).
func (h *harness) noneDone() {
	h.t.Helper()
	select {
	case id := <-h.done:
		h.t.Fatalf("request %s was given a token before it was due", id)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestImplementsClientGoRateLimiter(t *testing.T) {
	var _ flowcontrol.RateLimiter = New(1, 1)
}

func TestBurstPassesAtOnceThenOneTokenPerTick(t *testing.T) {
	h := newHarness(t, 3)
	for i := range 3 {
		h.start(context.Background(), "a", fmt.Sprint(i))
		h.collect()
	}
	if h.l.TryAccept() {
		t.Fatal("TryAccept took a token from an empty bucket")
	}
	h.start(context.Background(), "a", "3")
	h.start(context.Background(), "a", "4")
	h.noneDone()
	h.clock.Step(tick / 2)
	h.noneDone()
	h.clock.Step(tick / 2)
	if got := h.collect(); got != "3" {
		t.Fatalf("after one tick %s passed, want 3", got)
	}
	h.noneDone()
	if got := h.next(); got != "4" {
		t.Fatalf("after two ticks %s passed, want 4", got)
	}
}

// TestWaitingFlowsTakeTurns is the reason for the package: flow a has ten requests
// waiting when flow b's one arrives; b's is given the token after a's current turn,
// not after a's ten (client-go's token bucket would serve it eleventh).
func TestWaitingFlowsTakeTurns(t *testing.T) {
	h := newHarness(t, 1)
	h.takeBurst()
	for i := range 10 {
		h.start(context.Background(), "a", fmt.Sprintf("a%d", i))
	}
	h.start(context.Background(), "b", "b0")
	h.start(context.Background(), "", "none0") // no flow in the context: the flow ""
	var got []string
	for range 5 {
		got = append(got, h.next())
	}
	if want := []string{"a0", "b0", "none0", "a1", "a2"}; !slices.Equal(got, want) {
		t.Fatalf("order given tokens: %v, want %v", got, want)
	}
}

// TestRefillingFlowGetsOneTurnPerRound: a flow whose one request is given a token and
// that sends the next at once joins the end of the round each time; it alternates
// with a flow that has many waiting instead of taking every token.
func TestRefillingFlowGetsOneTurnPerRound(t *testing.T) {
	h := newHarness(t, 1)
	h.takeBurst()
	for i := range 6 {
		h.start(context.Background(), "a", fmt.Sprintf("a%d", i))
	}
	bSent := 0
	h.start(context.Background(), "b", "b0")
	var got []string
	for range 6 {
		id := h.next()
		got = append(got, id)
		if id[0] == 'b' {
			bSent++
			h.start(context.Background(), "b", fmt.Sprintf("b%d", bSent))
		}
	}
	if want := []string{"a0", "b0", "a1", "b1", "a2", "b2"}; !slices.Equal(got, want) {
		t.Fatalf("order given tokens: %v, want %v", got, want)
	}
}

// TestCancelledRequestTakesNoToken: a request whose context ends while it waits
// returns the context's error, leaves the turns, and the token due goes to the next
// request on time.
func TestCancelledRequestTakesNoToken(t *testing.T) {
	h := newHarness(t, 1)
	h.takeBurst()
	ctx, cancel := context.WithCancel(context.Background())
	h.start(ctx, "b", "b-cancelled")
	h.start(context.Background(), "a", "a0")
	cancel()
	if got := h.collect(); got != "b-cancelled ("+context.Canceled.Error()+")" {
		t.Fatalf("first done: %q, want the cancelled request with its error", got)
	}
	if got := h.next(); got != "a0" {
		t.Fatalf("after one tick %s passed, want a0", got)
	}
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if len(h.l.slots) != 0 || len(h.l.queues) != 0 || len(h.l.turns) != 0 {
		t.Fatalf("limiter not empty after every request left: %d slots, queues %v, turns %v", len(h.l.slots), h.l.queues, h.l.turns)
	}
}

// TestCancelledRequestGivesItsTokenBack: the instant a request booked when it started
// waiting goes back to the bucket when it gives up, so the next request passes when
// that instant comes, as no request had waited.
func TestCancelledRequestGivesItsTokenBack(t *testing.T) {
	h := newHarness(t, 1)
	h.takeBurst()
	ctx, cancel := context.WithCancel(context.Background())
	h.start(ctx, "a", "cancelled")
	cancel()
	h.collect()
	if h.l.TryAccept() {
		t.Fatal("a token was free before the next one was due")
	}
	h.clock.Step(tick)
	if !h.l.TryAccept() {
		t.Fatal("the token the cancelled request had booked was lost")
	}
}

// TestLateTimerLosesNoToken: every waiting request books an instant of the bucket, as
// client-go's token bucket does, so when the timer fires late (here five tokens late,
// with a burst of one) the five requests due all pass, and the rate holds.
func TestLateTimerLosesNoToken(t *testing.T) {
	h := newHarness(t, 1)
	h.takeBurst()
	for i := range 10 {
		h.start(context.Background(), fmt.Sprint(i%3), fmt.Sprint(i))
	}
	h.clock.Step(5 * tick)
	for range 5 {
		h.collect()
	}
	h.noneDone()
	h.next()
	h.noneDone()
}

// TestManyFlowsUnderRace runs many goroutines of many flows against the real clock
// (go test -race): every request passes, none twice, and the limiter ends empty.
func TestManyFlowsUnderRace(t *testing.T) {
	l := New(2000, 5)
	const flows, perFlow = 20, 25
	var wg sync.WaitGroup
	var passed, cancelled sync.Map
	for f := range flows {
		for i := range perFlow {
			wg.Go(func() {
				ctx := WithFlow(context.Background(), fmt.Sprint(f))
				if i%5 == 4 { // some give up while waiting
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Millisecond)
					defer cancel()
				}
				id := fmt.Sprintf("%d/%d", f, i)
				switch err := l.Wait(ctx); {
				case err == nil:
					if _, dup := passed.LoadOrStore(id, true); dup {
						t.Errorf("request %s passed twice", id)
					}
				case errors.Is(err, context.DeadlineExceeded):
					cancelled.Store(id, true)
				default:
					t.Errorf("request %s: %v", id, err)
				}
			})
		}
	}
	wg.Wait()
	n := 0
	passed.Range(func(any, any) bool { n++; return true })
	cancelled.Range(func(any, any) bool { n++; return true })
	if n != flows*perFlow {
		t.Fatalf("%d of %d requests returned", n, flows*perFlow)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.slots) != 0 || len(l.queues) != 0 || len(l.turns) != 0 {
		t.Fatalf("limiter not empty: %d slots, %d queues, turns %v", len(l.slots), len(l.queues), l.turns)
	}
}

func TestBurstBelowOneRefusesWithAnError(t *testing.T) {
	if err := New(10, 0).Wait(context.Background()); err == nil {
		t.Fatal("Wait with a burst of 0 returned nil, want an error")
	}
}

func TestFlowFromContext(t *testing.T) {
	if got := FlowFrom(context.Background()); got != "" {
		t.Fatalf("FlowFrom(no flow) = %q, want \"\"", got)
	}
	if got := FlowFrom(WithFlow(context.Background(), "team-a")); got != "team-a" {
		t.Fatalf("FlowFrom = %q, want team-a", got)
	}
}
