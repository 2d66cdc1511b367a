package lease

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Fence says whether this process may send the leader-only writes (elector.run): it
// is valid while this process holds the Lease and renewDeadline has not passed since the
// start of its last successful write of the Lease as its holder, the instant at which
// renewalLock.expire stops the pipeline. It is that instant's one source of truth: the
// elector's renewalLock notes each renewal in it, expire waits for it to close, and
// fenceTransport checks it before each leader-only write is sent. A process frozen past
// its Lease (SIGSTOP, a stalled VM) thus sends no write on resuming, even before expire
// has run, whatever its workers were about to do (issue 15).
//
// Times are read from clock with their monotonic reading (clock.RealClock's time.Now),
// so a wall-clock step neither opens nor closes the fence. (On Linux that clock does not
// advance while the machine is suspended, so a process on a suspended and resumed node
// is not fenced by it, as client-go's own elector does not notice either.) All methods
// are safe for concurrent use.
type Fence struct {
	clock         clock.Clock
	renewDeadline time.Duration

	mu      sync.Mutex
	last    time.Time // start of the last successful Lease write naming this process; zero before any
	stopped bool      // this process stopped leading; for good (it exits or stops after)
}

// NewFence returns a fence, closed until renewed, that closes renewDeadline (the
// Lease configuration's) after each renewal, read on clk.
func NewFence(clk clock.Clock, renewDeadline time.Duration) *Fence {
	return &Fence{clock: clk, renewDeadline: renewDeadline}
}

// renewed notes a successful write of the Lease naming this process that started at
// start; an older start than one already noted is ignored.
func (f *Fence) renewed(start time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if start.After(f.last) {
		f.last = start
	}
}

// lastRenewal is the start of the last successful write of the Lease naming this
// process; zero before any.
func (f *Fence) lastRenewal() time.Time {
	last, _ := f.expiry()
	return last
}

// expiry returns lastRenewal and lastRenewal + renewDeadline, the instant the fence closes
// (and renewalLock.expire stops the pipeline) unless a renewal pushes it back.
func (f *Fence) expiry() (last, expiry time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, f.last.Add(f.renewDeadline)
}

// stop closes the fence for good: this process no longer leads, whatever the Lease says.
func (f *Fence) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
}

// Valid reports whether a leader-only write may be sent at now: this process wrote the
// Lease as its holder, has not stopped leading, and now is before lastRenewal +
// renewDeadline.
func (f *Fence) Valid(now time.Time) bool { return f.check(now) == nil }

// check returns nil when the fence is valid at now (Valid), and otherwise why not.
func (f *Fence) check(now time.Time) error {
	f.mu.Lock()
	last, stopped := f.last, f.stopped
	f.mu.Unlock()
	expiry := last.Add(f.renewDeadline)
	switch {
	case stopped:
		return errors.New("this replica stopped leading")
	case last.IsZero():
		return errors.New("this replica does not lead")
	case !now.Before(expiry):
		return fmt.Errorf("this replica's Lease expired at %s (its last renewal started at %s, renewDeadline %s); a follower may lead",
			expiry.UTC().Format(time.RFC3339Nano), last.UTC().Format(time.RFC3339Nano), f.renewDeadline)
	}
	return nil
}

// FencedConfig returns a copy of c whose requests go through fenceTransport with f: the
// configuration of the leader-only clients. With a nil f (no leader election: the only
// replica always leads) it is a plain copy.
func FencedConfig(c *rest.Config, f *Fence) *rest.Config {
	c = rest.CopyConfig(c)
	if f != nil {
		c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &fenceTransport{fence: f, next: rt} })
	}
	return c
}

// fenceError is the error of a write fenceTransport refused to send. client-go returns
// it wrapped in a *url.Error; it is not an API status, so the stages retry it as any
// transport error.
type fenceError struct {
	// Method and Path are the refused request's (e.g. "PATCH",
	// "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/x").
	Method, Path string
	// Reason is why the fence was closed (Fence.check).
	Reason error
}

func (e *fenceError) Error() string {
	return fmt.Sprintf("not sending %s %s: %v", e.Method, e.Path, e.Reason)
}

func (e *fenceError) Unwrap() error { return e.Reason }

// fenceTransport sends a request through next unless it writes (any method but GET,
// HEAD and OPTIONS: POST, PUT, PATCH, DELETE) while fence is not valid: it then fails
// the request with a *fenceError without sending it. It is the innermost wrapper
// (rest.Config.Wrap), and client-go's rate limiter waits before any transport is called,
// so the check runs after every wait of client-go's, just before the HTTP transport.
type fenceTransport struct {
	fence *Fence
	next  http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *fenceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions: // reads, lists and watches
		return t.next.RoundTrip(req)
	}
	if err := t.fence.check(t.fence.clock.Now()); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, on errors too
		}
		return nil, &fenceError{Method: req.Method, Path: req.URL.Path, Reason: err}
	}
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper returns the transport t wraps (k8s.io/apimachinery's
// net.RoundTripperWrapper), so client-go can reach the transport it built.
func (t *fenceTransport) WrappedRoundTripper() http.RoundTripper { return t.next }
