package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trainyard/trainyard/pkg/kubeclient"
)

// apiServer is a fake API server: tokens maps a token to its user ("" unknown),
// allowed lists the "user verb path" triples the authorizer allows, and failing
// makes both reviews fail.
type apiServer struct {
	tokens       map[string]string
	allowed      map[string]bool
	failing      atomic.Bool
	tokenReviews atomic.Int32
	sars         atomic.Int32
	lastSAR      atomic.Pointer[authorizationv1.SubjectAccessReview]
}

func (s *apiServer) filter(clock *clocktesting.FakeClock) *Filter { return s.filterWith(clock, nil) }

// filterWith is filter with the client changed by wrap (if not nil).
func (s *apiServer) filterWith(clock *clocktesting.FakeClock, wrap func(kubeclient.Interface) kubeclient.Interface) *Filter {
	kube := fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.tokenReviews.Add(1)
		if s.failing.Load() {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if user, ok := s.tokens[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
				Username: user, UID: "uid-" + user, Groups: []string{"system:authenticated"},
				Extra: map[string]authenticationv1.ExtraValue{"k": {"v"}},
			}}
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "token not found"}
		}
		return true, tr, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.sars.Add(1)
		if s.failing.Load() {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		s.lastSAR.Store(sar)
		na := sar.Spec.NonResourceAttributes
		if na != nil && s.allowed[sar.Spec.User+" "+na.Verb+" "+na.Path] {
			sar.Status.Allowed = true
		} else {
			sar.Status.Reason = "no RBAC policy matched"
		}
		return true, sar, nil
	})
	if wrap == nil {
		return New(kube, klog.Background(), clock)
	}
	return New(wrap(kube), klog.Background(), clock)
}

func get(t *testing.T, h http.Handler, path, authorization string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })

func TestFilterCodes(t *testing.T) {
	s := &apiServer{
		tokens:  map[string]string{"prom": "system:serviceaccount:monitoring:prometheus", "nobody": "system:serviceaccount:default:nobody"},
		allowed: map[string]bool{"system:serviceaccount:monitoring:prometheus get /metrics": true},
	}
	h := s.filter(clocktesting.NewFakeClock(time.Now())).Wrap(ok)
	for _, tc := range []struct {
		name, path, auth string
		code             int
		bodyHas          string
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized, "bearer token is required"},
		{"another scheme", "/metrics", "Basic dXNlcjpwYXNz", http.StatusUnauthorized, "bearer token is required"},
		{"empty bearer", "/metrics", "Bearer ", http.StatusUnauthorized, "bearer token is required"},
		{"invalid token", "/metrics", "Bearer forged", http.StatusUnauthorized, "token not found"},
		{"authenticated, not authorized", "/metrics", "Bearer nobody", http.StatusForbidden, `"system:serviceaccount:default:nobody" may not get /metrics`},
		{"authorized", "/metrics", "Bearer prom", http.StatusOK, "metrics"},
		{"scheme is case-insensitive", "/metrics", "bearer prom", http.StatusOK, "metrics"},
		{"authorized for /metrics only", "/debug/pprof/heap", "Bearer prom", http.StatusForbidden, "may not get /debug/pprof/heap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, h, tc.path, tc.auth)
			if code != tc.code || !strings.Contains(body, tc.bodyHas) {
				t.Errorf("GET %s with %q = %d %q, want %d containing %q", tc.path, tc.auth, code, body, tc.code, tc.bodyHas)
			}
		})
	}
	sar := s.lastSAR.Load()
	if sar == nil {
		t.Fatal("no SubjectAccessReview")
	}
	if got := sar.Spec; got.User != "system:serviceaccount:monitoring:prometheus" || got.UID != "uid-system:serviceaccount:monitoring:prometheus" ||
		len(got.Groups) != 1 || got.Groups[0] != "system:authenticated" || got.Extra["k"][0] != "v" || got.ResourceAttributes != nil {
		t.Errorf("SubjectAccessReview spec %+v does not carry the TokenReview's user", got)
	}
}

func TestFilterCaches(t *testing.T) {
	s := &apiServer{
		tokens:  map[string]string{"prom": "prom", "nobody": "nobody"},
		allowed: map[string]bool{"prom get /metrics": true},
	}
	clock := clocktesting.NewFakeClock(time.Now())
	h := s.filter(clock).Wrap(ok)
	reviews := func() (int32, int32) { return s.tokenReviews.Load(), s.sars.Load() }
	expect := func(step string, path, auth string, code int, wantTR, wantSAR int32) {
		t.Helper()
		if got, _ := get(t, h, path, auth); got != code {
			t.Errorf("%s: code %d, want %d", step, got, code)
		}
		if tr, sar := reviews(); tr != wantTR || sar != wantSAR {
			t.Errorf("%s: %d TokenReviews and %d SubjectAccessReviews so far, want %d and %d", step, tr, sar, wantTR, wantSAR)
		}
	}
	expect("first allowed request", "/metrics", "Bearer prom", 200, 1, 1)
	expect("allowed again: cached", "/metrics", "Bearer prom", 200, 1, 1)
	expect("another path: its own decision", "/debug/pprof/", "Bearer prom", 403, 2, 2)
	expect("denied again: cached", "/debug/pprof/", "Bearer prom", 403, 2, 2)
	expect("invalid token", "/metrics", "Bearer forged", 401, 3, 2)
	expect("invalid token again: cached", "/metrics", "Bearer forged", 401, 3, 2)
	expect("no token: never reviewed", "/metrics", "", 401, 3, 2)

	// A binding created now: the denial expires after DenyTTL, the allowance stays.
	s.allowed["prom get /debug/pprof/"] = true
	clock.Step(DenyTTL + time.Second)
	expect("allowance within AllowTTL", "/metrics", "Bearer prom", 200, 3, 2)
	expect("denial expired", "/debug/pprof/", "Bearer prom", 200, 4, 3)

	// A binding removed: the allowance expires after AllowTTL.
	delete(s.allowed, "prom get /metrics")
	clock.Step(AllowTTL - DenyTTL)
	expect("allowance expired", "/metrics", "Bearer prom", 403, 5, 4)
}

func TestFilterAPIErrorsAreNotCached(t *testing.T) {
	s := &apiServer{tokens: map[string]string{"prom": "prom"}, allowed: map[string]bool{"prom get /metrics": true}}
	h := s.filter(clocktesting.NewFakeClock(time.Now())).Wrap(ok)
	s.failing.Store(true)
	for i := 0; i < 2; i++ {
		if code, body := get(t, h, "/metrics", "Bearer prom"); code != http.StatusInternalServerError || !strings.Contains(body, "TokenReview") {
			t.Errorf("request %d during an API outage = %d %q, want 500 naming the TokenReview", i, code, body)
		}
	}
	if n := s.tokenReviews.Load(); n != 2 {
		t.Errorf("%d TokenReviews during the outage, want 2 (errors are not cached)", n)
	}
	s.failing.Store(false)
	if code, _ := get(t, h, "/metrics", "Bearer prom"); code != http.StatusOK {
		t.Errorf("after the outage = %d, want 200", code)
	}
}
