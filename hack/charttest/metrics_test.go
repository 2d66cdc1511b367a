package charttest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestMetricsEndpoint: metrics.secureServing and metrics.auth.enabled reach the
// controller's configuration, the port names, the ServiceMonitor and RBAC
// together.
func TestMetricsEndpoint(t *testing.T) {
	for name, want := range map[string]struct {
		values       string
		secure, auth bool
		port, scheme string
	}{
		"defaults":           {values: ``, secure: true, auth: true, port: "https-metrics", scheme: "https"},
		"no-metrics-auth":    {values: `, auth: {enabled: false}`, secure: true, port: "https-metrics", scheme: "https"},
		"plain-http-metrics": {values: `, secureServing: false, auth: {enabled: false}`, port: "http-metrics", scheme: "http"},
	} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, "metrics: {serviceMonitor: {enabled: true}"+want.values+"}", withMonitoring())
			cfg := decodeConfig(t, configFile(t, r, fullname+"-config")).Metrics
			if cfg.SecureServing == nil || *cfg.SecureServing != want.secure || cfg.Auth.Enabled == nil || *cfg.Auth.Enabled != want.auth {
				t.Errorf("config metrics = %+v, want secureServing %t, auth.enabled %t", cfg, want.secure, want.auth)
			}

			c := into[appsv1.Deployment](t, r.get(t, "Deployment", fullname)).Spec.Template.Spec.Containers[0]
			if port := findPort(c.Ports, want.port); port != 8080 {
				t.Errorf("container port %s = %d, want 8080 (ports %+v)", want.port, port, c.Ports)
			}
			svc := into[corev1.Service](t, r.get(t, "Service", fullname+"-metrics"))
			if p := svc.Spec.Ports[0]; p.Name != want.port || p.TargetPort != intstr.FromString(want.port) {
				t.Errorf("metrics Service port %+v, want name and targetPort %s", p, want.port)
			}

			ep := r.get(t, "ServiceMonitor", fullname).Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
			if ep["port"] != want.port || ep["scheme"] != want.scheme {
				t.Errorf("ServiceMonitor endpoint port %v scheme %v, want %s %s", ep["port"], ep["scheme"], want.port, want.scheme)
			}
			tlsConfig, hasTLS := ep["tlsConfig"].(map[string]any)
			if want.secure != hasTLS || (hasTLS && tlsConfig["insecureSkipVerify"] != true) {
				t.Errorf("ServiceMonitor tlsConfig = %v, want insecureSkipVerify with HTTPS only", ep["tlsConfig"])
			}
			if _, deprecated := ep["bearerTokenFile"]; deprecated {
				t.Error("ServiceMonitor uses bearerTokenFile, which Prometheus Operator deprecates for authorization")
			}
			wantAuthz := map[string]any{"type": "Bearer", "credentials": map[string]any{"name": fullname + "-metrics-scraper-token", "key": "token"}}
			if authz, has := ep["authorization"]; has != want.auth || (want.auth && !cmp.Equal(authz, wantAuthz)) {
				t.Errorf("ServiceMonitor authorization = %v, want %v exactly with auth", authz, wantAuthz)
			}
			scraper := r.find("Secret", fullname+"-metrics-scraper-token")
			if (scraper != nil) != want.auth {
				t.Fatalf("scraper token Secret rendered: %t, want %t", scraper != nil, want.auth)
			}
			if scraper != nil {
				secret := into[corev1.Secret](t, scraper)
				if secret.Type != corev1.SecretTypeServiceAccountToken || secret.Annotations[corev1.ServiceAccountNameKey] != fullname+"-metrics-scraper" {
					t.Errorf("scraper Secret type %q annotations %v, want a service-account token of %s-metrics-scraper", secret.Type, secret.Annotations, fullname)
				}
				r.get(t, "ServiceAccount", fullname+"-metrics-scraper")
				binding := into[rbacv1.ClusterRoleBinding](t, r.get(t, "ClusterRoleBinding", fullname+"-metrics-scraper"))
				if binding.RoleRef.Name != fullname+"-metrics-reader" || len(binding.Subjects) != 1 || binding.Subjects[0].Name != fullname+"-metrics-scraper" {
					t.Errorf("scraper binding %+v, want %s-metrics-scraper bound to %s-metrics-reader alone", binding, fullname, fullname)
				}
			}

			var rules []rbacv1.PolicyRule
			for _, o := range r.ofKind("ClusterRole") {
				if o.GetName() != fullname+"-metrics-reader" {
					rules = append(rules, into[rbacv1.ClusterRole](t, o).Rules...)
				}
			}
			has := func(group, resource string) bool {
				for _, g := range grants(t, rules) {
					if g.group == group && g.resource == resource && g.verb == "create" {
						return true
					}
				}
				return false
			}
			// SubjectAccessReviews: for the filter, and for the OptimizationJob webhook
			// (on in all three).
			if !has("authorization.k8s.io", "subjectaccessreviews") {
				t.Error("create subjectaccessreviews not granted")
			}
			// TokenReviews: for the filter, and for the progress server (on in all three).
			if !has("authentication.k8s.io", "tokenreviews") {
				t.Error("create tokenreviews not granted")
			}

			reader := r.find("ClusterRole", fullname+"-metrics-reader")
			if (reader != nil) != want.auth {
				t.Fatalf("metrics-reader ClusterRole rendered: %t, want %t", reader != nil, want.auth)
			}
			if reader != nil {
				got := into[rbacv1.ClusterRole](t, reader).Rules
				if diff := cmp.Diff([]rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, got); diff != "" {
					t.Errorf("metrics-reader rules (-want +got):\n%s", diff)
				}
			}
		})
	}

	t.Run("auth without TLS fails", func(t *testing.T) {
		_, err := render(t, `metrics: {secureServing: false}`)
		errContains(t, err, "metrics.auth.enabled needs metrics.secureServing", "plain HTTP")
	})
	t.Run("tlsConfig with the webhook CA", func(t *testing.T) {
		r := mustRender(t, `metrics: {serviceMonitor: {enabled: true, tlsConfig: {serverName: trainyard-webhook.trainyard-system.svc, ca: {secret: {name: trainyard-webhook-certs, key: ca.crt}}}}}`, withMonitoring())
		ep := r.get(t, "ServiceMonitor", fullname).Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
		tlsConfig := ep["tlsConfig"].(map[string]any)
		if tlsConfig["serverName"] != "trainyard-webhook.trainyard-system.svc" || tlsConfig["ca"] == nil || tlsConfig["insecureSkipVerify"] != nil {
			t.Errorf("tlsConfig = %v, want the values'", tlsConfig)
		}
	})
	t.Run("authorization from the user's Secret", func(t *testing.T) {
		r := mustRender(t, `metrics: {serviceMonitor: {enabled: true, authorization: {credentials: {name: prometheus-token, key: jwt}}}}`, withMonitoring())
		ep := r.get(t, "ServiceMonitor", fullname).Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
		want := map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "prometheus-token", "key": "jwt"}}
		if diff := cmp.Diff(want, ep["authorization"]); diff != "" {
			t.Errorf("authorization (-want +got):\n%s", diff)
		}
		if r.find("Secret", fullname+"-metrics-scraper-token") != nil || r.find("ServiceAccount", fullname+"-metrics-scraper") != nil {
			t.Error("the chart's scraper identity rendered although the values name a Secret")
		}
	})
	t.Run("no reader role without RBAC", func(t *testing.T) {
		if r := mustRender(t, `rbac: {create: false}`); r.find("ClusterRole", fullname+"-metrics-reader") != nil {
			t.Error("metrics-reader rendered with rbac.create false")
		}
	})
}
