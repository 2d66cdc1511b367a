package charttest

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Value combinations the acceptance criteria name; each must lint and render.
var combinations = map[string]string{
	"defaults": ``,
	"monitoring": `
metrics:
  serviceMonitor: {enabled: true, labels: {release: kube-prometheus-stack}}
  prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack}}
`,
	"dashboard": `
metrics:
  dashboard: {enabled: true, namespace: monitoring, annotations: {grafana_folder: Kubeflow}}
`,
	"ha": `
replicas: 2
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway}
`,
	"single-no-leader-election": `
replicas: 1
leaderElection: {enabled: false}
`,
	"cert-manager": `
webhook: {certificates: {mode: CertManager}}
`,
	"cert-manager-issuer": `
webhook: {certificates: {mode: CertManager, secretName: ty-serving, certManager: {issuerRef: {kind: ClusterIssuer, name: internal-ca, group: cert-manager.io}}}}
`,
	"provided": `
webhook: {certificates: {mode: Provided, secretName: my-webhook-tls, caBundle: ` + testCABundle + `}}
`,
	"no-webhook": `
webhook: {enabled: false}
`,
	"no-status-server": `
statusServer: {enabled: false}
`,
	"no-metrics-auth": `
metrics: {auth: {enabled: false}}
`,
	"no-webhook, no-metrics-auth": `
webhook: {enabled: false}
metrics: {auth: {enabled: false}}
`,
	"watch-namespaces": `
watchNamespaces: [team-a, team-b]
`,
	"plain-http-metrics": `
metrics: {secureServing: false, auth: {enabled: false}}
`,
	"network-policy": `
networkPolicy:
  enabled: true
  webhook: {from: [{ipBlock: {cidr: 10.0.0.0/24}}]}
  progress: {podSelector: {matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]}}
`,
	"everything": `
nameOverride: ty
image: {repository: registry.example/ml/trainyard, tag: v9.9.9, digest: "sha256:` + strings.Repeat("ab", 32) + `", pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
commonLabels: {team: ml-platform}
replicas: 3
leaderElection: {leaseName: ty-lease, namespace: kube-system, leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 4s}
config:
  clientConnection: {qps: 300, burst: 500}
  stages:
    resolveRuntime: {workers: 2}
    mergePatches: {workers: 3}
    mlPolicy: {workers: 5}
    gang: {workers: 6}
    draClaims: {workers: 7}
    status: {workers: 16}
  rateLimit: {baseDelay: 10ms, maxDelay: 2m, qps: 20, burst: 200, refusalThreshold: 3, refusalDelay: 20m}
  featureGates: {SomeFeature: true}
statusServer: {port: 11443, writePeriod: 30s, qps: 100, burst: 200, namespaceQPS: 5, namespaceBurst: 8, maxConnections: 500, maxKeepAliveConnections: 400, maxReportsInFlight: 50, maxPendingReportBytes: 2097152}
logging: {verbosity: 4, format: text}
serviceAccount: {name: ty-controller, annotations: {example.com/role: x}}
podAnnotations: {example.com/a: b}
podLabels: {example.com/l: m}
priorityClassName: system-cluster-critical
terminationGracePeriodSeconds: 60
shutdownDelay: 12s
revisionHistoryLimit: 3
strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
resources: {requests: {cpu: 500m, memory: 1Gi}, limits: {cpu: 2, memory: 4Gi}}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: CriticalAddonsOnly, operator: Exists}]
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app.kubernetes.io/name: ty}}
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {custom: selector}}}
extraArgs: ["--kube-api-qps=400"]
extraEnv: [{name: GOMAXPROCS, value: "2"}]
podDisruptionBudget: {maxUnavailable: 1}
webhook:
  port: 10250
  failurePolicy: Ignore
  timeoutSeconds: 5
  namespaceSelector: {matchLabels: {trainyard.dev/admission: enabled}}
  certificates: {mode: Provided, secretName: ty-webhook-tls, caBundle: ` + testCABundle + `}
metrics:
  service: {annotations: {a: b}, labels: {c: d}}
  serviceMonitor: {enabled: true, namespace: monitoring, interval: 15s, scrapeTimeout: 10s, metricRelabelings: [{action: drop, regex: go_gc_.*, sourceLabels: [__name__]}]}
  prometheusRule:
    enabled: true
    selector: 'job="trainyard",cluster="prod"'
    additionalAlertLabels: {team: ml-platform}
    jobSetCreationSLO: {enabled: true, objective: 0.995, latencySeconds: 2.5, pageSeverity: page, ticketSeverity: ticket}
  dashboard: {enabled: true}
networkPolicy:
  enabled: true
  webhook: {from: [{ipBlock: {cidr: 10.0.0.0/24, except: [10.0.0.7/32]}}]}
  progress:
    namespaceSelector: {matchLabels: {team: ml}}
    podSelector: {matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]}
    from: [{ipBlock: {cidr: "fd00::/64"}}]
  metrics: {from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}, podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}}]}
  egress: [{to: [{ipBlock: {cidr: 192.0.2.10/32}}], ports: [{port: 6443, protocol: TCP}]}]
`,
}

