package httpserver_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trainyard/trainyard/pkg/httpserver"
)

// trickleReader returns its data n bytes per Read, as a slow client's body arrives.
type trickleReader struct {
	data []byte
	n    int
}

func (r *trickleReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n, len(r.data))
	copy(p, r.data[:k])
	r.data = r.data[k:]
	return k, nil
}

// TestBodyBudgetChargesWhatArrives: a body is charged beyond its Free bytes, by the
// buffer it holds, as it arrives; release gives the charge back.
func TestBodyBudgetChargesWhatArrives(t *testing.T) {
	b := &httpserver.BodyBudget{Total: 1 << 20, Free: 4 << 10}
	small, release, err := b.ReadBody(strings.NewReader(strings.Repeat("s", 3000)), 1<<20)
	if err != nil || len(small) != 3000 || b.Used() != 0 {
		t.Fatalf("small body: %d bytes, %v, %d charged; want 3000, no error, 0 charged", len(small), err, b.Used())
	}
	release()
	big, release, err := b.ReadBody(&trickleReader{data: bytes.Repeat([]byte("b"), 100<<10), n: 1000}, 1<<20)
	if err != nil || len(big) != 100<<10 {
		t.Fatalf("big body: %d bytes, %v", len(big), err)
	}
	if used := b.Used(); used < int64(cap(big))-(4<<10) || used > int64(cap(big)) {
		t.Errorf("%d bytes charged for a buffer of %d, want its capacity less Free", used, cap(big))
	}
	release()
	if b.Used() != 0 {
		t.Errorf("%d bytes charged after release, want 0", b.Used())
	}
}

// TestBodyBudgetRefuses: a body that does not fit the budget is ErrBusy while another
// holds it; one over max is a *http.MaxBytesError; neither keeps a charge.
func TestBodyBudgetRefuses(t *testing.T) {
	b := &httpserver.BodyBudget{Total: 64 << 10, Free: 1 << 10}
	_, holdRelease, err := b.ReadBody(bytes.NewReader(make([]byte, 40<<10)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	held := b.Used()
	if _, _, err := b.ReadBody(bytes.NewReader(make([]byte, 40<<10)), 1<<20); !errors.Is(err, httpserver.ErrBusy) {
		t.Errorf("a second 40 KiB body beside the first: %v, want ErrBusy", err)
	}
	if _, _, err := b.ReadBody(bytes.NewReader(make([]byte, 512)), 1<<20); err != nil {
		t.Errorf("a body within Free while the budget is held: %v, want none", err)
	}
	if b.Used() != held {
		t.Errorf("%d bytes charged after the refusals, want the first body's %d", b.Used(), held)
	}
	holdRelease()
	var tooLarge *http.MaxBytesError
	if _, _, err := b.ReadBody(bytes.NewReader(make([]byte, 2000)), 1500); !errors.As(err, &tooLarge) || tooLarge.Limit != 1500 {
		t.Errorf("a 2000-byte body over max 1500: %v, want *http.MaxBytesError with limit 1500", err)
	}
	if b.Used() != 0 {
		t.Errorf("%d bytes charged at the end, want 0", b.Used())
	}
}

func TestInFlight(t *testing.T) {
	f := httpserver.NewInFlight(2)
	var got []bool
	for range 3 {
		got = append(got, f.TryAcquire())
	}
	if got[0] != true || got[1] != true || got[2] != false {
		t.Fatalf("three acquisitions of two slots: %v, want [true true false]", got)
	}
	f.Release()
	if !f.TryAcquire() {
		t.Error("a released slot is not free")
	}
	unbounded := httpserver.NewInFlight(0)
	for range 1000 {
		if !unbounded.TryAcquire() {
			t.Fatal("an unbounded counter refused")
		}
	}
}

func TestNewValidatesItsBounds(t *testing.T) {
	if _, err := httpserver.New(http.NotFoundHandler(), "", nil, httpserver.Limits{MaxConns: 10, MaxKeepAliveConns: 10}); err == nil {
		t.Error("MaxKeepAliveConns = MaxConns: no error")
	}
	if _, err := httpserver.New(http.NotFoundHandler(), "", nil, httpserver.Limits{MaxKeepAliveConns: 10}); err != nil {
		t.Errorf("unbounded MaxConns: %v", err)
	}
}

// TestServerCapsConnectionsAndFreesSilentOnes: beyond MaxConns a connection waits to be
// accepted, and gets its turn once ReadHeaderTimeout closes a silent one.
func TestServerCapsConnectionsAndFreesSilentOnes(t *testing.T) {
	srv, err := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		"", nil, httpserver.Limits{ReadHeaderTimeout: 500 * time.Millisecond, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	for range 2 { // silent clients take both slots
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	start := time.Now()
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if waited := time.Since(start); waited < 300*time.Millisecond || waited > 5*time.Second {
		t.Errorf("answered after %v, want after the silent connections' header timeout (500 ms)", waited)
	}
}

// TestFairInFlight: a key is refused beyond its share while others are admitted, up to
// the total; a release frees the key's slot.
func TestFairInFlight(t *testing.T) {
	f := httpserver.NewFairInFlight(5, 2)
	for i, step := range []struct {
		key  string
		want bool
	}{{"a", true}, {"a", true}, {"a", false}, {"b", true}, {"b", true}, {"c", true}, {"c", false}, {"d", false}} {
		if got := f.TryAcquire(step.key); got != step.want {
			t.Errorf("step %d: TryAcquire(%s) = %v, want %v", i, step.key, got, step.want)
		}
	}
	f.Release("a")
	if !f.TryAcquire("d") {
		t.Error("TryAcquire(d) after a release = false, want true")
	}
	if f.TryAcquire("a") {
		t.Error("TryAcquire(a) with the total held = true, want false")
	}
	open := httpserver.NewFairInFlight(0, 1)
	for i := range 3 {
		if !open.TryAcquire("a") {
			t.Errorf("an unbounded FairInFlight refused request %d", i)
		}
	}
}
