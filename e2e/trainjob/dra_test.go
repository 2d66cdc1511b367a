package trainjob

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// TestDRAClaimTemplatePerNode (KEP-2782): a runtime patch adds a ResourceClaimTemplate
// for 2 fake GPUs to each of 2 trainer pods. Each pod gets its own claim, allocated 2
// devices from its node's ResourceSlice; PET_NPROC_PER_NODE is 2 although the TrainJob
// does not set numProcPerNode (derived from the template); the TrainJob completes.
func TestDRAClaimTemplatePerNode(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.createGPUClaimTemplate(t, "two-gpus", 2)
	// Pods stay Running for a while: generated claims are deallocated once pods finish.
	e.createRuntime(t, "torch-dra", map[string]string{cluster.AnnotationCompleteDelay: "10s"})
	e.createTrainJob(t, trainJob("dra", trainer.TrainingRuntimeKind, "torch-dra").withNumNodes(2).withGPUClaim("two-gpus"))

	var pods []corev1.Pod
	cluster.Eventually(t, time.Minute, "2 Running pods with generated claims", func(ctx context.Context) (bool, string) {
		list, err := e.c.Client().CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: jobsetv1alpha2.JobSetNameKey + "=dra"})
		if err != nil {
			return false, err.Error()
		}
		pods = list.Items
		var states []string
		ready := 0
		for _, p := range pods {
			states = append(states, fmt.Sprintf("%s %s claims %d", p.Name, p.Status.Phase, len(p.Status.ResourceClaimStatuses)))
			if p.Status.Phase == corev1.PodRunning && len(p.Status.ResourceClaimStatuses) == 1 &&
				p.Status.ResourceClaimStatuses[0].ResourceClaimName != nil {
				ready++
			}
		}
		return ready == 2 && len(pods) == 2, strings.Join(states, "; ")
	})

	claims := map[string]string{}
	for _, pod := range pods {
		if got := envOf(pod.Spec.Containers[0], "PET_NPROC_PER_NODE"); got != "2" {
			t.Errorf("pod %s: PET_NPROC_PER_NODE = %q, want \"2\" (2 GPUs per node from the claim template)", pod.Name, got)
		}
		name := *pod.Status.ResourceClaimStatuses[0].ResourceClaimName
		if other, dup := claims[name]; dup {
			t.Errorf("pods %s and %s share claim %s, want one claim per pod", other, pod.Name, name)
		}
		claims[name] = pod.Name
		claim, err := e.c.Client().ResourceV1().ResourceClaims(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting claim %s of pod %s: %v", name, pod.Name, err)
		}
		if claim.Status.Allocation == nil {
			t.Errorf("claim %s of pod %s is not allocated", name, pod.Name)
			continue
		}
		results := claim.Status.Allocation.Devices.Results
		if len(results) != 2 {
			t.Errorf("claim %s of pod %s allocated %d devices, want 2: %+v", name, pod.Name, len(results), results)
		}
		for _, r := range results {
			if r.Driver != cluster.DeviceClassName || r.Pool != pod.Spec.NodeName {
				t.Errorf("claim %s: device %s from driver %s pool %s, want driver %s pool %s (the pod's node)",
					name, r.Device, r.Driver, r.Pool, cluster.DeviceClassName, pod.Spec.NodeName)
			}
		}
	}

	e.waitCondition(t, "dra", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
}

