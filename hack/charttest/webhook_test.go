package charttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/util/cert"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
)

// testCABundle is a caBundle value for Provided mode: base64 of a CA's PEM.
var testCABundle = func() string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "charttest-ca"}, key)
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: ca.Raw}))
}()

// wantWebhook is one webhook as upstream registers it (docs/compatibility.md, Admission).
type wantWebhook struct {
	name, path, resource string
	scope                admissionregistrationv1.ScopeType
	runtime              bool // carries upstream's webhook-validation objectSelector
}

// Upstream's webhooks and paths (docs/compatibility.md, Admission), and Trainyard's
// OptimizationJob validator (docs/compatibility.md#optimizationjob-validation).
var (
	wantMutating = []wantWebhook{
		{"defaulter.trainjob.trainer.kubeflow.org", "/mutate-trainer-kubeflow-org-v1alpha1-trainjob", "trainjobs", admissionregistrationv1.NamespacedScope, false},
	}
	wantValidating = []wantWebhook{
		{"validator.trainjob.trainer.kubeflow.org", "/validate-trainer-kubeflow-org-v1alpha1-trainjob", "trainjobs", admissionregistrationv1.NamespacedScope, false},
		{"validator.trainingruntime.trainer.kubeflow.org", "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime", "trainingruntimes", admissionregistrationv1.NamespacedScope, true},
		{"validator.clustertrainingruntime.trainer.kubeflow.org", "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime", "clustertrainingruntimes", admissionregistrationv1.ClusterScope, true},
		// Trainyard's own, named by upstream's convention.
		{"validator.optimizationjob.trainer.kubeflow.org", "/validate-trainer-kubeflow-org-v1alpha1-optimizationjob", "optimizationjobs", admissionregistrationv1.NamespacedScope, false},
	}
)

// handlerPaths reads the Path* constants of pkg/admission/handler.go, the
// paths the controller serves. (Parsed rather than imported: importing
// pkg/admission would pull the controller's whole dependency tree into this
// module.)
func handlerPaths(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), repoRoot+"/pkg/admission/handler.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || len(spec.Names) != 1 || !strings.HasPrefix(spec.Names[0].Name, "Path") || len(spec.Values) != 1 {
			return true
		}
		if lit, ok := spec.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			p, _ := strconv.Unquote(lit.Value)
			paths = append(paths, p)
		}
		return true
	})
	slices.Sort(paths)
	return paths
}

// wireConst reads the string constant name of pkg/progress/wire/wire.go, the
// progress server's contract with trainer pods (parsed, as handlerPaths).
func wireConst(t *testing.T, name string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), repoRoot+"/pkg/progress/wire/wire.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	value, found := "", false
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, id := range spec.Names {
			if id.Name != name || i >= len(spec.Values) {
				continue
			}
			if lit, ok := spec.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				value, _ = strconv.Unquote(lit.Value)
				found = true
			}
		}
		return true
	})
	if !found {
		t.Fatalf("no string constant %s in pkg/progress/wire/wire.go", name)
	}
	return value
}

// servicePort returns the port called name of svc, or nil.
func servicePort(svc *corev1.Service, name string) *corev1.ServicePort {
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == name {
			return &svc.Spec.Ports[i]
		}
	}
	return nil
}

// webhookCommon is what the chart renders the same way for every webhook of
// both configurations.
type webhookCommon struct {
	name          string
	clientConfig  admissionregistrationv1.WebhookClientConfig
	rules         []admissionregistrationv1.RuleWithOperations
	failurePolicy *admissionregistrationv1.FailurePolicyType
	matchPolicy   *admissionregistrationv1.MatchPolicyType
	sideEffects   *admissionregistrationv1.SideEffectClass
	timeout       *int32
	versions      []string
	nsSelector    *metav1.LabelSelector
	objSelector   *metav1.LabelSelector
}