func TestLint(t *testing.T) {
	for name, values := range combinations {
		t.Run(name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(values))
			if err != nil {
				t.Fatal(err)
			}
			linter := lint.All(chartDir, vals, namespace, false)
			for _, m := range linter.Messages {
				// INFO is advice such as "icon is recommended".
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

func TestLintRejectsTypo(t *testing.T) {
	linter := lint.All(chartDir, map[string]any{"replicaCount": 2}, namespace, false)
	for _, m := range linter.Messages {
		if m.Severity == support.ErrorSev && strings.Contains(m.Err.Error(), "replicaCount") {
			return
		}
	}
	t.Errorf("helm lint accepted replicaCount; messages: %v", linter.Messages)
}

func TestCombinationsRender(t *testing.T) {
	for name, values := range combinations {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, values, withMonitoring(), withCertManager())
			// Every object decodes strictly into its type: no misspelt field.
			for _, o := range r.objects {
				switch o.GetKind() {
				case "Deployment":
					into[appsv1.Deployment](t, o)
				case "ServiceAccount":
					into[corev1.ServiceAccount](t, o)
				case "ConfigMap":
					into[corev1.ConfigMap](t, o)
				case "Service":
					into[corev1.Service](t, o)
				case "PodDisruptionBudget":
					into[policyv1.PodDisruptionBudget](t, o)
				case "NetworkPolicy":
					into[networkingv1.NetworkPolicy](t, o)
				case "ClusterRole":
					into[rbacv1.ClusterRole](t, o)
				case "ClusterRoleBinding":
					into[rbacv1.ClusterRoleBinding](t, o)
				case "Role":
					into[rbacv1.Role](t, o)
				case "RoleBinding":
					into[rbacv1.RoleBinding](t, o)
				case "Secret":
					into[corev1.Secret](t, o)
				case "MutatingWebhookConfiguration":
					into[admissionregistrationv1.MutatingWebhookConfiguration](t, o)
				case "ValidatingWebhookConfiguration":
					into[admissionregistrationv1.ValidatingWebhookConfiguration](t, o)
				case "ValidatingAdmissionPolicy":
					into[admissionregistrationv1.ValidatingAdmissionPolicy](t, o)
				case "ValidatingAdmissionPolicyBinding":
					into[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, o)
				case "ServiceMonitor", "PrometheusRule", "Issuer", "Certificate":
					// No Go types here; checked in their own tests.
				default:
					t.Errorf("unexpected kind %s", o.GetKind())
				}
				for k := range o.GetLabels() {
					if len(o.GetLabels()[k]) > 63 {
						t.Errorf("%s/%s: label %s longer than 63 characters", o.GetKind(), o.GetName(), k)
					}
				}
				if len(o.GetName()) > 63 && o.GetKind() != "ClusterRole" && o.GetKind() != "ClusterRoleBinding" {
					t.Errorf("%s/%s: name longer than 63 characters", o.GetKind(), o.GetName())
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	r := mustRender(t, ``)
	want := []string{
		"ClusterRole/trainyard", "ClusterRole/trainyard-metrics-reader", "ClusterRoleBinding/trainyard", "ConfigMap/trainyard-config",
		"Deployment/trainyard", "MutatingWebhookConfiguration/trainyard-defaulter", "PodDisruptionBudget/trainyard",
		"Role/trainyard-leader-election", "Role/trainyard-secret-name-key", "Role/trainyard-webhook-certs",
		"RoleBinding/trainyard-leader-election", "RoleBinding/trainyard-secret-name-key", "RoleBinding/trainyard-webhook-certs",
		"Secret/trainyard-secret-name-key", "Secret/trainyard-webhook-certs", "Service/trainyard-metrics", "Service/trainyard-webhook", "ServiceAccount/trainyard",
		"ValidatingAdmissionPolicy/trainyard-system-namespaces", "ValidatingAdmissionPolicyBinding/trainyard-system-namespaces",
		"ValidatingWebhookConfiguration/trainyard-validator",
	}
	if diff := cmp.Diff(want, r.ids()); diff != "" {
		t.Fatalf("default objects (-want +got):\n%s", diff)
	}
	for _, o := range r.objects {
		clusterScoped := strings.HasPrefix(o.GetKind(), "Cluster") || strings.HasSuffix(o.GetKind(), "WebhookConfiguration") ||
			strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy")
		if ns := o.GetNamespace(); ns != namespace && !clusterScoped {
			t.Errorf("%s/%s in namespace %q, want %q", o.GetKind(), o.GetName(), ns, namespace)
		}
	}

	d := into[appsv1.Deployment](t, r.get(t, "Deployment", fullname))
	// Two replicas: the webhooks fail closed, so one pod restarting would
	// block every TrainJob write.
	if got := *d.Spec.Replicas; got != 2 {
		t.Errorf("replicas = %d, want 2", got)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != "ghcr.io/trainyard/trainyard:"+loadChart(t).Metadata.AppVersion {
		t.Errorf("image %q does not default to the appVersion tag", c.Image)
	}
	wantArgs := []string{"--config=/etc/trainyard/config.yaml", "--leader-elect=true", "--log-format=json", "--v=2"}
	if diff := cmp.Diff(wantArgs, c.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	// Probes.
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port != intstr.FromString("healthz") {
			t.Errorf("probe %s: got %+v", name, p)
		}
	}
	if port := findPort(c.Ports, "healthz"); port != 8081 {
		t.Errorf("healthz port = %d, want 8081", port)
	}
	if port := findPort(c.Ports, "https-metrics"); port != 8080 {
		t.Errorf("https-metrics port = %d, want 8080", port)
	}
	// Restricted pod security.
	psc, sc := pod.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || sc == nil:
		t.Fatal("security contexts missing")
	case psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot:
		t.Error("runAsNonRoot not set")
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("seccomp RuntimeDefault not set")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem not set")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation not false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Error("capabilities not dropped")
	}
	// POD_NAMESPACE from the downward API (the Lease's default namespace).
	if len(c.Env) != 1 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom == nil ||
		c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("env = %+v, want POD_NAMESPACE from metadata.namespace", c.Env)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("memory request and limit must be set by default")
	}
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Error("the pod must mount its token explicitly (the ServiceAccount does not)")
	}
	sa := into[corev1.ServiceAccount](t, r.get(t, "ServiceAccount", fullname))
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the ServiceAccount should not automount tokens into other pods")
	}
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("pod uses ServiceAccount %q, chart creates %q", pod.ServiceAccountName, sa.Name)
	}
	if d.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("pod template lacks the config checksum")
	}
	// Optional fields stay unset.
	if pod.PriorityClassName != "" || pod.NodeSelector != nil || pod.Affinity != nil || pod.Tolerations != nil ||
		pod.TopologySpreadConstraints != nil || pod.ImagePullSecrets != nil || d.Spec.Strategy.Type != "" {
		t.Errorf("optional pod fields rendered by default: %+v", pod)
	}

	// The metrics Service exposes https-metrics 8080 and selects exactly the controller pods.
	svc := into[corev1.Service](t, r.get(t, "Service", fullname+"-metrics"))
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "https-metrics" || svc.Spec.Ports[0].Port != 8080 ||
		svc.Spec.Ports[0].TargetPort != intstr.FromString("https-metrics") {
		t.Errorf("metrics Service ports = %+v", svc.Spec.Ports)
	}
	if diff := cmp.Diff(d.Spec.Selector.MatchLabels, svc.Spec.Selector); diff != "" {
		t.Errorf("Service selector differs from the Deployment's (-deployment +service):\n%s", diff)
	}
}

