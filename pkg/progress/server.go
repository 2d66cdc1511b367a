package progress

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// Defaults of ServerOptions and HandlerConfig.MaxInFlight (statusServer.maxConnections,
// maxKeepAliveConnections and maxReportsInFlight of the Configuration).
const (
	// DefaultMaxConns is how many connections the server has open at once: at ~40 KiB
	// each (TLS state, 4 KiB read and write buffers, the connection's goroutine and its
	// request), 200 MiB. Further connections wait in the kernel's accept queue, costing
	// the process nothing, until one closes. The issue-14 benchmark, without it, had
	// ~9,200 connections open and a peak RSS of 803 MiB.
	DefaultMaxConns = configv1alpha1.DefaultStatusMaxConnections
	// DefaultMaxKeepAliveConns is how many of them are kept open between reports; a
	// connection answered while more are open is closed after its answer, so
	// DefaultMaxConns − DefaultMaxKeepAliveConns connections always turn over and a
	// waiting trainer is accepted within a report's time. A trainer whose connection
	// is closed dials again for its next report (a TLS handshake, ~1 ms of CPU).
	DefaultMaxKeepAliveConns = configv1alpha1.DefaultStatusMaxKeepAliveConnections
	// DefaultMaxInFlight is how many reports the handler serves at once. A report
	// answered from the review cache takes ~0.1 ms, so the bound binds only when
	// reviews are slow: after a restart every pod's first report waits for its
	// TokenReview, and on a saturated machine those waits reached 10 s.
	DefaultMaxInFlight = configv1alpha1.DefaultStatusMaxReportsInFlight
	// MaxHeaderBytes bounds a request's header: a bearer token (~1–2 KiB) and a few
	// short headers, where net/http's default allows 1 MiB per request.
	MaxHeaderBytes = 16 << 10
	// RetryAfterSeconds is the Retry-After of a report refused as one too many (429).
	RetryAfterSeconds = httpserver.RetryAfterSeconds
)

// ServerOptions configure a Server. Zero bounds take the defaults; a negative one
// removes its bound.
type ServerOptions struct {
	// Addr is the host:port to serve on (statusServer.bindAddress).
	Addr string
	// TLSConfig serves the certificate.
	TLSConfig *tls.Config
	// MaxConns is how many connections are open at once (DefaultMaxConns).
	MaxConns int
	// MaxKeepAliveConns is how many connections are kept open between reports
	// (DefaultMaxKeepAliveConns): while more are open, an HTTP/1 answer carries
	// Connection: close. It must be below MaxConns, or connections kept open could
	// take every slot and leave new trainers waiting.
	MaxKeepAliveConns int
}

// Server is the progress server: an httpserver.Server for NewHandler, whose Serve serves
// TLS within the bounds of its ServerOptions.
type Server struct {
	*httpserver.Server
}

// NewServer returns the progress server of handler (NewHandler), unstarted, with
// upstream's timeouts (10 s to read a request and to write its answer, 120 s idle) and
// these bounds on the memory its connections hold (package httpserver):
//
//   - at most MaxConns connections open (in Serve);
//   - at most MaxKeepAliveConns kept open between requests: an HTTP/1 answer on a
//     connection while more are open carries Connection: close, so the connection is
//     closed after it instead of idling (no report is refused for it);
//   - MaxHeaderBytes (16 KiB) per request header, where net/http allows 1 MiB;
//   - HTTP/2: 16 concurrent streams per connection, 16 KiB frames, receive buffers of
//     one body (MaxBodyBytes) per stream.
//
// The handler bounds the reports served at once (HandlerConfig.MaxInFlight) and reads
// at most MaxBodyBytes of a body. Upstream's trainers send a report per connection
// (urllib) or keep one session (requests), and treat any answer but 200 as a report
// lost: a closed connection costs them a handshake, a 429 one report. Errors: a
// MaxKeepAliveConns not below MaxConns, when both are bounded.
func NewServer(handler http.Handler, opts ServerOptions) (*Server, error) {
	if opts.MaxConns == 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxKeepAliveConns == 0 {
		opts.MaxKeepAliveConns = DefaultMaxKeepAliveConns
	}
	srv, err := httpserver.New(handler, opts.Addr, opts.TLSConfig, httpserver.Limits{
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		IdleTimeout:    2 * time.Minute, // trainers keep their connection between reports
		MaxHeaderBytes: MaxHeaderBytes,
		MaxConns:       opts.MaxConns, MaxKeepAliveConns: opts.MaxKeepAliveConns,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          16,
			MaxReadFrameSize:              16 << 10,
			MaxReceiveBufferPerStream:     wire.MaxBodyBytes,
			MaxReceiveBufferPerConnection: 16 * wire.MaxBodyBytes,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("progress server: %w", err)
	}
	return &Server{Server: srv}, nil
}