// TestDRAMissingClaimTemplateWaitsThenProceeds: a TrainJob whose claim template does
// not exist gets JobSetReady=False naming it and no JobSet; creating the template lets
// it proceed by itself (the ResourceClaimTemplate informer routes it back to stage 1).
func TestDRAMissingClaimTemplateWaitsThenProceeds(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.createRuntime(t, "torch-dra", nil)
	e.createTrainJob(t, trainJob("waits", trainer.TrainingRuntimeKind, "torch-dra").withNumNodes(2).withGPUClaim("late-gpus"))

	waiting := e.waitCondition(t, "waits", "JobSetReady", metav1.ConditionFalse, time.Minute)
	if !strings.Contains(waiting.Message, `ResourceClaimTemplate "late-gpus" not found`) ||
		!strings.Contains(waiting.Message, "resourceClaimTemplateName") {
		t.Errorf("JobSetReady = %s/%q, want a message naming ResourceClaimTemplate late-gpus and the field", waiting.Reason, waiting.Message)
	}
	if _, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(context.Background(), "waits", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("JobSet of a TrainJob with a missing claim template: err = %v, want NotFound", err)
	}

	e.createGPUClaimTemplate(t, "late-gpus", 1)
	e.waitCondition(t, "waits", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
}

// TestDRACapacityHint: a TrainJob whose gang needs more devices of the fake GPU class
// than every ResourceSlice of the cluster holds waits with JobSetReady=False, reason
// InsufficientDevices, naming the class, the devices needed and those published; no
// JobSet is created.
func TestDRACapacityHint(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.createGPUClaimTemplate(t, "many-gpus", 32) // the API allows at most 32 per request
	e.createRuntime(t, "torch-dra", nil)
	e.createTrainJob(t, trainJob("too-big", trainer.TrainingRuntimeKind, "torch-dra").withNumNodes(3).withGPUClaim("many-gpus"))

	waiting := e.waitCondition(t, "too-big", "JobSetReady", metav1.ConditionFalse, time.Minute)
	want := fmt.Sprintf(`needs 96 devices of DeviceClass %q (replicatedJob node: 3 pods × 32 from ResourceClaimTemplate "many-gpus") but the cluster's ResourceSlices publish`, cluster.DeviceClassName)
	if waiting.Reason != "InsufficientDevices" || !strings.Contains(waiting.Message, want) {
		t.Errorf("JobSetReady = %s/%q, want InsufficientDevices containing %q", waiting.Reason, waiting.Message, want)
	}
	if _, err := e.jobsets.JobsetV1alpha2().JobSets(e.ns).Get(context.Background(), "too-big", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("JobSet of a TrainJob that can never get its devices: err = %v, want NotFound", err)
	}
}

// TestWorkloadSharedClaimStaysPodLevelOn136 (KEP-5729): a podGroupPolicy.workload
// TrainJob whose two trainer pods share a ResourceClaim. Kubernetes 1.36 serves only
// scheduling.k8s.io/v1alpha2, whose PodGroup-level claims are behind an alpha gate: the
// PodGroup gets no resourceClaims, the claim stays pod-level (reserved by both pods),
// PodGroupResourceClaims=False says that PodGroup-level claims need Kubernetes 1.37,
// and the TrainJob completes.
func TestWorkloadSharedClaimStaysPodLevelOn136(t *testing.T) {
	e := newEnv(t)
	if v := e.c.KubeVersion(); v != cluster.KubeVersion136 {
		t.Skipf("Kubernetes %s: PodGroup-level claims are served (TestWorkloadSharedClaimReservedForPodGroupOn137)", v)
	}
	startController(t, e.c)
	e.createGPUClaim(t, "shared-gpu", 1)
	e.createRuntimeWith(t, "torch-gang", map[string]string{cluster.AnnotationCompleteDelay: "5s"}, func(rt *trainer.TrainingRuntime) {
		rt.Spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}}
	})
	e.createTrainJob(t, trainJob("shared", trainer.TrainingRuntimeKind, "torch-gang").withNumNodes(2).
		withClaim(corev1.PodResourceClaim{Name: "data", ResourceClaimName: ptr.To("shared-gpu")}, nil))

	c := e.waitCondition(t, "shared", "PodGroupResourceClaims", metav1.ConditionFalse, time.Minute)
	if c.Reason != "PodGroupClaimsNeedKubernetes137" || !strings.Contains(c.Message, "node/data") || !strings.Contains(c.Message, "Kubernetes 1.37") {
		t.Errorf("PodGroupResourceClaims = %s/%q, want PodGroupClaimsNeedKubernetes137 naming node/data and Kubernetes 1.37", c.Reason, c.Message)
	}
	pg, err := e.c.Dynamic().Resource(e.c.WorkloadAPI().WithResource("podgroups")).Namespace(e.ns).Get(context.Background(), "shared-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting PodGroup shared-node: %v", err)
	}
	if claims, found, _ := unstructured.NestedSlice(pg.Object, "spec", "resourceClaims"); found {
		t.Errorf("PodGroup resourceClaims = %v on v1alpha2, want none", claims)
	}
	cluster.Eventually(t, time.Minute, "the shared claim reserved by both pods", func(ctx context.Context) (bool, string) {
		claim, err := e.c.Client().ResourceV1().ResourceClaims(e.ns).Get(ctx, "shared-gpu", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(claim.Status.ReservedFor) == 2, fmt.Sprintf("reservedFor %v", claim.Status.ReservedFor)
	})
	e.waitCondition(t, "shared", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
}

// TestWorkloadSharedClaimReservedForPodGroupOn137 (KEP-5729): the same TrainJob on
// Kubernetes 1.37, which serves scheduling.k8s.io/v1beta1 with DRAWorkloadResourceClaims:
// the PodGroup carries the shared claim, the resourceclaim controller reserves the claim
// once, for the PodGroup (not per pod), PodGroupResourceClaims=True says so, and the
// TrainJob completes.
func TestWorkloadSharedClaimReservedForPodGroupOn137(t *testing.T) {
	e := newEnv(t)
	if v := e.c.KubeVersion(); v != cluster.KubeVersion137 {
		t.Skipf("Kubernetes %s serves no PodGroup-level claims (TestWorkloadSharedClaimStaysPodLevelOn136); run with %s=%s",
			v, cluster.EnvKubeVersion, cluster.KubeVersion137)
	}
	startController(t, e.c)
	e.createGPUClaim(t, "shared-gpu", 1)
	e.createRuntimeWith(t, "torch-gang", map[string]string{cluster.AnnotationCompleteDelay: "5s"}, func(rt *trainer.TrainingRuntime) {
		rt.Spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}}
	})
	e.createTrainJob(t, trainJob("shared", trainer.TrainingRuntimeKind, "torch-gang").withNumNodes(2).
		withClaim(corev1.PodResourceClaim{Name: "data", ResourceClaimName: ptr.To("shared-gpu")}, nil))

	c := e.waitCondition(t, "shared", "PodGroupResourceClaims", metav1.ConditionTrue, time.Minute)
	if c.Reason != "ReservedForPodGroup" || !strings.Contains(c.Message, "scheduling.k8s.io/v1beta1") {
		t.Errorf("PodGroupResourceClaims = True/%s %q, want ReservedForPodGroup naming scheduling.k8s.io/v1beta1", c.Reason, c.Message)
	}
	pg, err := e.c.Dynamic().Resource(e.c.WorkloadAPI().WithResource("podgroups")).Namespace(e.ns).Get(context.Background(), "shared-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting PodGroup shared-node: %v", err)
	}
	claims, _, _ := unstructured.NestedSlice(pg.Object, "spec", "resourceClaims")
	if want := []any{map[string]any{"name": "data", "resourceClaimName": "shared-gpu"}}; !reflect.DeepEqual(claims, want) {
		t.Errorf("PodGroup resourceClaims = %v, want %v", claims, want)
	}
	want := resourcev1.ResourceClaimConsumerReference{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "shared-node", UID: pg.GetUID()}
	cluster.Eventually(t, time.Minute, "the shared claim allocated and reserved for the PodGroup alone", func(ctx context.Context) (bool, string) {
		claim, err := e.c.Client().ResourceV1().ResourceClaims(e.ns).Get(ctx, "shared-gpu", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return claim.Status.Allocation != nil && len(claim.Status.ReservedFor) == 1 && claim.Status.ReservedFor[0] == want,
			fmt.Sprintf("allocated %v, reservedFor %+v", claim.Status.Allocation != nil, claim.Status.ReservedFor)
	})
	cluster.Eventually(t, time.Minute, "both pods Running", func(ctx context.Context) (bool, string) {
		bound, pending, err := e.boundPods(ctx, "shared")
		return err == nil && bound == 2, fmt.Sprintf("bound %d, pending %d, err %v", bound, pending, err)
	})
	e.waitCondition(t, "shared", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
}

// createGPUClaimTemplate creates a ResourceClaimTemplate asking for n devices of the
// fake driver's DeviceClass.
func (e *env) createGPUClaimTemplate(t *testing.T, name string, n int64) {
	t.Helper()
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: gpuClaimSpec(n)},
	}
	if _, err := e.c.Client().ResourceV1().ResourceClaimTemplates(e.ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceClaimTemplate %s: %v", name, err)
	}
}