// webhooks returns the mutating and validating configurations' webhooks in
// one shape.
func webhooks(t *testing.T, r *rendered) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, []webhookCommon) {
	t.Helper()
	muts := r.ofKind("MutatingWebhookConfiguration")
	vals := r.ofKind("ValidatingWebhookConfiguration")
	if len(muts) != 1 || len(vals) != 1 {
		t.Fatalf("want one Mutating and one ValidatingWebhookConfiguration, have %v", r.ids())
	}
	m := into[admissionregistrationv1.MutatingWebhookConfiguration](t, muts[0])
	v := into[admissionregistrationv1.ValidatingWebhookConfiguration](t, vals[0])
	var out []webhookCommon
	for _, w := range m.Webhooks {
		if w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy {
			t.Errorf("%s: reinvocationPolicy %v, want Never", w.Name, w.ReinvocationPolicy)
		}
		out = append(out, webhookCommon{w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.NamespaceSelector, w.ObjectSelector})
	}
	for _, w := range v.Webhooks {
		out = append(out, webhookCommon{w.Name, w.ClientConfig, w.Rules, w.FailurePolicy, w.MatchPolicy, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.NamespaceSelector, w.ObjectSelector})
	}
	return m, v, out
}

func TestWebhookConfigurations(t *testing.T) {
	r := mustRender(t, ``)
	m, v, all := webhooks(t, r)
	cfg := decodeConfig(t, configFile(t, r, fullname+"-config")).Webhook

	// The names the controller keeps current are the names rendered.
	if m.Name != cfg.MutatingWebhookConfigurationName || v.Name != cfg.ValidatingWebhookConfigurationName {
		t.Errorf("rendered %s and %s; the controller's configuration names %s and %s",
			m.Name, v.Name, cfg.MutatingWebhookConfigurationName, cfg.ValidatingWebhookConfigurationName)
	}
	// Which, for the release "trainyard", are the binary's defaults (what
	// `make run` registers).
	if m.Name != configv1alpha1.DefaultMutatingWebhookName || v.Name != configv1alpha1.DefaultValidatingWebhookName {
		t.Errorf("configuration names %s, %s differ from the binary's defaults", m.Name, v.Name)
	}

	var got []wantWebhook
	svc := into[corev1.Service](t, r.get(t, "Service", cfg.ServiceName))
	for _, w := range all {
		if len(w.rules) != 1 || len(w.rules[0].Resources) != 1 {
			t.Fatalf("%s: rules %+v, want one rule on one resource", w.name, w.rules)
		}
		rule := w.rules[0]
		got = append(got, wantWebhook{w.name, ptrOr(w.clientConfig.Service.Path, ""), rule.Resources[0], ptrOr(rule.Scope, ""), w.objSelector != nil})
		if !slices.Equal(rule.APIGroups, []string{"trainer.kubeflow.org"}) || !slices.Equal(rule.APIVersions, []string{"v1alpha1"}) ||
			!slices.Equal(rule.Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}) {
			t.Errorf("%s: rule %+v, want CREATE and UPDATE on trainer.kubeflow.org/v1alpha1", w.name, rule)
		}
		if ptrOr(w.failurePolicy, "") != admissionregistrationv1.Fail || ptrOr(w.matchPolicy, "") != admissionregistrationv1.Equivalent ||
			ptrOr(w.sideEffects, "") != admissionregistrationv1.SideEffectClassNone || ptrOr(w.timeout, 0) != 10 ||
			!slices.Equal(w.versions, []string{"v1"}) {
			t.Errorf("%s: failurePolicy %v, matchPolicy %v, sideEffects %v, timeoutSeconds %v, admissionReviewVersions %v; want Fail, Equivalent, None, 10, [v1]",
				w.name, ptrOr(w.failurePolicy, ""), ptrOr(w.matchPolicy, ""), ptrOr(w.sideEffects, ""), ptrOr(w.timeout, 0), w.versions)
		}
		// The admission Service, port 443, in the release namespace.
		s := w.clientConfig.Service
		if s == nil || s.Name != svc.Name || s.Namespace != namespace || ptrOr(s.Port, 0) != 443 || w.clientConfig.URL != nil {
			t.Errorf("%s: clientConfig %+v, want service %s/%s port 443", w.name, w.clientConfig, namespace, svc.Name)
		}
		// Self-managed: no caBundle in the manifest (the controller writes it).
		if w.clientConfig.CABundle != nil {
			t.Errorf("%s: caBundle rendered in SelfManaged mode; helm upgrade would reset the controller's", w.name)
		}
		// The runtime validators' objectSelector is upstream's opt-out.
		if w.objSelector != nil {
			want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "trainer.kubeflow.org/webhook-validation", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"disabled"}}}}
			if diff := cmp.Diff(want, w.objSelector); diff != "" {
				t.Errorf("%s: objectSelector (-want +got):\n%s", w.name, diff)
			}
		}
		// Namespaced webhooks never see kube-system; the cluster-scoped one has
		// no namespace to select on.
		if (ptrOr(rule.Scope, "") == admissionregistrationv1.NamespacedScope) != (w.nsSelector != nil) {
			t.Errorf("%s: scope %v with namespaceSelector %v", w.name, ptrOr(rule.Scope, ""), w.nsSelector)
		}
	}
	if diff := cmp.Diff(append(slices.Clone(wantMutating), wantValidating...), got, cmp.AllowUnexported(wantWebhook{})); diff != "" {
		t.Errorf("webhooks (-upstream +rendered):\n%s", diff)
	}
	// And the controller serves exactly those paths.
	var rendered []string
	for _, w := range got {
		rendered = append(rendered, w.path)
	}
	slices.Sort(rendered)
	if diff := cmp.Diff(handlerPaths(t), rendered); diff != "" {
		t.Errorf("paths (-pkg/admission serves +the chart registers):\n%s", diff)
	}

	// The Service: 443 → the container's "webhook" port, which is the port the
	// controller binds, on every controller pod.
	d := into[appsv1.Deployment](t, r.get(t, "Deployment", fullname))
	// (Its other port is the progress server's: statusserver_test.go.)
	if p := servicePort(svc, "https-webhook"); svc.Namespace != namespace || p == nil || p.Port != 443 ||
		p.TargetPort != intstr.FromString("webhook") || p.Protocol != corev1.ProtocolTCP {
		t.Errorf("webhook Service %s/%s ports %+v, want https-webhook 443 → webhook", svc.Namespace, svc.Name, svc.Spec.Ports)
	}
	if diff := cmp.Diff(d.Spec.Selector.MatchLabels, svc.Spec.Selector); diff != "" {
		t.Errorf("webhook Service selector differs from the Deployment's (-deployment +service):\n%s", diff)
	}
	if port := findPort(d.Spec.Template.Spec.Containers[0].Ports, "webhook"); port != 9443 || cfg.BindAddress != ":9443" {
		t.Errorf("container port webhook %d, controller binds %q; want 9443 and \":9443\"", port, cfg.BindAddress)
	}
	if svc.Labels["app.kubernetes.io/component"] != "webhook" {
		t.Errorf("webhook Service component label %q, want webhook (the metrics ServiceMonitor must not select it)", svc.Labels["app.kubernetes.io/component"])
	}

	t.Run("values", func(t *testing.T) {
		r := mustRender(t, combinations["everything"], withMonitoring())
		_, _, all := webhooks(t, r)
		for _, w := range all {
			if ptrOr(w.failurePolicy, "") != admissionregistrationv1.Ignore || ptrOr(w.timeout, 0) != 5 {
				t.Errorf("%s: failurePolicy %v timeoutSeconds %v, want Ignore and 5", w.name, ptrOr(w.failurePolicy, ""), ptrOr(w.timeout, 0))
			}
			if w.clientConfig.Service.Name != "trainyard-ty-webhook" {
				t.Errorf("%s: service %s", w.name, w.clientConfig.Service.Name)
			}
		}
		d := into[appsv1.Deployment](t, r.get(t, "Deployment", "trainyard-ty"))
		cfg := decodeConfig(t, configFile(t, r, "trainyard-ty-config")).Webhook
		if port := findPort(d.Spec.Template.Spec.Containers[0].Ports, "webhook"); port != 10250 || cfg.BindAddress != ":10250" {
			t.Errorf("container port %d, bindAddress %q; want 10250", port, cfg.BindAddress)
		}
		r.get(t, "Service", cfg.ServiceName)
	})
	t.Run("port taken", func(t *testing.T) {
		_, err := render(t, `webhook: {port: 8081}`)
		errContains(t, err, "webhook.port 8081 is taken")
	})
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// TestWebhookNeverReviewsKubeSystem evaluates each namespaced webhook's
// selector the way the API server does, for user selectors that try hard.
func TestWebhookNeverReviewsKubeSystem(t *testing.T) {
	ns := func(name string, extra map[string]string) labels.Set {
		l := labels.Set{"kubernetes.io/metadata.name": name}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	for _, tc := range []struct {
		values string
		// whether the release namespace and an ordinary namespace labelled
		// team: ml are reviewed
		release, teamML bool
	}{
		{``, true, true},
		{`webhook: {namespaceSelector: {matchLabels: {team: ml}}}`, false, true},
		{`webhook: {namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [kube-system, trainyard-system]}]}}`, true, false},
		{`webhook: {namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: Exists}]}}`, true, true},
		{`webhook: {namespaceSelector: {matchExpressions: [{key: team, operator: DoesNotExist}]}}`, true, false},
	} {
		t.Run(tc.values, func(t *testing.T) {
			_, _, all := webhooks(t, mustRender(t, tc.values))
			for _, w := range all {
				if w.nsSelector == nil {
					continue // cluster-scoped
				}
				sel, err := metav1.LabelSelectorAsSelector(w.nsSelector)
				if err != nil {
					t.Fatalf("%s: %v", w.name, err)
				}
				for _, l := range []labels.Set{ns("kube-system", nil), ns("kube-system", map[string]string{"team": "ml"})} {
					if sel.Matches(l) {
						t.Errorf("%s: namespaceSelector %q matches kube-system (%v)", w.name, sel, l)
					}
				}
				if got := sel.Matches(ns(namespace, nil)); got != tc.release {
					t.Errorf("%s: namespaceSelector %q matches the release namespace: %v, want %v", w.name, sel, got, tc.release)
				}
				if got := sel.Matches(ns("team-a", map[string]string{"team": "ml"})); got != tc.teamML {
					t.Errorf("%s: namespaceSelector %q matches namespace team-a (team: ml): %v, want %v", w.name, sel, got, tc.teamML)
				}
			}
		})
	}
}

// TestWebhookModes renders each certificate mode and checks what belongs to
// it: the certificate objects, the controller's configuration, the mount, the
// caBundle and its injection.
func TestWebhookModes(t *testing.T) {
	type want struct {
		objects    []string // webhook-related objects beyond the two configurations and the Service
		mode       string   // the controller's certificates.mode
		secret     string   // Secret the controller reads (SelfManaged) or that is mounted
		mounted    bool
		caBundle   bool   // rendered into the webhooks
		injectFrom string // cert-manager.io/inject-ca-from
	}
	for name, w := range map[string]want{
		"defaults": {
			objects: []string{"Role/trainyard-webhook-certs", "RoleBinding/trainyard-webhook-certs", "Secret/trainyard-webhook-certs"},
			mode:    configv1alpha1.CertificatesSelfManaged, secret: "trainyard-webhook-certs",
		},
		"cert-manager": {
			objects: []string{"Certificate/trainyard-webhook", "Certificate/trainyard-webhook-ca",
				"Issuer/trainyard-webhook-ca", "Issuer/trainyard-webhook-selfsigned"},
			mode: configv1alpha1.CertificatesProvided, secret: "trainyard-webhook-certs", mounted: true,
			injectFrom: namespace + "/trainyard-webhook",
		},
		"cert-manager-issuer": {
			objects: []string{"Certificate/trainyard-webhook"},
			mode:    configv1alpha1.CertificatesProvided, secret: "ty-serving", mounted: true,
			injectFrom: namespace + "/trainyard-webhook",
		},
		"provided": {
			mode: configv1alpha1.CertificatesProvided, secret: "my-webhook-tls", mounted: true, caBundle: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, combinations[name], withCertManager())
			var got []string
			for _, id := range r.ids() {
				kind := strings.Split(id, "/")[0]
				if id == "Secret/"+fullname+"-secret-name-key" { // not a certificate object, in every mode
					continue
				}
				if slices.Contains([]string{"Certificate", "Issuer", "Secret"}, kind) || strings.Contains(id, "webhook-certs") {
					got = append(got, id)
				}
			}
			if diff := cmp.Diff(w.objects, got); diff != "" {
				t.Errorf("certificate objects (-want +got):\n%s", diff)
			}
			m, v, all := webhooks(t, r)
			for _, o := range []metav1.ObjectMeta{m.ObjectMeta, v.ObjectMeta} {
				if got := o.Annotations["cert-manager.io/inject-ca-from"]; got != w.injectFrom {
					t.Errorf("%s: inject-ca-from %q, want %q", o.Name, got, w.injectFrom)
				}
			}
			for _, wh := range all {
				if got := wh.clientConfig.CABundle != nil; got != w.caBundle {
					t.Errorf("%s: caBundle rendered %v, want %v", wh.name, got, w.caBundle)
				} else if got && base64.StdEncoding.EncodeToString(wh.clientConfig.CABundle) != testCABundle {
					t.Errorf("%s: caBundle is not webhook.certificates.caBundle", wh.name)
				}
			}

			cfg := decodeConfig(t, configFile(t, r, fullname+"-config")).Webhook
			if cfg.Certificates.Mode != w.mode {
				t.Errorf("controller certificates.mode %q, want %q", cfg.Certificates.Mode, w.mode)
			}
			d := into[appsv1.Deployment](t, r.get(t, "Deployment", fullname))
			pod := d.Spec.Template.Spec
			var mountedSecret, mountedCA string
			for _, vol := range pod.Volumes {
				if vol.Secret != nil {
					mountedSecret = vol.Secret.SecretName
				}
				if vol.Projected == nil {
					continue
				}
				for _, src := range vol.Projected.Sources {
					if src.Secret != nil {
						mountedSecret = src.Secret.Name
						if got := keysToPaths(src.Secret.Items); !maps.Equal(got, map[string]string{"tls.crt": "tls.crt", "tls.key": "tls.key"}) {
							t.Errorf("projected Secret items %v, want tls.crt and tls.key only", got)
						}
					}
					if src.ConfigMap != nil {
						mountedCA = src.ConfigMap.Name
						if got := keysToPaths(src.ConfigMap.Items); !maps.Equal(got, map[string]string{"ca.crt": "ca.crt"}) {
							t.Errorf("projected ConfigMap items %v, want ca.crt", got)
						}
					}
				}
			}
			// Provided: caBundle is mounted as ca.crt beside the pair, the CA the progress
			// server publishes to trainer pods (issue 23: the Secret may have no ca.crt).
			if w.caBundle {
				cm := into[corev1.ConfigMap](t, r.get(t, "ConfigMap", fullname+"-webhook-ca-bundle"))
				want, _ := base64.StdEncoding.DecodeString(testCABundle)
				if mountedCA != cm.Name || cm.Data["ca.crt"] != string(want) {
					t.Errorf("ConfigMap %q mounted, holding ca.crt %q; want %s holding webhook.certificates.caBundle decoded", mountedCA, cm.Data["ca.crt"], cm.Name)
				}
			} else if mountedCA != "" {
				t.Errorf("ConfigMap %s mounted as ca.crt outside mode Provided", mountedCA)
			}
			var mountPath string
			for _, vm := range pod.Containers[0].VolumeMounts {
				if vm.Name == "webhook-certs" {
					mountPath = vm.MountPath
				}
			}
			switch {
			case w.mounted && (mountedSecret != w.secret || mountPath != cfg.Certificates.CertDir):
				t.Errorf("Secret %q mounted at %q; want %q at the controller's certDir %q", mountedSecret, mountPath, w.secret, cfg.Certificates.CertDir)
			case !w.mounted && (mountedSecret != "" || mountPath != ""):
				t.Errorf("Secret %q mounted at %q; the controller keeps self-managed certificates in memory", mountedSecret, mountPath)
			case !w.mounted && cfg.Certificates.SecretName != w.secret:
				t.Errorf("controller certificates.secretName %q, want %q", cfg.Certificates.SecretName, w.secret)
			}
			if name == "cert-manager" || name == "cert-manager-issuer" {
				c := r.get(t, "Certificate", "trainyard-webhook")
				spec := c.Object["spec"].(map[string]any)
				if spec["secretName"] != w.secret {
					t.Errorf("Certificate secretName %v, want the mounted %q", spec["secretName"], w.secret)
				}
				wantDNS := []any{"trainyard-webhook.trainyard-system.svc", "trainyard-webhook.trainyard-system.svc.cluster.local"}
				if diff := cmp.Diff(wantDNS, spec["dnsNames"]); diff != "" {
					t.Errorf("Certificate dnsNames (-want +got):\n%s", diff)
				}
				wantIssuer := map[string]any{"name": "trainyard-webhook-ca", "kind": "Issuer", "group": "cert-manager.io"}
				if name == "cert-manager-issuer" {
					wantIssuer = map[string]any{"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
				}
				if diff := cmp.Diff(wantIssuer, spec["issuerRef"]); diff != "" {
					t.Errorf("Certificate issuerRef (-want +got):\n%s", diff)
				}
			}
			if name == "cert-manager" {
				// The chart's own CA keeps its key when cert-manager renews it: a new key
				// would make every trainer pod (and API server) holding the previous CA
				// refuse the serving certificates the renewed CA signs.
				ca := r.get(t, "Certificate", "trainyard-webhook-ca").Object["spec"].(map[string]any)
				if ca["isCA"] != true || ca["privateKey"].(map[string]any)["rotationPolicy"] != "Never" {
					t.Errorf("CA Certificate spec %v, want isCA and privateKey.rotationPolicy Never", ca)
				}
			}
		})
	}

	t.Run("disabled", func(t *testing.T) {
		r := mustRender(t, combinations["no-webhook"])
		for _, id := range r.ids() {
			if strings.Contains(id, "ebhook") || (strings.HasPrefix(id, "Secret/") && id != "Secret/"+fullname+"-secret-name-key") {
				t.Errorf("%s rendered with webhook.enabled false", id)
			}
		}
		cfg := decodeConfig(t, configFile(t, r, fullname+"-config")).Webhook
		if cfg.BindAddress != "0" {
			t.Errorf("controller bindAddress %q, want \"0\" (no admission server)", cfg.BindAddress)
		}
		d := into[appsv1.Deployment](t, r.get(t, "Deployment", fullname))
		if findPort(d.Spec.Template.Spec.Containers[0].Ports, "webhook") != 0 || len(d.Spec.Template.Spec.Volumes) != 1 {
			t.Errorf("admission port or certificate volume rendered with webhook.enabled false: %+v", d.Spec.Template.Spec)
		}
	})
	t.Run("cert-manager needs its CRDs", func(t *testing.T) {
		_, err := render(t, combinations["cert-manager"])
		errContains(t, err, "--api-versions cert-manager.io/v1/Certificate")
	})
	t.Run("provided needs a Secret and a CA", func(t *testing.T) {
		_, err := render(t, `webhook: {certificates: {mode: Provided, caBundle: `+testCABundle+`}}`)
		errContains(t, err, "webhook.certificates.secretName is required")
		_, err = render(t, `webhook: {certificates: {mode: Provided, secretName: tls}}`)
		errContains(t, err, "webhook.certificates.caBundle is required")
	})
}