func findPort(ports []corev1.ContainerPort, name string) int32 {
	for _, p := range ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func TestHighAvailability(t *testing.T) {
	r := mustRender(t, combinations["ha"])
	d := into[appsv1.Deployment](t, r.get(t, "Deployment", fullname))
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d", *d.Spec.Replicas)
	}
	if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--leader-elect=true") {
		t.Errorf("args %v lack --leader-elect=true", d.Spec.Template.Spec.Containers[0].Args)
	}
	pdb := into[policyv1.PodDisruptionBudget](t, r.get(t, "PodDisruptionBudget", fullname))
	if pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(1) || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PDB spec = %+v, want minAvailable 1", pdb.Spec)
	}
	if diff := cmp.Diff(d.Spec.Selector, pdb.Spec.Selector); diff != "" {
		t.Errorf("PDB selector differs from the Deployment's:\n%s", diff)
	}
	// A topology spread constraint without selector gets the pods' selector.
	tsc := d.Spec.Template.Spec.TopologySpreadConstraints
	if len(tsc) != 1 || tsc[0].LabelSelector == nil || !cmp.Equal(tsc[0].LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("topologySpreadConstraints = %+v, want the pod selector filled in", tsc)
	}
	r.get(t, "Role", fullname+"-leader-election")

	t.Run("maxUnavailable replaces minAvailable", func(t *testing.T) {
		r := mustRender(t, "replicas: 2\npodDisruptionBudget: {maxUnavailable: 50%}")
		pdb := into[policyv1.PodDisruptionBudget](t, r.get(t, "PodDisruptionBudget", fullname))
		if pdb.Spec.MinAvailable != nil || pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromString("50%") {
			t.Errorf("PDB spec = %+v, want maxUnavailable 50%%", pdb.Spec)
		}
	})
	t.Run("no PDB for one replica", func(t *testing.T) {
		if r := mustRender(t, "replicas: 1"); len(r.ofKind("PodDisruptionBudget")) != 0 {
			t.Error("a PDB on a single replica would block node drains")
		}
	})
	t.Run("PDB can be turned off", func(t *testing.T) {
		if r := mustRender(t, "replicas: 2\npodDisruptionBudget: {enabled: false}"); len(r.ofKind("PodDisruptionBudget")) != 0 {
			t.Error("PDB rendered although disabled")
		}
	})
	t.Run("several replicas require leader election", func(t *testing.T) {
		_, err := render(t, "replicas: 2\nleaderElection: {enabled: false}")
		errContains(t, err, "leaderElection.enabled is false")
	})
	t.Run("one replica without leader election", func(t *testing.T) {
		r := mustRender(t, combinations["single-no-leader-election"])
		d := into[appsv1.Deployment](t, r.get(t, "Deployment", fullname))
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--leader-elect=false") {
			t.Errorf("args %v lack --leader-elect=false", d.Spec.Template.Spec.Containers[0].Args)
		}
		if r.find("Role", fullname+"-leader-election") != nil || r.find("RoleBinding", fullname+"-leader-election") != nil {
			t.Error("Lease RBAC rendered without leader election")
		}
	})
}

