// Package fairlimit is a client-side rate limiter for client-go (rest.Config.RateLimiter)
// that serves the requests waiting for a token flow by flow in turn, where client-go's
// token bucket (flowcontrol.NewTokenBucketRateLimiter) serves them in arrival order.
//
// Why: the pipeline's stage queues serve namespaces in turn (package engine), but every
// stage's workers then wait for the same client's tokens. When one namespace's burst
// keeps the client at its QPS, each of the status stage's workers waits in the limiter
// with one of that namespace's writes, and another namespace's JobSet write, handed to
// the next free worker in its turn, then waited behind all of them in arrival order:
// up to workers/QPS (32 workers at 200 QPS: 160 ms) however fair the queues were
// (issue 43; docs/design/architecture.md#fair-queuing-in-every-stage). Here a waiting
// request of another flow gets one of the next tokens, whatever the other flows have
// waiting.
//
// A request's flow is in its context (WithFlow; the engine sets the TrainJob's
// namespace for each sync); requests without one (informers, leader election, the
// certificate manager) share the flow "". The bucket itself is golang.org/x/time/rate's,
// with client-go's meaning of QPS and burst: the same requests pass, in a fairer order.
package fairlimit

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

type flowKey struct{}

// WithFlow returns ctx carrying flow, the flow the Limiter files a request made with
// it under (a namespace, for the pipeline).
func WithFlow(ctx context.Context, flow string) context.Context {
	return context.WithValue(ctx, flowKey{}, flow)
}

// FlowFrom returns the flow WithFlow put in ctx, "" when none.
func FlowFrom(ctx context.Context) string {
	flow, _ := ctx.Value(flowKey{}).(string)
	return flow
}

// Limiter is a token bucket of QPS tokens per second holding at most burst, whose
// waiting requests are served one flow at a time in turn, and in arrival order within
// a flow. It implements client-go's flowcontrol.RateLimiter; one Limiter serves the
// clients that share its budget. Its zero value is not usable: use New.
//
// Each request that finds no free token books the next free instant of the bucket, as
// client-go's does (a rate.Reservation each); the instants are handed out as they fall
// due, not to the request that booked them but to the waiting request whose flow's
// turn it is. So the Limiter passes the same requests at the same times as client-go's
// token bucket, in a fairer order, and a timer that fires late loses no token.
type Limiter struct {
	qps   float32
	clock clock.WithDelayedExecution

	mu     sync.Mutex
	bucket *rate.Limiter
	// queues holds each flow's waiting requests in arrival order; a flow with none
	// waiting has no entry, so an idle flow costs nothing.
	queues map[string]*list.List
	// turns lists the flows with requests waiting, in the order they are served from
	// next on, round and round; a flow that starts waiting joins at the end of the
	// round, behind the flows already waiting.
	turns []string
	next  int
	// slots are the instants booked, one per waiting request, earliest first: as many
	// as the requests in queues.
	slots []slot
	// timerSet is true while a timer is set to hand out the slots falling due.
	timerSet bool
}

// slot is one booked instant of the bucket.
type slot struct {
	at time.Time
	r  *rate.Reservation
}

var _ flowcontrol.RateLimiter = (*Limiter)(nil)

// waiter is one waiting request. ready is closed when it is given a token.
type waiter struct {
	flow  string
	ready chan struct{}
	elem  *list.Element
}

// New returns a Limiter of qps tokens per second and at most burst at once, full at
// first, as client-go's token bucket. qps must be positive and burst at least 1, as
// rest.Config validates them; with a burst below 1 Wait returns an error, as
// golang.org/x/time/rate's does.
func New(qps float32, burst int) *Limiter {
	return NewWithClock(qps, burst, clock.RealClock{})
}

// NewWithClock is New on the clock c (a fake one in tests).
func NewWithClock(qps float32, burst int, c clock.WithDelayedExecution) *Limiter {
	return &Limiter{
		qps:    qps,
		clock:  c,
		bucket: rate.NewLimiter(rate.Limit(qps), burst),
		queues: map[string]*list.List{},
	}
}

