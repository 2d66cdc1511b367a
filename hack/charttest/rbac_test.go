package charttest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// grant is one permission: verb on group/resource (optionally one name).
type grant struct{ group, resource, verb, name string }

func (g grant) String() string {
	s := fmt.Sprintf("%s %s/%s", g.verb, g.group, g.resource)
	if g.name != "" {
		s += " " + g.name
	}
	return s
}

// controllerCalls are the API calls the controller makes, cluster-wide: the
// ClusterRole must grant exactly these. Keep in step with templates/rbac.yaml
// and with the code (pkg/informers, pkg/stages/status, pkg/stages/gang, the
// events recorder).
var controllerCalls = []grant{
	// shared informers
	{"trainer.kubeflow.org", "trainjobs", "get", ""},
	{"trainer.kubeflow.org", "trainjobs", "list", ""},
	{"trainer.kubeflow.org", "trainjobs", "watch", ""},
	{"trainer.kubeflow.org", "trainingruntimes", "get", ""},
	{"trainer.kubeflow.org", "trainingruntimes", "list", ""},
	{"trainer.kubeflow.org", "trainingruntimes", "watch", ""},
	{"trainer.kubeflow.org", "clustertrainingruntimes", "get", ""},
	{"trainer.kubeflow.org", "clustertrainingruntimes", "list", ""},
	{"trainer.kubeflow.org", "clustertrainingruntimes", "watch", ""},
	{"jobset.x-k8s.io", "jobsets", "get", ""},
	{"jobset.x-k8s.io", "jobsets", "list", ""},
	{"jobset.x-k8s.io", "jobsets", "watch", ""},
	// status writer: merge patch of trainjobs/status
	{"trainer.kubeflow.org", "trainjobs/status", "patch", ""},
	// JobSet server-side apply: authorized as create when the JobSet is new, patch otherwise
	{"jobset.x-k8s.io", "jobsets", "create", ""},
	{"jobset.x-k8s.io", "jobsets", "patch", ""},
	// activeDeadlineSeconds
	{"jobset.x-k8s.io", "jobsets", "delete", ""},
	// blockOwnerDeletion on the JobSet's owner reference (OwnerReferencesPermissionEnforcement)
	{"trainer.kubeflow.org", "trainjobs/finalizers", "update", ""},
	// ttlSecondsAfterFinished (pkg/stages/status/lifecycle.go)
	{"trainer.kubeflow.org", "trainjobs", "delete", ""},
	// OptimizationJobs (pkg/optimization/controller): informer, status, trials
	{"trainer.kubeflow.org", "optimizationjobs", "get", ""},
	{"trainer.kubeflow.org", "optimizationjobs", "list", ""},
	{"trainer.kubeflow.org", "optimizationjobs", "watch", ""},
	{"trainer.kubeflow.org", "optimizationjobs", "patch", ""}, // trainyard.dev/trials-created
	{"trainer.kubeflow.org", "optimizationjobs/status", "update", ""},
	{"trainer.kubeflow.org", "optimizationjobs/finalizers", "update", ""},
	{"trainer.kubeflow.org", "trainjobs", "create", ""},
	// gang scheduling side objects, server-side applied by the status stage
	// (pkg/stages/status/objects.go; backends in pkg/stages/gang)
	{"scheduling.k8s.io", "workloads", "create", ""},
	{"scheduling.k8s.io", "workloads", "patch", ""},
	// Workload side-object informer, metadata only (pkg/informers/sideobjects.go)
	{"scheduling.k8s.io", "workloads", "list", ""},
	{"scheduling.k8s.io", "workloads", "watch", ""},
	{"scheduling.k8s.io", "podgroups", "create", ""},
	{"scheduling.k8s.io", "podgroups", "patch", ""},
	{"scheduling.x-k8s.io", "podgroups", "create", ""},
	{"scheduling.x-k8s.io", "podgroups", "patch", ""},
	{"scheduling.volcano.sh", "podgroups", "create", ""},
	{"scheduling.volcano.sh", "podgroups", "patch", ""},
	// PodGroup status informers (pkg/informers/podgroups.go)
	{"scheduling.k8s.io", "podgroups", "list", ""},
	{"scheduling.k8s.io", "podgroups", "watch", ""},
	{"scheduling.x-k8s.io", "podgroups", "list", ""},
	{"scheduling.x-k8s.io", "podgroups", "watch", ""},
	{"scheduling.volcano.sh", "podgroups", "list", ""},
	{"scheduling.volcano.sh", "podgroups", "watch", ""},
	// MPI and Flux side objects (pkg/stages/mlpolicy): the hostfile ConfigMap,
	// server-side applied, and the SSH auth Secret, created once and never updated
	{"", "configmaps", "create", ""},
	{"", "configmaps", "patch", ""},
	{"", "secrets", "create", ""},
	// side-object informers, metadata only and label-filtered, and the
	// metadata-only list by name of an unlabelled one (pkg/informers/sideobjects.go,
	// status.DynamicApplier.Lookup): ConfigMaps only, never Secrets (create-only
	// under unguessable names, docs/design/side-objects.md)
	{"", "configmaps", "list", ""},
	{"", "configmaps", "watch", ""},
	// DRA informers (pkg/informers/dra.go)
	{"resource.k8s.io", "resourceclaimtemplates", "get", ""},
	{"resource.k8s.io", "resourceclaimtemplates", "list", ""},
	{"resource.k8s.io", "resourceclaimtemplates", "watch", ""},
	{"resource.k8s.io", "resourceclaims", "get", ""},
	{"resource.k8s.io", "resourceclaims", "list", ""},
	{"resource.k8s.io", "resourceclaims", "watch", ""},
	{"resource.k8s.io", "deviceclasses", "get", ""},
	{"resource.k8s.io", "deviceclasses", "list", ""},
	{"resource.k8s.io", "deviceclasses", "watch", ""},
	{"resource.k8s.io", "resourceslices", "get", ""},
	{"resource.k8s.io", "resourceslices", "list", ""},
	{"resource.k8s.io", "resourceslices", "watch", ""},
	// events.k8s.io/v1 recorder
	{"events.k8s.io", "events", "create", ""},
	{"events.k8s.io", "events", "patch", ""},
}

