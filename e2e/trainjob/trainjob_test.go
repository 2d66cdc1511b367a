package trainjob

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

const torchRuntime = "torch-distributed"

// env is what a test needs: the cluster, typed clients and a fresh namespace.
type env struct {
	c        *cluster.Cluster
	ns       string
	trainers trainerclient.Interface
	jobsets  jobsetclient.Interface
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := cluster.Shared(t)
	e := &env{c: c, ns: cluster.NewNamespace(t, c)}
	var err error
	if e.trainers, err = trainerclient.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	if e.jobsets, err = jobsetclient.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	return e
}

// ensureUpstreamTorchRuntime installs upstream Kubeflow Trainer's torch-distributed
// ClusterTrainingRuntime, unmodified, from shared/upstream.
func (e *env) ensureUpstreamTorchRuntime(t *testing.T) {
	t.Helper()
	e.ensureUpstreamRuntime(t, "torch_distributed.yaml")
}

// ensureUpstreamRuntime installs the upstream ClusterTrainingRuntime in
// shared/upstream/runtimes/<file>, unmodified (a copy already installed by an earlier
// test is kept), and returns its name.
func (e *env) ensureUpstreamRuntime(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(utiltesting.UpstreamDir(t), "runtimes", file))
	if err != nil {
		t.Fatal(err)
	}
	rt := &trainer.ClusterTrainingRuntime{}
	if err := yaml.UnmarshalStrict(data, rt); err != nil {
		t.Fatalf("decoding the upstream runtime %s: %v", file, err)
	}
	_, err = e.trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(context.Background(), rt, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating ClusterTrainingRuntime %s: %v", rt.Name, err)
	}
	return rt.Name
}

// createRuntime creates a namespaced TrainingRuntime shaped like torch-distributed,
// with pod annotations (e.g. a kwok completion delay or a failure) and Job backoffLimit 0.
func (e *env) createRuntime(t *testing.T, name string, podAnnotations map[string]string) {
	t.Helper()
	e.createRuntimeWith(t, name, podAnnotations, nil)
}

// createRuntimeWith is createRuntime with a hook to change the runtime before creation.
func (e *env) createRuntimeWith(t *testing.T, name string, podAnnotations map[string]string, mutate func(*trainer.TrainingRuntime)) {
	t.Helper()
	rt := &trainer.TrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: trainer.TrainingRuntimeSpec{
			MLPolicy: &trainer.MLPolicy{NumNodes: ptr.To[int32](1), MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}},
			Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
				ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
					Name:     "node",
					Template: batchJobTemplate(podAnnotations),
				}},
			}},
		},
	}
	if mutate != nil {
		mutate(rt)
	}
	if _, err := e.trainers.TrainerV1alpha1().TrainingRuntimes(e.ns).Create(context.Background(), rt, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating TrainingRuntime %s: %v", name, err)
	}
}

func (e *env) createTrainJob(t *testing.T, tj testTrainJob) *trainer.TrainJob {
	t.Helper()
	tj.Namespace = e.ns
	created, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Create(context.Background(), tj.TrainJob, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating TrainJob %s: %v", tj.Name, err)
	}
	return created
}

// waitCondition waits until the TrainJob has condition condType with status and returns it.
func (e *env) waitCondition(t *testing.T, name, condType string, status metav1.ConditionStatus, timeout time.Duration) metav1.Condition {
	t.Helper()
	var found metav1.Condition
	cluster.Eventually(t, timeout, fmt.Sprintf("TrainJob %s/%s %s=%s", e.ns, name, condType, status), func(ctx context.Context) (bool, string) {
		tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if c := meta.FindStatusCondition(tj.Status.Conditions, condType); c != nil && c.Status == status {
			found = *c
			return true, ""
		}
		return false, fmt.Sprintf("conditions %+v", tj.Status.Conditions)
	})
	return found
}

// waitNoCondition waits until the TrainJob name has no condition of type condType.
func (e *env) waitNoCondition(t *testing.T, name, condType string, timeout time.Duration) {
	t.Helper()
	cluster.Eventually(t, timeout, fmt.Sprintf("TrainJob %s/%s without %s", e.ns, name, condType), func(ctx context.Context) (bool, string) {
		tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return meta.FindStatusCondition(tj.Status.Conditions, condType) == nil, fmt.Sprintf("conditions %+v", tj.Status.Conditions)
	})
}