// TestWebhookAnnotations: webhook.annotations lands on both configurations, beside
// cert-manager's CA injection in CertManager mode, and may not replace it.
func TestWebhookAnnotations(t *testing.T) {
	for name, tc := range map[string]struct {
		values string
		want   map[string]string
	}{
		"defaults": {``, nil},
		"self-managed": {
			`webhook: {annotations: {policies.kyverno.io/scored: "false", argocd.argoproj.io/compare-options: IgnoreExtraneous}}`,
			map[string]string{"policies.kyverno.io/scored": "false", "argocd.argoproj.io/compare-options": "IgnoreExtraneous"},
		},
		"cert-manager": {
			`webhook: {annotations: {example.com/team: ml}, certificates: {mode: CertManager}}`,
			map[string]string{"example.com/team": "ml", "cert-manager.io/inject-ca-from": namespace + "/trainyard-webhook"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			m, v, _ := webhooks(t, mustRender(t, tc.values, withCertManager()))
			for _, o := range []metav1.ObjectMeta{m.ObjectMeta, v.ObjectMeta} {
				if diff := cmp.Diff(tc.want, o.Annotations); diff != "" {
					t.Errorf("%s annotations (-want +got):\n%s", o.Name, diff)
				}
			}
		})
	}
	t.Run("cert-manager's key is the chart's", func(t *testing.T) {
		_, err := render(t, `webhook: {annotations: {cert-manager.io/inject-ca-from: other/cert}, certificates: {mode: CertManager}}`, withCertManager())
		errContains(t, err, "webhook.annotations sets cert-manager.io/inject-ca-from", "remove it from webhook.annotations")
	})
	t.Run("values are strings", func(t *testing.T) {
		_, err := render(t, `webhook: {annotations: {example.com/replicas: 2}}`)
		errContains(t, err, "annotations")
	})
}