func TestImage(t *testing.T) {
	for values, want := range map[string]string{
		`image: {tag: v1.2.3}`: "ghcr.io/trainyard/trainyard:v1.2.3",
		`image: {repository: r.example/t, digest: "sha256:` + strings.Repeat("0", 64) + `"}`: "r.example/t:" +
			loadChart(t).Metadata.AppVersion + "@sha256:" + strings.Repeat("0", 64),
	} {
		d := into[appsv1.Deployment](t, mustRender(t, values).get(t, "Deployment", fullname))
		if got := d.Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("%s: image = %q, want %q", values, got, want)
		}
	}
}

func TestEverything(t *testing.T) {
	r := mustRender(t, combinations["everything"], withMonitoring())
	d := into[appsv1.Deployment](t, r.get(t, "Deployment", "trainyard-ty"))
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if pod.PriorityClassName != "system-cluster-critical" || pod.NodeSelector["kubernetes.io/os"] != "linux" ||
		len(pod.Tolerations) != 1 || pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil ||
		*pod.TerminationGracePeriodSeconds != 60 || len(pod.ImagePullSecrets) != 1 {
		t.Errorf("pod scheduling fields not rendered: %+v", pod)
	}
	if got := pod.TopologySpreadConstraints[0].LabelSelector.MatchLabels; !cmp.Equal(got, map[string]string{"custom": "selector"}) {
		t.Errorf("an explicit labelSelector was replaced: %v", got)
	}
	if !slices.Contains(c.Args, "--kube-api-qps=400") || !slices.Contains(c.Args, "--log-format=text") || !slices.Contains(c.Args, "--v=4") {
		t.Errorf("args = %v", c.Args)
	}
	if len(c.Env) != 2 || c.Env[1].Name != "GOMAXPROCS" {
		t.Errorf("extraEnv not appended: %+v", c.Env)
	}
	if d.Labels["team"] != "ml-platform" || d.Spec.Template.Labels["team"] != "ml-platform" {
		t.Error("commonLabels missing")
	}
	if _, ok := d.Spec.Selector.MatchLabels["team"]; ok {
		t.Error("commonLabels leaked into the immutable selector")
	}
	if d.Spec.Template.Labels["example.com/l"] != "m" || d.Spec.Template.Annotations["example.com/a"] != "b" {
		t.Error("podLabels/podAnnotations missing")
	}
	if pod.ServiceAccountName != "ty-controller" {
		t.Errorf("serviceAccountName = %q", pod.ServiceAccountName)
	}
	role := r.get(t, "Role", "trainyard-ty-leader-election")
	if role.GetNamespace() != "kube-system" {
		t.Errorf("Lease Role in %q, want the Lease namespace kube-system", role.GetNamespace())
	}
}

