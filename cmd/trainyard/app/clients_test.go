package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/trainyard/trainyard/pkg/util/authlimit"
)

// TestAuthClientHasItsOwnLimits: an endpoint's authentication client has its own
// client-side rate limits, not the shared configuration's, and its limiter refuses a
// source's TokenReviews beyond the burst without sending them.
func TestAuthClientHasItsOwnLimits(t *testing.T) {
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		sent.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","status":{}}`))
	}))
	defer srv.Close()
	shared := &rest.Config{Host: srv.URL, QPS: 500, Burst: 1000}
	kube, err := authClient(shared, "progress", progressAuthQPS, progressAuthBurst, authlimit.Limits{SourceQPS: 1, SourceBurst: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if qps := kube.AuthenticationV1().RESTClient().GetRateLimiter().QPS(); qps != progressAuthQPS {
		t.Errorf("the authentication client's QPS is %v, want its own, %v", qps, progressAuthQPS)
	}
	if shared.QPS != 500 {
		t.Errorf("authClient changed the shared configuration's QPS to %v", shared.QPS)
	}
	ctx := authlimit.WithSource(context.Background(), "10.0.0.1")
	refused := 0
	for range 10 {
		_, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{})
		if apierrors.IsTooManyRequests(err) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if sent.Load() != 3 || refused != 7 {
		t.Errorf("10 TokenReviews from one source: %d sent, %d refused; want 3 and 7", sent.Load(), refused)
	}
}
