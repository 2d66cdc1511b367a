package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/trainyard/trainyard/pkg/util/authlimit"
	"github.com/trainyard/trainyard/pkg/util/fairlimit"
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

// TestClientsServeWaitingNamespacesInTurn (issue 43): each client of newClients has a
// rate limiter of its own, of the configuration's QPS, that serves waiting requests
// namespace by namespace. 32 workers keep the JobSet client at its QPS with one
// namespace's requests, as the status stage's workers do during a burst; another
// namespace's request then waits for about one token, where client-go's token bucket
// makes it wait behind every worker's (measured: all 32 of team-a's requests before it).
func TestClientsServeWaitingNamespacesInTurn(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string // the namespace of each request the server received
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /apis/jobset.x-k8s.io/v1alpha2/namespaces/<ns>/jobsets/<name>
		parts := strings.Split(r.URL.Path, "/")
		mu.Lock()
		order = append(order, parts[5])
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"x"}}`))
	}))
	defer srv.Close()
	const qps = 50
	cs, err := newClients(&rest.Config{Host: srv.URL, QPS: qps, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	limiters := map[string]any{
		"kube":     cs.kube.CoreV1().RESTClient().GetRateLimiter(),
		"trainers": cs.trainers.TrainerV1alpha1().RESTClient().GetRateLimiter(),
		"jobsets":  cs.jobsets.JobsetV1alpha2().RESTClient().GetRateLimiter(),
	}
	seen := map[any]string{}
	for name, l := range limiters {
		fl, ok := l.(*fairlimit.Limiter)
		if !ok {
			t.Fatalf("the %s client's rate limiter is a %T, want a *fairlimit.Limiter", name, l)
		}
		if fl.QPS() != qps {
			t.Errorf("the %s client's QPS is %v, want the configuration's %v", name, fl.QPS(), qps)
		}
		if other, dup := seen[l]; dup {
			t.Errorf("the %s and %s clients share one rate limiter, want one each", name, other)
		}
		seen[l] = name
	}

	ctx, cancel := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	defer workers.Wait()
	defer cancel()
	busy := fairlimit.WithFlow(ctx, "team-a")
	for range 32 {
		workers.Go(func() {
			for ctx.Err() == nil {
				_, _ = cs.jobsets.JobsetV1alpha2().JobSets("team-a").Get(busy, "x", metav1.GetOptions{})
			}
		})
	}
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(order)
	}
	for received() < 10 { // 200 ms at 50 QPS: every worker waits for a token by now
		time.Sleep(10 * time.Millisecond)
	}
	before := received()
	if _, err := cs.jobsets.JobsetV1alpha2().JobSets("team-b").Get(fairlimit.WithFlow(context.Background(), "team-b"), "x", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ahead := -1
	for i, ns := range order[before:] {
		if ns == "team-b" {
			ahead = i
			break
		}
	}
	mu.Unlock()
	// One token may be on its way to team-a's worker in turn when team-b's request
	// arrives, and team-a's turn may come first: at most 2.
	if ahead < 0 || ahead > 2 {
		t.Errorf("team-a's requests served between team-b's request and its arrival: %d, want at most 2 (32 of team-a's were waiting)", ahead)
	}
}
