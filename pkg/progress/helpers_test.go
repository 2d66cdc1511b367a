package progress_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/trainyard/trainyard/pkg/progress"
)

// t0 is the tests' "now".
var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func key(ns, name string) cache.ObjectName { return cache.ObjectName{Namespace: ns, Name: name} }

// observer records what the progress server tells its Observer.
type observer struct {
	mu        sync.Mutex
	reports   []string // rejected reason, "" for accepted
	reviews   []string // "result cached=bool"
	coalesced int
	dropped   []string
	writes    []string // "success" or "error"
	// pendingBytes and maxPendingBytes are the last and the largest bytes of pending
	// reports the Coalescer reported; bound the bound it reported.
	pendingBytes, maxPendingBytes, bound int64
}

func (o *observer) SetProgressPendingReportBytes(bytes int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pendingBytes = bytes
	o.maxPendingBytes = max(o.maxPendingBytes, bytes)
}

func (o *observer) SetProgressMaxPendingReportBytes(bytes int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bound = bytes
}

func (o *observer) ObserveProgressReport(rejected string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reports = append(o.reports, rejected)
}

func (o *observer) ObserveProgressTokenReview(result string, cached bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reviews = append(o.reviews, fmt.Sprintf("%s cached=%t", result, cached))
}

func (o *observer) ObserveProgressCoalesced() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.coalesced++
}

func (o *observer) ObserveProgressDropped(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropped = append(o.dropped, reason)
}

func (o *observer) ObserveProgressWrite(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.writes = append(o.writes, "error")
	} else {
		o.writes = append(o.writes, "success")
	}
}

var (
	_ progress.Observer             = (*observer)(nil)
	_ progress.PendingBytesObserver = (*observer)(nil)
)

// enqueued records the keys a Coalescer enqueues.
type enqueued struct {
	mu      sync.Mutex
	keys    []cache.ObjectName
	forward func(cache.ObjectName) // also called, when set (a pipeline's Enqueue)
}

func (e *enqueued) add(k cache.ObjectName) {
	e.mu.Lock()
	e.keys = append(e.keys, k)
	forward := e.forward
	e.mu.Unlock()
	if forward != nil {
		forward(k)
	}
}

func (e *enqueued) get() []cache.ObjectName {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]cache.ObjectName(nil), e.keys...)
}

// fakeAuthorizer answers every request with decision (or err), or panics when panics is
// set, and counts calls.
type fakeAuthorizer struct {
	decision progress.Decision
	err      error
	panics   bool

	mu     sync.Mutex
	tokens []string
}

func (f *fakeAuthorizer) Authorize(_ context.Context, token string, _ cache.ObjectName) (progress.Decision, error) {
	f.mu.Lock()
	f.tokens = append(f.tokens, token)
	f.mu.Unlock()
	if f.panics {
		panic("authorizer exploded")
	}
	return f.decision, f.err
}

func (f *fakeAuthorizer) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tokens)
}

func uid(s string) types.UID { return types.UID(s) }

// allowedUID is the TrainJob uid the fake authorizers' allows name.
const allowedUID = types.UID("uid-llm")

// post sends body to path with the bearer token and returns the status code.
func post(t testing.TB, h http.Handler, path, token, body string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}