func TestConfigChecksumFollowsConfig(t *testing.T) {
	sum := func(values string) string {
		d := into[appsv1.Deployment](t, mustRender(t, values).get(t, "Deployment", fullname))
		return d.Spec.Template.Annotations["checksum/config"]
	}
	base := sum(``)
	if base == sum(`config: {stages: {status: {workers: 9}}}`) {
		t.Error("changing the configuration does not change the pod template: pods would keep the old file")
	}
	if base != sum(`podLabels: {a: b}`) {
		t.Error("the checksum changes with values unrelated to the configuration")
	}
}

func TestNoCRDsInTemplates(t *testing.T) {
	// The CRDs are installed from crds/ by Helm itself (see README "CRDs");
	// rendering them as templates too would make the first install fail on
	// objects that already exist.
	r := mustRender(t, combinations["everything"], withMonitoring())
	if got := r.ofKind("CustomResourceDefinition"); len(got) != 0 {
		t.Fatalf("templates render %d CRDs", len(got))
	}
	crds := loadChart(t).CRDObjects()
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
	}
	want := []string{
		"crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
		"crds/trainer.kubeflow.org_optimizationjobs.yaml",
		"crds/trainer.kubeflow.org_trainingruntimes.yaml",
		"crds/trainer.kubeflow.org_trainjobs.yaml",
	}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("CRDs in crds/ (-want +got):\n%s", diff)
	}
}

