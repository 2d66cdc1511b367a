package trainjob

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// poolLabel pins a test's pods to nodes the test adds (and keeps other pods off them
// through a taint of the same key).
const poolLabel = "trainyard.dev/e2e-pool"

// addPoolNode adds an 8-GPU kwok node reserved for the test's namespace.
func (e *env) addPoolNode(t *testing.T, suffix string) {
	t.Helper()
	name := e.ns + "-" + suffix
	if _, err := e.c.AddNode(context.Background(), cluster.NodeSpec{
		Name:   name,
		Labels: map[string]string{poolLabel: e.ns},
		Taints: []corev1.Taint{{Key: poolLabel, Value: e.ns, Effect: corev1.TaintEffectNoSchedule}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.c.RemoveNode(context.Background(), name); err != nil {
			t.Error(err)
		}
	})
}

// gpuRuntime is a torch runtime whose pods each ask 4 GPUs on the test's node pool.
func (e *env) gpuRuntime(t *testing.T, name string, policy *trainer.PodGroupPolicy) {
	t.Helper()
	e.createRuntimeWith(t, name, map[string]string{cluster.AnnotationCompleteDelay: "2s"}, func(rt *trainer.TrainingRuntime) {
		rt.Spec.PodGroupPolicy = policy
		pod := &rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
		pod.NodeSelector = map[string]string{poolLabel: e.ns}
		pod.Tolerations = []corev1.Toleration{{Key: poolLabel, Operator: corev1.TolerationOpEqual, Value: e.ns, Effect: corev1.TaintEffectNoSchedule}}
		pod.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}
	})
}

// boundPods counts the TrainJob's pods bound to a node and those still unbound.
func (e *env) boundPods(ctx context.Context, name string) (bound, pending int, err error) {
	pods, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=" + name})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			bound++
		} else {
			pending++
		}
	}
	return bound, pending, nil
}