// admissionCalls are the admission server's extra calls, cluster-wide: the
// Volcano rule's PriorityClass informer. The rest of what it reads (runtimes,
// TrainJobs, JobSets) is in controllerCalls.
var admissionCalls = []grant{
	// Whether an OptimizationJob's creator may create its trials (issue 41, finding 8).
	{"authorization.k8s.io", "subjectaccessreviews", "create", ""},
	{"scheduling.k8s.io", "priorityclasses", "get", ""},
	{"scheduling.k8s.io", "priorityclasses", "list", ""},
	{"scheduling.k8s.io", "priorityclasses", "watch", ""},
}

// selfManagedCertCalls are pkg/certs' calls (docs/design/certificates.md):
// single-object informers and full updates of the two webhook configurations
// (cluster-wide, by name) and of the Secret (in the release namespace, by
// name). No create: the chart pre-creates the Secret.
var (
	selfManagedWebhookCalls = []grant{
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "get", "trainyard-validator"},
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "list", "trainyard-validator"},
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "watch", "trainyard-validator"},
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "update", "trainyard-validator"},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", "trainyard-defaulter"},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "list", "trainyard-defaulter"},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "watch", "trainyard-defaulter"},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update", "trainyard-defaulter"},
	}
	selfManagedSecretCalls = []grant{
		{"", "secrets", "get", "trainyard-webhook-certs"},
		{"", "secrets", "list", "trainyard-webhook-certs"},
		{"", "secrets", "watch", "trainyard-webhook-certs"},
		{"", "secrets", "update", "trainyard-webhook-certs"},
	}
)

// secretNameKeyCalls are cmd/trainyard/app's loadSecretNames calls, in the release
// namespace, by name: the get of the Secret-name key and the update that fills in
// the chart's empty Secret. No create: the chart pre-creates it.
var secretNameKeyCalls = []grant{
	{"", "secrets", "get", "trainyard-secret-name-key"},
	{"", "secrets", "update", "trainyard-secret-name-key"},
}

