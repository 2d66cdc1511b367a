package trainjob

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// TestMetricsAreAuthenticated: with the default metrics settings (HTTPS, TokenReview +
// SubjectAccessReview) the controller serves /metrics with its shared serving
// certificate (it chains to the webhook CA bundle the API server trusts) and only to
// a token allowed to get /metrics: none is a 401, a service account without RBAC a
// 403, the same one bound to a metrics-reader ClusterRole a 200 with trainyard_
// series. /debug/pprof (--profiling) is behind the same filter: the reader's binding
// does not open it, a binding for /debug/pprof/* does.
func TestMetricsAreAuthenticated(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	kube := e.c.Client()
	ctrl := startController(t, e.c, "--metrics-secure=true", "--metrics-auth=true", "--profiling")

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(webhookCABundle(t, e)) {
		t.Fatal("the webhook CA bundle does not parse")
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
	}}
	get := func(path, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "https://"+ctrl.metricsAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	expect := func(step, path, token string, want int) string {
		t.Helper()
		code, body := get(path, token)
		if code != want {
			t.Errorf("%s: GET %s = %d, want %d: %.300s", step, path, code, want, body)
		}
		return body
	}

	// Plain HTTP is not served at all.
	if resp, err := http.Get("http://" + ctrl.metricsAddr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP GET /metrics = %d, want 400 (the server speaks TLS only)", resp.StatusCode)
		}
	}

	expect("no token", "/metrics", "", http.StatusUnauthorized)
	expect("no token on pprof", "/debug/pprof/", "", http.StatusUnauthorized)
	expect("a forged token", "/metrics", "not-a-token", http.StatusUnauthorized)

	sa, err := kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minting a token for %s/%s: %v", e.ns, sa.Name, err)
	}
	token := tr.Status.Token
	expect("a service account without RBAC", "/metrics", token, http.StatusForbidden)
	expect("a service account without RBAC, pprof", "/debug/pprof/", token, http.StatusForbidden)

	// The chart's <fullname>-metrics-reader, bound to the scraper.
	bind := func(name string, urls ...string) {
		t.Helper()
		name = e.ns + "-" + name
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: urls, Verbs: []string{"get"}}}}
		if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: e.ns}}}
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	bind("metrics-reader", "/metrics")
	// The 403 is cached for up to 10 s.
	start := time.Now()
	var body string
	cluster.Eventually(t, 30*time.Second, "/metrics allowed after the binding", func(ctx context.Context) (bool, string) {
		code, b := get("/metrics", token)
		body = b
		return code == http.StatusOK, fmt.Sprintf("%d %.200s", code, b)
	})
	t.Logf("/metrics allowed %s after the binding", time.Since(start).Round(100*time.Millisecond))
	if !strings.Contains(body, "\ntrainyard_build_info{") {
		t.Errorf("the authorized scrape has no trainyard_ series:\n%.2000s", body)
	}
	expect("the reader on pprof", "/debug/pprof/", token, http.StatusForbidden)

	bind("pprof-reader", "/debug/pprof", "/debug/pprof/*")
	cluster.Eventually(t, 30*time.Second, "/debug/pprof/ allowed after its binding", func(ctx context.Context) (bool, string) {
		code, b := get("/debug/pprof/", token)
		return code == http.StatusOK && strings.Contains(b, "goroutine"), fmt.Sprintf("%d %.200s", code, b)
	})
	expect("a profile", "/debug/pprof/heap?debug=1", token, http.StatusOK)
}
