package charttest

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The controller container's ports, by what they serve. The Deployment names
// them; the NetworkPolicy must allow exactly the ones that are on.
const (
	portWebhook  = "webhook"
	portProgress = "status-server"
	portHealth   = "healthz"
	portMetrics  = "metrics" // https-metrics or http-metrics
)

// controllerPorts maps what each container port of the rendered Deployment
// serves to its number, and fails on a port the test does not know: a new
// port must get a rule (or a reason not to) in templates/networkpolicy.yaml.
func controllerPorts(t *testing.T, d *appsv1.Deployment) map[string]int32 {
	t.Helper()
	ports := map[string]int32{}
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		name := p.Name
		switch name {
		case "https-metrics", "http-metrics":
			name = portMetrics
		case portWebhook, portProgress, portHealth:
		default:
			t.Fatalf("the Deployment declares container port %q (%d), which TestNetworkPolicy does not know: allow it in templates/networkpolicy.yaml and here", p.Name, p.ContainerPort)
		}
		if p.Protocol != corev1.ProtocolTCP {
			t.Errorf("container port %s protocol %q, want TCP", p.Name, p.Protocol)
		}
		ports[name] = p.ContainerPort
	}
	return ports
}

// networkPolicyView is the rendered NetworkPolicy next to the rendered Deployment.
type networkPolicyView struct {
	np    *networkingv1.NetworkPolicy
	d     *appsv1.Deployment
	ports map[string]int32 // the Deployment's container ports by what they serve
	rules map[int32]networkingv1.NetworkPolicyIngressRule
}

func viewNetworkPolicy(t *testing.T, values string) networkPolicyView {
	t.Helper()
	r := mustRender(t, values, withMonitoring(), withCertManager())
	nps, ds := r.ofKind("NetworkPolicy"), r.ofKind("Deployment")
	if len(nps) != 1 || len(ds) != 1 {
		t.Fatalf("%d NetworkPolicies and %d Deployments rendered, want 1 each: %v", len(nps), len(ds), r.ids())
	}
	v := networkPolicyView{
		np:    into[networkingv1.NetworkPolicy](t, nps[0]),
		d:     into[appsv1.Deployment](t, ds[0]),
		rules: map[int32]networkingv1.NetworkPolicyIngressRule{},
	}
	if diff := cmp.Diff(*v.d.Spec.Selector, v.np.Spec.PodSelector); diff != "" {
		t.Errorf("podSelector differs from the Deployment's selector (-deployment +policy):\n%s", diff)
	}
	v.ports = controllerPorts(t, v.d)
	for _, rule := range v.np.Spec.Ingress {
		// One port per rule, by number and TCP: each port has its own peers.
		if len(rule.Ports) != 1 {
			t.Fatalf("ingress rule %+v has %d ports, want 1", rule, len(rule.Ports))
		}
		p := rule.Ports[0]
		if p.Port == nil || p.Port.Type != intstr.Int || p.EndPort != nil || p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP {
			t.Errorf("ingress port %+v, want one TCP port by number", p)
			continue
		}
		if _, dup := v.rules[p.Port.IntVal]; dup {
			t.Errorf("two ingress rules for port %d", p.Port.IntVal)
		}
		v.rules[p.Port.IntVal] = rule
	}
	return v
}

// allowed lists what the policy's ingress ports serve, by the Deployment's
// names of them, failing on a port the Deployment does not declare.
func (v networkPolicyView) allowed(t *testing.T) []string {
	t.Helper()
	var out []string
	for port := range v.rules {
		found := false
		for name, p := range v.ports {
			if p == port {
				out = append(out, name)
				found = true
			}
		}
		if !found {
			t.Errorf("the NetworkPolicy allows port %d, which the Deployment does not declare (its ports: %v)", port, v.ports)
		}
	}
	slices.Sort(out)
	return out
}

// from returns the peers of the rule for the Deployment's port name.
func (v networkPolicyView) from(t *testing.T, name string) []networkingv1.NetworkPolicyPeer {
	t.Helper()
	rule, ok := v.rules[v.ports[name]]
	if !ok {
		t.Fatalf("no ingress rule for the %s port %d", name, v.ports[name])
	}
	return rule.From
}

