package installtest

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
)

// The namespace-scoped install: its own release and namespace, beside the cluster-wide
// one of TestChartRBACRunsATrainJobAndNoMore.
const (
	scopedRelease   = "scoped"
	scopedNamespace = "scoped-system"
	scopedWatched   = "scoped-team-a"
	scopedWatched2  = "scoped-team-b"
	scopedOther     = "scoped-team-c" // exists, not watched
)

// TestChartWatchNamespaces installs the chart with watchNamespaces and runs the
// controller as its ServiceAccount: an MPI TrainJob (hostfile ConfigMap, SSH Secret) in
// a watched namespace runs to Complete with only the per-namespace Roles, one in
// another namespace is never touched, and SubjectAccessReviews prove the ServiceAccount
// cannot write ConfigMaps or create Secrets outside the watched namespaces (kube-system,
// default, the unwatched one), can in the watched ones, and cannot read ConfigMaps or
// Secrets cluster-wide, nor Secrets anywhere.
func TestChartWatchNamespaces(t *testing.T) {
	c := cluster.Shared(t)
	ctx := context.Background()
	root, err := cluster.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{scopedNamespace, scopedWatched, scopedWatched2, scopedOther} {
		if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig, getter.Namespace = ptr.To(c.Kubeconfig()), ptr.To(scopedNamespace)
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, scopedNamespace, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	chart, err := loader.Load(filepath.Join(root, "charts", "trainyard"))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.SkipCRDs = scopedRelease, scopedNamespace, true
	values := map[string]any{"replicas": 0, "watchNamespaces": []any{scopedWatched, scopedWatched2}}
	if _, err := install.Run(chart, values); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	// As in TestChartRBACRunsATrainJobAndNoMore: no API server reaches a controller
	// running out of cluster through the chart's Service.
	fullname := scopedRelease + "-trainyard"
	admissionAPI := c.Client().AdmissionregistrationV1()
	if err := admissionAPI.ValidatingWebhookConfigurations().Delete(ctx, fullname+"-validator", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the chart's ValidatingWebhookConfiguration: %v", err)
	}
	if err := admissionAPI.MutatingWebhookConfigurations().Delete(ctx, fullname+"-defaulter", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the chart's MutatingWebhookConfiguration: %v", err)
	}

	sa := serviceAccountOf(t, c, scopedNamespace, scopedRelease)
	token, err := c.Client().CoreV1().ServiceAccounts(scopedNamespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeKubeconfig(t, c, token.Status.Token, kubeconfig)
	configPath := filepath.Join(dir, "config.yaml")
	writeChartConfigOf(t, c, scopedNamespace, scopedRelease, configPath)

	health := cluster.FreeAddr(t)
	controller := exec.Command(binary(t, root), "--config="+configPath, "--kubeconfig="+kubeconfig,
		"--metrics-bind-address=0", "--health-probe-bind-address="+health, "--log-format=text")
	controller.Env = append(os.Environ(), "POD_NAMESPACE="+scopedNamespace)
	logFile, err := os.Create(filepath.Join(c.LogDir(), "trainyard-chart-watch-namespaces.log"))
	if err != nil {
		t.Fatal(err)
	}
	controller.Stdout, controller.Stderr = logFile, logFile
	controller.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := controller.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = controller.Process.Signal(syscall.SIGTERM)
		_ = controller.Wait()
		logFile.Close()
	})
	// Ready means every informer synced: with only Roles, a cluster-wide list would be
	// forbidden and the controller would never get here.
	cluster.Eventually(t, time.Minute, "controller ready with namespaced Roles (log: "+logFile.Name()+")", func(context.Context) (bool, string) {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})

	trainers := trainerclient.NewForConfigOrDie(c.RESTConfig())
	runtime := &trainer.ClusterTrainingRuntime{}
	if err := yaml.UnmarshalStrict([]byte(mpiRuntimeYAML), runtime); err != nil {
		t.Fatal(err)
	}
	runtime.Name = "chart-scoped-mpi"
	if _, err := trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(ctx, runtime, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{scopedOther, scopedWatched} {
		tj := &trainer.TrainJob{
			ObjectMeta: metav1.ObjectMeta{Name: "scoped-mpi", Namespace: ns},
			Spec:       trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: runtime.Name}, Trainer: &trainer.Trainer{NumNodes: ptr.To[int32](2)}},
		}
		if _, err := trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, tj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cluster.Eventually(t, 2*time.Minute, "MPI TrainJob in a watched namespace Complete (controller log: "+logFile.Name()+")", func(ctx context.Context) (bool, string) {
		got, err := trainers.TrainerV1alpha1().TrainJobs(scopedWatched).Get(ctx, "scoped-mpi", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobComplete), conditionsOf(got)
	})
	if _, err := c.Client().CoreV1().ConfigMaps(scopedWatched).Get(ctx, "scoped-mpi-mpi-hostfile", metav1.GetOptions{}); err != nil {
		t.Errorf("the MPI hostfile ConfigMap in the watched namespace: %v", err)
	}
	// The TrainJob created first, in the unwatched namespace, was never seen: no
	// status, no JobSet, no side object.
	other, err := trainers.TrainerV1alpha1().TrainJobs(scopedOther).Get(ctx, "scoped-mpi", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(other.Status.Conditions) > 0 {
		t.Errorf("the TrainJob in unwatched namespace %s has conditions %s", scopedOther, conditionsOf(other))
	}
	if _, err := c.Client().CoreV1().ConfigMaps(scopedOther).Get(ctx, "scoped-mpi-mpi-hostfile", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("hostfile ConfigMap in unwatched namespace %s: %v, want NotFound", scopedOther, err)
	}
	if secrets, err := c.Client().CoreV1().Secrets(scopedOther).List(ctx, metav1.ListOptions{LabelSelector: "trainyard.dev/trainjob-name=scoped-mpi"}); err != nil || len(secrets.Items) > 0 {
		t.Errorf("Secrets in unwatched namespace %s: %d, %v; want none", scopedOther, len(secrets.Items), err)
	}
	jobSetsGVR := schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
	jobsets, err := c.Dynamic().Resource(jobSetsGVR).Namespace(scopedOther).List(ctx, metav1.ListOptions{})
	if err != nil || len(jobsets.Items) > 0 {
		t.Errorf("JobSets in unwatched namespace %s: %v; want none", scopedOther, err)
	}

	user := "system:serviceaccount:" + scopedNamespace + ":" + sa
	access := func(attrs authorizationv1.ResourceAttributes) bool {
		t.Helper()
		review, err := c.Client().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts"}, ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
	// What the side objects and the informers need, in each watched namespace.
	var allowed []authorizationv1.ResourceAttributes
	for _, ns := range []string{scopedWatched, scopedWatched2} {
		for _, verb := range []string{"create", "patch", "list", "watch"} {
			allowed = append(allowed, authorizationv1.ResourceAttributes{Verb: verb, Resource: "configmaps", Namespace: ns})
		}
		allowed = append(allowed,
			authorizationv1.ResourceAttributes{Verb: "create", Resource: "secrets", Namespace: ns},
			authorizationv1.ResourceAttributes{Verb: "list", Group: trainer.GroupName, Resource: "trainjobs", Namespace: ns},
			authorizationv1.ResourceAttributes{Verb: "patch", Group: "jobset.x-k8s.io", Resource: "jobsets", Namespace: ns})
	}
	allowed = append(allowed, authorizationv1.ResourceAttributes{Verb: "list", Group: trainer.GroupName, Resource: "clustertrainingruntimes"})
	for _, attrs := range allowed {
		if !access(attrs) {
			t.Errorf("the ServiceAccount may not %s %s/%s in watched namespace %q; the controller needs it", attrs.Verb, attrs.Group, attrs.Resource, attrs.Namespace)
		}
	}
	// Outside the watched namespaces: no ConfigMap write, no Secret create, no
	// TrainJob or JobSet access; cluster-wide: no ConfigMap or Secret read; Secrets
	// readable nowhere.
	var denied []authorizationv1.ResourceAttributes
	for _, ns := range []string{"kube-system", "default", scopedOther, scopedNamespace} {
		for _, verb := range []string{"create", "patch", "update", "list", "watch", "get"} {
			denied = append(denied, authorizationv1.ResourceAttributes{Verb: verb, Resource: "configmaps", Namespace: ns})
		}
		denied = append(denied,
			authorizationv1.ResourceAttributes{Verb: "create", Resource: "secrets", Namespace: ns},
			authorizationv1.ResourceAttributes{Verb: "list", Group: trainer.GroupName, Resource: "trainjobs", Namespace: ns},
			authorizationv1.ResourceAttributes{Verb: "patch", Group: trainer.GroupName, Resource: "trainjobs", Subresource: "status", Namespace: ns},
			authorizationv1.ResourceAttributes{Verb: "patch", Group: "jobset.x-k8s.io", Resource: "jobsets", Namespace: ns},
			authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: ns})
	}
	for _, verb := range []string{"get", "list", "watch"} {
		denied = append(denied,
			authorizationv1.ResourceAttributes{Verb: verb, Resource: "configmaps"},
			authorizationv1.ResourceAttributes{Verb: verb, Resource: "secrets"},
			authorizationv1.ResourceAttributes{Verb: verb, Group: trainer.GroupName, Resource: "trainjobs"},
			authorizationv1.ResourceAttributes{Verb: verb, Group: "jobset.x-k8s.io", Resource: "jobsets"})
		for _, ns := range []string{scopedWatched, scopedWatched2, "kube-system"} {
			denied = append(denied, authorizationv1.ResourceAttributes{Verb: verb, Resource: "secrets", Namespace: ns})
		}
	}
	denied = append(denied,
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps"},
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "secrets"},
		authorizationv1.ResourceAttributes{Verb: "update", Resource: "secrets", Namespace: scopedWatched},
		authorizationv1.ResourceAttributes{Verb: "delete", Resource: "configmaps", Namespace: scopedWatched})
	for _, attrs := range denied {
		if access(attrs) {
			t.Errorf("the ServiceAccount may %s %s/%s%s in %q; with watchNamespaces it must not", attrs.Verb, attrs.Group, attrs.Resource, subresource(attrs), attrs.Namespace)
		}
	}
}

func subresource(attrs authorizationv1.ResourceAttributes) string {
	if attrs.Subresource == "" {
		return ""
	}
	return "/" + attrs.Subresource
}

// serviceAccountOf returns the name of the ServiceAccount release created in namespace.
func serviceAccountOf(t *testing.T, c *cluster.Cluster, namespace, release string) string {
	t.Helper()
	list, err := c.Client().CoreV1().ServiceAccounts(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the chart's ServiceAccount: %v (found %d)", err, len(list.Items))
	}
	return list.Items[0].Name
}

// writeChartConfigOf writes the Configuration file release rendered into its ConfigMap
// in namespace.
func writeChartConfigOf(t *testing.T, c *cluster.Cluster, namespace, release, path string) {
	t.Helper()
	list, err := c.Client().CoreV1().ConfigMaps(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		if data, ok := cm.Data["config.yaml"]; ok {
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no ConfigMap with config.yaml among the chart's %d ConfigMaps", len(list.Items))
}
