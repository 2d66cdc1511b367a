package realnode

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

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
// becomes Failed with a reason and a message that say which Job failed. The runtime is
// upstream's torch-distributed with retries off (restartPolicy Never, backoffLimit 0):
// upstream's own restarts the container with the kubelet's back-off, which only delays
// the same outcome by minutes.
func TestTrainerExitingNonZeroFailsTheTrainJob(t *testing.T) {
	e := newEnv(t)
	runtime := e.installRuntime(t, torchRuntimeFile, func(rt *trainer.ClusterTrainingRuntime) {
		rt.Name = "torch-distributed-no-retry"
		job := &rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec
		job.BackoffLimit = ptr.To[int32](0)
		job.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	})
	tj, err := training.DigitsTrainJob(e.repo, e.ns, "exits", training.DigitsOptions{Nodes: 1, Epochs: 1, ExtraCommand: "exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	tj.Spec.RuntimeRef.Name = runtime
	e.create(t, tj)
	got := e.waitFinished(t, tj.Name)
	failed := meta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
	if failed == nil || failed.Status != metav1.ConditionTrue {
		t.Fatalf("TrainJob not Failed: %v\n%s", got.Status.Conditions, e.logs(t, tj.Name))
	}
	if failed.Reason == "" || !strings.Contains(failed.Message, "exits-node") {
		t.Errorf("Failed condition %q: %q, want a reason and a message naming the failed Job (exits-node-...)", failed.Reason, failed.Message)
	}
	pods := e.trainerPods(t, tj.Name)
	if len(pods) != 1 {
		t.Fatalf("%d trainer pods, want the 1 that failed: %s", len(pods), e.podStates(context.Background()))
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
	if log := podLog(t, e.c, e.ns, pods[0].Name, "node"); !strings.Contains(log, "done: 1 epochs") {
		t.Errorf("the trainer did not train before exiting; its log:\n%s", log)
	}
	t.Logf("Failed: %s: %s", failed.Reason, failed.Message)
}

// TestActiveDeadlineStopsARunningTrainer: a TrainJob whose trainer is still running
// when spec.activeDeadlineSeconds passes becomes Failed (DeadlineExceeded) and its
// pods go: the controller deletes the JobSet and the kubelet stops the containers.
func TestActiveDeadlineStopsARunningTrainer(t *testing.T) {
	e := newEnv(t)
	e.pullImage(t, runtimeImage(t, torchRuntimeFile))
	tj, err := training.DigitsTrainJob(e.repo, e.ns, "deadline", training.DigitsOptions{Nodes: 1, Epochs: 1, ExtraCommand: "sleep 3600"})
	if err != nil {
		t.Fatal(err)
	}
	const deadline = 30
	tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](deadline)
	e.create(t, tj)
	pods := e.waitRunning(t, tj.Name, "", 1)
	created, err := e.get(context.Background(), tj.Name)
	if err != nil {
		t.Fatal(err)
	}
	if age := time.Since(created.CreationTimestamp.Time); age > deadline*time.Second {
		t.Fatalf("the trainer started %s after creation, past the %ds deadline: the test cannot show a running trainer stopped", age.Round(time.Second), deadline)
	}
	got := e.waitFinished(t, tj.Name)
	failed := meta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
	if failed == nil || failed.Status != metav1.ConditionTrue || failed.Reason != trainer.TrainJobDeadlineExceededReason {
		t.Fatalf("TrainJob conditions %v, want Failed with reason %s", got.Status.Conditions, trainer.TrainJobDeadlineExceededReason)
	}
	if late := failed.LastTransitionTime.Sub(created.CreationTimestamp.Time) - deadline*time.Second; late < 0 || late > 15*time.Second {
		t.Errorf("Failed %s after the deadline, want within 15s of it (and not before)", late)
	}
	// The kubelet gives the container its grace period (30 s) after SIGTERM.
	e.waitNoPods(t, tj.Name, 90*time.Second)
	t.Logf("pod %s stopped; Failed %s after creation", pods[0].Name, failed.LastTransitionTime.Sub(created.CreationTimestamp.Time).Round(time.Second))
}

// TestSuspendStopsARunningTrainJobAndResumeRunsItToComplete: spec.suspend on a
// TrainJob whose trainer runs deletes its pods (JobSet suspends its Jobs) and marks it
// Suspended; clearing it starts new pods that train to Complete.
func TestSuspendStopsARunningTrainJobAndResumeRunsItToComplete(t *testing.T) {
	e := newEnv(t)
	// The trainer waits before training, so it is still running when suspended.
	tj, err := training.DigitsTrainJob(e.repo, e.ns, "suspend", training.DigitsOptions{Nodes: 2, Epochs: 5, BeforeCommand: "sleep 20"})
	if err != nil {
		t.Fatal(err)
	}
	e.create(t, tj)
	first := e.waitRunning(t, tj.Name, "", 2)

	e.setSuspend(t, tj.Name, true)
	cluster.Eventually(t, time.Minute, "TrainJob Suspended", func(ctx context.Context) (bool, string) {
		cur, err := e.get(ctx, tj.Name)
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(cur.Status.Conditions, trainer.TrainJobSuspended), fmt.Sprint(cur.Status.Conditions)
	})
	e.waitNoPods(t, tj.Name, 90*time.Second)

	e.setSuspend(t, tj.Name, false)
	second := e.waitRunning(t, tj.Name, "", 2)
	for _, p := range second {
		for _, old := range first {
			if p.UID == old.UID {
				t.Fatalf("pod %s survived the suspension", p.Name)
			}
		}
	}
	got := e.waitComplete(t, tj.Name)
	if c := meta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobSuspended); c != nil {
		t.Errorf("Suspended condition %+v after the resume, want none (docs/compatibility.md#suspended-condition)", c)
	}
	if log := podLog(t, e.c, e.ns, e.trainerPods(t, tj.Name)[0].Name, "node"); !strings.Contains(log, "done: 5 epochs on 2 nodes") {
		t.Errorf("the resumed trainer did not finish training; node 0's log:\n%s", log)
	}
}

func (e *env) setSuspend(t *testing.T, name string, suspend bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend)
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting spec.suspend of %s to %t: %v", name, suspend, err)
	}
}