// Wait blocks until the request of ctx's flow (FlowFrom) is given a token, and returns
// nil; or until ctx is done, and returns ctx.Err() having taken none (a token given
// while ctx ended is kept and nil returned: the request goes).
func (l *Limiter) Wait(ctx context.Context) error {
	l.mu.Lock()
	now := l.clock.Now()
	if len(l.slots) == 0 && l.bucket.AllowN(now, 1) {
		l.mu.Unlock()
		return nil
	}
	r := l.bucket.ReserveN(now, 1)
	if !r.OK() {
		l.mu.Unlock()
		return fmt.Errorf("fairlimit: a burst of %d admits no request", l.bucket.Burst())
	}
	w := l.enqueue(FlowFrom(ctx))
	l.slots = append(l.slots, slot{at: now.Add(r.DelayFrom(now)), r: r})
	l.handOut(now)
	l.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Slots already due go out first (a timer may be late), so that the slot given
	// back below is still to come and returns its token.
	now = l.clock.Now()
	l.handOut(now)
	select {
	case <-w.ready:
		return nil
	default:
	}
	l.remove(w)
	// Give back the latest slot booked: it is the bucket's latest reservation, so
	// cancelling it returns its token whole.
	last := l.slots[len(l.slots)-1]
	l.slots = l.slots[:len(l.slots)-1]
	last.r.CancelAt(now)
	return ctx.Err()
}

// TryAccept takes a token and returns true when one is free and no request waits for
// one; false otherwise, taking none.
func (l *Limiter) TryAccept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.slots) == 0 && l.bucket.AllowN(l.clock.Now(), 1)
}

// Accept blocks until a request of the flow "" is given a token.
func (l *Limiter) Accept() { _ = l.Wait(context.Background()) }

// QPS returns the tokens per second New was given.
func (l *Limiter) QPS() float32 { return l.qps }

// Stop does nothing, as client-go's token bucket: a Limiter holds no goroutine of its
// own (a timer runs only while requests wait, and they stop waiting with their context).
func (l *Limiter) Stop() {}

// enqueue files a request of flow at the end of its flow's queue; a flow that had none
// waiting joins the turns at the end of the round. l.mu is held.
func (l *Limiter) enqueue(flow string) *waiter {
	q := l.queues[flow]
	if q == nil {
		q = list.New()
		l.queues[flow] = q
		// Insert at next and move next past it: the new flow is served after every
		// flow already waiting has had its turn, so a flow that empties its queue and
		// refills it at once cannot take every token.
		l.turns = append(l.turns, "")
		copy(l.turns[l.next+1:], l.turns[l.next:])
		l.turns[l.next] = flow
		l.next = (l.next + 1) % len(l.turns)
	}
	w := &waiter{flow: flow, ready: make(chan struct{})}
	w.elem = q.PushBack(w)
	return w
}

// remove takes w, not yet given a token, out of its flow's queue. l.mu is held.
func (l *Limiter) remove(w *waiter) {
	q := l.queues[w.flow]
	q.Remove(w.elem)
	if q.Len() == 0 {
		l.dropFlow(w.flow)
	}
}

// dropFlow removes flow, whose queue is empty, from the queues and the turns. l.mu is
// held.
func (l *Limiter) dropFlow(flow string) {
	delete(l.queues, flow)
	for i, f := range l.turns {
		if f != flow {
			continue
		}
		l.turns = append(l.turns[:i], l.turns[i+1:]...)
		if i < l.next {
			l.next--
		}
		if l.next >= len(l.turns) {
			l.next = 0
		}
		return
	}
}

// handOut gives each slot due by now to the request in turn, then sets a timer for
// the next slot if none is set. l.mu is held.
func (l *Limiter) handOut(now time.Time) {
	for len(l.slots) > 0 && !l.slots[0].at.After(now) {
		l.slots[0] = slot{} // the backing array keeps no spent reservation
		l.slots = l.slots[1:]
		l.release()
	}
	if len(l.slots) == 0 || l.timerSet {
		return
	}
	l.timerSet = true
	// The clock may call f with its own lock held (the fake clock does): f must not
	// read the clock, so the slots are handed out from another goroutine.
	l.clock.AfterFunc(l.slots[0].at.Sub(now), func() { go l.fire() })
}

// fire hands out the slots that fell due; a timer set for a slot since given back
// finds none due and sets the next.
func (l *Limiter) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timerSet = false
	l.handOut(l.clock.Now())
}

// release gives a token to the first request of the flow in turn and moves the turn
// on. l.mu is held and a request waits (its slot was just handed out).
func (l *Limiter) release() {
	flow := l.turns[l.next]
	q := l.queues[flow]
	w := q.Remove(q.Front()).(*waiter)
	close(w.ready)
	if q.Len() == 0 {
		l.dropFlow(flow) // next now points at the flow after it
		return
	}
	l.next = (l.next + 1) % len(l.turns)
}
