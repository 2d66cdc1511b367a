package installtest

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
)

const (
	guardRelease   = "guard"
	guardNamespace = "guard-system"
	guardTeam      = "guard-team-a" // an ordinary namespace, for contrast
	// guardProbe is a ConfigMap the test creates in kube-system, the target of the
	// ServiceAccount's patches.
	guardProbe = "trainyard-guard-probe"
)

var jobSetsResource = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// TestChartSystemNamespaceGuard installs the chart with its defaults (one ClusterRole:
// ConfigMap patch and JobSet create granted in every namespace) and authenticates as
// its ServiceAccount with a token of it: the API server (ValidatingAdmissionPolicy, GA
// since Kubernetes 1.30) refuses that ServiceAccount a kube-system ConfigMap patch and
// a JobSet create in kube-system, kube-public and kube-node-lease, names the guard, and
// lets the same writes through in an ordinary namespace (so RBAC grants them: the
// refusal is the policy's) and lets a cluster admin patch kube-system. Every write is a
// dry run: admission runs, nothing is stored.
func TestChartSystemNamespaceGuard(t *testing.T) {
	c := cluster.Shared(t)
	ctx := context.Background()
	root, err := cluster.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{guardNamespace, guardTeam} {
		if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease", guardTeam} {
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: guardProbe, Namespace: ns}, Data: map[string]string{"k": "v"}}
		if _, err := c.Client().CoreV1().ConfigMaps(ns).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Client().CoreV1().ConfigMaps(ns).Delete(context.Background(), guardProbe, metav1.DeleteOptions{})
		})
	}
	installChart(t, c, root, guardNamespace, guardRelease, guardRelease+"-trainyard", map[string]any{"replicas": 0})

	sa := serviceAccount(t, c, guardNamespace, guardRelease)
	token, err := c.Client().CoreV1().ServiceAccounts(guardNamespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.RESTConfig()
	cfg.BearerToken, cfg.BearerTokenFile = token.Status.Token, ""
	cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = nil, nil, "", ""
	cfg.Username, cfg.Password = "", ""
	cfg.Impersonate = rest.ImpersonationConfig{}
	asController := kubernetes.NewForConfigOrDie(cfg)
	asControllerDyn := dynamic.NewForConfigOrDie(cfg)

	dryRun := []string{metav1.DryRunAll}
	patchConfigMap := func(ctx context.Context, client kubernetes.Interface, ns string) error {
		_, err := client.CoreV1().ConfigMaps(ns).Patch(ctx, guardProbe, types.MergePatchType,
			[]byte(`{"data":{"k":"changed"}}`), metav1.PatchOptions{DryRun: dryRun})
		return err
	}
	createJobSet := func(ctx context.Context, ns string) error {
		_, err := asControllerDyn.Resource(jobSetsResource).Namespace(ns).Create(ctx, guardJobSet(ns), metav1.CreateOptions{DryRun: dryRun})
		return err
	}
	// The policy's messageExpression names the ServiceAccount and the namespace (its
	// static message, the fallback when the expression fails, does not).
	refusedByGuard := func(err error) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "rbac.systemNamespaceGuard") &&
			strings.Contains(err.Error(), ":"+sa+" may not ")
	}

	// The API server loads a new policy asynchronously; the first refusal says it is
	// active (until then the dry-run patch passes, and stores nothing).
	seen, last := map[string]bool{}, ""
	cluster.Eventually(t, time.Minute, "the guard refuses the ServiceAccount a kube-system ConfigMap patch", func(ctx context.Context) (bool, string) {
		err := patchConfigMap(ctx, asController, "kube-system")
		if ctx.Err() != nil { // the deadline, not the API server's answer
			return false, last
		}
		if last = "dry-run patch: " + errString(err); !seen[last] {
			seen[last] = true
			t.Logf("the ServiceAccount's %s", last)
		}
		return refusedByGuard(err), last
	})
	for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease"} {
		if err := patchConfigMap(ctx, asController, ns); !refusedByGuard(err) {
			t.Errorf("the ServiceAccount's ConfigMap patch in %s: %v, want 403 from the system-namespace guard", ns, err)
		}
		if err := createJobSet(ctx, ns); !refusedByGuard(err) {
			t.Errorf("the ServiceAccount's JobSet create in %s: %v, want 403 from the system-namespace guard", ns, err)
		}
		_, err := asController.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "guard-probe", Namespace: ns}},
			metav1.CreateOptions{DryRun: dryRun})
		if !refusedByGuard(err) {
			t.Errorf("the ServiceAccount's Secret create in %s: %v, want 403 from the system-namespace guard", ns, err)
		}
	}
	// The same writes in an ordinary namespace pass: RBAC grants them, so the refusals
	// above are the policy's, not RBAC's.
	if err := patchConfigMap(ctx, asController, guardTeam); err != nil {
		t.Errorf("the ServiceAccount's ConfigMap patch in %s: %v, want allowed (RBAC grants it)", guardTeam, err)
	}
	if err := createJobSet(ctx, guardTeam); err != nil {
		t.Errorf("the ServiceAccount's JobSet create in %s: %v, want allowed (RBAC grants it)", guardTeam, err)
	}
	// Only the controller's ServiceAccount is concerned: an admin still may.
	if err := patchConfigMap(ctx, c.Client(), "kube-system"); err != nil {
		t.Errorf("a cluster admin's ConfigMap patch in kube-system: %v, want allowed", err)
	}
}

// guardJobSet is the smallest valid JobSet: one Job of one pod.
func guardJobSet(ns string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": "guard-probe", "namespace": ns},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{
			"name": "node", "replicas": int64(1),
			"template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"restartPolicy": "Never",
				"containers":    []any{map[string]any{"name": "node", "image": "busybox"}},
			}}}},
		}}},
	}}
}

func errString(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
