package admission

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/httpserver/slowclient"
)

// The attack of TestServerHoldsSlowClients: 300 connections, each holding what it
// can, against a server whose connection cap is a quarter of the controller's (256 of
// 1,024, 192 of 768 kept alive): the attack exceeds it, as 1,100 connections would
// exceed the controller's, at a cost 2 loaded cores running -race can carry.
const (
	// slowHeaders send a request header a byte a second: ReadHeaderTimeout cuts them.
	slowHeaders = 200
	// slowBodies announce a body of MaxRequestBytes and send it a byte a second: they
	// hold a request slot and the bytes they sent, never MaxRequestBytes.
	slowBodies = 80
	// stalledBodies send MaxRequestBytes−1 bytes at once and hold the last: before the
	// bounds each held ~8 MiB of heap until the client gave up.
	stalledBodies = 20
	// slowMaxConns and slowMaxKeepAliveConns are the server's connection caps here.
	slowMaxConns, slowMaxKeepAliveConns = 256, 192
	// heapBound is the heap growth allowed during the attack, server and attacking
	// clients together (~40 KiB per TLS connection at each end: 24 MiB, plus the body
	// budget, 32 MiB, plus each stalled body's uncharged 64 KiB). Without the bounds the
	// stalled bodies alone hold ~160 MiB.
	heapBound = 128 << 20
	// answerBound is how long a review may take to be answered under attack: half the
	// API server's 10 s webhook timeout, for 2 loaded cores running -race beside other
	// packages' tests (alone, the slowest review takes ~0.2 s).
	answerBound = 5 * time.Second
)

// TestServerHoldsSlowClients serves the handler as the controller does (httpserver.New
// with ServerLimits but a quarter of its connection cap, TLS, the default Limits) and
// sends an AdmissionReview over HTTP/2 as the API server does, on the connection it
// keeps; then 300 slow connections, more than the cap, attack it. Reviews sent
// meanwhile on that connection must be answered within answerBound, the heap must not
// grow by more than heapBound, the server must hold at most its cap, and every slow
// header must be cut (ReadHeaderTimeout) at least once, its connection's slot going to
// the connections waiting.
func TestServerHoldsSlowClients(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 300 TLS connections for ~10 s in the server's process")
	}
	limits := ServerLimits()
	limits.MaxConns, limits.MaxKeepAliveConns = slowMaxConns, slowMaxKeepAliveConns
	var accepted atomic.Int64
	srv, addr, tlsConfig := serveWithin(t, limits, Limits{}, nil, &accepted)
	client := &http.Client{Timeout: 5 * answerBound, Transport: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}}
	body := review(t, "TrainJob", admissionv1.Create, trainJob("test-runtime", nil), nil)
	send := func() (int, string, time.Duration, error) {
		start := time.Now()
		resp, err := client.Post("https://"+addr+PathValidateTrainJob, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, "", time.Since(start), err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Proto, time.Since(start), nil
	}
	if code, proto, _, err := send(); err != nil || code != http.StatusOK || proto != "HTTP/2.0" {
		t.Fatalf("review before the attack: %d %s %v, want 200 over HTTP/2", code, proto, err)
	}
	before := heapInuse()

	stop := make(chan struct{})
	var attackers sync.WaitGroup
	stopped := false
	stopAttack := func() {
		if !stopped {
			stopped = true
			close(stop)
			attackers.Wait()
		}
	}
	t.Cleanup(stopAttack)
	stalled := bytes.Repeat([]byte{'x'}, MaxRequestBytes-1)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: trainyard\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		PathValidateTrainJob, MaxRequestBytes)
	for i := range slowHeaders + slowBodies + stalledBodies {
		attackers.Go(func() {
			switch {
			case i < slowHeaders:
				slowclient.Trickle(addr, "", head, stop)
			case i < slowHeaders+slowBodies:
				slowclient.Trickle(addr, head, "{\"kind\":\"AdmissionReview\"", stop)
			default:
				slowclient.Hold(addr, []byte(head), stalled, 20*time.Second, stop)
			}
		})
	}

	// The attackers' handshakes and 140 MiB share this process's CPU: measure once they
	// hold the cap, as the API server, on other machines, would see it.
	for deadline := time.Now().Add(30 * time.Second); srv.OpenConns() < slowMaxConns && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d connections open (cap %d), %d attacking", srv.OpenConns(), slowMaxConns, slowHeaders+slowBodies+stalledBodies)
	var worst time.Duration
	peak, peakConns := before, 0
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		code, proto, elapsed, err := send()
		if err != nil {
			t.Fatalf("review under attack: %v", err)
		}
		worst = max(worst, elapsed)
		if code != http.StatusOK || elapsed > answerBound {
			t.Fatalf("review under attack answered %d (%s) after %v, want 200 within %v", code, proto, elapsed, answerBound)
		}
		peak, peakConns = max(peak, heapInuse()), max(peakConns, srv.OpenConns())
		if peak-before > heapBound {
			t.Fatalf("heap grew by %d MiB under attack, want at most %d MiB", (peak-before)>>20, heapBound>>20)
		}
	}
	// Every slow header holding a slot when the cap was reached is cut within
	// ReadHeaderTimeout (5 s) and reconnects; the connections queued behind take the
	// slots, so the server accepts more connections than the attack opened. Without
	// the timeout it accepts no more than its cap.
	attack := int64(slowHeaders + slowBodies + stalledBodies)
	cutWant := int64(slowHeaders - (slowHeaders + slowBodies + stalledBodies - slowMaxConns)) // held a slot
	for deadline := time.Now().Add(30 * time.Second); accepted.Load()-1-attack < cutWant && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	cut := max(0, accepted.Load()-1-attack) // less the review's connection
	stopAttack()
	if peakConns > slowMaxConns {
		t.Errorf("%d connections open at once, above the cap %d", peakConns, slowMaxConns)
	}
	if cut < cutWant {
		t.Errorf("%d connections accepted beyond the attack's %d, want at least the %d slow headers that held a slot cut and replaced", cut, attack, cutWant)
	}
	t.Logf("%d slow connections (cap %d): slowest review %v; %d connections cut and replaced; heap in use %d MiB before, peak %d MiB (growth %d MiB, bound %d MiB)",
		attack, slowMaxConns, worst, cut, before>>20, peak>>20, (peak-before)>>20, heapBound>>20)
}

