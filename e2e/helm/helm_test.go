package helm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/training"
	"github.com/trainyard/trainyard/pkg/admission/admissiontest"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

const (
	release   = "trainyard"
	namespace = "trainyard-system"
	// imageRepository is the chart's default image.repository without its registry:
	// the real node pulls ghcr.io/<imageRepository> from the cluster's registry.
	imageRepository = "trainyard/trainyard"
	// installTimeout bounds `helm install --wait`: the image pulled, both replicas
	// started, their caches synced and a serving certificate issued.
	installTimeout  = 5 * time.Minute
	trainingTimeout = 6 * time.Minute
)

// leg is the state the ordered steps of TestChartLifecycle share.
type leg struct {
	c        *cluster.Cluster
	repo     string
	trainers trainerclient.Interface
	// scrape is the cluster's Prometheus scraping the controller Pods, from the
	// step that configures it on.
	scrape *scrape
	// image is the digest of the controller image index pushed (pushImage), and
	// imageDigests holds it and its platform images' digests: what a controller
	// container's imageID may name.
	image        string
	imageDigests map[string]bool
}

// helm runs the helm CLI against the cluster and returns its combined output; a
// failure fails the test with it.
func (l *leg) helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := l.helmResult(args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (l *leg) helmResult(args ...string) (string, error) {
	cmd := exec.Command(l.c.BinaryPath(cluster.Helm), append(args, "--kubeconfig", l.c.Kubeconfig())...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(l.c.WorkDir(), "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(l.c.WorkDir(), "helm", "config"), "HELM_DATA_HOME="+filepath.Join(l.c.WorkDir(), "helm", "data"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// imageLayout is the OCI image layout of the controller image (EnvImageLayout).
func imageLayout() string { return os.Getenv(EnvImageLayout) }

// chartDir is charts/trainyard of the repository.
func (l *leg) chartDir() string { return filepath.Join(l.repo, "charts", "trainyard") }

// kubectlStdin runs the cluster's kubectl with stdin and returns its combined output.
func (l *leg) kubectlStdin(stdin string, args ...string) (string, error) {
	cmd := exec.Command(l.c.BinaryPath(cluster.Kubectl), append(args, "--kubeconfig", l.c.Kubeconfig())...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// appVersion returns the chart's appVersion, the image tag it deploys by default.
func appVersion(t *testing.T, repo string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "charts", "trainyard", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml: no appVersion (%v)", err)
	}
	return chart.AppVersion
}

// pushImage pushes the image index of the OCI layout dir to the cluster's registry as
// <imageRepository>:<tag>, where the node finds the chart's default image, and records
// its digest (leg.image).
func (l *leg) pushImage(t *testing.T, dir, tag string) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("%s: %v (make image writes it)", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("%s: want one image index, got %v (%v)", dir, m, err)
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(l.c.RegistryHost() + "/" + imageRepository + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatalf("pushing the controller image to %s: %v", ref, err)
	}
	platforms, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	l.image, l.imageDigests = m.Manifests[0].Digest.String(), map[string]bool{m.Manifests[0].Digest.String(): true}
	for _, p := range platforms.Manifests {
		l.imageDigests[p.Digest.String()] = true
	}
	t.Logf("controller image %s pushed as %s", m.Manifests[0].Digest, ref)
}

// checkPodsRunPushedImage fails for each of pods whose controller container runs
// another image than the one pushed last (leg.image).
func (l *leg) checkPodsRunPushedImage(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if _, digest, _ := strings.Cut(cs.ImageID, "@"); !l.imageDigests[digest] {
				t.Errorf("pod %s runs image %s, not the image pushed (%s): a copy the node pulled earlier under the same tag?", p.Name, cs.ImageID, l.image)
			}
		}
	}
}

// TestChartLifecycle installs the chart as a platform team does and checks what they
// rely on, in order: both replicas Ready under the chart's securityContext, admission
// through the chart's Service, a real DDP TrainJob reporting progress through it, and
// an uninstall that leaves no webhook behind.
func TestChartLifecycle(t *testing.T) {
	c := cluster.Shared(t)
	repo, err := cluster.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	l := &leg{c: c, repo: repo}
	if l.trainers, err = trainerclient.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", l.helm(t, "version", "--short"))
	l.pushImage(t, imageLayout(), appVersion(t, repo))

	steps := []struct {
		name string
		run  func(*testing.T, *leg)
	}{
		{"install", testInstall},
		{"Prometheus scrapes both Pods with the ServiceMonitor's token", testPrometheusScrapesThePods},
		{"admission through the Service", testAdmissionThroughTheService},
		{"training reports progress through the Service", testTrainingReportsThroughTheService},
		{"failover of the leader Pod under 200 creates", testFailover},
		{"Prometheus follows the Pods after the failover", testPrometheusFollowsThePods},
		{"upgrade under a create loop, then the CRD upgrade step", testUpgrade},
		{"Prometheus follows the Pods after the upgrade", testPrometheusFollowsThePods},
		{"uninstall", testUninstall},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, l) }) {
			t.Fatalf("step %q failed; the later steps build on it", s.name)
		}
	}
}