// statusServerCalls are the progress server's calls (KEP-2779), cluster-wide,
// with statusServer.enabled (and webhook.enabled): TokenReviews of trainers'
// tokens, a get of the pod a token was issued to, and pkg/progress's
// CAPublisher: a single-name ConfigMap informer (field selector) and the
// delete of a ConfigMap its apply cannot correct. Its applies are authorized
// as create and patch, which controllerCalls grant (MPI hostfile).
func statusServerCalls(t *testing.T) []grant {
	name := wireConst(t, "CAConfigMapName")
	return []grant{
		{"authentication.k8s.io", "tokenreviews", "create", ""},
		{"", "pods", "get", ""},
		{"", "configmaps", "list", name},
		{"", "configmaps", "watch", name},
		{"", "configmaps", "delete", name},
	}
}

// metricsAuthCalls are pkg/metrics/auth's calls with metrics.auth.enabled: a
// TokenReview of the scraper's token (the same grant as the progress
// server's) and a SubjectAccessReview of its get on the URL.
var metricsAuthCalls = []grant{
	{"authentication.k8s.io", "tokenreviews", "create", ""},
	{"authorization.k8s.io", "subjectaccessreviews", "create", ""},
}

// leaseCalls are the leader election calls, in the Lease's namespace.
var leaseCalls = []grant{
	{"coordination.k8s.io", "leases", "create", ""},
	{"coordination.k8s.io", "leases", "get", "trainyard-controller"},
	{"coordination.k8s.io", "leases", "update", "trainyard-controller"},
}

// grants expands rules into single permissions.
func grants(t *testing.T, rules []rbacv1.PolicyRule) []grant {
	t.Helper()
	var out []grant
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("rule grants non-resource URLs %v", r.NonResourceURLs)
		}
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range names {
						out = append(out, grant{g, res, v, n})
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b grant) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// sorted returns gs sorted, each grant once (two features may need the same
// call; the chart must grant it once).
func sorted(gs []grant) []grant {
	out := slices.Clone(gs)
	slices.SortFunc(out, func(a, b grant) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

func TestRBACIsExactlyWhatTheControllerCalls(t *testing.T) {
	r := mustRender(t, ``)
	cr := into[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", fullname))
	needed := slices.Concat(controllerCalls, admissionCalls, selfManagedWebhookCalls, statusServerCalls(t), metricsAuthCalls)
	if diff := cmp.Diff(sorted(needed), grants(t, cr.Rules), cmp.AllowUnexported(grant{})); diff != "" {
		t.Errorf("ClusterRole grants (-needed +granted):\n%s", diff)
	}
	certRole := into[rbacv1.Role](t, r.get(t, "Role", fullname+"-webhook-certs"))
	if certRole.Namespace != namespace {
		t.Errorf("certificate Secret Role in %q, want the release namespace %q", certRole.Namespace, namespace)
	}
	if diff := cmp.Diff(sorted(selfManagedSecretCalls), grants(t, certRole.Rules), cmp.AllowUnexported(grant{})); diff != "" {
		t.Errorf("certificate Secret Role grants (-needed +granted):\n%s", diff)
	}
	keyRole := into[rbacv1.Role](t, r.get(t, "Role", fullname+"-secret-name-key"))
	if keyRole.Namespace != namespace {
		t.Errorf("Secret-name key Role in %q, want the release namespace %q", keyRole.Namespace, namespace)
	}
	if diff := cmp.Diff(sorted(secretNameKeyCalls), grants(t, keyRole.Rules), cmp.AllowUnexported(grant{})); diff != "" {
		t.Errorf("Secret-name key Role grants (-needed +granted):\n%s", diff)
	}
	keyBinding := into[rbacv1.RoleBinding](t, r.get(t, "RoleBinding", fullname+"-secret-name-key"))
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: keyRole.Name}); keyBinding.RoleRef != want ||
		!cmp.Equal(keyBinding.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: namespace}}) {
		t.Errorf("Secret-name key RoleBinding %+v → %+v", keyBinding.Subjects, keyBinding.RoleRef)
	}
	if key := r.get(t, "Secret", "trainyard-secret-name-key"); key.GetNamespace() != namespace || key.Object["data"] != nil {
		t.Errorf("the Secret-name key Secret = %v, want it empty in %q (the controller fills it in)", key.Object, namespace)
	}
	if got := decodeConfig(t, configFile(t, r, fullname+"-config")).SideObjects.SecretNameKeySecret; got != "trainyard-secret-name-key" {
		t.Errorf("the controller is configured for the Secret-name key Secret %q; RBAC grants trainyard-secret-name-key", got)
	}
	certBinding := into[rbacv1.RoleBinding](t, r.get(t, "RoleBinding", fullname+"-webhook-certs"))
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: certRole.Name}); certBinding.RoleRef != want ||
		!cmp.Equal(certBinding.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: namespace}}) {
		t.Errorf("certificate RoleBinding %+v → %+v", certBinding.Subjects, certBinding.RoleRef)
	}
	// The names granted are the names the controller is configured with.
	cfg := decodeConfig(t, configFile(t, r, fullname+"-config")).Webhook
	if cfg.ValidatingWebhookConfigurationName != "trainyard-validator" || cfg.MutatingWebhookConfigurationName != "trainyard-defaulter" ||
		cfg.Certificates.SecretName != "trainyard-webhook-certs" {
		t.Errorf("the controller is configured for %s, %s and Secret %s; RBAC grants trainyard-validator, trainyard-defaulter and trainyard-webhook-certs",
			cfg.ValidatingWebhookConfigurationName, cfg.MutatingWebhookConfigurationName, cfg.Certificates.SecretName)
	}
	role := into[rbacv1.Role](t, r.get(t, "Role", fullname+"-leader-election"))
	if role.Namespace != namespace {
		t.Errorf("Lease Role in %q, want %q", role.Namespace, namespace)
	}
	if diff := cmp.Diff(sorted(leaseCalls), grants(t, role.Rules), cmp.AllowUnexported(grant{})); diff != "" {
		t.Errorf("Lease Role grants (-needed +granted):\n%s", diff)
	}

	crb := into[rbacv1.ClusterRoleBinding](t, r.get(t, "ClusterRoleBinding", fullname))
	rb := into[rbacv1.RoleBinding](t, r.get(t, "RoleBinding", fullname+"-leader-election"))
	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: fullname, Namespace: namespace}
	for _, b := range []struct {
		subjects []rbacv1.Subject
		ref      rbacv1.RoleRef
		want     rbacv1.RoleRef
	}{
		{crb.Subjects, crb.RoleRef, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}},
		{rb.Subjects, rb.RoleRef, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}},
	} {
		if !cmp.Equal(b.subjects, []rbacv1.Subject{wantSubject}) || b.ref != b.want {
			t.Errorf("binding %+v → %+v, want %+v → %+v", b.subjects, b.ref, wantSubject, b.want)
		}
	}
}

