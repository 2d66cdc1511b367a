// Package installtest installs the Helm chart on the local control plane and runs the
// controller with the chart's ServiceAccount credentials: proof that the chart's RBAC
// is enough for a TrainJob to run to Complete, and no broader than needed.
package installtest

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
)

const (
	release   = "trainyard"
	namespace = "trainyard-system"
)

func TestMain(m *testing.M) { os.Exit(cluster.ForTests(m)) }

func TestChartRBACRunsATrainJobAndNoMore(t *testing.T) {
	c := cluster.Shared(t)
	ctx := context.Background()
	root, err := cluster.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// helm install, without CRDs (the cluster has them) and without the Deployment: the
	// controller runs out of cluster below, as the chart's ServiceAccount.
	installChart(t, c, root, namespace, release, release, map[string]any{"replicas": 0})
	// The certificate Secret exists before the controller runs: it needs no "create".
	if _, err := c.Client().CoreV1().Secrets(namespace).Get(ctx, release+"-webhook-certs", metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's webhook certificate Secret: %v", err)
	}

	sa, controllerLog := runAsServiceAccount(t, c, root, namespace, release, "trainyard-chart-rbac.log")

	// As an admin: a runtime and a TrainJob; the controller must take it to Complete.
	trainers := trainerclient.NewForConfigOrDie(c.RESTConfig())
	runtime := &trainer.ClusterTrainingRuntime{}
	data, err := os.ReadFile(filepath.Join(root, "examples", "torch-distributed-runtime.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, runtime); err != nil {
		t.Fatal(err)
	}
	runtime.Name = "chart-rbac-torch"
	if _, err := trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(ctx, runtime, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tj := &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac", Namespace: namespace},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: runtime.Name},
			Trainer:    &trainer.Trainer{NumNodes: ptr.To[int32](2)},
		},
	}
	if _, err := trainers.TrainerV1alpha1().TrainJobs(namespace).Create(ctx, tj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, 2*time.Minute, "TrainJob Complete (controller log: "+controllerLog+")", func(ctx context.Context) (bool, string) {
		got, err := trainers.TrainerV1alpha1().TrainJobs(namespace).Get(ctx, tj.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobComplete), conditionsOf(got)
	})

	// An MPI TrainJob: its SSH Secret is created with the "create" verb alone, its
	// hostfile ConfigMap server-side applied.
	mpiRuntime := &trainer.ClusterTrainingRuntime{}
	if err := yaml.UnmarshalStrict([]byte(mpiRuntimeYAML), mpiRuntime); err != nil {
		t.Fatal(err)
	}
	if _, err := trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(ctx, mpiRuntime, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mpiJob := &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-mpi", Namespace: namespace},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: mpiRuntime.Name},
			Trainer:    &trainer.Trainer{NumNodes: ptr.To[int32](2)},
		},
	}
	if _, err := trainers.TrainerV1alpha1().TrainJobs(namespace).Create(ctx, mpiJob, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, 2*time.Minute, "MPI TrainJob Complete (controller log: "+controllerLog+")", func(ctx context.Context) (bool, string) {
		got, err := trainers.TrainerV1alpha1().TrainJobs(namespace).Get(ctx, mpiJob.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobComplete), conditionsOf(got)
	})
	// Its name ends in a suffix only the controller can compute (the test, as admin,
	// finds it by its label).
	mpiSecrets, err := c.Client().CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: "trainyard.dev/trainjob-name=rbac-mpi"})
	if err != nil || len(mpiSecrets.Items) != 1 || !strings.HasPrefix(mpiSecrets.Items[0].Name, "rbac-mpi-mpi-ssh-auth-") {
		t.Fatalf("the MPI SSH Secret: %v, %v; want one rbac-mpi-mpi-ssh-auth-<suffix>", mpiSecrets, err)
	}
	mpiSecret := mpiSecrets.Items[0].Name
	if _, err := c.Client().CoreV1().ConfigMaps(namespace).Get(ctx, "rbac-mpi-mpi-hostfile", metav1.GetOptions{}); err != nil {
		t.Errorf("the MPI hostfile ConfigMap: %v", err)
	}

	// Self-managed webhook certificates: the Secret and the two configurations, by
	// name, and the PriorityClass informer of the admission rules.
	access := serviceAccountMay(t, c, namespace, sa)
	var needed []authorizationv1.ResourceAttributes
	for _, verb := range []string{"get", "list", "watch", "update"} {
		needed = append(needed,
			authorizationv1.ResourceAttributes{Verb: verb, Resource: "secrets", Name: release + "-webhook-certs", Namespace: namespace},
			authorizationv1.ResourceAttributes{Verb: verb, Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: release + "-validator"},
			authorizationv1.ResourceAttributes{Verb: verb, Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: release + "-defaulter"})
	}
	for _, verb := range []string{"get", "list", "watch"} {
		needed = append(needed, authorizationv1.ResourceAttributes{Verb: verb, Group: "scheduling.k8s.io", Resource: "priorityclasses"})
	}
	// The progress server (on by default): TokenReviews, the pod a token names, and the
	// CA ConfigMap by name in any namespace (list and watch with a metadata.name field
	// selector are authorized by name; the apply by the side-object rule's create and patch).
	needed = append(needed,
		authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"},
		authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Name: "some-trainer-pod", Namespace: "team-a"})
	// The authenticated metrics endpoint (metrics.auth.enabled, on by default): a
	// scraper's token (the TokenReview above) and its right to get /metrics; and the
	// OptimizationJob webhook: whether the creator may create the trials.
	needed = append(needed, authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"})
	for _, verb := range []string{"list", "watch", "delete", "create", "patch"} {
		needed = append(needed, authorizationv1.ResourceAttributes{Verb: verb, Resource: "configmaps", Name: "trainyard-status-server-ca", Namespace: "team-a"})
	}
	// The Secret-name key, by name in the release namespace.
	for _, verb := range []string{"get", "update"} {
		needed = append(needed, authorizationv1.ResourceAttributes{Verb: verb, Resource: "secrets", Name: release + "-secret-name-key", Namespace: namespace})
	}
	// ttlSecondsAfterFinished (KEP-2899): the controller deletes a finished TrainJob.
	needed = append(needed, authorizationv1.ResourceAttributes{Verb: "delete", Group: trainer.GroupName, Resource: "trainjobs", Namespace: "team-a"})
	// Create-only side objects (Secrets) anywhere.
	needed = append(needed, authorizationv1.ResourceAttributes{Verb: "create", Resource: "secrets", Namespace: "team-a"})
	// The side-object informers (metadata only, labelled objects only; RBAC cannot
	// say either) in every namespace. Not Secrets.
	for _, r := range []authorizationv1.ResourceAttributes{{Resource: "configmaps"}, {Group: "scheduling.k8s.io", Resource: "workloads"}} {
		for _, verb := range []string{"list", "watch"} {
			r.Verb = verb
			needed = append(needed, r)
		}
	}
	for _, attrs := range needed {
		if !access(attrs) {
			t.Errorf("the chart's ServiceAccount may not %s %s/%s %q in %q; self-managed certificates and admission need it", attrs.Verb, attrs.Group, attrs.Resource, attrs.Name, attrs.Namespace)
		}
	}

	// And no more than needed: what the ServiceAccount must not do. It cannot read
	// Secrets anywhere: no get, list or watch, cluster-wide or in any namespace, but
	// for its two Secrets by name in its own namespace.
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "get", Resource: "secrets"},
		{Verb: "list", Resource: "secrets"},
		{Verb: "watch", Resource: "secrets"},
		{Verb: "list", Resource: "secrets", Namespace: namespace},
		{Verb: "watch", Resource: "secrets", Namespace: namespace},
		{Verb: "get", Resource: "secrets", Namespace: "team-a"},
		{Verb: "list", Resource: "secrets", Namespace: "kube-system"},
		{Verb: "get", Resource: "secrets", Name: mpiSecret, Namespace: namespace},
		{Verb: "list", Resource: "secrets", Name: release + "-secret-name-key", Namespace: namespace},
		{Verb: "get", Resource: "secrets", Name: release + "-secret-name-key", Namespace: "default"},
		{Verb: "update", Resource: "secrets", Namespace: namespace},
		{Verb: "patch", Resource: "secrets", Namespace: namespace},
		{Verb: "delete", Resource: "secrets", Namespace: namespace},
		{Verb: "get", Resource: "configmaps", Namespace: namespace},
		{Verb: "delete", Resource: "configmaps", Namespace: namespace},
		{Verb: "list", Resource: "pods"},
		{Verb: "watch", Resource: "pods", Namespace: namespace},
		{Verb: "update", Resource: "configmaps", Namespace: namespace},
		{Verb: "delete", Resource: "configmaps", Name: "rbac-mpi-mpi-hostfile", Namespace: namespace},
		{Verb: "create", Resource: "pods", Namespace: namespace},
		// delete on trainjobs is granted for ttlSecondsAfterFinished (KEP-2899); on the
		// other trainer kinds, and deletecollection on any, it is not.
		{Verb: "deletecollection", Group: trainer.GroupName, Resource: "trainjobs", Namespace: namespace},
		{Verb: "delete", Group: trainer.GroupName, Resource: "trainingruntimes", Namespace: namespace},
		{Verb: "update", Group: trainer.GroupName, Resource: "trainingruntimes", Namespace: namespace},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: "kube-scheduler", Namespace: namespace},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"},
		{Verb: "create", Group: "batch", Resource: "jobs", Namespace: namespace},
		{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
		// Certificates: other Secrets, other webhook configurations, other verbs.
		{Verb: "get", Resource: "secrets", Name: release + "-webhook-certs", Namespace: "default"},
		{Verb: "delete", Resource: "secrets", Name: release + "-webhook-certs", Namespace: namespace},
		{Verb: "patch", Resource: "secrets", Name: release + "-webhook-certs", Namespace: namespace},
		{Verb: "create", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"},
		{Verb: "list", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"},
		{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "some-other-validator"},
		{Verb: "delete", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: release + "-validator"},
		{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: "some-other-defaulter"},
		{Verb: "create", Group: "scheduling.k8s.io", Resource: "priorityclasses"},
	} {
		if access(attrs) {
			t.Errorf("the chart's ServiceAccount may %s %s/%s %q in %q; it must not", attrs.Verb, attrs.Group, attrs.Resource, attrs.Name, attrs.Namespace)
		}
	}
}

// mpiRuntimeYAML is a minimal MPI runtime in the shape of upstream's
// deepspeed-distributed: workers that stay up, a launcher that starts once they are
// Ready and decides success.
const mpiRuntimeYAML = `
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: chart-rbac-mpi
spec:
  mlPolicy:
    numNodes: 1
    mpi:
      runLauncherAsNode: true
  template:
    spec:
      successPolicy:
        operator: All
        targetReplicatedJobs: [launcher]
      replicatedJobs:
        - name: node
          template:
            spec:
              template:
                metadata:
                  annotations:
                    pod-complete.stage.kwok.x-k8s.io/delay: 5m
                spec:
                  containers:
                    - name: node
                      image: ghcr.io/kubeflow/trainer/deepspeed-runtime
        - name: launcher
          dependsOn:
            - name: node
              status: Ready
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: ghcr.io/kubeflow/trainer/deepspeed-runtime
`

// installChart installs the chart from root as release in ns with values, without its
// CRDs (the cluster has them). Admission is on by default (self-managed certificates),
// but no API server can reach a controller running out of cluster through the chart's
// Service: with failurePolicy Fail every TrainJob write would be refused. So it removes
// the two webhook configurations the release made (fullname-validator and
// fullname-defaulter; the e2e tests cover admission, with the controller registering
// itself over 127.0.0.1) and keeps everything else, the RBAC for the certificates in
// particular, which the tests' SubjectAccessReviews check.
func installChart(t *testing.T, c *cluster.Cluster, root, ns, rel, fullname string, values map[string]any) {
	t.Helper()
	ctx := context.Background()
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig, getter.Namespace = ptr.To(c.Kubeconfig()), ptr.To(ns)
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, ns, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	chart, err := loader.Load(filepath.Join(root, "charts", "trainyard"))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.SkipCRDs = rel, ns, true
	if _, err := install.Run(chart, values); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	admissionAPI := c.Client().AdmissionregistrationV1()
	if err := admissionAPI.ValidatingWebhookConfigurations().Delete(ctx, fullname+"-validator", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the chart's ValidatingWebhookConfiguration: %v", err)
	}
	if err := admissionAPI.MutatingWebhookConfigurations().Delete(ctx, fullname+"-defaulter", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the chart's MutatingWebhookConfiguration: %v", err)
	}
}

// runAsServiceAccount runs the controller built from root out of cluster, with the
// credentials of the ServiceAccount that release rel made in ns and the configuration
// file the chart rendered, until the test ends. It returns once the controller is
// ready — every informer synced, which a forbidden list or watch would prevent — with
// the ServiceAccount's name and the path of the controller's log (logName in the
// cluster's log folder).
func runAsServiceAccount(t *testing.T, c *cluster.Cluster, root, ns, rel, logName string) (sa, logPath string) {
	t.Helper()
	ctx := context.Background()
	sa = serviceAccount(t, c, ns, rel)
	token, err := c.Client().CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeKubeconfig(t, c, ns, token.Status.Token, kubeconfig)
	configPath := filepath.Join(dir, "config.yaml")
	writeChartConfig(t, c, ns, rel, configPath)

	health := cluster.FreeAddr(t)
	controller := exec.Command(binary(t, root), "--config="+configPath, "--kubeconfig="+kubeconfig,
		"--metrics-bind-address=0", "--health-probe-bind-address="+health, "--log-format=text")
	controller.Env = append(os.Environ(), "POD_NAMESPACE="+ns)
	logFile, err := os.Create(filepath.Join(c.LogDir(), logName))
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
	cluster.Eventually(t, time.Minute, "controller ready as the chart's ServiceAccount (log: "+logFile.Name()+")", func(context.Context) (bool, string) {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return sa, logFile.Name()
}

// serviceAccountMay returns a function that asks the API server, with a
// SubjectAccessReview, whether ServiceAccount sa of ns may do what attrs say.
func serviceAccountMay(t *testing.T, c *cluster.Cluster, ns, sa string) func(attrs authorizationv1.ResourceAttributes) bool {
	user := "system:serviceaccount:" + ns + ":" + sa
	return func(attrs authorizationv1.ResourceAttributes) bool {
		t.Helper()
		review, err := c.Client().AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts"}, ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
}

// serviceAccount returns the name of the ServiceAccount release rel made in ns.
func serviceAccount(t *testing.T, c *cluster.Cluster, ns, rel string) string {
	t.Helper()
	list, err := c.Client().CoreV1().ServiceAccounts(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rel})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the chart's ServiceAccount: %v (found %d)", err, len(list.Items))
	}
	return list.Items[0].Name
}

// writeChartConfig writes the Configuration file release rel rendered into its
// ConfigMap in ns.
func writeChartConfig(t *testing.T, c *cluster.Cluster, ns, rel, path string) {
	t.Helper()
	list, err := c.Client().CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rel})
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

// writeKubeconfig writes a kubeconfig for the cluster's API server that authenticates
// with token, ns its default namespace.
func writeKubeconfig(t *testing.T, c *cluster.Cluster, ns, token, path string) {
	t.Helper()
	rc := c.RESTConfig()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData, InsecureSkipTLSVerify: rc.Insecure}
	cfg.AuthInfos["trainyard"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["trainyard"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "trainyard", Namespace: ns}
	cfg.CurrentContext = "trainyard"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// binary returns $TRAINYARD_BIN or builds cmd/trainyard.
func binary(t *testing.T, root string) string {
	t.Helper()
	if bin := os.Getenv("TRAINYARD_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "trainyard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/trainyard")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the controller: %v\n%s", err, out)
	}
	return bin
}

func conditionsOf(tj *trainer.TrainJob) string {
	out := ""
	for _, c := range tj.Status.Conditions {
		out += c.Type + "=" + string(c.Status) + "(" + c.Reason + ") "
	}
	return out
}
