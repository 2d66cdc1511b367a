package trainjob

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// completionIndex is the fieldRef the ML policies use for a pod's rank.
const completionIndex = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

// TestRuntimePolicies runs one controller for the runtime features of issue 5, each in
// its own namespace and in parallel: ML policy env (JAX, XGBoost), initializers,
// runtimePatches, activeDeadlineSeconds and runtime snapshots. Suspend/resume is
// TestSuspendThenResume.
func TestRuntimePolicies(t *testing.T) {
	startController(t, cluster.Shared(t))
	t.Run("JAX", func(t *testing.T) { t.Parallel(); testJAX(t) })
	t.Run("XGBoost", func(t *testing.T) { t.Parallel(); testXGBoost(t) })
	t.Run("Initializers", func(t *testing.T) { t.Parallel(); testInitializers(t) })
	t.Run("RuntimePatches", func(t *testing.T) { t.Parallel(); testRuntimePatches(t) })
	t.Run("ActiveDeadline", func(t *testing.T) { t.Parallel(); testActiveDeadline(t) })
	t.Run("RuntimeSnapshot", func(t *testing.T) { t.Parallel(); testRuntimeSnapshot(t) })
}

// testJAX: the unmodified upstream jax-distributed runtime; every trainer pod carries
// JAX_NUM_PROCESSES, its JAX_PROCESS_ID and the coordinator's address
// (docs/compatibility.md#jax), and the TrainJob completes.
func testJAX(t *testing.T) {
	e := newEnv(t)
	runtime := e.ensureUpstreamRuntime(t, "jax_distributed.yaml")
	e.createTrainJob(t, trainJob("jax", trainer.ClusterTrainingRuntimeKind, runtime).withNumNodes(2))

	for _, pod := range e.waitPods(t, "jax", 2) {
		node := podContainer(t, pod, trainer.ContainerNode)
		expectEnv(t, pod.Name, node, map[string]string{
			"JAX_NUM_PROCESSES":       "2",
			"JAX_COORDINATOR_ADDRESS": "jax-node-0-0.jax:29500",
		})
		expectCompletionIndex(t, pod.Name, node, "JAX_PROCESS_ID")
	}
	e.waitCondition(t, "jax", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
}

// testXGBoost: the unmodified upstream xgboost-distributed runtime; DMLC_* env with one
// worker per node on GPU-less pods (docs/compatibility.md#xgboost), and the TrainJob
// completes.
func testXGBoost(t *testing.T) {
	e := newEnv(t)
	runtime := e.ensureUpstreamRuntime(t, "xgboost_distributed.yaml")
	e.createTrainJob(t, trainJob("xgb", trainer.ClusterTrainingRuntimeKind, runtime).withNumNodes(2))

	for _, pod := range e.waitPods(t, "xgb", 2) {
		node := podContainer(t, pod, trainer.ContainerNode)
		expectEnv(t, pod.Name, node, map[string]string{
			"DMLC_TRACKER_URI":  "xgb-node-0-0.xgb",
			"DMLC_TRACKER_PORT": "29500",
			"DMLC_NUM_WORKER":   "2",
		})
		expectCompletionIndex(t, pod.Name, node, "DMLC_TASK_ID")
	}
	e.waitCondition(t, "xgb", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
}

// testInitializers: a runtime whose trainer depends on dataset and model initializers
// (as upstream's do, through JobSet dependsOn); the TrainJob's storageUris reach the
// initializer containers, and the trainer Job is created only after both initializer
// Jobs completed (they run 2 s and 4 s).
func testInitializers(t *testing.T) {
	e := newEnv(t)
	e.createRuntimeWith(t, "with-initializers", nil, func(rt *trainer.TrainingRuntime) {
		node := &rt.Spec.Template.Spec.ReplicatedJobs[0]
		node.DependsOn = []jobsetv1alpha2.DependsOn{
			{Name: trainer.AncestorDatasetInitializer, Status: jobsetv1alpha2.DependencyComplete},
			{Name: trainer.AncestorModelInitializer, Status: jobsetv1alpha2.DependencyComplete},
		}
		rt.Spec.Template.Spec.ReplicatedJobs = []jobsetv1alpha2.ReplicatedJob{
			initializerJob(trainer.AncestorDatasetInitializer, trainer.ContainerDatasetInitializer, "2s"),
			initializerJob(trainer.AncestorModelInitializer, trainer.ContainerModelInitializer, "4s"),
			*node,
		}
	})
	tj := trainJob("init", trainer.TrainingRuntimeKind, "with-initializers")
	tj.Spec.Initializer = &trainer.Initializer{
		Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://datasets/tatsu-lab/alpaca")},
		Model:   &trainer.ModelInitializer{StorageUri: ptr.To("hf://meta-llama/Llama-3.2-1B")},
	}
	e.createTrainJob(t, tj)

	js := e.waitJobSet(t, "init")
	var order []string
	for _, rj := range js.Spec.ReplicatedJobs {
		order = append(order, rj.Name)
		if rj.Name == trainer.ReplicatedJobNode && len(rj.DependsOn) != 2 {
			t.Errorf("JobSet replicatedJob node dependsOn = %+v, want both initializers Complete", rj.DependsOn)
		}
	}
	if fmt.Sprint(order) != "[dataset-initializer model-initializer node]" {
		t.Errorf("JobSet replicatedJobs = %v, want the runtime's order", order)
	}
	e.waitCondition(t, "init", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)

	jobs := map[string]batchv1.Job{}
	list, err := e.c.Client().BatchV1().Jobs(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=init"})
	if err != nil {
		t.Fatal(err)
	}
	for _, job := range list.Items {
		jobs[job.Labels[jobsetv1alpha2.ReplicatedJobNameKey]] = job
	}
	trainerJob, ok := jobs[trainer.ReplicatedJobNode]
	if !ok {
		t.Fatalf("no trainer Job among %d Jobs", len(list.Items))
	}
	for name, uri := range map[string]string{
		trainer.AncestorDatasetInitializer: "hf://datasets/tatsu-lab/alpaca",
		trainer.AncestorModelInitializer:   "hf://meta-llama/Llama-3.2-1B",
	} {
		job, ok := jobs[name]
		if !ok || job.Status.CompletionTime == nil {
			t.Errorf("initializer Job %s: found %v, completion time %v; want a completed Job", name, ok, job.Status.CompletionTime)
			continue
		}
		if trainerJob.CreationTimestamp.Before(job.Status.CompletionTime) {
			t.Errorf("trainer Job created at %s, before initializer %s completed at %s",
				trainerJob.CreationTimestamp, name, job.Status.CompletionTime)
		}
		if got := envOf(job.Spec.Template.Spec.Containers[0], "STORAGE_URI"); got != uri {
			t.Errorf("initializer %s STORAGE_URI = %q, want %q", name, got, uri)
		}
	}
}

// initializerJob is an initializer replicatedJob that runs for delay on kwok.
func initializerJob(ancestor, container, delay string) jobsetv1alpha2.ReplicatedJob {
	tmpl := batchJobTemplate(map[string]string{cluster.AnnotationCompleteDelay: delay})
	tmpl.Labels = map[string]string{trainer.LabelTrainJobAncestor: ancestor}
	tmpl.Spec.Template.Spec.Containers[0].Name = container
	tmpl.Spec.Template.Spec.Containers[0].Image = "ghcr.io/kubeflow/trainer/" + container
	return jobsetv1alpha2.ReplicatedJob{Name: ancestor, Template: tmpl}
}

// testRuntimePatches: a runtimePatch adding env, a volume with its mount and a
// toleration to the trainer reaches the pods (docs/compatibility.md#the-build-model
// step 2).
func testRuntimePatches(t *testing.T) {
	e := newEnv(t)
	e.createRuntime(t, "torch", nil)
	tj := trainJob("patched", trainer.TrainingRuntimeKind, "torch")
	// Env for the node container comes from spec.trainer: patches may not set it there
	// (upstream's admission rule, docs/compatibility.md#trainjob-validation).
	tj.Spec.Trainer = &trainer.Trainer{Env: []corev1.EnvVar{{Name: "PATCHED_BY", Value: "e2e"}}}
	toleration := corev1.Toleration{Key: "example.com/dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{{
		Manager: "example.com/e2e",
		TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{
			ReplicatedJobs: []trainer.ReplicatedJobPatch{{
				Name: trainer.ReplicatedJobNode,
				Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: &trainer.PodSpecPatch{
					Volumes:     []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
					Tolerations: []corev1.Toleration{toleration},
					Containers: []trainer.ContainerPatch{{
						Name:         trainer.ContainerNode,
						VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}},
					}},
				}}}},
			}},
		}}},
	}}
	e.createTrainJob(t, tj)

	pod := e.waitPods(t, "patched", 1)[0]
	node := podContainer(t, pod, trainer.ContainerNode)
	expectEnv(t, pod.Name, node, map[string]string{"PATCHED_BY": "e2e"})
	if !hasVolume(pod.Spec.Volumes, "scratch") {
		t.Errorf("pod %s volumes = %+v, want scratch", pod.Name, pod.Spec.Volumes)
	}
	if !hasMount(node.VolumeMounts, "scratch", "/scratch") {
		t.Errorf("pod %s node mounts = %+v, want scratch at /scratch", pod.Name, node.VolumeMounts)
	}
	if !hasToleration(pod.Spec.Tolerations, toleration) {
		t.Errorf("pod %s tolerations = %+v, want %+v", pod.Name, pod.Spec.Tolerations, toleration)
	}
	e.waitCondition(t, "patched", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
}