// TestRBACPerWebhookMode: the certificate rules exist only when the controller
// keeps its own certificates; the PriorityClass informer whenever it admits.
func TestRBACPerWebhookMode(t *testing.T) {
	status := statusServerCalls(t)
	for name, want := range map[string][]grant{
		"defaults":                    slices.Concat(controllerCalls, secretNameKeyCalls, admissionCalls, selfManagedWebhookCalls, selfManagedSecretCalls, status, metricsAuthCalls),
		"cert-manager":                slices.Concat(controllerCalls, secretNameKeyCalls, admissionCalls, status, metricsAuthCalls),
		"provided":                    slices.Concat(controllerCalls, secretNameKeyCalls, admissionCalls, status, metricsAuthCalls),
		"no-webhook":                  slices.Concat(controllerCalls, secretNameKeyCalls, metricsAuthCalls), // the progress server needs the webhook's Service and certificate
		"no-status-server":            slices.Concat(controllerCalls, secretNameKeyCalls, admissionCalls, selfManagedWebhookCalls, selfManagedSecretCalls, metricsAuthCalls),
		"no-metrics-auth":             slices.Concat(controllerCalls, secretNameKeyCalls, admissionCalls, selfManagedWebhookCalls, selfManagedSecretCalls, status),
		"no-webhook, no-metrics-auth": slices.Concat(controllerCalls, secretNameKeyCalls),
	} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, combinations[name], withCertManager())
			var rules []rbacv1.PolicyRule
			for _, o := range r.ofKind("ClusterRole") {
				if o.GetName() != fullname+"-metrics-reader" { // for users to bind, TestMetricsReaderRole
					rules = append(rules, into[rbacv1.ClusterRole](t, o).Rules...)
				}
			}
			for _, o := range r.ofKind("Role") {
				if o.GetName() != fullname+"-leader-election" {
					rules = append(rules, into[rbacv1.Role](t, o).Rules...)
				}
			}
			if diff := cmp.Diff(sorted(want), grants(t, rules), cmp.AllowUnexported(grant{})); diff != "" {
				t.Errorf("grants besides the Lease's (-needed +granted):\n%s", diff)
			}
		})
	}
	t.Run("names follow the release", func(t *testing.T) {
		r := mustRender(t, ``, withRelease("prod"))
		cfg := decodeConfig(t, configFile(t, r, "prod-trainyard-config")).Webhook
		var names []string
		for _, o := range append(r.ofKind("ClusterRole"), r.ofKind("Role")...) {
			for _, rule := range into[rbacv1.ClusterRole](t, o).Rules {
				names = append(names, rule.ResourceNames...)
			}
		}
		slices.Sort(names)
		// The CA ConfigMap's name is the same for every release: trainer pods in
		// any namespace mount it by that name.
		want := []string{cfg.Certificates.SecretName, cfg.MutatingWebhookConfigurationName, "trainyard-controller", cfg.ValidatingWebhookConfigurationName,
			wireConst(t, "CAConfigMapName"), decodeConfig(t, configFile(t, r, "prod-trainyard-config")).SideObjects.SecretNameKeySecret}
		slices.Sort(want)
		if diff := cmp.Diff(want, names); diff != "" {
			t.Errorf("resourceNames (-configured +granted):\n%s", diff)
		}
		r.get(t, "ValidatingWebhookConfiguration", cfg.ValidatingWebhookConfigurationName)
		r.get(t, "MutatingWebhookConfiguration", cfg.MutatingWebhookConfigurationName)
		r.get(t, "Secret", cfg.Certificates.SecretName)
		r.get(t, "Service", cfg.ServiceName)
		if cfg.ValidatingWebhookConfigurationName != "prod-trainyard-validator" {
			t.Errorf("a second release would share the configuration %s", cfg.ValidatingWebhookConfigurationName)
		}
	})
}

