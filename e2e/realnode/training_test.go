package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// trainingTimeout bounds one real training run: image pull on a cold node, two
// torchrun processes on 2 shared cores.
const trainingTimeout = 6 * time.Minute

type env struct {
	c        *cluster.Cluster
	ns       string
	trainers trainerclient.Interface
	repo     string
}

// newEnv starts the controller as `make run` does (its progress server on the host's
// bridge address, published as its Service), installs upstream's torch-distributed
// runtime unchanged, and gives the test a namespace.
func newEnv(t *testing.T, controllerArgs ...string) *env {
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
	data, err := os.ReadFile(filepath.Join(utiltesting.UpstreamDir(t), "runtimes", "torch_distributed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rt := &trainer.ClusterTrainingRuntime{}
	if err := yaml.UnmarshalStrict(data, rt); err != nil {
		t.Fatal(err)
	}
	if _, err := e.trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(context.Background(), rt, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ctrlproc.Start(t, c, controllerBinary, controllerArgs...)
	return e
}

func (e *env) create(t *testing.T, tj *trainer.TrainJob) {
	t.Helper()
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Create(context.Background(), tj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating TrainJob %s: %v", tj.Name, err)
	}
}

// waitFinished waits until the TrainJob is Complete or Failed and returns it; the
// message of a timeout lists its pods' states.
func (e *env) waitFinished(t *testing.T, name string) *trainer.TrainJob {
	t.Helper()
	var tj *trainer.TrainJob
	cluster.Eventually(t, trainingTimeout, "TrainJob "+name+" finished", func(ctx context.Context) (bool, string) {
		var err error
		if tj, err = e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		if meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) || meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed) {
			return true, ""
		}
		return false, fmt.Sprintf("conditions %v; pods: %s", tj.Status.Conditions, e.podStates(ctx))
	})
	return tj
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
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return cmpString(a.Name, b.Name) })
	return pods.Items
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

var epochLine = regexp.MustCompile(`epoch (\d+)/\d+ loss ([0-9.]+) accuracy ([0-9.]+)`)

// TestDDPTrainsOnTwoNodesAndReportsProgress is the ground truth of issue 23: upstream's
// torch-distributed runtime, unchanged, runs a TrainJob of 2 nodes; torchrun on each
// rendezvous with node 0 through the headless Service's DNS name the controller
// injects; PyTorch DDP over gloo trains on scikit-learn's digits with the loss falling;
// rank 0's reports reach the controller's progress server through the injected URL,
// CA and projected token, and land in status.trainerStatus; the TrainJob ends Complete.
func TestDDPTrainsOnTwoNodesAndReportsProgress(t *testing.T) {
	e := newEnv(t)
	tj, err := training.DigitsTrainJob(e.repo, e.ns, "ddp", training.DigitsOptions{Epochs: 15})
	if err != nil {
		t.Fatal(err)
	}
	e.create(t, tj)
	got := e.waitFinished(t, tj.Name)
	pods := e.trainerPods(t, tj.Name)
	if len(pods) != 2 {
		t.Fatalf("%d trainer pods, want 2: %s", len(pods), e.podStates(context.Background()))
	}
	log := podLog(t, e.c, e.ns, pods[0].Name, "node")
	if !meta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobComplete) {
		t.Fatalf("TrainJob not Complete: %v\nnode 0's log:\n%s\nnode 1's log:\n%s", got.Status.Conditions, log, podLog(t, e.c, e.ns, pods[1].Name, "node"))
	}
	for _, p := range pods {
		if p.Spec.NodeName != cluster.RealNodeName {
			t.Errorf("pod %s ran on %q, want the real node", p.Name, p.Spec.NodeName)
		}
	}
	epochs := epochLine.FindAllStringSubmatch(log, -1)
	if len(epochs) != 15 {
		t.Fatalf("node 0 logged %d epochs, want 15; its log:\n%s", len(epochs), log)
	}
	first, _ := strconv.ParseFloat(epochs[0][2], 64)
	last, _ := strconv.ParseFloat(epochs[len(epochs)-1][2], 64)
	accuracy, _ := strconv.ParseFloat(epochs[len(epochs)-1][3], 64)
	if last >= first/2 || accuracy < 0.8 {
		t.Errorf("training did not learn: loss %.4f -> %.4f, test accuracy %.4f; log:\n%s", first, last, accuracy, log)
	}
	t.Logf("loss %.4f -> %.4f over %d epochs, test accuracy %.4f", first, last, len(epochs), accuracy)
	if !regexp.MustCompile(`rank 0 of 2`).MatchString(log) {
		t.Errorf("node 0 did not see a world of 2; log:\n%s", log)
	}

	// The reports: the last one the controller wrote (it writes at most once per
	// statusServer.writePeriod, so not every epoch's) is in trainerStatus.
	var ts *trainer.TrainerStatus
	cluster.Eventually(t, 30*time.Second, "status.trainerStatus written", func(ctx context.Context) (bool, string) {
		cur, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, tj.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ts = cur.Status.TrainerStatus
		return ts != nil && ts.ProgressPercentage != nil && len(ts.Metrics) == 2, fmt.Sprintf("trainerStatus %+v", ts)
	})
	if *ts.ProgressPercentage <= 0 || *ts.ProgressPercentage > 100 || ts.EstimatedRemainingSeconds == nil {
		t.Errorf("trainerStatus %+v: want progressPercentage in (0, 100] and estimatedRemainingSeconds", ts)
	}
	names := []string{ts.Metrics[0].Name, ts.Metrics[1].Name}
	if !slices.Equal(names, []string{"loss", "accuracy"}) {
		t.Errorf("trainerStatus metrics %v, want loss and accuracy", ts.Metrics)
	}
	if !regexp.MustCompile(`progress report \d+%: HTTP 200`).MatchString(log) {
		t.Errorf("no report was accepted (HTTP 200); log:\n%s", log)
	}
}

// TestTrainerExitingNonZeroFailsTheTrainJob: a trainer process that exits 3 after
// training fails its pod for real (the kubelet reports the exit code), and the TrainJob
// becomes Failed with a reason and a message that say which Job failed.
func TestTrainerExitingNonZeroFailsTheTrainJob(t *testing.T) {
	e := newEnv(t)
	tj, err := training.DigitsTrainJob(e.repo, e.ns, "exits", training.DigitsOptions{Nodes: 1, Epochs: 1, ExtraCommand: "exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	e.create(t, tj)
	got := e.waitFinished(t, tj.Name)
	failed := meta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
	if failed == nil || failed.Status != metav1.ConditionTrue {
		t.Fatalf("TrainJob not Failed: %v", got.Status.Conditions)
	}
	if failed.Reason == "" || !regexp.MustCompile(`exits-node`).MatchString(failed.Message) {
		t.Errorf("Failed condition %q: %q, want a reason and a message naming the failed Job (exits-node-...)", failed.Reason, failed.Message)
	}
	pods := e.trainerPods(t, tj.Name)
	if len(pods) == 0 {
		t.Fatal("no trainer pod")
	}
	var exit int32 = -1
	for _, s := range pods[0].Status.ContainerStatuses {
		if s.Name == "node" && s.State.Terminated != nil {
			exit = s.State.Terminated.ExitCode
		}
	}
	if exit != 3 {
		t.Errorf("trainer container: %s, want exit code 3", describePod(&pods[0]))
	}
	t.Logf("Failed: %s: %s", failed.Reason, failed.Message)
}