// serveAsTheController serves NewHandler, within limits, as the controller's admission
// server does (ServerLimits) and returns its address and a client TLS configuration
// trusting it. arrived, unless nil, counts the requests that reached the handler.
func serveAsTheController(t *testing.T, limits Limits, arrived *atomic.Int64) (*httpserver.Server, string, *tls.Config) {
	t.Helper()
	return serveWithin(t, ServerLimits(), limits, arrived, nil)
}

// serveWithin is serveAsTheController with the server's limits server; accepted,
// unless nil, counts the connections it accepted.
func serveWithin(t *testing.T, server httpserver.Limits, limits Limits, arrived, accepted *atomic.Int64) (*httpserver.Server, string, *tls.Config) {
	t.Helper()
	tmp := httptest.NewUnstartedServer(nil) // for its certificate
	tmp.EnableHTTP2 = true
	tmp.StartTLS()
	serverTLS, clientTLS := tmp.TLS.Clone(), tmp.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tmp.Close()
	deps := fixture{runtimes: []runtime.Object{ctr("test-runtime", skeleton(torchPolicy), nil)}}.deps(t)
	deps.Limits = limits
	handler := NewHandler(deps)
	if arrived != nil {
		next := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived.Add(1)
			next.ServeHTTP(w, r)
		})
	}
	srv, err := httpserver.New(handler, "", serverTLS, server)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if accepted != nil {
		ln = &acceptCounter{Listener: ln, n: accepted}
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, addr, clientTLS
}

// acceptCounter counts the connections its listener accepts.
type acceptCounter struct {
	net.Listener
	n *atomic.Int64
}