// TestSelfManagedSecret: the Secret the controller fills is created empty, by
// Helm, and nothing Helm does later can reset it.
func TestSelfManagedSecret(t *testing.T) {
	s := into[corev1.Secret](t, mustRender(t, ``).get(t, "Secret", "trainyard-webhook-certs"))
	if s.Namespace != namespace || s.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("Secret %s/%s annotations %v; want the release namespace and helm.sh/resource-policy: keep", s.Namespace, s.Name, s.Annotations)
	}
	// No data (a rendered "tls.crt: ''" would be reset by every upgrade) and no
	// type (the controller may re-create it as kubernetes.io/tls; type is
	// immutable and a rendered Opaque would then fail every upgrade).
	if s.Data != nil || s.StringData != nil || s.Type != "" {
		t.Errorf("Secret renders type %q, data %v, stringData %v; want none", s.Type, s.Data, s.StringData)
	}
}

// TestUpgradeKeepsControllerWrites replays `helm upgrade` (Helm 3's three-way
// strategic merge patch of the previous manifest, the new manifest and the live
// object, helm.sh/helm/v3/pkg/kube.createPatch) over the objects the controller
// writes into in SelfManaged mode: its caBundle and its certificates survive an
// upgrade that changes the same objects.
func TestUpgradeKeepsControllerWrites(t *testing.T) {
	before := mustRender(t, ``)
	after := mustRender(t, `webhook: {timeoutSeconds: 7, namespaceSelector: {matchLabels: {team: ml}}}`+"\ncommonLabels: {team: ml}")
	caBundle := []byte(testCABundle)

	upgrade := func(t *testing.T, kind, name string, live, typed any, controllerWrites func(map[string]any)) map[string]any {
		t.Helper()
		original, err := json.Marshal(before.get(t, kind, name).Object)
		if err != nil {
			t.Fatal(err)
		}
		modified, err := json.Marshal(after.get(t, kind, name).Object)
		if err != nil {
			t.Fatal(err)
		}
		cur := before.get(t, kind, name).DeepCopy().Object
		controllerWrites(cur)
		current, _ := json.Marshal(cur)
		meta, err := strategicpatch.NewPatchMetaFromStruct(typed)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := strategicpatch.CreateThreeWayMergePatch(original, modified, current, meta, true)
		if err != nil {
			t.Fatal(err)
		}
		result, err := strategicpatch.StrategicMergePatch(current, patch, typed)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(result, live); err != nil {
			t.Fatal(err)
		}
		return cur
	}
	injectCA := func(obj map[string]any) {
		for _, w := range obj["webhooks"].([]any) {
			w.(map[string]any)["clientConfig"].(map[string]any)["caBundle"] = string(caBundle)
		}
	}

	var v admissionregistrationv1.ValidatingWebhookConfiguration
	upgrade(t, "ValidatingWebhookConfiguration", "trainyard-validator", &v, &admissionregistrationv1.ValidatingWebhookConfiguration{}, injectCA)
	var m admissionregistrationv1.MutatingWebhookConfiguration
	upgrade(t, "MutatingWebhookConfiguration", "trainyard-defaulter", &m, &admissionregistrationv1.MutatingWebhookConfiguration{}, injectCA)
	type hook struct {
		cc      admissionregistrationv1.WebhookClientConfig
		timeout *int32
		ns      *metav1.LabelSelector
	}
	var hooks []hook
	for _, w := range v.Webhooks {
		hooks = append(hooks, hook{w.ClientConfig, w.TimeoutSeconds, w.NamespaceSelector})
	}
	for _, w := range m.Webhooks {
		hooks = append(hooks, hook{w.ClientConfig, w.TimeoutSeconds, w.NamespaceSelector})
	}
	if want := len(wantMutating) + len(wantValidating); len(hooks) != want {
		t.Fatalf("%d webhooks after the upgrade, want %d", len(hooks), want)
	}
	for _, h := range hooks {
		want, _ := base64.StdEncoding.DecodeString(testCABundle)
		if string(h.cc.CABundle) != string(want) {
			t.Errorf("upgrade reset the caBundle the controller wrote (%s)", ptrOr(h.cc.Service.Path, ""))
		}
		if ptrOr(h.timeout, 0) != 7 {
			t.Errorf("upgrade did not apply timeoutSeconds 7 (%s)", ptrOr(h.cc.Service.Path, ""))
		}
		if h.ns != nil && h.ns.MatchLabels["team"] != "ml" {
			t.Errorf("upgrade did not apply the namespaceSelector (%s): %+v", ptrOr(h.cc.Service.Path, ""), h.ns)
		}
	}
	if v.Labels["team"] != "ml" {
		t.Error("upgrade did not apply commonLabels")
	}

	var s corev1.Secret
	upgrade(t, "Secret", "trainyard-webhook-certs", &s, &corev1.Secret{}, func(obj map[string]any) {
		obj["type"] = string(corev1.SecretTypeTLS)
		obj["data"] = map[string]any{"tls.crt": testCABundle, "tls.key": testCABundle, "ca.crt": testCABundle, "ca.key": testCABundle}
	})
	if len(s.Data) != 4 || s.Type != corev1.SecretTypeTLS || s.Labels["team"] != "ml" {
		t.Errorf("after the upgrade the Secret has type %q, data keys %d, labels %v; want the controller's kubernetes.io/tls with 4 keys and the new labels", s.Type, len(s.Data), s.Labels)
	}
}

// keysToPaths maps the keys of projected items to their paths.
func keysToPaths(items []corev1.KeyToPath) map[string]string {
	out := map[string]string{}
	for _, it := range items {
		out[it.Key] = it.Path
	}
	return out
}
