package progress_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// TestHandlerNamespaceShare: one namespace's trainers, with valid tokens, send
// DefaultMaxInFlight reports whose bodies never end: they hold their namespace's share
// of the slots (a quarter) and the rest are refused 429 at once, while another
// namespace's reports are all accepted. Before the share the flood held every slot and
// the other namespace's reports were refused 429.
func TestHandlerNamespaceShare(t *testing.T) {
	auth := &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Allowed, TrainJobUID: allowedUID}}
	h := progress.NewHandler(progress.HandlerConfig{
		Authorizer: auth,
		Coalescer:  progress.NewCoalescer(func(cache.ObjectName) {}, metrics.New(nil)),
	})
	var held sync.WaitGroup
	var refused atomic.Int64
	var bodies []*io.PipeWriter
	t.Cleanup(func() {
		for _, w := range bodies {
			_ = w.CloseWithError(io.ErrUnexpectedEOF)
		}
		held.Wait()
	})
	for i := range progress.DefaultMaxInFlight {
		r, w := io.Pipe()
		bodies = append(bodies, w)
		req := httptest.NewRequest(http.MethodPost, wire.Path("flood", fmt.Sprintf("tj-%d", i)), r)
		req.Header.Set("Authorization", "Bearer valid")
		held.Add(1)
		go func() {
			defer held.Done()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == http.StatusTooManyRequests {
				refused.Add(1)
			}
		}()
	}
	share := progress.DefaultMaxInFlight / 4
	// A report holding a slot was authorized (its header is whole) and waits for its body.
	eventually(t, "every report of the flood to hold a slot or be refused", func() bool {
		return int(refused.Load())+auth.calls() == progress.DefaultMaxInFlight
	})
	for i := range 2 * share {
		flooding := auth.calls() - i // the flood's reviews, less the quiet reports'
		if code := post(t, h, wire.Path("quiet", fmt.Sprintf("tj-%d", i)), "valid", fullReport); code != http.StatusOK {
			t.Fatalf("report %d of another namespace beside %d slow ones: %d, want 200", i, flooding, code)
		}
	}
	if n := refused.Load(); n != int64(progress.DefaultMaxInFlight-share) {
		t.Errorf("%d of the flood's reports refused, want all but its share's %d", n, share)
	}
}
