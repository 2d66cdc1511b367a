package progress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// slowAuthorizer allows every token once release is closed, as a TokenReview that the
// API server is slow to answer; it counts the requests waiting.
type slowAuthorizer struct {
	release chan struct{}
	waiting atomic.Int64
}

func (a *slowAuthorizer) Authorize(ctx context.Context, _ string, _ cache.ObjectName) (progress.Decision, error) {
	a.waiting.Add(1)
	select {
	case <-a.release:
	case <-ctx.Done():
	}
	return progress.Decision{Verdict: progress.Allowed, TrainJobUID: allowedUID}, nil
}

// serverBench is the progress server (NewServer, NewHandler) over TLS on 127.0.0.1,
// and raw HTTP/1.1 TLS connections to it, so that the process's memory is the
// server's plus the clients' TLS state (~7 KiB a connection; no client buffers but a
// 512-byte reader, and client goroutines only while they dial).
type serverBench struct {
	b       *testing.B
	srv     *progress.Server
	addr    string
	obs     *observer
	request []byte
	before  runtime.MemStats

	mu    sync.Mutex
	conns []*tls.Conn
}

// newServerBench starts the server; bounded false sets every bound of the server and
// the handler off, as the server was before them.
func newServerBench(b *testing.B, auth progress.Authorizer, bounded bool) *serverBench {
	obs := &observer{}
	hc := progress.HandlerConfig{
		Authorizer: auth,
		Coalescer:  progress.NewCoalescer(func(cache.ObjectName) {}, metrics.New(nil)),
		Observer:   obs,
	}
	tmp := httptest.NewUnstartedServer(nil) // for its certificate
	tmp.StartTLS()
	opts := progress.ServerOptions{TLSConfig: tmp.TLS.Clone()}
	tmp.Close()
	if !bounded {
		hc.MaxInFlight, opts.MaxConns, opts.MaxKeepAliveConns = -1, -1, -1
	}
	srv, err := progress.NewServer(progress.NewHandler(hc), opts)
	if err != nil {
		b.Fatal(err)
	}
	if !bounded {
		srv.MaxHeaderBytes, srv.HTTP2 = 0, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	body := fullReport
	return &serverBench{
		b: b, srv: srv, addr: ln.Addr().String(), obs: obs,
		request: fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: trainyard\r\nAuthorization: Bearer t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			wire.Path(ns, "llm"), len(body), body),
	}
}

// start records the memory in use before the connections.
func (s *serverBench) start() {
	runtime.GC()
	runtime.ReadMemStats(&s.before)
}

// send dials a connection and sends a report on it, without reading the answer.
func (s *serverBench) send() *tls.Conn {
	c, err := tls.Dial("tcp", s.addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		s.b.Fatal(err)
	}
	if _, err := c.Write(s.request); err != nil {
		s.b.Fatal(err)
	}
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	return c
}

// perConn returns the heap and stacks in use since start, per connection.
func (s *serverBench) perConn() float64 {
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	used := int64(after.HeapInuse+after.StackInuse) - int64(s.before.HeapInuse+s.before.StackInuse)
	return float64(used) / float64(len(s.conns))
}

func (s *serverBench) close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
	_ = s.srv.Close()
}

// eventually waits for cond, which the server makes true within moments.
func eventually(b testing.TB, what string, cond func() bool) {
	b.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
	}
}

// BenchmarkServerMemory measures what the progress server holds in memory (Go heap and
// stacks, after a GC) per connection, with its bounds (bounded) and without them
// (unbounded, the server before issue 14's benchmark found an 803 MiB peak RSS):
//
//   - keep-alive: 2,000 connections each send a report, get 200 and stay open, as
//     trainers' sessions do between reports; bounded, the server keeps
//     DefaultMaxKeepAliveConns of them and closes the others after their answer;
//   - slow reviews: 3,000 connections at once each send a report whose token review
//     does not come back, as after a restart on a saturated API server; bounded, the
//     server accepts DefaultMaxConns connections at a time, serves DefaultMaxInFlight
//     reports and answers the others 429 at once, keeping DefaultMaxKeepAliveConns of
//     their connections.
//
// Run it with go test -run '^$' -bench ServerMemory -benchmem ./pkg/progress: B/conn
// is the figure; the clients' TLS state (~7 KiB) is in it.
func BenchmarkServerMemory(b *testing.B) {
	for _, bounded := range []bool{false, true} {
		name := map[bool]string{false: "unbounded", true: "bounded"}[bounded]
		b.Run("keep-alive/"+name, func(b *testing.B) {
			const conns = 2000
			var perConn float64
			for b.Loop() {
				s := newServerBench(b, &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Allowed, TrainJobUID: allowedUID}}, bounded)
				s.start()
				for range conns {
					c := s.send()
					resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
					if err != nil || resp.StatusCode != http.StatusOK {
						b.Fatalf("answer %v, %v", resp, err)
					}
					_ = resp.Body.Close()
					if resp.Close { // not kept: wait for the server to close it
						_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
						if _, err := io.Copy(io.Discard, c); err != nil {
							b.Fatalf("connection not closed: %v", err)
						}
					}
				}
				perConn = s.perConn()
				s.close()
			}
			b.ReportMetric(perConn, "B/conn")
		})
		b.Run("slow-reviews/"+name, func(b *testing.B) {
			const conns = 3000
			var perConn float64
			for b.Loop() {
				auth := &slowAuthorizer{release: make(chan struct{})}
				s := newServerBench(b, auth, bounded)
				s.start()
				var wg sync.WaitGroup
				for range conns { // at once: beyond MaxConns, the dials wait to be accepted
					wg.Go(func() { s.send() })
				}
				eventually(b, "every report to wait for its review or be refused", func() bool {
					s.obs.mu.Lock()
					refused := len(s.obs.reports)
					s.obs.mu.Unlock()
					return auth.waiting.Load()+int64(refused) == conns
				})
				wg.Wait()
				perConn = s.perConn()
				close(auth.release)
				s.close()
			}
			b.ReportMetric(perConn, "B/conn")
		})
	}
}
