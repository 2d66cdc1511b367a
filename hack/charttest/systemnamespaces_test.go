package charttest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// systemNamespaces are the namespaces the controller must never write in
// (pkg/trainjob.SystemNamespaces).
var systemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// dangerousInSystemNamespaces are writes that would let a compromised controller
// change the cluster's own namespaces: patch kube-system's ConfigMaps (kube-proxy,
// coredns, kubeadm-config), create Secrets there, or start pods under any of their
// ServiceAccounts through a JobSet. Checked whatever the rendered rules say, so the
// test cannot pass by rendering fewer rules to derive writes from.
var dangerousInSystemNamespaces = []grant{
	{"", "configmaps", "create", ""},
	{"", "configmaps", "patch", ""},
	{"", "configmaps", "patch", "kube-proxy"},
	{"", "secrets", "create", ""},
	{"jobset.x-k8s.io", "jobsets", "create", ""},
	{"jobset.x-k8s.io", "jobsets", "patch", ""},
	{"jobset.x-k8s.io", "jobsets", "delete", ""},
}

// writeVerbs are the RBAC verbs that change objects, with the admission operations
// the API server reviews them as: a server-side apply is a PATCH that admission sees
// as CREATE for a new object and UPDATE otherwise.
var writeVerbs = map[string][]admissionregistrationv1.OperationType{
	"create":           {admissionregistrationv1.Create},
	"update":           {admissionregistrationv1.Update},
	"patch":            {admissionregistrationv1.Create, admissionregistrationv1.Update},
	"delete":           {admissionregistrationv1.Delete},
	"deletecollection": {admissionregistrationv1.Delete},
}

// admissionRequest is one write as a ValidatingAdmissionPolicy's CEL sees it
// (the request variable, admission.k8s.io/v1 AdmissionRequest).
type admissionRequest struct {
	user, namespace, name, group, resource, subresource string
	operation                                           admissionregistrationv1.OperationType
}

func (a admissionRequest) String() string {
	res := a.resource
	if a.subresource != "" {
		res += "/" + a.subresource
	}
	return fmt.Sprintf("%s %s.%s %s/%s", a.operation, res, a.group, a.namespace, a.name)
}

// vars is the request variable as the API server builds it, from the
// AdmissionRequest's JSON: empty fields (omitempty) are absent, and reading one is
// an error ("no such key"), which failurePolicy Fail turns into a refusal.
func (a admissionRequest) vars() map[string]any {
	req := map[string]any{
		"operation": string(a.operation),
		"resource":  map[string]any{"group": a.group, "version": "v1", "resource": a.resource},
		"userInfo":  map[string]any{"username": a.user, "groups": []any{"system:serviceaccounts"}},
	}
	if a.namespace != "" { // absent on a cluster-scoped request
		req["namespace"] = a.namespace
	}
	if a.name != "" {
		req["name"] = a.name
	}
	if a.subresource != "" {
		req["subResource"] = a.subresource
	}
	return map[string]any{"request": req}
}

// systemNamespaceGuard is the chart's ValidatingAdmissionPolicy, compiled: the tests
// evaluate it as the API server would (matchConstraints, then matchConditions, then
// validations; test/e2e of hack/charttest/installtest does it on a real API server).
type systemNamespaceGuard struct {
	policy      *admissionregistrationv1.ValidatingAdmissionPolicy
	conditions  []cel.Program
	validations []cel.Program
	messages    []cel.Program // each validation's messageExpression; nil without
}