// TestWorkloadGangSchedulesAllOrNothing: a TrainJob of three pods that each need 4 of
// a node's 8 GPUs, on a runtime with podGroupPolicy.workload, gets a Workload and a
// PodGroup with minCount 3, in the Workload API version the cluster serves (v1alpha2 on
// 1.36, v1beta1 on 1.37, each with its own reference to the Workload's template); on
// one node none of its pods binds, and a second node lets all three bind together and
// the TrainJob completes. Deleting the TrainJob deletes the Workload and PodGroup.
func TestWorkloadGangSchedulesAllOrNothing(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.addPoolNode(t, "a")
	e.gpuRuntime(t, "gang", &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}})
	e.createTrainJob(t, trainJob("gang", trainer.TrainingRuntimeKind, "gang").withNumNodes(3))

	// Unstructured: the e2e module's client libraries (v0.37) have no v1alpha2 types.
	gv := e.c.WorkloadAPI()
	workloadGVR, podGroupGVR := gv.WithResource("workloads"), gv.WithResource("podgroups")
	var pg *unstructured.Unstructured
	cluster.Eventually(t, time.Minute, "PodGroup gang-node", func(ctx context.Context) (bool, string) {
		var err error
		if pg, err = e.c.Dynamic().Resource(podGroupGVR).Namespace(e.ns).Get(ctx, "gang-node", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if minCount, _, _ := unstructured.NestedInt64(pg.Object, "spec", "schedulingPolicy", "gang", "minCount"); minCount != 3 {
		t.Errorf("PodGroup gang minCount = %d, want 3", minCount)
	}
	refPath, wantRef := []string{"spec", "workloadRef"}, map[string]string{"workloadName": "gang", "templateName": "node"}
	if gv.Version == "v1alpha2" {
		refPath, wantRef = []string{"spec", "podGroupTemplateRef", "workload"}, map[string]string{"workloadName": "gang", "podGroupTemplateName": "node"}
	}
	if ref, _, _ := unstructured.NestedStringMap(pg.Object, refPath...); !maps.Equal(ref, wantRef) {
		t.Errorf("PodGroup %s %s = %v, want %v", gv, strings.Join(refPath, "."), ref, wantRef)
	}
	if _, err := e.c.Dynamic().Resource(workloadGVR).Namespace(e.ns).Get(context.Background(), "gang", metav1.GetOptions{}); err != nil {
		t.Errorf("Workload gang: %v", err)
	}

	e.waitPods(t, "gang", 3)
	cluster.Consistently(t, 8*time.Second, "no pod of the gang binds on one node", func(ctx context.Context) (bool, string) {
		bound, pending, err := e.boundPods(ctx, "gang")
		return err == nil && bound == 0, fmt.Sprintf("bound %d, pending %d, err %v", bound, pending, err)
	})

	// The wait is explained on the TrainJob, from the PodGroup's status.
	waiting := e.waitCondition(t, "gang", "GangScheduled", metav1.ConditionFalse, time.Minute)
	if waiting.Reason != "GangUnschedulable" || !strings.Contains(waiting.Message, "waiting for 3 pods to be schedulable together") ||
		!strings.Contains(waiting.Message, "PodGroup gang-node") {
		t.Errorf("GangScheduled = %s/%q, want GangUnschedulable explaining that 3 pods of PodGroup gang-node wait", waiting.Reason, waiting.Message)
	}

	e.addPoolNode(t, "b")
	cluster.Eventually(t, time.Minute, "all three pods bound", func(ctx context.Context) (bool, string) {
		bound, pending, err := e.boundPods(ctx, "gang")
		return err == nil && bound == 3, fmt.Sprintf("bound %d, pending %d, err %v", bound, pending, err)
	})
	e.waitCondition(t, "gang", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
	if scheduled := e.waitCondition(t, "gang", "GangScheduled", metav1.ConditionTrue, time.Minute); scheduled.Reason != "GangScheduled" {
		t.Errorf("GangScheduled = True/%s, want reason GangScheduled", scheduled.Reason)
	}

	if err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Delete(context.Background(), "gang", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, time.Minute, "Workload and PodGroup garbage-collected", func(ctx context.Context) (bool, string) {
		_, wErr := e.c.Dynamic().Resource(workloadGVR).Namespace(e.ns).Get(ctx, "gang", metav1.GetOptions{})
		_, pErr := e.c.Dynamic().Resource(podGroupGVR).Namespace(e.ns).Get(ctx, "gang-node", metav1.GetOptions{})
		return apierrors.IsNotFound(wErr) && apierrors.IsNotFound(pErr), fmt.Sprintf("workload: %v, podgroup: %v", wErr, pErr)
	})
}

// TestWithoutGangPodsBindPiecemeal is the contrast: the same TrainJob without a
// podGroupPolicy binds two pods on one node and leaves the third Pending.
func TestWithoutGangPodsBindPiecemeal(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.addPoolNode(t, "a")
	e.gpuRuntime(t, "no-gang", nil)
	e.createTrainJob(t, trainJob("piecemeal", trainer.TrainingRuntimeKind, "no-gang").withNumNodes(3))

	cluster.Eventually(t, time.Minute, "two pods bound, one pending", func(ctx context.Context) (bool, string) {
		bound, pending, err := e.boundPods(ctx, "piecemeal")
		return err == nil && bound == 2 && pending == 1, fmt.Sprintf("bound %d, pending %d, err %v", bound, pending, err)
	})
}

// TestKAISchedulerContract: with podGroupPolicy.kaiScheduler the JobSet and every pod
// carry kai.scheduler/queue and the pods name kai-scheduler. No KAI scheduler runs
// here, so the pods stay Pending: the contract is what is asserted.
func TestKAISchedulerContract(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.createRuntimeWith(t, "kai", nil, func(rt *trainer.TrainingRuntime) {
		rt.Spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
			KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{Queue: "team-a"}}}
	})
	e.createTrainJob(t, trainJob("kai", trainer.TrainingRuntimeKind, "kai").withNumNodes(2))

	if js := e.waitJobSet(t, "kai"); js.Labels["kai.scheduler/queue"] != "team-a" {
		t.Errorf("JobSet labels = %v, want kai.scheduler/queue=team-a", js.Labels)
	}
	for _, pod := range e.waitPods(t, "kai", 2) {
		if pod.Spec.SchedulerName != "kai-scheduler" || pod.Labels["kai.scheduler/queue"] != "team-a" {
			t.Errorf("pod %s: schedulerName %q, queue label %q; want kai-scheduler and team-a", pod.Name, pod.Spec.SchedulerName, pod.Labels["kai.scheduler/queue"])
		}
	}
}

// TestUpstreamPodGroups: runtimes selecting coscheduling and Volcano get their
// PodGroup, sized for the whole TrainJob, and the pods their group label or annotation.
func TestUpstreamPodGroups(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	for _, tc := range []struct {
		name   string
		policy trainer.PodGroupPolicySource
		gvr    schema.GroupVersionResource
		pods   func(corev1.Pod) string
	}{
		{"cosched", trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}},
			schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"},
			func(p corev1.Pod) string { return p.Labels["scheduling.x-k8s.io/pod-group"] }},
		{"volcano", trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{}},
			schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "podgroups"},
			func(p corev1.Pod) string { return p.Annotations["scheduling.k8s.io/group-name"] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.createRuntimeWith(t, tc.name, nil, func(rt *trainer.TrainingRuntime) {
				rt.Spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: tc.policy}
			})
			e.createTrainJob(t, trainJob(tc.name, trainer.TrainingRuntimeKind, tc.name).withNumNodes(3))
			var minMember int64
			cluster.Eventually(t, time.Minute, tc.gvr.Group+" PodGroup", func(ctx context.Context) (bool, string) {
				pg, err := e.c.Dynamic().Resource(tc.gvr).Namespace(e.ns).Get(ctx, tc.name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				minMember, _, _ = unstructured.NestedInt64(pg.Object, "spec", "minMember")
				return true, ""
			})
			if minMember != 3 {
				t.Errorf("minMember = %d, want 3", minMember)
			}
			for _, pod := range e.waitPods(t, tc.name, 3) {
				if got := tc.pods(pod); got != tc.name {
					t.Errorf("pod %s group = %q, want %q", pod.Name, got, tc.name)
				}
			}
		})
	}
}

