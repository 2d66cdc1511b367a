package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// trainingTimeout bounds one real training run: image pull on a cold node, two
// processes on 2 shared cores.
const trainingTimeout = 6 * time.Minute

// The upstream runtime files (in the upstream folder's runtimes/) the tests install.
const (
	torchRuntimeFile     = "torch_distributed.yaml"
	deepSpeedRuntimeFile = "deepspeed_distributed.yaml"
	xgboostRuntimeFile   = "xgboost_distributed.yaml"
)

type env struct {
	c        *cluster.Cluster
	ns       string
	trainers trainerclient.Interface
	repo     string
	ctrl     *ctrlproc.Process
}

// newEnv starts the controller as `make run` does (its progress server on the host's
// bridge address, published as its Service), installs upstream's torch-distributed
// runtime unchanged, and gives the test a namespace.
func newEnv(t *testing.T, controllerArgs ...string) *env {
	t.Helper()
	return newEnvWith(t, ctrlproc.Config{Args: controllerArgs})
}

// newEnvWith is newEnv with the controller described by cfg (its Binary: the
// package's).
func newEnvWith(t *testing.T, cfg ctrlproc.Config) *env {
	t.Helper()
	c := cluster.Shared(t)
	e := &env{c: c, ns: cluster.NewNamespace(t, c)}
	var err error
	if e.trainers, err = trainerclient.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	if e.repo, err = cluster.FindRepoRoot(); err != nil {
		t.Fatal(err)
	}
	e.installRuntime(t, torchRuntimeFile, nil)
	cfg.Binary = controllerBinary
	e.ctrl = ctrlproc.Run(t, c, cfg)
	return e
}

// installRuntime creates the upstream ClusterTrainingRuntime of file, unchanged when
// edit is nil. edit changes a copy, which must get a name of its own (runtimes are
// cluster-scoped and shared by the package's tests). It returns the runtime's name.
func (e *env) installRuntime(t *testing.T, file string, edit func(*trainer.ClusterTrainingRuntime)) string {
	t.Helper()
	rt := upstreamRuntime(t, file)
	if edit != nil {
		upstream := rt.Name
		edit(rt)
		if rt.Name == upstream {
			t.Fatalf("an edited copy of %s keeps upstream's name %q", file, upstream)
		}
	}
	if _, err := e.trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(context.Background(), rt, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return rt.Name
}

func (e *env) create(t *testing.T, tj *trainer.TrainJob) {
	t.Helper()
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Create(context.Background(), tj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating TrainJob %s: %v", tj.Name, err)
	}
}

func (e *env) get(ctx context.Context, name string) (*trainer.TrainJob, error) {
	return e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
}

// waitFinished waits until the TrainJob is Complete or Failed and returns it; the
// message of a timeout lists its pods' states.
func (e *env) waitFinished(t *testing.T, name string) *trainer.TrainJob {
	t.Helper()
	var tj *trainer.TrainJob
	cluster.Eventually(t, trainingTimeout, "TrainJob "+name+" finished", func(ctx context.Context) (bool, string) {
		var err error
		if tj, err = e.get(ctx, name); err != nil {
			return false, err.Error()
		}
		if meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) || meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed) {
			return true, ""
		}
		return false, fmt.Sprintf("conditions %v; pods: %s", tj.Status.Conditions, e.podStates(ctx))
	})
	return tj
}

// waitComplete waits until the TrainJob is finished and fails the test, with the
// trainer pods' logs, unless it is Complete.
func (e *env) waitComplete(t *testing.T, name string) *trainer.TrainJob {
	t.Helper()
	tj := e.waitFinished(t, name)
	if !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) {
		t.Fatalf("TrainJob %s not Complete: %v\n%s", name, tj.Status.Conditions, e.logs(t, name))
	}
	return tj
}

