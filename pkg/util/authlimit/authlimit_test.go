package authlimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

type countingObserver struct{ sent, source, concurrency atomic.Int64 }

func (o *countingObserver) ObserveTokenReviewAdmission(_, result string) {
	switch result {
	case ResultSent:
		o.sent.Add(1)
	case ResultSourceLimited:
		o.source.Add(1)
	case ResultConcurrencyLimited:
		o.concurrency.Add(1)
	}
}

func TestSourceBucket(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	obs := &countingObserver{}
	l := New("test", Limits{SourceQPS: 2, SourceBurst: 5}, obs, clk)
	ctx := WithSource(context.Background(), "10.0.0.1")
	for i := range 5 {
		release, err := l.Admit(ctx)
		if err != nil {
			t.Fatalf("review %d of the burst refused: %v", i, err)
		}
		release()
	}
	_, err := l.Admit(ctx)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("6th review at once: got %v, want a 429", err)
	}
	if s, ok := RetryAfter(err); !ok || s != 1 {
		t.Errorf("Retry-After = %d, %v; want 1 s (a token every 0.5 s, rounded up)", s, ok)
	}
	// Another source has its own bucket.
	if _, err := l.Admit(WithSource(context.Background(), "10.0.0.2")); err != nil {
		t.Errorf("another source refused: %v", err)
	}
	clk.Step(time.Second) // two tokens
	for i := range 2 {
		if _, err := l.Admit(ctx); err != nil {
			t.Errorf("refill review %d refused: %v", i, err)
		}
	}
	if _, err := l.Admit(ctx); err == nil {
		t.Error("a third review after 1 s at 2/s was admitted")
	}
	if got := [3]int64{obs.sent.Load(), obs.source.Load(), obs.concurrency.Load()}; got != [3]int64{8, 2, 0} {
		t.Errorf("observed sent, source_limited, concurrency_limited = %v, want [8 2 0]", got)
	}
}

func TestMaxSourcesBoundsTheMap(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	l := New("test", Limits{SourceQPS: 1, SourceBurst: 1, MaxSources: 100}, nil, clk)
	for i := range 1000 {
		if _, err := l.Admit(WithSource(context.Background(), fmt.Sprintf("10.0.%d.%d", i/256, i%256))); err != nil {
			t.Fatalf("source %d's first review refused: %v", i, err)
		}
	}
	if n := l.Sources(); n != 100 {
		t.Errorf("Sources() = %d after 1,000 sources, want MaxSources 100", n)
	}
}

func TestMaxInFlight(t *testing.T) {
	obs := &countingObserver{}
	l := New("test", Limits{MaxInFlight: 3}, obs, nil)
	var releases []func()
	for i := range 3 {
		release, err := l.Admit(WithSource(context.Background(), fmt.Sprint(i)))
		if err != nil {
			t.Fatalf("review %d refused: %v", i, err)
		}
		releases = append(releases, release)
	}
	_, err := l.Admit(context.Background())
	if s, ok := RetryAfter(err); !apierrors.IsTooManyRequests(err) || !ok || s != 1 {
		t.Fatalf("4th review in flight: got %v (Retry-After %d), want a 429 with Retry-After 1", err, s)
	}
	releases[0]()
	releases[0]() // a second call is a no-op
	if _, err := l.Admit(context.Background()); err != nil {
		t.Errorf("a review after one ended refused: %v", err)
	}
	if _, err := l.Admit(context.Background()); err == nil {
		t.Error("a double release freed two slots")
	}
	if got := obs.concurrency.Load(); got != 2 {
		t.Errorf("concurrency_limited = %d, want 2", got)
	}
}

// TestMaxInFlightPerShare: one share's reviews are refused beyond its bound while
// another share's are admitted, up to MaxInFlight.
func TestMaxInFlightPerShare(t *testing.T) {
	l := New("test", Limits{MaxInFlight: 3, MaxInFlightPerShare: 2}, nil, nil)
	admit := func(share string) error {
		_, err := l.Admit(WithShare(context.Background(), share))
		return err
	}
	for i, share := range []string{"flood", "flood"} {
		if err := admit(share); err != nil {
			t.Fatalf("review %d of the flood's share refused: %v", i, err)
		}
	}
	if err := admit("flood"); !apierrors.IsTooManyRequests(err) {
		t.Errorf("a 3rd review of the flood's share: %v, want a 429", err)
	}
	if err := admit("quiet"); err != nil {
		t.Errorf("a review of another share beside the flood refused: %v", err)
	}
	if err := admit("other"); !apierrors.IsTooManyRequests(err) {
		t.Errorf("a review beyond MaxInFlight: %v, want a 429", err)
	}
}

func TestClientLimitsTokenReviewsOnly(t *testing.T) {
	kube := fake.NewClientset()
	var reviews atomic.Int64
	kube.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		return true, &authenticationv1.TokenReview{}, nil
	})
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	limited := Client(kube, New("test", Limits{SourceQPS: 1, SourceBurst: 10}, nil, clk))
	ctx := WithSource(context.Background(), "10.0.0.9")
	refused := 0
	for range 1000 {
		_, err := limited.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{})
		if apierrors.IsTooManyRequests(err) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if reviews.Load() != 10 || refused != 990 {
		t.Errorf("1,000 reviews from one source: %d sent, %d refused; want the burst, 10, and 990", reviews.Load(), refused)
	}
	if _, err := limited.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("another request through the wrapped client: %v", err)
	}
}
