package charttest

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// clusterScopedResources are the resources of controllerCalls and statusServerCalls
// that have no namespace: they stay in the ClusterRole with watchNamespaces.
var clusterScopedResources = []string{"clustertrainingruntimes", "deviceclasses", "resourceslices", "tokenreviews"}

// split returns the grants of calls on namespaced and on cluster-scoped resources.
func split(calls []grant) (namespaced, clusterScoped []grant) {
	for _, g := range calls {
		if slices.Contains(clusterScopedResources, g.resource) {
			clusterScoped = append(clusterScoped, g)
		} else {
			namespaced = append(namespaced, g)
		}
	}
	return namespaced, clusterScoped
}

// TestRBACWatchNamespaces: with watchNamespaces, the ClusterRole grants exactly the
// controller's calls on cluster-scoped resources, each watched namespace gets a Role
// (bound to the ServiceAccount) with exactly its namespaced calls, no other namespace
// gets any but the release namespace's by-name Roles, and nothing cluster-wide lets
// it write ConfigMaps, create Secrets or read either.
func TestRBACWatchNamespaces(t *testing.T) {
	watched := []string{"team-a", "team-b"}
	r := mustRender(t, combinations["watch-namespaces"])
	namespaced, clusterScoped := split(slices.Concat(controllerCalls, statusServerCalls(t)))

	cr := into[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", fullname))
	wantCluster := slices.Concat(clusterScoped, admissionCalls, selfManagedWebhookCalls, metricsAuthCalls)
	if diff := cmp.Diff(sorted(wantCluster), grants(t, cr.Rules), cmp.AllowUnexported(grant{})); diff != "" {
		t.Errorf("ClusterRole grants (-needed +granted):\n%s", diff)
	}
	for _, f := range []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "patch", "list", "watch", "get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "list", "get", "watch"}},
		{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs", "trainingruntimes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"jobset.x-k8s.io"}, Resources: []string{"jobsets"}, Verbs: []string{"list", "create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
	} {
		for _, verb := range f.Verbs {
			rule := rbacv1.PolicyRule{APIGroups: f.APIGroups, Resources: f.Resources, Verbs: []string{verb}}
			if covered, _ := validation.Covers(cr.Rules, []rbacv1.PolicyRule{rule}); covered {
				t.Errorf("the ClusterRole allows %s %v/%v in every namespace", verb, f.APIGroups, f.Resources)
			}
		}
	}

	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: namespace}}
	roleNamespaces := map[string][]string{} // Role name → namespaces
	for _, o := range r.ofKind("Role") {
		roleNamespaces[o.GetName()] = append(roleNamespaces[o.GetName()], o.GetNamespace())
		if o.GetName() != fullname {
			if o.GetNamespace() != namespace {
				t.Errorf("Role %s in namespace %q, want the release namespace", o.GetName(), o.GetNamespace())
			}
			continue
		}
		role := into[rbacv1.Role](t, o)
		if diff := cmp.Diff(sorted(namespaced), grants(t, role.Rules), cmp.AllowUnexported(grant{})); diff != "" {
			t.Errorf("Role in %s grants (-needed +granted):\n%s", o.GetNamespace(), diff)
		}
	}
	if got := roleNamespaces[fullname]; !cmp.Equal(got, watched) {
		t.Errorf("Role %s in namespaces %v, want each watched namespace %v", fullname, got, watched)
	}
	var bound []string
	for _, o := range r.ofKind("RoleBinding") {
		if o.GetName() != fullname {
			continue
		}
		b := into[rbacv1.RoleBinding](t, o)
		bound = append(bound, b.Namespace)
		if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: fullname}); b.RoleRef != want || !cmp.Equal(b.Subjects, wantSubjects) {
			t.Errorf("RoleBinding in %s: %+v → %+v, want %+v → %+v", b.Namespace, b.Subjects, b.RoleRef, wantSubjects, want)
		}
	}
	if !cmp.Equal(bound, watched) {
		t.Errorf("RoleBindings %s in %v, want each watched namespace %v", fullname, bound, watched)
	}

	// The controller is told the same namespaces.
	if got := decodeConfig(t, configFile(t, r, fullname+"-config")).WatchNamespaces; !cmp.Equal(got, watched) {
		t.Errorf("configuration watchNamespaces = %v, want %v", got, watched)
	}
	// Admission reviews TrainJobs and runtimes of the watched namespaces only.
	wantIn := metav1.LabelSelectorRequirement{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: watched}
	vwc := into[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.get(t, "ValidatingWebhookConfiguration", "trainyard-validator"))
	mwc := into[admissionregistrationv1.MutatingWebhookConfiguration](t, r.get(t, "MutatingWebhookConfiguration", "trainyard-defaulter"))
	selectors := map[string]*metav1.LabelSelector{}
	for _, w := range vwc.Webhooks {
		selectors[w.Name] = w.NamespaceSelector
	}
	for _, w := range mwc.Webhooks {
		selectors[w.Name] = w.NamespaceSelector
	}
	for name, sel := range selectors {
		if name == "validator.clustertrainingruntime.trainer.kubeflow.org" {
			continue // cluster-scoped
		}
		if sel == nil || !slices.ContainsFunc(sel.MatchExpressions, func(e metav1.LabelSelectorRequirement) bool { return cmp.Equal(e, wantIn) }) {
			t.Errorf("webhook %s namespaceSelector %+v, want it to require %+v", name, sel, wantIn)
		}
	}

	// Without watchNamespaces, no such Role and no In requirement.
	d := mustRender(t, ``)
	for _, o := range d.ofKind("Role") {
		if o.GetName() == fullname {
			t.Errorf("Role %s in %s rendered without watchNamespaces", fullname, o.GetNamespace())
		}
	}
	for _, w := range into[admissionregistrationv1.ValidatingWebhookConfiguration](t, d.get(t, "ValidatingWebhookConfiguration", "trainyard-validator")).Webhooks {
		if w.NamespaceSelector != nil {
			for _, e := range w.NamespaceSelector.MatchExpressions {
				if e.Operator == metav1.LabelSelectorOpIn {
					t.Errorf("webhook %s selects namespaces %v without watchNamespaces", w.Name, e.Values)
				}
			}
		}
	}
	if got := decodeConfig(t, configFile(t, d, fullname+"-config")).WatchNamespaces; got != nil {
		t.Errorf("configuration watchNamespaces = %v without the value, want every namespace", got)
	}
}