// installCommand is README.md's install command, as the leg runs it. The leg adds the
// pushed image's digest (image.digest): the real node keeps the images it pulled across
// runs (cluster.RealNodeState.ContainerdRoot), and with the chart's pullPolicy
// IfNotPresent a tag pushed again with other content would run the image an earlier
// run pulled.
var installCommand = []string{"install", release, "charts/trainyard", "--namespace", namespace, "--create-namespace", "--wait"}

// testInstall: `helm install` with the chart's defaults (its CRDs, two replicas, the
// self-managed certificates, the default image) and its ServiceMonitor, as in a
// cluster that runs Prometheus Operator, on the real node: both Pods Ready, each
// controller process running as the chart's non-root user.
func testInstall(t *testing.T, l *leg) {
	l.installServiceMonitorCRD(t)
	args := append(append(append([]string{}, installCommand...), "--timeout", installTimeout.String()), monitoringValues...)
	args[2] = l.chartDir()
	args = append(args, "--set", "image.digest="+l.image)
	if set := os.Getenv(EnvHelmSet); set != "" {
		t.Logf("installing with --set %s (%s): a step is meant to fail", set, EnvHelmSet)
		args = append(args, "--set", set)
	}
	start := time.Now()
	out, err := l.helmResult(args...)
	if err != nil {
		t.Fatalf("helm install: %v\n%s\n%s", err, out, l.describeControllerPods())
	}
	t.Logf("helm install --wait: %s", time.Since(start).Round(100*time.Millisecond))
	ctx := context.Background()
	dep, err := l.c.Client().AppsV1().Deployments(namespace).Get(ctx, release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Status.ReadyReplicas != 2 || ptrValue(dep.Spec.Replicas) != 2 {
		t.Fatalf("deployment %s: %d/%d ready, want 2/2\n%s", release, dep.Status.ReadyReplicas, ptrValue(dep.Spec.Replicas), l.describeControllerPods())
	}
	pods := l.controllerPods(t, dep)
	l.checkPodsRunPushedImage(t, pods)
	for _, p := range pods {
		if p.Spec.NodeName != cluster.RealNodeName {
			t.Errorf("pod %s on %q, want the real node", p.Name, p.Spec.NodeName)
		}
		sc := p.Spec.Containers[0].SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("pod %s: container securityContext %+v, want the chart's (read-only root, drop ALL)", p.Name, sc)
		}
	}
	// The processes themselves, as the kernel sees them: the image's /trainyard, as
	// user 65532, in as many processes as Ready replicas.
	uids := controllerProcessUIDs(t)
	if len(uids) != 2 {
		t.Errorf("%d controller processes on this machine (uids %v), want 2", len(uids), uids)
	}
	for _, uid := range uids {
		if uid != "65532" {
			t.Errorf("a controller process runs as uid %s, want 65532", uid)
		}
	}
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func (l *leg) controllerPods(t *testing.T, dep *appsv1.Deployment) []corev1.Pod {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := l.c.Client().CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// describeControllerPods lists the release's pods with their states and recent logs,
// for a failure's message.
func (l *leg) describeControllerPods() string {
	ctx := context.Background()
	pods, err := l.c.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: phase %s on %q, conditions %v\n", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Conditions)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  container %s: ready %v, restarts %d, state %+v\n", cs.Name, cs.Ready, cs.RestartCount, cs.State)
		}
		tail := int64(30)
		if log, err := l.c.Client().CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx); err == nil {
			fmt.Fprintf(&b, "  log:\n%s\n", log)
		}
	}
	events, _ := l.c.Client().CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if events != nil {
		for _, e := range events.Items {
			fmt.Fprintf(&b, "event %s %s/%s: %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return b.String()
}

// controllerProcessUIDs returns the real uid of every process on this machine whose
// command line starts with the image's entrypoint, /trainyard.
func controllerProcessUIDs(t *testing.T) []string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	uidLine := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`)
	var uids []string
	for _, path := range procs {
		cmdline, err := os.ReadFile(path)
		if err != nil || !bytes.HasPrefix(cmdline, []byte("/trainyard\x00")) {
			continue
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(path), "status"))
		if err != nil {
			continue
		}
		if m := uidLine.FindSubmatch(status); m != nil {
			uids = append(uids, string(m[1]))
		}
	}
	return uids
}

// testAdmissionThroughTheService: the chart registers its webhooks by Service, and a
// TrainJob the project's rules refuse is refused with the project's message.
func testAdmissionThroughTheService(t *testing.T, l *leg) {
	ctx := context.Background()
	vwcs, err := l.c.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		t.Fatal(err)
	}
	if len(vwcs.Items) == 0 {
		t.Fatal("the release has no ValidatingWebhookConfiguration")
	}
	for _, cfg := range vwcs.Items {
		for _, w := range cfg.Webhooks {
			if w.ClientConfig.Service == nil || w.ClientConfig.URL != nil {
				t.Errorf("webhook %s: clientConfig %+v, want the chart's Service", w.Name, w.ClientConfig)
			}
		}
	}
	ns := cluster.NewNamespace(t, l.c)
	var refused *admissiontest.Case
	for _, c := range admissiontest.Cases(ns) {
		if c.Name == "TrainJob: runtimeRef.kind not a runtime" {
			refused = &c
		}
	}
	if refused == nil {
		t.Fatal("admissiontest has no case \"TrainJob: runtimeRef.kind not a runtime\"")
	}
	tj := refused.Object.(*trainer.TrainJob)
	// The replicas' caches and serving certificates are ready (install waited for
	// readiness), so the first answer must be the webhook's.
	_, err = l.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, tj, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("a TrainJob whose runtimeRef.kind is Deployment was admitted")
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "admission webhook") || !strings.Contains(err.Error(), refused.Message) {
		t.Fatalf("refused with %v, want the webhook's denial with %q", err, refused.Message)
	}
}

// testTrainingReportsThroughTheService: upstream's torch-distributed runtime runs a
// DDP TrainJob of 2 nodes to Complete; rank 0's progress reports reach the controller
// Pods through the routed progress Service (the URL the controller injects names it)
// and land in status.trainerStatus.
func testTrainingReportsThroughTheService(t *testing.T, l *leg) {
	ctx := context.Background()
	rt := &trainer.ClusterTrainingRuntime{}
	data, err := os.ReadFile(filepath.Join(utiltesting.UpstreamDir(t), "runtimes", "torch_distributed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, rt); err != nil {
		t.Fatal(err)
	}
	if _, err := l.trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(ctx, rt, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := cluster.NewNamespace(t, l.c)
	tj, err := training.DigitsTrainJob(l.repo, ns, "ddp", training.DigitsOptions{Epochs: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, tj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *trainer.TrainJob
	cluster.Eventually(t, trainingTimeout, "TrainJob ddp Complete with its final report", func(ctx context.Context) (bool, string) {
		if got, err = l.trainers.TrainerV1alpha1().TrainJobs(ns).Get(ctx, "ddp", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		if meta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobFailed) {
			t.Fatalf("TrainJob failed: %v", got.Status.Conditions)
		}
		done := meta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobComplete)
		reported := got.Status.TrainerStatus != nil && got.Status.TrainerStatus.ProgressPercentage != nil && *got.Status.TrainerStatus.ProgressPercentage == 100
		return done && reported, fmt.Sprintf("conditions %v, trainerStatus %+v", got.Status.Conditions, got.Status.TrainerStatus)
	})
	// The URL the trainers were given names the chart's Service, not a host address.
	pods, err := l.c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantURL := regexp.MustCompile(`^https://[a-z0-9-]+\.` + namespace + `\.svc:\d+/`)
	var urls []string
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == "KUBEFLOW_TRAINER_SERVER_URL" {
					urls = append(urls, e.Value)
					if !wantURL.MatchString(e.Value) {
						t.Errorf("pod %s reports to %q, want the chart's Service in %s", p.Name, e.Value, namespace)
					}
				}
			}
		}
	}
	if len(urls) == 0 {
		t.Errorf("no trainer pod was given KUBEFLOW_TRAINER_SERVER_URL")
	}
}