// TestCRDsNamedEverywhere: the places that name the chart's CRDs (Artifact
// Hub's annotation in Chart.yaml, values.yaml's header, the README's "CRDs"
// section) name every CRD in crds/, and the annotation no other.
func TestCRDsNamedEverywhere(t *testing.T) {
	ch := loadChart(t)
	type kindVersion struct{ Kind, Version string }
	var shipped []kindVersion
	for _, c := range ch.CRDObjects() {
		var crd struct {
			Spec struct {
				Names    struct{ Kind string }
				Versions []struct {
					Name   string
					Served bool
				}
			}
		}
		if err := yaml.Unmarshal(c.File.Data, &crd); err != nil || crd.Spec.Names.Kind == "" {
			t.Fatalf("%s: not a CRD (%v)", c.Filename, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Served {
				shipped = append(shipped, kindVersion{crd.Spec.Names.Kind, v.Name})
			}
		}
	}
	var annotated []kindVersion
	if err := yaml.Unmarshal([]byte(ch.Metadata.Annotations["artifacthub.io/crds"]), &annotated); err != nil {
		t.Fatalf("Chart.yaml annotation artifacthub.io/crds: %v", err)
	}
	less := func(a, b kindVersion) int { return strings.Compare(a.Kind+"/"+a.Version, b.Kind+"/"+b.Version) }
	slices.SortFunc(shipped, less)
	slices.SortFunc(annotated, less)
	if diff := cmp.Diff(shipped, annotated); diff != "" {
		t.Errorf("Chart.yaml's artifacthub.io/crds against crds/ (-crds/ +annotation):\n%s", diff)
	}
	values := string(mustReadFile(t, chartDir+"/values.yaml"))
	header := values[:strings.Index(values, "\n\n# -- ")]
	readme := string(mustReadFile(t, chartDir+"/README.md"))
	section := readme[strings.Index(readme, "## CRDs\n\n")+len("## CRDs\n\n"):]
	section = section[:strings.Index(section, "\n\n")] // its first paragraph
	for _, kv := range shipped {
		for name, text := range map[string]string{"values.yaml's header": header, "README.md's CRDs section": section} {
			if !regexp.MustCompile(`\b` + kv.Kind + `\b`).MatchString(text) {
				t.Errorf("%s does not name the CRD %s:\n%s", name, kv.Kind, text)
			}
		}
	}
}

func TestServiceMonitor(t *testing.T) {
	r := mustRender(t, combinations["monitoring"], withMonitoring())
	sm := r.get(t, "ServiceMonitor", fullname)
	svc := into[corev1.Service](t, r.get(t, "Service", fullname+"-metrics"))
	spec := sm.Object["spec"].(map[string]any)
	selector := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
	for k, v := range selector {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%v; the metrics Service has %q", k, v, svc.Labels[k])
		}
	}
	// The selector must not also match the controller pods' labels set alone.
	if selector["app.kubernetes.io/component"] != "metrics" {
		t.Errorf("ServiceMonitor selector %v does not pin the metrics component", selector)
	}
	ep := spec["endpoints"].([]any)[0].(map[string]any)
	if ep["port"] != svc.Spec.Ports[0].Name || ep["path"] != "/metrics" {
		t.Errorf("endpoint %v does not scrape the Service's port /metrics", ep)
	}
	if got := spec["namespaceSelector"].(map[string]any)["matchNames"].([]any); len(got) != 1 || got[0] != namespace {
		t.Errorf("namespaceSelector = %v", got)
	}
	if sm.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Error("serviceMonitor.labels not applied")
	}

	t.Run("fails without the CRD", func(t *testing.T) {
		_, err := render(t, combinations["monitoring"])
		errContains(t, err, "--api-versions monitoring.coreos.com/v1/ServiceMonitor")
	})
	t.Run("absent by default", func(t *testing.T) {
		if r := mustRender(t, ``, withMonitoring()); len(r.ofKind("ServiceMonitor"))+len(r.ofKind("PrometheusRule")) != 0 {
			t.Error("monitoring objects rendered by default")
		}
	})
}