// TestRBACWatchNamespacesGrantsNothingDangerous runs the dangerous-permission check
// over the namespace-scoped install.
func TestRBACWatchNamespacesGrantsNothingDangerous(t *testing.T) {
	rbacGrantsNothingDangerous(t, combinations["watch-namespaces"],
		slices.Concat(controllerCalls, secretNameKeyCalls, admissionCalls, selfManagedWebhookCalls, selfManagedSecretCalls, statusServerCalls(t), metricsAuthCalls))
}

// secretAndConfigMapWrites are the write verbs on Secrets and ConfigMaps (and JobSets)
// the controller holds for TrainJobs' side objects, the progress CA ConfigMaps and the
// JobSets: the rules issue 25 (item 10) asks to scope.
var secretAndConfigMapWrites = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}},
	{APIGroups: []string{"jobset.x-k8s.io"}, Resources: []string{"jobsets"}, Verbs: []string{"create"}},
	{APIGroups: []string{"jobset.x-k8s.io"}, Resources: []string{"jobsets"}, Verbs: []string{"patch"}},
}

// writeNamespaces returns the namespaces in which some Role of r, bound to the
// controller's ServiceAccount by a RoleBinding of the same name, grants rule.
func writeNamespaces(t *testing.T, r *rendered, rule rbacv1.PolicyRule) []string {
	t.Helper()
	bound := map[string]bool{} // namespace/role bound to the ServiceAccount
	for _, o := range r.ofKind("RoleBinding") {
		b := into[rbacv1.RoleBinding](t, o)
		for _, s := range b.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == fullname && s.Namespace == namespace && b.RoleRef.Kind == "Role" {
				bound[b.Namespace+"/"+b.RoleRef.Name] = true
			}
		}
	}
	var out []string
	for _, o := range r.ofKind("Role") {
		role := into[rbacv1.Role](t, o)
		if covered, _ := validation.Covers(role.Rules, []rbacv1.PolicyRule{rule}); covered && bound[role.Namespace+"/"+role.Name] {
			out = append(out, role.Namespace)
		}
	}
	slices.Sort(out)
	return out
}

// TestRBACSecretAndConfigMapWriteScope: the rendered RBAC of the write verbs on Secrets,
// ConfigMaps and JobSets. Without watchNamespaces they are in the ClusterRole, so in
// every namespace, system namespaces included (RBAC cannot exclude a namespace from a
// ClusterRole; the controller refuses to build there, and values.yaml and the README say
// so). With watchNamespaces, exactly the listed namespaces grant them, through a bound
// Role each, and no system namespace does. A system namespace in watchNamespaces fails
// the render, naming it.
func TestRBACSecretAndConfigMapWriteScope(t *testing.T) {
	d := mustRender(t, ``)
	cr := into[rbacv1.ClusterRole](t, d.get(t, "ClusterRole", fullname))
	for _, rule := range secretAndConfigMapWrites {
		if covered, _ := validation.Covers(cr.Rules, []rbacv1.PolicyRule{rule}); !covered {
			t.Errorf("without watchNamespaces the ClusterRole does not grant %v %v/%v cluster-wide", rule.Verbs, rule.APIGroups, rule.Resources)
		}
		if got := writeNamespaces(t, d, rule); len(got) != 0 {
			t.Errorf("without watchNamespaces, Roles grant %v %v in %v, want none (the ClusterRole does)", rule.Verbs, rule.Resources, got)
		}
	}

	r := mustRender(t, `watchNamespaces: [team-b, team-a]`)
	cr = into[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", fullname))
	for _, rule := range secretAndConfigMapWrites {
		if covered, _ := validation.Covers(cr.Rules, []rbacv1.PolicyRule{rule}); covered {
			t.Errorf("with watchNamespaces the ClusterRole grants %v %v/%v cluster-wide", rule.Verbs, rule.APIGroups, rule.Resources)
		}
		if got, want := writeNamespaces(t, r, rule), []string{"team-a", "team-b"}; !cmp.Equal(got, want) {
			t.Errorf("%v %v granted in %v, want exactly the watched namespaces %v", rule.Verbs, rule.Resources, got, want)
		}
	}
	for _, o := range slices.Concat(r.ofKind("Role"), r.ofKind("RoleBinding")) {
		if slices.Contains([]string{"kube-system", "kube-public", "kube-node-lease"}, o.GetNamespace()) {
			t.Errorf("%s %s rendered in system namespace %s", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}

	for _, system := range []string{"kube-system", "kube-public", "kube-node-lease"} {
		_, err := render(t, `watchNamespaces: [team-a, `+system+`]`)
		errContains(t, err, "watchNamespaces[1]", `"`+system+`"`, "system namespace", "remove it")
	}
}
