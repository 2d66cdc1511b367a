package progress_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// discard is a ResponseWriter that keeps only the status code.
type discard struct {
	header http.Header
	code   int
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }

// BenchmarkHandler is the hot path: a pod's report with its token's review cached,
// through the real authorizer, metrics and Coalescer (go test -bench Handler -benchmem).
func BenchmarkHandler(b *testing.B) {
	c := newCluster(b)
	c.tokens["good"] = boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "llm"))
	h := progress.NewHandler(progress.HandlerConfig{
		Authorizer: c.authorizer,
		Coalescer:  progress.NewCoalescer(func(cache.ObjectName) {}, metrics.New(nil)),
		Observer:   metrics.New(nil),
		Clock:      c.clock,
	})
	body := []byte(fullReport)
	req := httptest.NewRequest(http.MethodPost, wire.Path(ns, "llm"), nil)
	req.Header.Set("Authorization", "Bearer good")
	w := &discard{header: http.Header{}}
	serve := func() {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		clear(w.header)
		h.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			b.Fatalf("code %d", w.code)
		}
	}
	serve() // the review is cached from here on
	b.ReportAllocs()
	for b.Loop() {
		serve()
	}
	if reviews, _ := c.counts(); reviews != 1 {
		b.Errorf("%d TokenReviews, want 1", reviews)
	}
}

// BenchmarkCoalesce records reports of 1000 TrainJobs from parallel goroutines, each
// replacing a pending one, as a flood of reports does.
func BenchmarkCoalesce(b *testing.B) {
	co := progress.NewCoalescer(func(cache.ObjectName) {}, metrics.New(nil))
	keys := make([]cache.ObjectName, 1000)
	for i := range keys {
		keys[i] = key(ns, fmt.Sprintf("tj-%d", i))
	}
	report := status(50, t0)
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			co.Record(keys[i%uint64(len(keys))], "uid", report)
		}
	})
}

// BenchmarkStageSyncDeferred is the Sync of a key whose report waits for the period to
// end: what every report within the period costs the progress stage.
func BenchmarkStageSyncDeferred(b *testing.B) {
	llm := key("team-a", "llm")
	f := newStageFixture(b, progress.WriteLimits{Period: time.Hour}, trainJob("team-a", "llm", nil))
	f.record(llm, status(1, t0))
	if res, err := f.sync(llm); err != nil || res != engine.WaitForEvent() {
		b.Fatalf("first Sync = %+v, %v", res, err)
	}
	f.record(llm, status(2, t0.Add(time.Second)))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res, _ := f.stage.Sync(ctx, llm); res.Code != engine.CodeRequeueAfter {
			b.Fatalf("Sync = %+v, want requeue_after", res)
		}
	}
}