// guardOf returns the rendered guard, or nil when the chart renders none. A policy
// without a binding that denies is no guard: the test fails.
func guardOf(t *testing.T, r *rendered) *systemNamespaceGuard {
	t.Helper()
	policies := r.ofKind("ValidatingAdmissionPolicy")
	if len(policies) == 0 {
		return nil
	}
	if len(policies) > 1 {
		t.Fatalf("%d ValidatingAdmissionPolicies rendered, want one", len(policies))
	}
	vap := into[admissionregistrationv1.ValidatingAdmissionPolicy](t, policies[0])
	bound := false
	for _, o := range r.ofKind("ValidatingAdmissionPolicyBinding") {
		b := into[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, o)
		if b.Spec.PolicyName == vap.Name && b.Spec.MatchResources == nil && b.Spec.ParamRef == nil &&
			slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) {
			bound = true
		}
	}
	if !bound {
		t.Fatalf("ValidatingAdmissionPolicy %s has no binding with validationActions [Deny] and no narrowing", vap.Name)
	}
	if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("ValidatingAdmissionPolicy %s failurePolicy %v, want Fail (an unevaluable request must not pass)", vap.Name, vap.Spec.FailurePolicy)
	}
	env, err := cel.NewEnv(cel.Variable("request", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	compile := func(what, expr string) cel.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s %q does not compile: %v", what, expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		return prg
	}
	g := &systemNamespaceGuard{policy: vap}
	for _, c := range vap.Spec.MatchConditions {
		g.conditions = append(g.conditions, compile("matchCondition "+c.Name, c.Expression))
	}
	for _, v := range vap.Spec.Validations {
		g.validations = append(g.validations, compile("validation", v.Expression))
		var msg cel.Program
		if v.MessageExpression != "" {
			msg = compile("messageExpression", v.MessageExpression)
		}
		g.messages = append(g.messages, msg)
	}
	if len(g.validations) == 0 {
		t.Fatalf("ValidatingAdmissionPolicy %s has no validation", vap.Name)
	}
	return g
}

// denies reports whether the guard refuses req. An expression that errs refuses it,
// as failurePolicy Fail has the API server do (the error is logged).
func (g *systemNamespaceGuard) denies(t *testing.T, req admissionRequest) bool {
	t.Helper()
	if g == nil || !g.matches(req) {
		return false
	}
	var failed bool
	eval := func(p cel.Program) bool {
		out, _, err := p.Eval(req.vars())
		if err != nil {
			t.Logf("the guard errs on %s (failurePolicy Fail refuses it): %v", req, err)
			failed = true
			return false
		}
		b, ok := out.Value().(bool)
		if !ok {
			t.Fatalf("the guard's expression returned %v on %s, want a bool", out, req)
		}
		return b
	}
	for _, c := range g.conditions {
		if !eval(c) {
			return failed
		}
	}
	for i, v := range g.validations {
		if !eval(v) {
			if failed {
				return true
			}
			if m := g.messages[i]; m != nil {
				out, _, err := m.Eval(req.vars())
				if err != nil {
					t.Errorf("the guard's messageExpression fails on %s: %v", req, err)
				} else if msg, _ := out.Value().(string); !strings.Contains(msg, "rbac.systemNamespaceGuard") || !strings.Contains(msg, req.namespace) {
					t.Errorf("the guard's message on %s is %q, want it to name the namespace and rbac.systemNamespaceGuard", req, msg)
				}
			}
			return true
		}
	}
	return false
}

// matches applies the policy's matchConstraints (resource rules only: the chart's
// policy has no namespace or object selector, checked here).
func (g *systemNamespaceGuard) matches(req admissionRequest) bool {
	mc := g.policy.Spec.MatchConstraints
	if mc == nil {
		return true
	}
	if mc.NamespaceSelector != nil && (len(mc.NamespaceSelector.MatchLabels) > 0 || len(mc.NamespaceSelector.MatchExpressions) > 0) ||
		mc.ObjectSelector != nil && (len(mc.ObjectSelector.MatchLabels) > 0 || len(mc.ObjectSelector.MatchExpressions) > 0) ||
		len(mc.ExcludeResourceRules) > 0 {
		panic("the chart's guard narrows its matchConstraints beyond resource rules: teach this test")
	}
	for _, rule := range mc.ResourceRules {
		if !slices.Contains(rule.Operations, req.operation) && !slices.Contains(rule.Operations, admissionregistrationv1.OperationAll) {
			continue
		}
		if !slices.Contains(rule.APIGroups, "*") && !slices.Contains(rule.APIGroups, req.group) {
			continue
		}
		for _, res := range rule.Resources {
			main, sub, _ := strings.Cut(res, "/")
			if (main == "*" || main == req.resource) && (sub == "*" || sub == req.subresource) {
				return true
			}
		}
	}
	return false
}