// waitRunning waits until every container of the TrainJob's pods named by
// replicatedJob (all pods when "") runs, and returns those pods, ordered by name.
func (e *env) waitRunning(t *testing.T, name, replicatedJob string, pods int) []corev1.Pod {
	t.Helper()
	var running []corev1.Pod
	cluster.Eventually(t, trainingTimeout, fmt.Sprintf("%d pods of TrainJob %s running", pods, name), func(ctx context.Context) (bool, string) {
		running = running[:0]
		for _, p := range e.trainerPods(t, name) {
			if replicatedJob != "" && p.Labels["jobset.sigs.k8s.io/replicatedjob-name"] != replicatedJob {
				continue
			}
			if p.DeletionTimestamp != nil || !containersRunning(&p) {
				return false, e.podStates(ctx)
			}
			running = append(running, p)
		}
		return len(running) == pods, e.podStates(ctx)
	})
	return running
}

func containersRunning(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running == nil {
			return false
		}
	}
	return true
}

// waitNoPods waits until the TrainJob has no pod left, terminating ones included.
func (e *env) waitNoPods(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	cluster.Eventually(t, timeout, "TrainJob "+name+" has no pods", func(ctx context.Context) (bool, string) {
		pods := e.trainerPods(t, name)
		return len(pods) == 0, e.podStates(ctx)
	})
}

func (e *env) podStates(ctx context.Context) string {
	pods, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var s []string
	for i := range pods.Items {
		s = append(s, pods.Items[i].Name+": "+describePod(&pods.Items[i]))
	}
	return fmt.Sprint(s)
}

// trainerPods returns the TrainJob's pods, ordered by name (node-0-0 first).
func (e *env) trainerPods(t *testing.T, name string) []corev1.Pod {
	t.Helper()
	pods, err := e.c.Client().CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods.Items
}

// logs is the log of each container of the TrainJob's pods that has one, for a
// failure message.
func (e *env) logs(t *testing.T, name string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range e.trainerPods(t, name) {
		for _, c := range p.Spec.Containers {
			data, err := e.c.Client().CoreV1().Pods(e.ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(context.Background())
			if err != nil {
				fmt.Fprintf(&b, "--- %s/%s: no log: %v\n", p.Name, c.Name, err)
				continue
			}
			fmt.Fprintf(&b, "--- %s/%s (%s):\n%s\n", p.Name, c.Name, describePod(&p), data)
		}
	}
	return b.String()
}

// pullImage runs a pod of image on the real node and waits until it has exited, so
// the image is in the node's store: a test that measures a deadline then measures the
// trainer, not a pull of 1.5 GiB on a cold node.
func (e *env) pullImage(t *testing.T, image string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, GenerateName: "pull-"},
		Spec: corev1.PodSpec{
			NodeName:      cluster.RealNodeName,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "pull", Image: image, Command: []string{"true"}}},
			// Ends at once; nothing to wait for.
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	pod, err := e.c.Client().CoreV1().Pods(e.ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, trainingTimeout, "image "+image+" pulled on the real node", func(ctx context.Context) (bool, string) {
		p, err := e.c.Client().CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("pulling %s: %s", image, describePod(p))
		}
		return p.Status.Phase == corev1.PodSucceeded, describePod(p)
	})
}

// runtimeImage is the image of the container named "node" in the first
// replicatedJob of the upstream runtime in file.
func runtimeImage(t *testing.T, file string) string {
	t.Helper()
	rt := upstreamRuntime(t, file)
	for _, c := range rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers {
		if c.Name == "node" {
			return c.Image
		}
	}
	t.Fatalf("%s: no container named node", file)
	return ""
}

// upstreamRuntime decodes, strictly, the upstream ClusterTrainingRuntime in file of
// the upstream folder's runtimes/.
func upstreamRuntime(t *testing.T, file string) *trainer.ClusterTrainingRuntime {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(utiltesting.UpstreamDir(t), "runtimes", file))
	if err != nil {
		t.Fatal(err)
	}
	rt := &trainer.ClusterTrainingRuntime{}
	if err := yaml.UnmarshalStrict(data, rt); err != nil {
		t.Fatal(err)
	}
	return rt
}