func TestDashboardConfigMap(t *testing.T) {
	r := mustRender(t, combinations["dashboard"])
	cm := into[corev1.ConfigMap](t, r.get(t, "ConfigMap", fullname+"-dashboard-trainyard"))
	if cm.Namespace != "monitoring" {
		t.Errorf("dashboard ConfigMap in %q, want monitoring", cm.Namespace)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "Kubeflow" {
		t.Errorf("labels %v / annotations %v", cm.Labels, cm.Annotations)
	}
	want := strings.TrimRight(string(mustReadFile(t, chartDir+"/dashboards/trainyard.json")), "\n")
	if cm.Data["trainyard.json"] != want {
		t.Error("ConfigMap data differs from dashboards/trainyard.json")
	}
	var d struct {
		UID string `json:"uid"`
	}
	if err := json.Unmarshal([]byte(cm.Data["trainyard.json"]), &d); err != nil || d.UID != "trainyard-stages" {
		t.Errorf("dashboard uid = %q (%v), want trainyard-stages", d.UID, err)
	}
	if size := cm.Size(); size > 512<<10 {
		t.Errorf("dashboard ConfigMap is %d bytes; ConfigMaps are limited to 1 MiB and sidecars get slow long before", size)
	}
	if r := mustRender(t, ``); len(r.ofKind("ConfigMap")) != 1 {
		t.Error("dashboard ConfigMap rendered by default")
	}
}

func TestNotes(t *testing.T) {
	notes := mustRender(t, ``).files["templates/NOTES.txt"]
	for _, want := range []string{
		"Lease trainyard-system/trainyard-controller",
		"port-forward service/trainyard-metrics 8080:https-metrics",
		"clusterrole=trainyard-metrics-reader",
		"create token",
		"helm show crds",
		"upstream Kubeflow Trainer controller",
		"Admission:        trainyard-validator, trainyard-defaulter via service/trainyard-webhook (failurePolicy Fail, certificates SelfManaged)",
		"kubectl get validatingwebhookconfiguration trainyard-validator",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "WARNING") {
		t.Errorf("NOTES.txt warns with the defaults:\n%s", notes)
	}
	for _, tc := range []struct {
		values string
		warn   bool
	}{
		{"replicas: 1", true},
		{"replicas: 0", true},
		{"replicas: 1\nwebhook: {failurePolicy: Ignore}", false},
		{"replicas: 1\nwebhook: {enabled: false}", false},
		{"replicas: 3", false},
	} {
		notes := mustRender(t, tc.values).files["templates/NOTES.txt"]
		if got := strings.Contains(notes, "WARNING: replicas is") && strings.Contains(notes, "fail closed"); got != tc.warn {
			t.Errorf("%q: NOTES.txt warns about a single admission replica: %v, want %v\n%s", tc.values, got, tc.warn, notes)
		}
	}
	notes = mustRender(t, "metrics: {prometheusRule: {enabled: true}}", withMonitoring()).files["templates/NOTES.txt"]
	if !strings.Contains(notes, "WARNING: the PrometheusRule selects") {
		t.Errorf("NOTES.txt does not warn about alerts without a ServiceMonitor:\n%s", notes)
	}
}

func TestServiceAccount(t *testing.T) {
	_, err := render(t, "serviceAccount: {create: false}")
	errContains(t, err, "serviceAccount.name is required")
	r := mustRender(t, "serviceAccount: {create: false, name: existing}")
	if len(r.ofKind("ServiceAccount")) != 0 {
		t.Error("ServiceAccount rendered with create: false")
	}
	crb := into[rbacv1.ClusterRoleBinding](t, r.get(t, "ClusterRoleBinding", fullname))
	if crb.Subjects[0].Name != "existing" || crb.Subjects[0].Namespace != namespace {
		t.Errorf("binding subjects = %+v", crb.Subjects)
	}
}

func TestFullnameIsStable(t *testing.T) {
	for release, want := range map[string]string{
		"trainyard":             "trainyard",
		"prod-trainyard":        "prod-trainyard",
		"prod":                  "prod-trainyard",
		strings.Repeat("x", 60): strings.Repeat("x", 55),
	} {
		r := mustRender(t, ``, withRelease(release))
		if len(r.ofKind("Deployment")) != 1 || r.ofKind("Deployment")[0].GetName() != want {
			t.Errorf("release %q: Deployment %v, want %q", release, r.ids(), want)
		}
	}
}

// The ConfigMap's config.yaml, as the controller reads it.
func configFile(t *testing.T, r *rendered, name string) []byte {
	t.Helper()
	cm := into[corev1.ConfigMap](t, r.get(t, "ConfigMap", name))
	data, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no config.yaml", name)
	}
	return []byte(data)
}
