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
			if token, _ := ep["bearerTokenFile"].(string); (token != "") != want.auth ||
				(want.auth && token != "/var/run/secrets/kubernetes.io/serviceaccount/token") {
				t.Errorf("ServiceMonitor bearerTokenFile = %q, want Prometheus' token exactly with auth", token)
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
	t.Run("no reader role without RBAC", func(t *testing.T) {
		if r := mustRender(t, `rbac: {create: false}`); r.find("ClusterRole", fullname+"-metrics-reader") != nil {
			t.Error("metrics-reader rendered with rbac.create false")
		}
	})
}
