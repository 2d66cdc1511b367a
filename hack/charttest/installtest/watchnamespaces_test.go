package installtest

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

	installChart(t, c, root, scopedNamespace, scopedRelease, scopedRelease+"-trainyard",
		map[string]any{"replicas": 0, "watchNamespaces": []any{scopedWatched, scopedWatched2}})
	// Ready means every informer synced: with only Roles, a cluster-wide list would be
	// forbidden and the controller would never get here.
	sa, controllerLog := runAsServiceAccount(t, c, root, scopedNamespace, scopedRelease, "trainyard-chart-watch-namespaces.log")

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
	cluster.Eventually(t, 2*time.Minute, "MPI TrainJob in a watched namespace Complete (controller log: "+controllerLog+")", func(ctx context.Context) (bool, string) {
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

	access := serviceAccountMay(t, c, scopedNamespace, sa)
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
