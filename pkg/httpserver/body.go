package httpserver

import (
	"io"
	"net/http"
	"sync/atomic"
)

// BodyBudget bounds the request-body bytes a handler holds in memory at once, across
// its requests, while letting small requests through whatever large ones hold:
//
//   - the first Free bytes of every body are not charged: a small request (an
//     AdmissionReview of a TrainJob is a few KiB) is never refused for want of budget,
//     and what they hold together is bounded by the server's connection cap × Free;
//   - the bytes beyond Free are charged to one shared budget of Total bytes as they
//     arrive (the buffer's capacity, which is what the heap holds), never as a
//     Content-Length announces them: a client that announces 7 MiB and sends a byte a
//     second holds a few bytes, not 7 MiB;
//   - a body whose next bytes do not fit is refused at once (ErrBusy), not queued.
//
// The heap a handler's bodies hold is therefore at most Total + open connections × Free
// (plus, while a buffer grows, the half-size buffer it replaces).
type BodyBudget struct {
	// Total is the shared budget in bytes; ≤0 charges nothing (no bound).
	Total int64
	// Free is the uncharged allowance of every body in bytes.
	Free int64
	used atomic.Int64
}

// Used is how many bytes are charged now.
func (b *BodyBudget) Used() int64 { return b.used.Load() }

// take charges n bytes and reports whether they fit.
func (b *BodyBudget) take(n int64) bool {
	if b.Total <= 0 || n <= 0 {
		return true
	}
	if b.used.Add(n) > b.Total {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *BodyBudget) give(n int64) {
	if b.Total > 0 && n > 0 {
		b.used.Add(-n)
	}
}

// ReadBody reads body whole, at most max bytes, charging the budget as it grows, and
// returns it with release, which returns its charge to the budget: call it once the
// bytes are no longer needed (release is never nil; after an error it is a no-op).
// Errors: *http.MaxBytesError (limit max) when the body is longer than max (answer 413);
// ErrBusy when the budget cannot hold its next bytes (answer 429); else body's read error
// (a timeout, a connection reset: answer 400).
func (b *BodyBudget) ReadBody(body io.Reader, max int64) (data []byte, release func(), err error) {
	return b.read(body, max, b.Free)
}

// ReadBodyCharged is ReadBody charging every byte, the first Free included: for a
// request that holds no slot of the bounds that make the Free allowances add up to a
// known total (a connection, a request slot).
func (b *BodyBudget) ReadBodyCharged(body io.Reader, max int64) (data []byte, release func(), err error) {
	return b.read(body, max, 0)
}

func (b *BodyBudget) read(body io.Reader, max, free int64) (data []byte, release func(), err error) {
	var charged int64
	release = func() { b.give(charged); charged = 0 }
	buf := make([]byte, 0, min(int64(512), max+1))
	for {
		if len(buf) == cap(buf) {
			next := min(2*int64(cap(buf)), max+1)
			if want := next - free - charged; want > 0 {
				if !b.take(want) {
					release()
					return nil, func() {}, ErrBusy
				}
				charged += want
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			release()
			return nil, func() {}, &http.MaxBytesError{Limit: max}
		}
		if err == io.EOF {
			return buf, release, nil
		}
		if err != nil {
			release()
			return nil, func() {}, err
		}
	}
}