// testUninstall: `helm uninstall` removes every webhook configuration (one left with
// failurePolicy Fail would refuse every TrainJob write in the cluster) and every
// cluster-scoped object of the release; the CRDs stay, as the chart documents, and
// TrainJobs can still be written. What is left is listed once the controller processes
// have exited (`--wait` waits for the Deployment object, which Helm deletes in the
// background, not for its Pods, which serve on for shutdownDelay), so that a
// configuration a stopping replica wrote back would be seen too.
func testUninstall(t *testing.T, l *leg) {
	l.helm(t, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "2m")
	start := time.Now()
	cluster.Eventually(t, 2*time.Minute, "the controller processes exited", func(context.Context) (bool, string) {
		uids := controllerProcessUIDs(t)
		return len(uids) == 0, fmt.Sprintf("%d running", len(uids))
	})
	t.Logf("controller processes exited %s after helm uninstall returned", time.Since(start).Round(100*time.Millisecond))
	ctx := context.Background()
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	var left []string
	webhookLeft := func(kind string, o metav1.ObjectMeta) {
		if !strings.Contains(o.Name, release) {
			return
		}
		why := ""
		if policy, ok := o.Annotations["helm.sh/resource-policy"]; ok {
			why = " (helm.sh/resource-policy: " + policy + ")"
		}
		left = append(left, kind+" "+o.Name+why)
	}
	vwcs, err := l.c.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range vwcs.Items {
		webhookLeft("ValidatingWebhookConfiguration", o.ObjectMeta)
	}
	mwcs, err := l.c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range mwcs.Items {
		webhookLeft("MutatingWebhookConfiguration", o.ObjectMeta)
	}
	if list, err := l.c.Client().RbacV1().ClusterRoles().List(ctx, selector); err == nil {
		for _, o := range list.Items {
			left = append(left, "ClusterRole "+o.Name)
		}
	}
	if list, err := l.c.Client().RbacV1().ClusterRoleBindings().List(ctx, selector); err == nil {
		for _, o := range list.Items {
			left = append(left, "ClusterRoleBinding "+o.Name)
		}
	}
	if len(left) > 0 {
		t.Errorf("left after helm uninstall: %s", strings.Join(left, ", "))
	}
	if _, err := l.c.Dynamic().Resource(trainer.SchemeGroupVersion.WithResource("trainjobs")).Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the TrainJob CRD is gone after uninstall (the chart keeps it): %v", err)
	}
	ns := cluster.NewNamespace(t, l.c)
	tj := training.ShellTrainJob(ns, "after-uninstall", "torch-distributed", 1, "true")
	if _, err := l.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, tj, metav1.CreateOptions{}); err != nil {
		t.Errorf("a TrainJob write after uninstall: %v (a webhook left behind?)", err)
	}
}
