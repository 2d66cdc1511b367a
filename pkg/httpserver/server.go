// Package httpserver holds the bounds the controller's HTTP servers share: the progress
// server (package progress), the admission server (package admission), and the metrics
// and health probe servers (cmd/trainyard/app). Each of them can be reached by any pod, so each bounds
// what a client can make it hold:
//
//   - time: header, body, answer and idle timeouts free the connection of a client that
//     sends slowly or not at all (Limits);
//   - connections: at most Limits.MaxConns open, more wait in the kernel's accept queue
//     (which costs the process nothing and serves them in order), at most
//     Limits.MaxKeepAliveConns kept open between requests, so idle connections cannot
//     take every slot, and at most Limits.MaxConnsPerSource from one IP, so one pod
//     cannot take them all;
//   - requests: InFlight counts the requests being served and refuses the ones beyond
//     its bound at once (429 with Retry-After), which a Kubernetes client, the API server
//     calling a webhook included, retries after the delay;
//   - memory: BodyBudget bounds the request-body bytes held at once, charging bytes as
//     they arrive, never as a Content-Length announces them.
//
// What each server picks and why is documented at its constructor.
package httpserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
)

// Limits are the bounds of a Server. A zero duration or count means no bound (net/http's
// behavior), so a caller states every bound it wants.
type Limits struct {
	// ReadHeaderTimeout is how long a connection may take to send a request's header,
	// from its first byte (and, on TLS, the handshake, which net/http bounds by the
	// shortest of the three read and write timeouts). It frees the slot of a client that
	// opens a connection and sends nothing, or a header a byte at a time.
	ReadHeaderTimeout time.Duration
	// ReadTimeout is how long a request may take to arrive, header and body.
	ReadTimeout time.Duration
	// WriteTimeout is how long a request may take from the end of its header to the
	// end of its answer (HTTP/1), or per stream (HTTP/2).
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection waits for its next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (net/http's default is 1 MiB).
	MaxHeaderBytes int
	// MaxConns is how many connections are open at once; further ones wait to be
	// accepted. ≤0: no bound.
	MaxConns int
	// MaxKeepAliveConns is how many connections are kept open between requests: while
	// more are open, an HTTP/1 answer carries Connection: close and its connection is
	// closed after it. It must be below MaxConns, so that at least MaxConns −
	// MaxKeepAliveConns slots always turn over. ≤0: no bound.
	MaxKeepAliveConns int
	// MaxConnsPerSource is how many connections one source IP has open at once: a
	// further one is closed as soon as it is accepted (it takes no slot of MaxConns, and
	// the connections queued behind it are accepted at once). ≤0: no bound.
	MaxConnsPerSource int
	// HTTP2 bounds HTTP/2 connections (streams per connection, frame size, receive
	// buffers); nil keeps net/http's defaults (250 streams, 1 MiB buffers).
	HTTP2 *http.HTTP2Config
}

// Server is an http.Server whose Serve applies its Limits' connection bounds and serves
// TLS when TLSConfig is set. Use Shutdown and Close as on http.Server.
type Server struct {
	*http.Server
	maxConns, maxPerSource int
	open, refused          atomic.Int64
}

// New returns the server of handler on addr, unstarted, with the timeouts, header and
// HTTP/2 bounds of limits; MaxConns applies in Serve and MaxKeepAliveConns to every
// HTTP/1 answer. tlsConfig nil serves plain HTTP. Errors: a MaxKeepAliveConns not below
// MaxConns, when both are bounded (kept-alive connections could take every slot).
func New(handler http.Handler, addr string, tlsConfig *tls.Config, limits Limits) (*Server, error) {
	if limits.MaxConns > 0 && limits.MaxKeepAliveConns >= limits.MaxConns {
		return nil, fmt.Errorf("MaxKeepAliveConns %d must be below MaxConns %d", limits.MaxKeepAliveConns, limits.MaxConns)
	}
	s := &Server{maxConns: limits.MaxConns, maxPerSource: limits.MaxConnsPerSource}
	if limits.MaxKeepAliveConns > 0 {
		keep := int64(limits.MaxKeepAliveConns)
		next := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 1 && s.open.Load() > keep {
				w.Header().Set("Connection", "close")
			}
			next.ServeHTTP(w, r)
		})
	}
	s.Server = &http.Server{
		Addr:              addr,
		Handler:           handler,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		ReadTimeout:       limits.ReadTimeout,
		WriteTimeout:      limits.WriteTimeout,
		IdleTimeout:       limits.IdleTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		HTTP2:             limits.HTTP2,
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.open.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.open.Add(-1)
			}
		},
	}
	return s, nil
}

// OpenConns is how many connections the server has open now.
func (s *Server) OpenConns() int { return int(s.open.Load()) }

// RefusedConns is how many connections the server closed on accepting them, their
// source holding MaxConnsPerSource already.
func (s *Server) RefusedConns() int { return int(s.refused.Load()) }

// Serve serves ln, accepting at most MaxConns connections at a time (MaxConnsPerSource
// from one IP), over TLS when the
// server has a TLSConfig, until Shutdown or Close; it returns http.ErrServerClosed then.
// It shadows http.Server.Serve, which would serve plain HTTP.
func (s *Server) Serve(ln net.Listener) error {
	if s.maxPerSource > 0 {
		ln = &sourceListener{Listener: ln, max: s.maxPerSource, refused: &s.refused, open: map[string]int{}}
	}
	if s.maxConns > 0 {
		ln = netutil.LimitListener(ln, s.maxConns)
	}
	if s.TLSConfig != nil {
		return s.ServeTLS(ln, "", "")
	}
	return s.Server.Serve(ln)
}

// ListenAndServe listens on the server's Addr and calls Serve. Errors: the address
// cannot be bound; then those of Serve.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// InFlight counts the requests a handler is serving and refuses those beyond its bound,
// so that a burst is answered at once instead of queueing goroutines and memory. Its
// zero value, like a bound ≤0, admits everything.
type InFlight struct {
	max int64
	n   atomic.Int64
}

// NewInFlight returns a counter admitting max requests at once (≤0: no bound).
func NewInFlight(max int) *InFlight { return &InFlight{max: int64(max)} }

// TryAcquire takes a slot and reports whether one was free; after true, call Release
// when the request is answered. It never waits.
func (f *InFlight) TryAcquire() bool {
	if f.max <= 0 {
		return true
	}
	if f.n.Add(1) > f.max {
		f.n.Add(-1)
		return false
	}
	return true
}

// Release frees the slot of a request TryAcquire admitted.
func (f *InFlight) Release() {
	if f.max > 0 {
		f.n.Add(-1)
	}
}

// Max is the bound (≤0: none).
func (f *InFlight) Max() int { return int(f.max) }

// RetryAfterSeconds is the Retry-After of an answer refusing a request as one too many.
// Kubernetes clients (client-go's rest client, which the API server calls webhooks
// with) wait that long and send the request again, within their own timeout.
const RetryAfterSeconds = 1

// ErrBusy is returned by BodyBudget.ReadBody when the budget cannot hold the body now;
// answer 429 with Retry-After: RetryAfterSeconds.
var ErrBusy = errors.New("too many request bytes in flight")
