package trainjob

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// The statuses the Kubeflow Python SDK's TrainerClient.get_job() reports, and
// wait_for_job_status waits for (kubeflow/sdk, kubeflow/trainer/constants/constants.py:
// TRAINJOB_CREATED, TRAINJOB_RUNNING, TRAINJOB_COMPLETE, TRAINJOB_FAILED).
const (
	sdkCreated  = "Created"
	sdkRunning  = "Running"
	sdkComplete = "Complete"
	sdkFailed   = "Failed"
)

// sdkStatus is the status the SDK derives for tj, whose trainer step has numNodes
// nodes, from tj and the pods of its JobSet. The rules are the SDK's, read in kubeflow/sdk
// kubeflow/trainer/backends/kubernetes/backend.py, KubernetesBackend.__get_trainjob_from_cr
// (commit 020e475b; unchanged in the later versions read for issue 40):
//
//  1. the status is Created by default;
//  2. when status.conditions is not empty, it is the type of the last condition in the
//     list that is Complete=True or Failed=True, and stays Created if there is none —
//     whatever else the conditions say (kubeflow/sdk #803: a Suspended=False condition
//     left by a resume keeps a running TrainJob Created);
//  3. when status.conditions is empty, it is Running when the trainer's node steps —
//     the pods labelled jobset.sigs.k8s.io/replicatedjob-name launcher or node — that
//     are in phase Running or Succeeded number numNodes (spec.trainer.numNodes, else
//     the runtime's mlPolicy.numNodes).
func sdkStatus(tj *trainer.TrainJob, numNodes int32, pods []corev1.Pod) string {
	if len(tj.Status.Conditions) > 0 {
		status := sdkCreated
		for _, c := range tj.Status.Conditions {
			if (c.Type == trainer.TrainJobComplete || c.Type == trainer.TrainJobFailed) && c.Status == metav1.ConditionTrue {
				status = c.Type
			}
		}
		return status
	}
	var running int32
	for _, p := range pods {
		switch p.Labels["jobset.sigs.k8s.io/replicatedjob-name"] {
		case "launcher", "node":
			if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded {
				running++
			}
		}
	}
	if running == numNodes {
		return sdkRunning
	}
	return sdkCreated
}

// TestSDKStatusRules: the SDK's rules (sdkStatus) on known states, so that a change
// to the encoding shows.
func TestSDKStatusRules(t *testing.T) {
	pod := func(rj string, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"jobset.sigs.k8s.io/replicatedjob-name": rj}}, Status: corev1.PodStatus{Phase: phase}}
	}
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status}
	}
	for _, tc := range []struct {
		name  string
		conds []metav1.Condition
		pods  []corev1.Pod
		want  string
	}{
		{"no pods", nil, nil, sdkCreated},
		{"one of two nodes running", nil, []corev1.Pod{pod("node", corev1.PodRunning), pod("node", corev1.PodPending)}, sdkCreated},
		{"both nodes running, an initializer too", nil, []corev1.Pod{pod("node", corev1.PodRunning), pod("node", corev1.PodSucceeded), pod("dataset-initializer", corev1.PodRunning)}, sdkRunning},
		{"resumed and running: any condition hides Running", []metav1.Condition{cond(trainer.TrainJobSuspended, metav1.ConditionFalse)}, []corev1.Pod{pod("node", corev1.PodRunning), pod("node", corev1.PodRunning)}, sdkCreated},
		{"complete", []metav1.Condition{cond(trainer.TrainJobSuspended, metav1.ConditionFalse), cond(trainer.TrainJobComplete, metav1.ConditionTrue)}, nil, sdkComplete},
		{"failed", []metav1.Condition{cond(trainer.TrainJobFailed, metav1.ConditionTrue)}, nil, sdkFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := &trainer.TrainJob{Status: trainer.TrainJobStatus{Conditions: tc.conds}}
			if got := sdkStatus(tj, 2, tc.pods); got != tc.want {
				t.Errorf("sdkStatus = %s, want %s", got, tc.want)
			}
		})
	}
}

// waitSDKStatus waits until the SDK would report want for the TrainJob name of numNodes
// nodes.
func (e *env) waitSDKStatus(t *testing.T, name string, numNodes int32, want string, timeout time.Duration) {
	t.Helper()
	cluster.Eventually(t, timeout, fmt.Sprintf("the SDK reporting TrainJob %s %s", name, want), func(ctx context.Context) (bool, string) {
		got, state := e.sdkStatusOf(ctx, name, numNodes)
		return got == want, state
	})
}

// sdkStatusOf returns what the SDK reports for the TrainJob name now, and a description
// of what it read.
func (e *env) sdkStatusOf(ctx context.Context, name string, numNodes int32) (string, string) {
	tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err.Error()
	}
	pods, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=" + name})
	if err != nil {
		return "", err.Error()
	}
	got := sdkStatus(tj, numNodes, pods.Items)
	var phases []string
	for _, p := range pods.Items {
		phases = append(phases, p.Name+"="+string(p.Status.Phase))
	}
	return got, fmt.Sprintf("SDK status %s; conditions %+v; pods %v", got, tj.Status.Conditions, phases)
}

// TestSDKStatus runs the SDK's rules (sdkStatus) over TrainJobs through their life on
// the controller: a clean run reads Created, Running while its nodes run, then
// Complete; a failing one Failed; one suspended and resumed by hand Running again once
// its node runs — the resume removes the Suspended condition, where upstream's
// Suspended=False kept the SDK at Created for the rest of the run (kubeflow/sdk #803,
// docs/compatibility.md#suspended-condition). e2e/kueue checks the same after a Kueue
// admission.
func TestSDKStatus(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.createRuntime(t, "steady", map[string]string{cluster.AnnotationCompleteDelay: "15s"})
	e.createRuntime(t, "failing", map[string]string{cluster.AnnotationFailAfter: "5s"})

	e.createTrainJob(t, trainJob("clean", trainer.TrainingRuntimeKind, "steady").withNumNodes(2))
	e.waitSDKStatus(t, "clean", 2, sdkRunning, time.Minute)
	e.waitSDKStatus(t, "clean", 2, sdkComplete, 2*time.Minute)

	failing := trainJob("failing", trainer.TrainingRuntimeKind, "failing")
	e.createTrainJob(t, failing)
	e.waitSDKStatus(t, "failing", 1, sdkFailed, 2*time.Minute)

	resumed := trainJob("resumed", trainer.TrainingRuntimeKind, "steady")
	resumed.Spec.Suspend = ptr.To(true)
	e.createTrainJob(t, resumed)
	e.waitCondition(t, "resumed", trainer.TrainJobSuspended, metav1.ConditionTrue, time.Minute)
	updateTrainJob(t, e.trainers.TrainerV1alpha1().TrainJobs(e.ns), "resumed", func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	e.waitPods(t, "resumed", 1)
	cluster.Eventually(t, time.Minute, "the resumed TrainJob's node running", func(ctx context.Context) (bool, string) {
		pods, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=resumed"})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning, fmt.Sprint(len(pods.Items))
	})
	e.waitSDKStatus(t, "resumed", 1, sdkRunning, 30*time.Second)
	e.waitSDKStatus(t, "resumed", 1, sdkComplete, 2*time.Minute)
}
