package kubeclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// The fake clientset the tests use, and any kubernetes.Interface, is an Interface.
var (
	_ Interface = kubernetes.Interface(nil)
	_ Interface = (*fake.Clientset)(nil)
)

// Every group's client and discovery send through the one transport of the
// configuration, its wrappers included (the leader's write fence is one,
// docs/design/architecture.md), with client-go's default user agent.
func TestClientsShareTheConfiguredTransport(t *testing.T) {
	var (
		mu     sync.Mutex
		agents []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		agents = append(agents, r.UserAgent())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/version":
			_, _ = w.Write([]byte(`{"major":"1","minor":"36","gitVersion":"v1.36.0"}`))
		case strings.HasSuffix(r.URL.Path, "/namespaces/ns"):
			_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns"}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404}`))
		}
	}))
	defer srv.Close()
	var wrapped int
	c := &rest.Config{Host: srv.URL, QPS: 100, Burst: 10}
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			wrapped++
			mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	cs, err := NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "ns", metav1.GetOptions{}); err != nil {
		t.Fatalf("core get: %v", err)
	}
	if _, err := cs.SchedulingV1().PriorityClasses().Get(ctx, "high", metav1.GetOptions{}); err == nil {
		t.Fatal("scheduling get: want the server's NotFound")
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatalf("discovery: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if wrapped != 3 || len(agents) != 3 {
		t.Fatalf("requests through the wrapper: %d, at the server: %d; want 3 and 3", wrapped, len(agents))
	}
	for _, a := range agents {
		if a != rest.DefaultKubernetesUserAgent() {
			t.Errorf("user agent %q, want client-go's default %q", a, rest.DefaultKubernetesUserAgent())
		}
	}
}

// One token bucket limits every group's client, as kubernetes.NewForConfig's does.
func TestClientsShareOneRateLimiter(t *testing.T) {
	cs, err := NewForConfig(&rest.Config{Host: "https://example.invalid", QPS: 5, Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	limiter := cs.CoreV1().RESTClient().GetRateLimiter()
	if limiter == nil {
		t.Fatal("core client has no rate limiter")
	}
	for name, rc := range map[string]rest.Interface{
		"admissionregistration": cs.AdmissionregistrationV1().RESTClient(),
		"authentication":        cs.AuthenticationV1().RESTClient(),
		"authorization":         cs.AuthorizationV1().RESTClient(),
		"coordination":          cs.CoordinationV1().RESTClient(),
		"events":                cs.EventsV1().RESTClient(),
		"resource":              cs.ResourceV1().RESTClient(),
		"scheduling":            cs.SchedulingV1().RESTClient(),
	} {
		if rc.GetRateLimiter() != limiter {
			t.Errorf("%s client has a rate limiter of its own", name)
		}
	}
}

func TestNewForConfigRefusesQPSWithoutBurst(t *testing.T) {
	if _, err := NewForConfig(&rest.Config{Host: "https://example.invalid", QPS: 5}); err == nil {
		t.Fatal("want an error for QPS without burst")
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