// writesIn returns the writes the rendered RBAC lets the ServiceAccount make in
// namespace ns — the rules of every ClusterRole bound by a ClusterRoleBinding, and of
// the Roles in ns — as admission requests (name "any-name" where a rule names none).
func writesIn(t *testing.T, r *rendered, ns, user string) []admissionRequest {
	t.Helper()
	var rules []rbacv1.PolicyRule
	controller := into[appsv1.Deployment](t, r.ofKind("Deployment")[0]).Spec.Template.Spec.ServiceAccountName
	for _, o := range r.ofKind("ClusterRoleBinding") {
		crb := into[rbacv1.ClusterRoleBinding](t, o)
		// The controller's bindings only: the metrics scraper's (metrics-reader,
		// non-resource /metrics) is another identity's.
		if !slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == controller }) {
			continue
		}
		rules = append(rules, into[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", crb.RoleRef.Name)).Rules...)
	}
	for _, o := range r.ofKind("Role") {
		if o.GetNamespace() == ns {
			rules = append(rules, into[rbacv1.Role](t, o).Rules...)
		}
	}
	var out []admissionRequest
	for _, g := range grants(t, rules) {
		ops, ok := writeVerbs[g.verb]
		if !ok {
			continue
		}
		name := g.name
		if name == "" {
			name = "any-name"
		}
		res, sub, _ := strings.Cut(g.resource, "/")
		for _, op := range ops {
			out = append(out, admissionRequest{user: user, namespace: ns, name: name, group: g.group, resource: res, subresource: sub, operation: op})
		}
	}
	return out
}

// checkSystemNamespaceWrites fails the test for every write the ServiceAccount of
// the release in releaseNS may make in a system namespace (or one of extra): granted
// by RBAC there and not refused by the chart's guard, unless it is one of allowed
// (the controller's own objects there, "OPERATION resource namespace/name").
func checkSystemNamespaceWrites(t *testing.T, r *rendered, releaseNS string, extra []string, allowed ...string) {
	t.Helper()
	sa := into[rbacv1.ClusterRoleBinding](t, r.ofKind("ClusterRoleBinding")[0]).Subjects[0]
	if sa.Kind != rbacv1.ServiceAccountKind || sa.Namespace != releaseNS {
		t.Fatalf("the ClusterRoleBinding's subject %+v is not a ServiceAccount of %s", sa, releaseNS)
	}
	user := "system:serviceaccount:" + releaseNS + ":" + sa.Name
	guard := guardOf(t, r)
	for _, ns := range append(slices.Clone(systemNamespaces), extra...) {
		var writes []admissionRequest
		granted := map[string]bool{}
		for _, w := range writesIn(t, r, ns, user) {
			if !granted[w.String()] {
				granted[w.String()] = true
				writes = append(writes, w)
			}
		}
		for _, g := range dangerousInSystemNamespaces {
			for _, op := range writeVerbs[g.verb] {
				name := g.name
				if name == "" {
					name = "any-name"
				}
				if w := (admissionRequest{user: user, namespace: ns, name: name, group: g.group, resource: g.resource, operation: op}); !granted[w.String()] {
					writes = append(writes, w)
				}
			}
		}
		for _, w := range writes {
			refused := guard.denies(t, w)
			key := fmt.Sprintf("%s %s %s/%s", w.operation, w.resource, w.namespace, w.name)
			switch ours := slices.Contains(allowed, key); {
			case ours && refused:
				t.Errorf("the guard refuses the controller's own %s", w)
			case !ours && !refused && granted[w.String()]:
				t.Errorf("%s may %s in system namespace %s: RBAC grants it and no guard refuses it", user, w, ns)
			case !ours && !refused:
				// Not granted today: a rule added later must not open it either.
				t.Errorf("no guard refuses %s in system namespace %s: only today's RBAC rules keep it out", w, ns)
			}
		}
		// Someone else (a cluster admin, a system controller) is never refused.
		other := admissionRequest{user: "system:serviceaccount:kube-system:kube-proxy", namespace: ns, name: "kube-proxy", resource: "configmaps", operation: admissionregistrationv1.Update}
		if guard.denies(t, other) {
			t.Errorf("the guard refuses %s to %s: it must match the controller's ServiceAccount only", other, other.user)
		}
	}
	// Nor the controller's cluster-scoped writes (its webhook configurations'
	// caBundle): such a request has no namespace, and a guard reading it unguarded
	// errs and refuses them all (seen in the Helm leg).
	for _, op := range []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update} {
		w := admissionRequest{user: user, name: "trainyard-validator", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", operation: op}
		if guard.denies(t, w) {
			t.Errorf("the guard refuses the cluster-scoped %s", w)
		}
	}
	// Nor the controller elsewhere.
	for _, w := range writesIn(t, r, "team-a", user) {
		if guard.denies(t, w) {
			t.Errorf("the guard refuses %s outside system namespaces", w)
		}
	}
}

