package lease

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	testingclock "k8s.io/utils/clock/testing"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	"github.com/trainyard/trainyard/pkg/stages/status"
)

// apiServer is an httptest server standing in for the API server: it answers every
// request with an empty JobSet and records the requests that reached it.
type apiServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string // "METHOD path"
}

func newAPIServer(t *testing.T) *apiServer {
	s := &apiServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"x"}}`))
	}))
	t.Cleanup(s.Close)
	return s
}

// received returns the requests that reached the server so far.
func (s *apiServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// The fence transport refuses every write (POST, PUT, PATCH, DELETE) while the fence is
// closed — before any renewal, from lastRenewal + renewDeadline on, after stop — without
// sending it, and passes reads (GET: gets, lists, watches) always and writes while the
// fence is open; without leader election (no fence) it passes everything (issue 15).
func TestFenceTransport(t *testing.T) {
	const renewDeadline = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	writes := []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	for name, tc := range map[string]struct {
		fence     func(clk *testingclock.FakeClock) *Fence // nil: no leader election
		wantSent  bool                                     // the writes reach the server
		wantError string                                   // in a refused write's error
	}{
		"no leader election: open": {wantSent: true},
		"never renewed: closed": {
			fence:     func(clk *testingclock.FakeClock) *Fence { return NewFence(clk, renewDeadline) },
			wantError: "this replica does not lead",
		},
		"renewed 1ns less than renewDeadline ago: open": {
			fence: func(clk *testingclock.FakeClock) *Fence {
				f := NewFence(clk, renewDeadline)
				f.renewed(clk.Now())
				clk.Step(renewDeadline - time.Nanosecond)
				return f
			},
			wantSent: true,
		},
		"renewed renewDeadline ago: closed": {
			fence: func(clk *testingclock.FakeClock) *Fence {
				f := NewFence(clk, renewDeadline)
				f.renewed(clk.Now())
				clk.Step(renewDeadline)
				return f
			},
			wantError: "this replica's Lease expired at 2026-01-01T00:00:10Z (its last renewal started at 2026-01-01T00:00:00Z, renewDeadline 10s); a follower may lead",
		},
		"renewed just now but stopped leading: closed": {
			fence: func(clk *testingclock.FakeClock) *Fence {
				f := NewFence(clk, renewDeadline)
				f.renewed(clk.Now())
				f.stop()
				f.renewed(clk.Now().Add(time.Second)) // a late renewal does not reopen it
				return f
			},
			wantError: "this replica stopped leading",
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			var fence *Fence
			if tc.fence != nil {
				fence = tc.fence(clk)
			}
			srv := newAPIServer(t)
			client, err := rest.HTTPClientFor(FencedConfig(&rest.Config{Host: srv.URL}, fence))
			if err != nil {
				t.Fatal(err)
			}
			const path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/x"
			var want []string
			for _, method := range append([]string{http.MethodGet}, writes...) {
				req, err := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := client.Do(req)
				if method == http.MethodGet || tc.wantSent {
					if err != nil {
						t.Errorf("%s: %v; want it sent", method, err)
						continue
					}
					_ = resp.Body.Close()
					want = append(want, method+" "+path)
					continue
				}
				var refused *fenceError
				if !errors.As(err, &refused) {
					t.Errorf("%s: error %v; want a fenceError", method, err)
					continue
				}
				if wantMsg := "not sending " + method + " " + path + ": " + tc.wantError; refused.Error() != wantMsg {
					t.Errorf("%s: error %q; want %q", method, refused.Error(), wantMsg)
				}
			}
			if got := srv.received(); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("the server received %q; want %q", got, want)
			}
		})
	}
}

// A leader's JobSet apply attempted from lastRenewal + renewDeadline on never reaches the
// API server, even when the pipeline's context is not cancelled (a process frozen past
// its Lease whose workers resume before the elector's expiry has run): the fence closes
// at the very instant the elector stops the pipeline (issue 15).
func TestFencedLeaderSendsNoWriteAfterRenewDeadline(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lock := &fakeLock{identity: "leader"}
	unhang := make(chan struct{})
	r := startLeader(t, context.Background(), leaderElectionTimings, lock, clk)
	pipelineCtx := r.leading(t)
	srv := newAPIServer(t)
	jobsets, err := jobsetclient.NewForConfig(FencedConfig(&rest.Config{Host: srv.URL}, r.fence))
	if err != nil {
		t.Fatal(err)
	}
	apply := status.RESTJobSetApply(jobsets.JobsetV1alpha2().RESTClient())
	// The worker's context: never cancelled, as if the elector's expiry had not run yet.
	workerCtx := context.Background()

	// Every Lease call hangs from now on: no renewal succeeds.
	lock.hangUntil(t, unhang)
	renewDeadline := leaderElectionTimings.RenewDeadline.Duration
	clk.Step(renewDeadline - time.Nanosecond)
	if err := apply(workerCtx, "ns", "x", []byte("{}")); err != nil {
		t.Fatalf("apply 1ns before renewDeadline had passed since the last renewal: %v", err)
	}
	if err := pipelineCtx.Err(); err != nil {
		t.Fatalf("pipeline stopped before renewDeadline had passed since the last renewal: %v", err)
	}
	clk.Step(time.Nanosecond)
	err = apply(workerCtx, "ns", "x", []byte("{}"))
	var refused *fenceError
	if !errors.As(err, &refused) {
		t.Errorf("apply renewDeadline after the last renewal: error %v; want a fenceError", err)
	}
	if got, want := srv.received(), []string{"PATCH /apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/x"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the API server received %q; want only the apply sent before renewDeadline, %q", got, want)
	}
	awaitClosed(t, pipelineCtx.Done(), "the pipeline's context to be cancelled at the same instant")

	close(unhang)
	awaitClosed(t, r.lost, "the elector to report the Lease lost (the process exits)")
	awaitClosed(t, r.done, "the elector to return")
	if r.fence.Valid(clk.Now().Add(-renewDeadline)) { // the last renewal's instant
		t.Error("the fence is valid, at a time before its expiry, after the Lease was lost; want it closed for good")
	}
}

// On stop (SIGTERM), the fence closes once the pipeline has drained, before the Lease is
// released, although the last renewal is fresh: a follower may take the released Lease at
// once, so what the pipeline left running must not write (issue 15).
func TestLeaderFenceClosesOnStopBeforeTheRelease(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // never stepped
	lock := &fakeLock{identity: "leader"}
	validAtRelease := make(chan bool, 1)
	ctx, stop := context.WithCancel(context.Background())
	r := startLeader(t, ctx, leaderElectionTimings, lock, clk)
	// The release comes only after stop below.
	lock.setHook(func(_ context.Context, call string, ler *resourcelock.LeaderElectionRecord) error {
		if call == "update" && ler.HolderIdentity == "" {
			validAtRelease <- r.fence.Valid(clk.Now())
		}
		return nil
	})
	r.leading(t)
	if !r.fence.Valid(clk.Now()) {
		t.Fatal("the fence is closed while leading with a fresh renewal")
	}
	stop()
	awaitClosed(t, r.done, "the elector to return")
	select {
	case valid := <-validAtRelease:
		if valid {
			t.Error("the fence was open when the Lease was released; want closed once the pipeline drained")
		}
	default:
		t.Fatal("the Lease was not released on stop")
	}
	if r.fence.Valid(clk.Now()) {
		t.Error("the fence is open after stop")
	}
}