// TestVolcanoCRDAbsentThenInstalled: with the Volcano PodGroup CRD absent, a TrainJob on
// a podGroupPolicy.volcano runtime gets JobSetReady=False (NotSupported) naming the API
// and no JobSet; once the CRD is installed the controller notices (ServedAPIs re-checks
// every 30 s) and the TrainJob gets its PodGroup and JobSet by itself. The CRD is put
// back however the test ends, so the package's other tests find it.
func TestVolcanoCRDAbsentThenInstalled(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	apiext, err := apiextensionsclient.NewForConfig(e.c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	const crdName = "podgroups.scheduling.volcano.sh"
	crd, err := apiext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saved := crd.DeepCopy()
	saved.ObjectMeta = metav1.ObjectMeta{Name: crd.Name, Labels: crd.Labels, Annotations: crd.Annotations}
	saved.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	install := func(ctx context.Context) error {
		_, err := apiext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, saved, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	served := func() bool {
		_, err := e.c.Client().Discovery().ServerResourcesForGroupVersion("scheduling.volcano.sh/v1beta1")
		return err == nil
	}
	t.Cleanup(func() {
		if err := install(context.Background()); err != nil {
			t.Errorf("re-installing %s: %v", crdName, err)
		}
		cluster.Eventually(t, time.Minute, crdName+" served again", func(context.Context) (bool, string) { return served(), "" })
	})
	if err := apiext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crdName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, time.Minute, crdName+" gone from discovery", func(context.Context) (bool, string) { return !served(), "" })

	startController(t, e.c)
	e.createRuntimeWith(t, "volcano", nil, func(rt *trainer.TrainingRuntime) {
		rt.Spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{}}}
	})
	e.createTrainJob(t, trainJob("volcano", trainer.TrainingRuntimeKind, "volcano").withNumNodes(2))

	waiting := e.waitCondition(t, "volcano", "JobSetReady", metav1.ConditionFalse, time.Minute)
	if waiting.Reason != "NotSupported" || !strings.Contains(waiting.Message, "podGroupPolicy.volcano") ||
		!strings.Contains(waiting.Message, "scheduling.volcano.sh/v1beta1 is not served") {
		t.Errorf("JobSetReady = %s/%q, want NotSupported naming podGroupPolicy.volcano and scheduling.volcano.sh/v1beta1", waiting.Reason, waiting.Message)
	}
	if _, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(ctx, "volcano", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("JobSet of a TrainJob whose PodGroup API is absent: err = %v, want NotFound", err)
	}

	if err := install(ctx); err != nil {
		t.Fatal(err)
	}
	volcanoGVR := schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "podgroups"}
	cluster.Eventually(t, 2*time.Minute, "Volcano PodGroup once the CRD is installed", func(ctx context.Context) (bool, string) {
		_, err := e.c.Dynamic().Resource(volcanoGVR).Namespace(e.ns).Get(ctx, "volcano", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	e.waitJobSet(t, "volcano")
	e.waitCondition(t, "volcano", "JobSetReady", metav1.ConditionTrue, time.Minute)
}