// createGPUClaim creates a ResourceClaim (shared by every pod naming it) asking for n
// devices of the fake driver's DeviceClass.
func (e *env) createGPUClaim(t *testing.T, name string, n int64) {
	t.Helper()
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Spec: gpuClaimSpec(n)}
	if _, err := e.c.Client().ResourceV1().ResourceClaims(e.ns).Create(context.Background(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceClaim %s: %v", name, err)
	}
}

func gpuClaimSpec(n int64) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
		Name: "gpus",
		Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: cluster.DeviceClassName,
			AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
			Count:           n,
		},
	}}}}
}

// withGPUClaim adds a runtime patch giving the trainer pods a claim "gpus" from the
// ResourceClaimTemplate template, used by the "node" container.
func (tj testTrainJob) withGPUClaim(template string) testTrainJob {
	return tj.withClaim(corev1.PodResourceClaim{Name: "gpus", ResourceClaimTemplateName: ptr.To(template)},
		[]trainer.ContainerPatch{{
			Name:      trainer.ContainerNode,
			Resources: &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}},
		}})
}

// withClaim adds a runtime patch giving the trainer pods claim, and containers.
func (tj testTrainJob) withClaim(claim corev1.PodResourceClaim, containers []trainer.ContainerPatch) testTrainJob {
	tj.Spec.RuntimePatches = append(tj.Spec.RuntimePatches, trainer.RuntimePatch{
		Manager: "e2e.trainyard.dev/dra",
		TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
			Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
				Name: trainer.ReplicatedJobNode,
				Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{
					Spec: &trainer.PodSpecPatch{ResourceClaims: []corev1.PodResourceClaim{claim}, Containers: containers},
				}}},
			}}},
		}},
	})
	return tj
}

// envOf returns the literal value of env var name of c, "" when unset.
func envOf(c corev1.Container, name string) string {
	for _, v := range c.Env {
		if v.Name == name {
			return v.Value
		}
	}
	return ""
}