// testActiveDeadline: a TrainJob outliving activeDeadlineSeconds fails with reason
// DeadlineExceeded and its JobSet is deleted (docs/compatibility.md#active-deadline).
func testActiveDeadline(t *testing.T) {
	e := newEnv(t)
	e.createRuntime(t, "slow", map[string]string{cluster.AnnotationCompleteDelay: "60s"})
	tj := trainJob("late", trainer.TrainingRuntimeKind, "slow")
	tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](3)
	e.createTrainJob(t, tj)
	e.waitJobSet(t, "late")

	failed := e.waitCondition(t, "late", trainer.TrainJobFailed, metav1.ConditionTrue, time.Minute)
	if failed.Reason != "DeadlineExceeded" || failed.Message != "TrainJob exceeded its active deadline" {
		t.Errorf("Failed = %s/%q, want DeadlineExceeded/TrainJob exceeded its active deadline", failed.Reason, failed.Message)
	}
	cluster.Eventually(t, time.Minute, "JobSet late deleted", func(ctx context.Context) (bool, string) {
		js, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "late", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return js.DeletionTimestamp != nil, "JobSet still there"
	})
}

// testRuntimeSnapshot: editing a runtime changes no TrainJob that already has a JobSet
// — neither a running one nor a suspended one resumed after the edit (upstream's
// KEP-2599 behaviour) — while a TrainJob created after the edit gets the new runtime.
func testRuntimeSnapshot(t *testing.T) {
	e := newEnv(t)
	version := func(v string) func(*trainer.TrainingRuntime) {
		return func(rt *trainer.TrainingRuntime) {
			c := &rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0]
			c.Env = []corev1.EnvVar{{Name: "MODEL_VERSION", Value: v}}
		}
	}
	e.createRuntimeWith(t, "versioned", map[string]string{cluster.AnnotationCompleteDelay: "20s"}, version("v1"))
	e.createTrainJob(t, trainJob("running", trainer.TrainingRuntimeKind, "versioned"))
	e.createTrainJob(t, trainJob("queued", trainer.TrainingRuntimeKind, "versioned").suspended())
	e.waitPods(t, "running", 1)
	e.waitJobSet(t, "queued")
	before := e.waitJobSet(t, "running")

	runtimes := e.trainers.TrainerV1alpha1().TrainingRuntimes(e.ns)
	rt, err := runtimes.Get(context.Background(), "versioned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	version("v2")(rt)
	if _, err := runtimes.Update(context.Background(), rt, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("editing the runtime: %v", err)
	}
	e.createTrainJob(t, trainJob("fresh", trainer.TrainingRuntimeKind, "versioned"))
	resume := []byte(`{"spec":{"suspend":false}}`)
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Patch(context.Background(), "queued", types.MergePatchType, resume, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	for name, want := range map[string]string{"fresh": "v2", "queued": "v1"} {
		pod := e.waitPods(t, name, 1)[0]
		expectEnv(t, pod.Name, podContainer(t, pod, trainer.ContainerNode), map[string]string{"MODEL_VERSION": want})
	}
	after, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(context.Background(), "running", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation || after.UID != before.UID {
		t.Errorf("running JobSet changed after the runtime edit: generation %d -> %d, UID %s -> %s",
			before.Generation, after.Generation, before.UID, after.UID)
	}
	if got := envOf(after.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0], "MODEL_VERSION"); got != "v1" {
		t.Errorf("running JobSet MODEL_VERSION = %q, want v1", got)
	}
}

func podContainer(t *testing.T, pod corev1.Pod, name string) corev1.Container {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("pod %s has no container %s", pod.Name, name)
	return corev1.Container{}
}

// expectEnv checks plain env values of a pod's container.
func expectEnv(t *testing.T, pod string, c corev1.Container, want map[string]string) {
	t.Helper()
	for name, value := range want {
		if got := envOf(c, name); got != value {
			t.Errorf("pod %s container %s: %s = %q, want %q", pod, c.Name, name, got, value)
		}
	}
}

// expectCompletionIndex checks that env var name is the pod's Job completion index.
func expectCompletionIndex(t *testing.T, pod string, c corev1.Container, name string) {
	t.Helper()
	for _, v := range c.Env {
		if v.Name == name {
			if v.ValueFrom == nil || v.ValueFrom.FieldRef == nil || v.ValueFrom.FieldRef.FieldPath != completionIndex {
				t.Errorf("pod %s: %s = %+v, want the Job completion index", pod, name, v)
			}
			return
		}
	}
	t.Errorf("pod %s container %s has no %s", pod, c.Name, name)
}

func hasVolume(volumes []corev1.Volume, name string) bool {
	for _, v := range volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}

func hasMount(mounts []corev1.VolumeMount, name, path string) bool {
	for _, m := range mounts {
		if m.Name == name && m.MountPath == path {
			return true
		}
	}
	return false
}

func hasToleration(tolerations []corev1.Toleration, want corev1.Toleration) bool {
	for _, tol := range tolerations {
		if tol.MatchToleration(&want) {
			return true
		}
	}
	return false
}