func TestRBACGrantsNothingDangerous(t *testing.T) {
	status := statusServerCalls(t)
	for name, needed := range map[string][]grant{
		"everything":       slices.Concat(controllerCalls, admissionCalls, status, metricsAuthCalls), // names follow its values
		"defaults":         slices.Concat(controllerCalls, secretNameKeyCalls, admissionCalls, selfManagedWebhookCalls, selfManagedSecretCalls, status, metricsAuthCalls),
		"no-status-server": slices.Concat(controllerCalls, secretNameKeyCalls, admissionCalls, selfManagedWebhookCalls, selfManagedSecretCalls, metricsAuthCalls),
		"no-metrics-auth":  slices.Concat(controllerCalls, secretNameKeyCalls, admissionCalls, selfManagedWebhookCalls, selfManagedSecretCalls, status),
	} {
		t.Run(name, func(t *testing.T) {
			var extra []rbacv1.PolicyRule
			if name == "no-status-server" {
				// Without the progress server, nothing at all on Pods.
				extra = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}
			}
			rbacGrantsNothingDangerous(t, combinations[name], needed, extra...)
		})
	}
}

func rbacGrantsNothingDangerous(t *testing.T, values string, calls []grant, alsoForbidden ...rbacv1.PolicyRule) {
	r := mustRender(t, values, withMonitoring())
	var all []rbacv1.PolicyRule
	for _, o := range append(r.ofKind("ClusterRole"), r.ofKind("Role")...) {
		for _, rule := range into[rbacv1.ClusterRole](t, o).Rules {
			for _, field := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames, rule.NonResourceURLs} {
				for _, v := range field {
					if strings.Contains(v, "*") {
						t.Errorf("%s/%s: wildcard %q in %+v", o.GetKind(), o.GetName(), v, rule)
					}
				}
			}
			all = append(all, rule)
		}
	}
	// What a compromised controller must not be able to do, whatever the values.
	// Not here: list and watch of ConfigMaps, which the side-object informers
	// need (metadata only in the controller's code; RBAC cannot say so, see
	// templates/rbac.yaml).
	forbidden := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"watch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"delete"}},
		// pods get: the progress server's authorization reads the pod a token
		// names (only with statusServer.enabled); never list or watch.
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: []string{"trainyard-status-server-ca"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"delete"}, ResourceNames: []string{"rbac-mpi-mpi-hostfile"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: []string{"kube-root-ca.crt"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"localsubjectaccessreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create"}},
		{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs"}, Verbs: []string{"update"}},
		{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainingruntimes"}, Verbs: []string{"patch"}},
		// delete: TrainJobs only (their TTL), one at a time.
		{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs"}, Verbs: []string{"deletecollection"}},
		{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainingruntimes"}, Verbs: []string{"delete"}},
		{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"clustertrainingruntimes"}, Verbs: []string{"delete"}},
		{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"optimizationjobs"}, Verbs: []string{"delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"delete"}},
		{APIGroups: []string{"scheduling.k8s.io"}, Resources: []string{"priorityclasses"}, Verbs: []string{"create"}},
		{APIGroups: []string{"scheduling.volcano.sh"}, Resources: []string{"queues"}, Verbs: []string{"create"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"update"}, ResourceNames: []string{"kube-scheduler"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"escalate"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterrolebindings"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"update"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"create"}},
		// Self-managed certificates: only the chart's own objects, by name.
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"update"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"list"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"update"}, ResourceNames: []string{"cert-manager-webhook"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"delete"}, ResourceNames: []string{"trainyard-validator"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"patch"}, ResourceNames: []string{"trainyard-validator"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: []string{"update"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: []string{"create"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: []string{"update"}, ResourceNames: []string{"trainyard-validator"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: []string{"delete"}, ResourceNames: []string{"trainyard-defaulter"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"trainyard-webhook-certs-other"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"update"}, ResourceNames: []string{"rbac-mpi-mpi-ssh-auth"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}, ResourceNames: []string{"rbac-mpi-mpi-ssh-auth"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"rbac-mpi-mpi-ssh-auth-abcdefghij"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}, ResourceNames: []string{"trainyard-secret-name-key"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"delete"}, ResourceNames: []string{"trainyard-secret-name-key"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"delete"}, ResourceNames: []string{"trainyard-webhook-certs"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"patch"}, ResourceNames: []string{"trainyard-webhook-certs"}},
		{APIGroups: []string{"scheduling.k8s.io"}, Resources: []string{"priorityclasses"}, Verbs: []string{"update"}},
	}
	forbidden = append(forbidden, alsoForbidden...)
	// Writes the controller needs in the namespaces of TrainJobs — configmaps
	// create and patch, secrets create, jobsets create, patch and delete, ... —
	// are dangerous in kube-system, kube-public and kube-node-lease, where the
	// default ClusterRole grants them too (RBAC has no deny rule): the chart's
	// ValidatingAdmissionPolicy must refuse each there (systemnamespaces_test.go).
	checkSystemNamespaceWrites(t, r, namespace, nil, leaseIn(t, r)...)
	for _, f := range forbidden {
		if covered, _ := validation.Covers(all, []rbacv1.PolicyRule{f}); covered {
			t.Errorf("the chart's RBAC allows %v %v/%v %v", f.Verbs, f.APIGroups, f.Resources, f.ResourceNames)
		}
	}
	// And what it needs is covered (the same check an API server does when
	// the ClusterRole is bound).
	needed := []rbacv1.PolicyRule{}
	for _, g := range calls {
		rule := rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}, Verbs: []string{g.verb}}
		if g.name != "" {
			rule.ResourceNames = []string{g.name}
		}
		needed = append(needed, rule)
	}
	if covered, missing := validation.Covers(all, needed); !covered {
		t.Errorf("the chart's RBAC misses %+v", missing)
	}
}

func TestRBACCanBeTurnedOff(t *testing.T) {
	r := mustRender(t, `rbac: {create: false}`)
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if got := r.ofKind(kind); len(got) != 0 {
			t.Errorf("%d %s rendered with rbac.create false", len(got), kind)
		}
	}
}