func (l *acceptCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// failure is the error p holds, or nil.
func failure(p *atomic.Pointer[error]) error {
	if e := p.Load(); e != nil {
		return *e
	}
	return nil
}

// heapInuse is the heap in use after a collection, in bytes.
func heapInuse() uint64 {
	goruntime.GC()
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestServerCutsHTTP2SlowBodies floods the server, served as the controller serves it,
// with HTTP/2 streams sending their body a byte a second: h2Requests of them take every
// request slot and h2Overflow more go beyond them, 32 streams (ServerLimits) to a
// connection. A review sent meanwhile, as the API server sends it, must be answered 200
// within answerBound, and the streams beyond the slots must be cut (408) within
// OverflowBodyTimeout, so that they hold their goroutine briefly. Before the overflow
// lane every review was refused 429 until a slot freed, 10 s (ReadTimeout) later. The
// slots are fewer than DefaultMaxRequests for 2 loaded cores running -race; e2e/faults
// TestAdmissionUnderHTTP2SlowBodies floods a controller's 2,048.
func TestServerCutsHTTP2SlowBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("holds ~600 HTTP/2 streams for ~10 s")
	}
	const h2Requests, h2Overflow = 512, 96
	var arrived atomic.Int64
	_, addr, tlsConfig := serveAsTheController(t, Limits{MaxRequests: h2Requests}, &arrived)

	stop := make(chan struct{})
	var attackers sync.WaitGroup
	t.Cleanup(func() { close(stop); attackers.Wait() })
	var cut, cutAnswered408 atomic.Int64
	var firstErr atomic.Pointer[error] // a stream that failed rather than was answered
	attacker := slowclient.HTTP2Client((h2Requests + h2Overflow + MaxConcurrentStreams - 1) / MaxConcurrentStreams)
	for range h2Requests + h2Overflow {
		attackers.Add(1)
		go func() {
			defer attackers.Done()
			for {
				code, wasCut, err := slowclient.TrickleHTTP2(attacker, "https://"+addr+PathValidateTrainJob, "application/json",
					MaxRequestBytes, "{\"kind\":\"AdmissionReview\"", stop)
				if !wasCut {
					return
				}
				cut.Add(1)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
				if code == http.StatusRequestTimeout {
					cutAnswered408.Add(1)
				}
			}
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); arrived.Load() < h2Requests+h2Overflow && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if n := arrived.Load(); n < h2Requests+h2Overflow {
		t.Fatalf("%d slow streams reached the handler, want the attack's %d", n, h2Requests+h2Overflow)
	}
	cutBefore := cutAnswered408.Load()

	client := &http.Client{Timeout: 5 * answerBound, Transport: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true}}
	body := review(t, "TrainJob", admissionv1.Create, trainJob("test-runtime", nil), nil)
	var worst time.Duration
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		start := time.Now()
		resp, err := client.Post("https://"+addr+PathValidateTrainJob, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("review under an HTTP/2 slow-body flood: %v", err)
		}
		_ = resp.Body.Close()
		elapsed := time.Since(start)
		worst = max(worst, elapsed)
		if resp.StatusCode != http.StatusOK || elapsed > answerBound || resp.ProtoMajor != 2 {
			t.Fatalf("review under an HTTP/2 slow-body flood answered %d (%s) after %v, want 200 over HTTP/2 within %v",
				resp.StatusCode, resp.Proto, elapsed, answerBound)
		}
	}
	// In those 5 s the overflow streams are cut (within OverflowBodyTimeout) and re-sent
	// by their attacker, about twice each alone, about once under -race; the slot
	// holders are cut at ReadTimeout (10 s). Without the overflow lane none is cut with
	// 408: they are refused 429 at once.
	if got := cutAnswered408.Load() - cutBefore; got < h2Overflow/2 {
		t.Errorf("%d slow streams cut with 408 in 5 s, want at least half the %d beyond the request slots", got, h2Overflow)
	}
	t.Logf("%d slow HTTP/2 streams (%d request slots): slowest review %v; %d slow streams cut (%d answered 408); first failed stream: %v",
		h2Requests+h2Overflow, h2Requests, worst, cut.Load(), cutAnswered408.Load(), failure(&firstErr))
}
