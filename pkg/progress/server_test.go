package progress_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// testHandler is NewHandler over TrainJob ns/llm with auth and obs.
func testHandler(t testing.TB, auth progress.Authorizer, obs *observer, maxInFlight int) http.Handler {
	return progress.NewHandler(progress.HandlerConfig{
		Authorizer:  auth,
		Coalescer:   progress.NewCoalescer(func(cache.ObjectName) {}, metrics.New(nil)),
		Observer:    obs,
		MaxInFlight: maxInFlight, MaxInFlightPerNamespace: maxInFlight,
	})
}

// TestHandlerMaxInFlight: reports beyond MaxInFlight are answered 429 with Retry-After
// at once, before their token is reviewed; a slot frees when a report is answered.
func TestHandlerMaxInFlight(t *testing.T) {
	auth := &slowAuthorizer{release: make(chan struct{})}
	obs := &observer{}
	h := testHandler(t, auth, obs, 2)
	path := wire.Path(ns, "llm")
	done := make(chan int, 2)
	for range 2 {
		go func() { done <- post(t, h, path, "t", fullReport) }()
	}
	eventually(t, "two reports to wait for their reviews", func() bool { return auth.waiting.Load() == 2 })

	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(fullReport))
	req.Header.Set("Authorization", "Bearer t")
	rec := httptest.NewRecorder()
	third := make(chan struct{})
	go func() {
		defer close(third)
		h.ServeHTTP(rec, req)
	}()
	eventually(t, "the third report to be answered or reviewed", func() bool {
		select {
		case <-third:
			return true
		default:
			return auth.waiting.Load() > 2
		}
	})
	if auth.waiting.Load() > 2 {
		close(auth.release)
		t.Fatal("the third report was reviewed, want it refused at once")
	}
	var st metav1.Status
	_ = json.Unmarshal(rec.Body.Bytes(), &st)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || st.Reason != metav1.StatusReasonTooManyRequests {
		t.Errorf("third report: %d, Retry-After %q, reason %q; want 429, 1, TooManyRequests", rec.Code, rec.Header().Get("Retry-After"), st.Reason)
	}
	if n := auth.waiting.Load(); n != 2 {
		t.Errorf("%d reviews, want 2: a refused report is not reviewed", n)
	}

	close(auth.release)
	for range 2 {
		if code := <-done; code != http.StatusOK {
			t.Errorf("waiting report answered %d, want 200", code)
		}
	}
	if code := post(t, h, path, "t", fullReport); code != http.StatusOK {
		t.Errorf("report after the others were answered: %d, want 200", code)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if got := strings.Join(obs.reports, ","); strings.Count(got, metrics.ReasonTooManyRequests) != 1 {
		t.Errorf("observed rejections %q, want one %s", got, metrics.ReasonTooManyRequests)
	}
}

// TestServerKeepAlive: while more than MaxKeepAliveConns connections are open, an
// answer closes its connection; the ones within the bound are kept.
func TestServerKeepAlive(t *testing.T) {
	tmp := httptest.NewUnstartedServer(nil) // for its certificate
	tmp.StartTLS()
	tlsConfig := tmp.TLS.Clone()
	tmp.Close()
	srv, err := progress.NewServer(testHandler(t, &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Allowed, TrainJobUID: allowedUID}}, &observer{}, 0),
		progress.ServerOptions{TLSConfig: tlsConfig, MaxConns: 10, MaxKeepAliveConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	request := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: trainyard\r\nAuthorization: Bearer t\r\nContent-Length: %d\r\n\r\n%s",
		wire.Path(ns, "llm"), len(fullReport), fullReport)
	var closed []bool
	for range 4 {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write([]byte(request)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("answer %v, %v", resp, err)
		}
		closed = append(closed, resp.Close)
		if resp.Close { // wait for the server to close it, so the next one counts without it
			_, _ = bufio.NewReader(c).ReadByte()
		}
	}
	if want := []bool{false, false, true, true}; fmt.Sprint(closed) != fmt.Sprint(want) {
		t.Errorf("Connection: close on the answers %v, want %v (two connections kept)", closed, want)
	}
}

func TestNewServerValidatesItsBounds(t *testing.T) {
	if _, err := progress.NewServer(http.NotFoundHandler(), progress.ServerOptions{MaxConns: 10, MaxKeepAliveConns: 10}); err == nil {
		t.Error("MaxKeepAliveConns = MaxConns: no error")
	}
	if _, err := progress.NewServer(http.NotFoundHandler(), progress.ServerOptions{MaxConns: -1, MaxKeepAliveConns: 10}); err != nil {
		t.Errorf("unbounded MaxConns: %v", err)
	}
}