func TestNetworkPolicy(t *testing.T) {
	t.Run("absent by default", func(t *testing.T) {
		for _, values := range []string{``, combinations["watch-namespaces"], `networkPolicy: {enabled: false, egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8}}]}]}`} {
			if r := mustRender(t, values); len(r.ofKind("NetworkPolicy")) != 0 {
				t.Errorf("values %q: a NetworkPolicy rendered although networkPolicy.enabled is false", values)
			}
		}
	})

	t.Run("selects the controller pods, ingress only", func(t *testing.T) {
		v := viewNetworkPolicy(t, `networkPolicy: {enabled: true}`)
		if v.np.Namespace != namespace || v.np.Name != fullname {
			t.Errorf("NetworkPolicy %s/%s, want %s/%s", v.np.Namespace, v.np.Name, namespace, fullname)
		}
		// viewNetworkPolicy compared podSelector with the Deployment's selector;
		// the pods carry the labels the policy selects.
		sel, err := metav1.LabelSelectorAsSelector(&v.np.Spec.PodSelector)
		if err != nil || sel.Empty() {
			t.Fatalf("podSelector %v: %v", v.np.Spec.PodSelector, err)
		}
		if !sel.Matches(labels.Set(v.d.Spec.Template.Labels)) {
			t.Errorf("podSelector %v does not select the pod template's labels %v", sel, v.d.Spec.Template.Labels)
		}
		if want := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}; !slices.Equal(v.np.Spec.PolicyTypes, want) {
			t.Errorf("policyTypes %v, want %v: egress is not restricted by default", v.np.Spec.PolicyTypes, want)
		}
		if v.np.Spec.Egress != nil {
			t.Errorf("egress %+v rendered by default", v.np.Spec.Egress)
		}
	})

	// Every container port of the Deployment that is on gets exactly one rule,
	// by its number in the Deployment: a port changed in one template and not
	// the other fails here.
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"defaults", `networkPolicy: {enabled: true}`, []string{portHealth, portMetrics, portProgress, portWebhook}},
		{"ports moved", `
networkPolicy: {enabled: true}
webhook: {port: 10250}
statusServer: {port: 11443}
metrics: {secureServing: false, auth: {enabled: false}}
`, []string{portHealth, portMetrics, portProgress, portWebhook}},
		{"everything", combinations["everything"], []string{portHealth, portMetrics, portProgress, portWebhook}},
		{"progress server off", `
networkPolicy: {enabled: true}
statusServer: {enabled: false}
`, []string{portHealth, portMetrics, portWebhook}},
		{"webhook off (and with it the progress server)", `
networkPolicy: {enabled: true}
webhook: {enabled: false}
`, []string{portHealth, portMetrics}},
		{"metrics rule off", `
networkPolicy: {enabled: true, metrics: {enabled: false}}
`, []string{portHealth, portProgress, portWebhook}},
	} {
		t.Run("ports: "+tc.name, func(t *testing.T) {
			v := viewNetworkPolicy(t, tc.values)
			if diff := cmp.Diff(tc.want, v.allowed(t)); diff != "" {
				t.Errorf("ports the policy allows (-want +got):\n%s", diff)
			}
			// What is allowed is what the Deployment serves; what it serves and
			// the policy leaves out is only the metrics port turned off here.
			for name := range v.ports {
				if !slices.Contains(tc.want, name) && name != portMetrics {
					t.Errorf("the Deployment serves %s (%d) and the policy does not allow it", name, v.ports[name])
				}
			}
			for _, name := range tc.want {
				if _, ok := v.ports[name]; !ok {
					t.Errorf("the policy should allow %s, which the Deployment does not serve", name)
				}
			}
		})
	}

	t.Run("sources by default", func(t *testing.T) {
		v := viewNetworkPolicy(t, `networkPolicy: {enabled: true}`)
		// No `from`: any source, for the API server (cluster-specific address),
		// the scraper and the kubelet.
		for _, name := range []string{portWebhook, portMetrics, portHealth} {
			if from := v.from(t, name); from != nil {
				t.Errorf("%s rule from %+v, want any source (no from)", name, from)
			}
		}
		// Progress: pods of every namespace (not ipBlocks or host traffic).
		want := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}
		if diff := cmp.Diff(want, v.from(t, portProgress)); diff != "" {
			t.Errorf("progress rule from (-want +got):\n%s", diff)
		}
	})

	t.Run("peers pass through", func(t *testing.T) {
		v := viewNetworkPolicy(t, `
networkPolicy:
  enabled: true
  webhook:
    from: [{ipBlock: {cidr: 10.0.0.0/24, except: [10.0.0.7/32]}}]
  progress:
    namespaceSelector: {matchLabels: {team: ml}}
    podSelector: {matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]}
    from: [{ipBlock: {cidr: "fd00::/64"}}]
  metrics:
    from:
      - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
        podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}
`)
		for name, want := range map[string][]networkingv1.NetworkPolicyPeer{
			portWebhook: {{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24", Except: []string{"10.0.0.7/32"}}}},
			portProgress: {
				{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ml"}},
					PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "jobset.sigs.k8s.io/jobset-name", Operator: metav1.LabelSelectorOpExists},
					}},
				},
				{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::/64"}},
			},
			portMetrics: {{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
			}},
			portHealth: nil,
		} {
			if diff := cmp.Diff(want, v.from(t, name)); diff != "" {
				t.Errorf("%s rule from (-want +got):\n%s", name, diff)
			}
		}
	})

	t.Run("progress limited to the watched namespaces", func(t *testing.T) {
		v := viewNetworkPolicy(t, `
watchNamespaces: [team-a, team-b]
networkPolicy: {enabled: true, progress: {namespaceSelector: {matchLabels: {team: ml}, matchExpressions: [{key: tier, operator: NotIn, values: [dev]}]}}}
`)
		want := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"team": "ml"},
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"dev"}},
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a", "team-b"}},
			},
		}}}
		if diff := cmp.Diff(want, v.from(t, portProgress)); diff != "" {
			t.Errorf("progress rule from (-want +got):\n%s", diff)
		}
		// The value itself is not changed: a second render adds the expression once.
		r := mustRender(t, `watchNamespaces: [team-a]
networkPolicy: {enabled: true}`)
		np := into[networkingv1.NetworkPolicy](t, r.ofKind("NetworkPolicy")[0])
		for _, rule := range np.Spec.Ingress {
			for _, peer := range rule.From {
				if peer.NamespaceSelector != nil && len(peer.NamespaceSelector.MatchExpressions) != 1 {
					t.Errorf("namespaceSelector %+v, want the watched namespaces' expression once", peer.NamespaceSelector)
				}
			}
		}
	})

	t.Run("egress rules restrict egress", func(t *testing.T) {
		v := viewNetworkPolicy(t, `
networkPolicy:
  enabled: true
  egress:
    - to: [{ipBlock: {cidr: 192.0.2.10/32}}]
      ports: [{port: 6443, protocol: TCP}]
    - to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, podSelector: {matchLabels: {k8s-app: kube-dns}}}]
      ports: [{port: 53, protocol: UDP}, {port: dns-tcp, protocol: TCP}]
`)
		if want := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}; !slices.Equal(v.np.Spec.PolicyTypes, want) {
			t.Errorf("policyTypes %v, want %v", v.np.Spec.PolicyTypes, want)
		}
		tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
		port := func(p intstr.IntOrString) *intstr.IntOrString { return &p }
		want := []networkingv1.NetworkPolicyEgressRule{
			{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.10/32"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: port(intstr.FromInt32(6443)), Protocol: &tcp}},
			},
			{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: port(intstr.FromInt32(53)), Protocol: &udp}, {Port: port(intstr.FromString("dns-tcp")), Protocol: &tcp}},
			},
		}
		if diff := cmp.Diff(want, v.np.Spec.Egress, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("egress (-want +got):\n%s", diff)
		}
	})
}