func (e *env) waitJobSet(t *testing.T, name string) *jobsetv1alpha2.JobSet {
	t.Helper()
	var js *jobsetv1alpha2.JobSet
	cluster.Eventually(t, 60*time.Second, "JobSet "+name, func(ctx context.Context) (bool, string) {
		var err error
		js, err = e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return js
}

// testTrainJob is a TrainJob under construction.
type testTrainJob struct{ *trainer.TrainJob }

func trainJob(name, runtimeKind, runtimeName string) testTrainJob {
	return testTrainJob{&trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{
			Name: runtimeName, APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(runtimeKind)}},
	}}
}

func (tj testTrainJob) withNumNodes(n int32) testTrainJob {
	tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To(n)}
	return tj
}

func (tj testTrainJob) suspended() testTrainJob {
	tj.Spec.Suspend = ptr.To(true)
	return tj
}

// TestTorchTrainJobRunsToComplete is the main job: an upstream TrainJob shape on the
// unmodified upstream torch-distributed runtime becomes a JobSet whose pods carry the
// PET_* environment, runs on kwok nodes and reaches Complete — with no more API writes
// than one JobSet apply plus one status patch per status change, and none at all when
// a restarted controller finds everything up to date.
func TestTorchTrainJobRunsToComplete(t *testing.T) {
	e := newEnv(t)
	e.ensureUpstreamTorchRuntime(t)
	// The write counts below are the controller's, for all TrainJobs: let earlier tests'
	// namespaces finish terminating so this TrainJob is the only one.
	e.waitAloneInCluster(t)
	// Admission off: its webhook registrations are writes too, and this test counts the
	// pipeline's (TestAdmission covers admission).
	ctrl := startController(t, e.c, noAdmission)

	statusChanges := e.countStatusChanges(t, "torch")
	e.createTrainJob(t, trainJob("torch", trainer.ClusterTrainingRuntimeKind, torchRuntime).withNumNodes(2))

	js := e.waitJobSet(t, "torch")
	if ref := metav1.GetControllerOf(js); ref == nil || ref.Kind != "TrainJob" || ref.Name != "torch" {
		t.Errorf("JobSet controller reference = %+v, want TrainJob torch", ref)
	}
	pods := e.waitPods(t, "torch", 2)
	for _, pod := range pods {
		node := podContainer(t, pod, trainer.ContainerNode)
		expectEnv(t, pod.Name, node, map[string]string{
			"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1",
			"PET_MASTER_ADDR": "torch-node-0-0.torch", "PET_MASTER_PORT": "29500",
		})
		expectCompletionIndex(t, pod.Name, node, "PET_NODE_RANK")
	}

	complete := e.waitCondition(t, "torch", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
	if complete.Reason != "AllJobsCompleted" {
		t.Errorf("Complete reason = %q, want the JobSet's AllJobsCompleted", complete.Reason)
	}

	// API economy, from the controller's own client metrics. Let in-flight work settle.
	time.Sleep(2 * time.Second)
	writes := ctrl.writes(t)
	events := e.controllerEvents(t)
	wantPatches := 1 + statusChanges() // one JobSet apply, one patch per status change
	t.Logf("controller writes for one TrainJob run to Complete: %v (status changes %d, events %d)", writes, wantPatches-1, events)
	if writes["PATCH"] != wantPatches || writes["PUT"] != 0 || writes["DELETE"] != 0 || writes["POST"] != 0 || events != 0 {
		t.Errorf("controller writes = %v and %d events, want PATCH %d (1 JobSet apply + %d status changes), no POST (no events on the happy path, as upstream), PUT or DELETE",
			writes, events, wantPatches, wantPatches-1)
	}

	// An idle restart: everything is up to date, so the new process writes nothing.
	ctrl.stop(t)
	idle := startController(t, e.c, noAdmission)
	time.Sleep(5 * time.Second)
	if w := idle.writes(t); len(w) != 0 {
		t.Errorf("a restarted controller with nothing to do wrote %v, want no writes", w)
	}
}

// TestPodFailureFailsTrainJob: a failing pod fails its Job, the JobSet fails, and the
// TrainJob gets Failed=True with the JobSet's reason.
func TestPodFailureFailsTrainJob(t *testing.T) {
	e := newEnv(t)
	ctrl := startController(t, e.c)
	e.createRuntime(t, "torch-failing", map[string]string{cluster.AnnotationFailAfter: "1s"})
	e.createTrainJob(t, trainJob("fails", trainer.TrainingRuntimeKind, "torch-failing"))

	failed := e.waitCondition(t, "fails", trainer.TrainJobFailed, metav1.ConditionTrue, 2*time.Minute)
	js, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(context.Background(), "fails", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	jsFailed := meta.FindStatusCondition(js.Status.Conditions, string(jobsetv1alpha2.JobSetFailed))
	if jsFailed == nil || failed.Reason != jsFailed.Reason || failed.Message != jsFailed.Message {
		t.Errorf("TrainJob Failed = %s/%q, want the JobSet's %+v", failed.Reason, failed.Message, jsFailed)
	}

	// Failed is terminal, as upstream treats it: the JobSet deleted after the failure
	// (by hand, or by a TTL) is not re-created, which would run the training again with
	// JobSet's restart count reset. The deletion routes the TrainJob to the status stage
	// (pkg/informers); a controller that re-creates the JobSet does it from that sync,
	// through the build stages back to the status stage's apply. So instead of waiting
	// a fixed time, wait for what proves the deletion was processed: a stage sync after
	// it, with every queue then empty and no worker inside a sync (issue 41).
	ctx := context.Background()
	syncs := ctrl.waitPipelineIdle(t, -1)
	if err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Delete(ctx, "fails", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, 30*time.Second, "JobSet fails deleted", func(ctx context.Context) (bool, string) {
		_, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "fails", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	ctrl.waitPipelineIdle(t, syncs)
	if _, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "fails", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the JobSet of a Failed TrainJob came back after its deletion (err = %v)", err)
	}
	tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, "fails", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed) || meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) {
		t.Errorf("conditions after the JobSet's deletion %v, want Failed still True", tj.Status.Conditions)
	}
}

// TestMissingRuntimeWaitsThenProceeds: a TrainJob whose runtime does not exist shows a
// condition naming it, creates nothing, and proceeds by itself once the runtime exists.
func TestMissingRuntimeWaitsThenProceeds(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.createTrainJob(t, trainJob("early", trainer.TrainingRuntimeKind, "late-runtime"))

	waiting := e.waitCondition(t, "early", "RuntimeResolved", metav1.ConditionFalse, time.Minute)
	if waiting.Reason != "TrainingRuntimeNotFound" || !strings.Contains(waiting.Message, `"late-runtime"`) {
		t.Errorf("RuntimeResolved = %s/%q, want reason TrainingRuntimeNotFound naming late-runtime", waiting.Reason, waiting.Message)
	}
	if _, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(context.Background(), "early", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("JobSet of a TrainJob without runtime: err = %v, want NotFound", err)
	}

	e.createRuntime(t, "late-runtime", nil)
	e.waitCondition(t, "early", "RuntimeResolved", metav1.ConditionTrue, time.Minute)
	e.waitCondition(t, "early", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
}

// TestSuspendThenResume: a suspended TrainJob gets a suspended JobSet and no pods;
// resuming starts the pods and the TrainJob completes
// (docs/compatibility.md#suspend-and-resume,
// docs/compatibility.md#suspended-condition).
func TestSuspendThenResume(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.createRuntime(t, "torch", nil)
	e.createTrainJob(t, trainJob("paused", trainer.TrainingRuntimeKind, "torch").suspended())

	suspended := e.waitCondition(t, "paused", trainer.TrainJobSuspended, metav1.ConditionTrue, time.Minute)
	if suspended.Reason != "Suspended" || suspended.Message != "TrainJob is suspended" {
		t.Errorf("Suspended = %s/%q, want Suspended/TrainJob is suspended", suspended.Reason, suspended.Message)
	}
	if js := e.waitJobSet(t, "paused"); js.Spec.Suspend == nil || !*js.Spec.Suspend {
		t.Errorf("JobSet of a suspended TrainJob has spec.suspend %v, want true", js.Spec.Suspend)
	}

	patch := []byte(`{"spec":{"suspend":false}}`)
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Patch(context.Background(), "paused", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The resume removes the condition (not upstream's Suspended=False/Resumed, which
	// keeps the SDK from ever reporting Running: docs/compatibility.md#suspended-condition).
	e.waitNoCondition(t, "paused", trainer.TrainJobSuspended, time.Minute)
	e.waitCondition(t, "paused", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
}

// TestControllerKilledMidRun: killing the controller while a TrainJob runs and starting
// a new one creates no second JobSet and loses no TrainJob
// (docs/design/architecture.md#one-worker-per-key-one-jobset-per-trainjob).
func TestControllerKilledMidRun(t *testing.T) {
	e := newEnv(t)
	first := startController(t, e.c)
	e.createRuntime(t, "slow", map[string]string{cluster.AnnotationCompleteDelay: "15s"})
	e.createTrainJob(t, trainJob("survivor", trainer.TrainingRuntimeKind, "slow"))
	before := e.waitJobSet(t, "survivor")

	first.kill(t)
	startController(t, e.c)
	e.waitCondition(t, "survivor", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)

	list, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].UID != before.UID {
		t.Errorf("JobSets after the restart = %d (UIDs %v), want exactly the original %s", len(list.Items), uids(list.Items), before.UID)
	}
}

func uids(items []jobsetv1alpha2.JobSet) []types.UID {
	out := make([]types.UID, 0, len(items))
	for _, js := range items {
		out = append(out, js.UID)
	}
	return out
}

// waitPods waits for n pods of the JobSet and returns them.
func (e *env) waitPods(t *testing.T, jobSet string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	cluster.Eventually(t, time.Minute, fmt.Sprintf("%d pods of JobSet %s", n, jobSet), func(ctx context.Context) (bool, string) {
		list, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + jobSet})
		if err != nil {
			return false, err.Error()
		}
		pods = list.Items
		return len(pods) >= n, fmt.Sprintf("%d pods", len(pods))
	})
	return pods
}

// countStatusChanges watches the TrainJob and returns a function reporting how many
// times its status changed. Each change is at least one write; a write that changes
// nothing produces no watch event, so comparing with the controller's write count
// exposes wasted writes.
func (e *env) countStatusChanges(t *testing.T, name string) func() int {
	t.Helper()
	return e.countChanges(t, name, func(tj *trainer.TrainJob) any { return tj.Status.DeepCopy() },
		func(tj *trainer.TrainJob) bool { return len(tj.Status.Conditions) > 0 || len(tj.Status.JobsStatus) > 0 })
}

// countChanges watches the TrainJob and returns a function reporting how many times the
// part of it that project returns changed; the first state seen counts as a change when
// countFirst says so.
func (e *env) countChanges(t *testing.T, name string, project func(*trainer.TrainJob) any, countFirst func(*trainer.TrainJob) bool) func() int {
	t.Helper()
	w, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	changes := make(chan int, 1)
	changes <- 0
	go func() {
		var last any
		first := true
		for ev := range w.ResultChan() {
			tj, ok := ev.Object.(*trainer.TrainJob)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			cur := project(tj)
			if (first && countFirst(tj)) || (!first && !equality.Semantic.DeepEqual(last, cur)) {
				changes <- <-changes + 1
			}
			first, last = false, cur
		}
	}()
	return func() int {
		n := <-changes
		changes <- n
		return n
	}
}

// controllerEvents counts the events the controller recorded in the test namespace.
func (e *env) controllerEvents(t *testing.T) int {
	t.Helper()
	list, err := e.c.Client().EventsV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range list.Items {
		if ev.ReportingController == "trainyard-trainjob-controller" {
			n++
		}
	}
	return n
}

// waitAloneInCluster waits until the only TrainJobs left in the cluster are the test's.
func (e *env) waitAloneInCluster(t *testing.T) {
	t.Helper()
	cluster.Eventually(t, 3*time.Minute, "TrainJobs of other tests deleted", func(ctx context.Context) (bool, string) {
		list, err := e.trainers.TrainerV1alpha1().TrainJobs(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var others []string
		for _, tj := range list.Items {
			if tj.Namespace != e.ns {
				others = append(others, tj.Namespace+"/"+tj.Name)
			}
		}
		return len(others) == 0, fmt.Sprintf("still there: %v", others)
	})
}
