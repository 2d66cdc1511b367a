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
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/httpserver/slowclient"
)

// The attack of TestServerHoldsSlowClients: 500 connections, each holding what it can.
const (
	// slowHeaders send a request header a byte a second: ReadHeaderTimeout frees them.
	slowHeaders = 250
	// slowBodies announce a body of MaxRequestBytes and send it a byte a second: they
	// hold a request slot and the bytes they sent, never MaxRequestBytes.
	slowBodies = 200
	// stalledBodies send MaxRequestBytes−1 bytes at once and hold the last: before the
	// bounds each held ~8 MiB of heap until the client gave up.
	stalledBodies = 50
	// heapBound is the heap growth allowed during the attack, server and attacking
	// clients together (~40 KiB per TLS connection at each end: 40 MiB, plus the body
	// budget, 32 MiB, plus each stalled body's uncharged 64 KiB). Without the bounds the
	// stalled bodies alone hold ~400 MiB.
	heapBound = 128 << 20
	// answerBound is how long a review may take to be answered under attack: half the
	// API server's 10 s webhook timeout, for 2 loaded cores running -race beside other
	// packages' tests (alone, the slowest review takes ~0.2 s).
	answerBound = 5 * time.Second
)

// TestServerHoldsSlowClients serves the handler as the controller does
// (httpserver.New with ServerLimits, TLS, the default Limits), opens 500 slow
// connections against it, then sends AdmissionReviews over HTTP/2 as the API server
// does: each must be answered within answerBound, and the heap must not grow by more
// than heapBound.
func TestServerHoldsSlowClients(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("opens 500 TLS connections for ~10 s in the server's process: run without -short and -race (make test runs -race; e2e/faults TestAdmissionUnderSlowClients covers a controller process)")
	}
	srv, addr, tlsConfig := serveAsTheController(t)
	before := heapInuse()

	stop := make(chan struct{})
	var attackers sync.WaitGroup
	t.Cleanup(func() { close(stop); attackers.Wait() })
	stalled := bytes.Repeat([]byte{'x'}, MaxRequestBytes-1)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: trainyard\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		PathValidateTrainJob, MaxRequestBytes)
	for i := range slowHeaders + slowBodies + stalledBodies {
		attackers.Add(1)
		go func() {
			defer attackers.Done()
			switch {
			case i < slowHeaders:
				slowclient.Trickle(addr, "", head, stop)
			case i < slowHeaders+slowBodies:
				slowclient.Trickle(addr, head, "{\"kind\":\"AdmissionReview\"", stop)
			default:
				slowclient.Hold(addr, []byte(head), stalled, 20*time.Second, stop)
			}
		}()
	}

	// The attackers' handshakes and 350 MiB share this process's CPU: measure once they
	// are connected, as the API server, on other machines, would see it.
	for deadline := time.Now().Add(30 * time.Second); srv.OpenConns() < slowHeaders+slowBodies && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	t.Logf("%d connections open", srv.OpenConns())
	client := &http.Client{Timeout: 5 * answerBound, Transport: &http.Transport{
		TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 25,
	}}
	body := review(t, "TrainJob", admissionv1.Create, trainJob("test-runtime", nil), nil)
	var worst time.Duration
	peak := before
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		start := time.Now()
		resp, err := client.Post("https://"+addr+PathValidateTrainJob, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("review under attack: %v", err)
		}
		_ = resp.Body.Close()
		elapsed := time.Since(start)
		worst = max(worst, elapsed)
		if resp.StatusCode != http.StatusOK || elapsed > answerBound {
			t.Fatalf("review under attack answered %d after %v, want 200 within %v", resp.StatusCode, elapsed, answerBound)
		}
		peak = max(peak, heapInuse())
		if peak-before > heapBound {
			t.Fatalf("heap grew by %d MiB under attack, want at most %d MiB", (peak-before)>>20, heapBound>>20)
		}
	}
	t.Logf("500 slow connections: slowest review %v; heap in use %d MiB before, peak %d MiB (growth %d MiB, bound %d MiB)",
		worst, before>>20, peak>>20, (peak-before)>>20, heapBound>>20)
}

// serveAsTheController serves NewHandler as the controller's admission server does and
// returns its address and a client TLS configuration trusting it.
func serveAsTheController(t *testing.T) (*httpserver.Server, string, *tls.Config) {
	t.Helper()
	tmp := httptest.NewUnstartedServer(nil) // for its certificate
	tmp.EnableHTTP2 = true
	tmp.StartTLS()
	serverTLS, clientTLS := tmp.TLS.Clone(), tmp.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tmp.Close()
	deps := fixture{runtimes: []runtime.Object{ctr("test-runtime", skeleton(torchPolicy), nil)}}.deps(t)
	srv, err := httpserver.New(NewHandler(deps), "", serverTLS, ServerLimits())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, ln.Addr().String(), clientTLS
}

// heapInuse is the heap in use after a collection, in bytes.
func heapInuse() uint64 {
	goruntime.GC()
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return m.HeapInuse
}