// TestSystemNamespaceGuard: with the default values (one ClusterRole, writes granted
// in every namespace), every write the controller holds — ConfigMap patch, Secret
// create, JobSet create/patch/delete first — is refused in kube-system, kube-public
// and kube-node-lease by the chart's ValidatingAdmissionPolicy, evaluated here as the
// API server does; nothing else is.
func TestSystemNamespaceGuard(t *testing.T) {
	for name, values := range combinations {
		t.Run(name, func(t *testing.T) {
			r, err := render(t, values, withCertManager(), withMonitoring())
			if err != nil {
				t.Skipf("combination does not render: %v", err)
			}
			checkSystemNamespaceWrites(t, r, namespace, nil, leaseIn(t, r)...)
		})
	}
	t.Run("extra namespaces", func(t *testing.T) {
		r := mustRender(t, `rbac: {systemNamespaceGuard: {enabled: true, extraNamespaces: [cert-manager]}}`)
		checkSystemNamespaceWrites(t, r, namespace, []string{"cert-manager"})
	})
	t.Run("release and Lease in kube-system", func(t *testing.T) {
		// The controller's own objects there pass, by name; nothing else does.
		r := mustRender(t, ``, withNamespace("kube-system"))
		checkSystemNamespaceWrites(t, r, "kube-system", nil,
			"CREATE leases kube-system/trainyard-controller", "UPDATE leases kube-system/trainyard-controller",
			"UPDATE secrets kube-system/trainyard-webhook-certs", "UPDATE secrets kube-system/trainyard-secret-name-key")
	})
	t.Run("Lease in kube-node-lease", func(t *testing.T) {
		r := mustRender(t, `leaderElection: {namespace: kube-node-lease}`)
		checkSystemNamespaceWrites(t, r, namespace, nil,
			"CREATE leases kube-node-lease/trainyard-controller", "UPDATE leases kube-node-lease/trainyard-controller")
	})
	t.Run("off", func(t *testing.T) {
		r := mustRender(t, `rbac: {systemNamespaceGuard: {enabled: false}}`)
		if n := len(r.ofKind("ValidatingAdmissionPolicy")) + len(r.ofKind("ValidatingAdmissionPolicyBinding")); n != 0 {
			t.Errorf("%d policy objects rendered with the guard off", n)
		}
	})
}

func withNamespace(ns string) option { return func(o *renderOptions) { o.namespace = ns } }

// leaseIn returns the writes of the controller's Lease (its Role's resourceNames)
// when the values put it in a system namespace: the controller's own object there.
func leaseIn(t *testing.T, r *rendered) []string {
	var own []string
	for _, o := range r.ofKind("Role") {
		if !slices.Contains(systemNamespaces, o.GetNamespace()) {
			continue
		}
		for _, rule := range into[rbacv1.Role](t, o).Rules {
			if slices.Contains(rule.Resources, "leases") {
				for _, name := range rule.ResourceNames {
					own = append(own, "CREATE leases "+o.GetNamespace()+"/"+name, "UPDATE leases "+o.GetNamespace()+"/"+name)
				}
			}
		}
	}
	return own
}
