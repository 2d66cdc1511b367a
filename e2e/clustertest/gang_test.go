package clustertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// workloadManifests are a Workload with one gang template of minCount 3 and a
// PodGroup of it, in the Workload API version the cluster serves: v1alpha2
// (1.36), whose PodGroup names its template with
// podGroupTemplateRef.workload{workloadName, podGroupTemplateName}, or v1beta1
// (1.37), with workloadRef{workloadName, templateName}. The dynamic client
// speaks both: client-go v0.37 has no types for v1alpha2.
func workloadManifests(gv schema.GroupVersion) (workload, podGroup string) {
	workload = `
apiVersion: ` + gv.String() + `
kind: Workload
metadata:
  name: trainer
spec:
  podGroupTemplates:
  - name: trainer
    schedulingPolicy:
      gang:
        minCount: 3
`
	ref := `
  podGroupTemplateRef:
    workload:
      workloadName: trainer
      podGroupTemplateName: trainer`
	if gv.Version != "v1alpha2" {
		ref = `
  workloadRef:
    workloadName: trainer
    templateName: trainer`
	}
	podGroup = `
apiVersion: ` + gv.String() + `
kind: PodGroup
metadata:
  name: trainer-0
spec:` + ref + `
  schedulingPolicy:
    gang:
      minCount: 3
`
	return workload, podGroup
}

// poolLabel keeps the gang's pods on nodes this test adds (and other tests'
// pods off them, through a taint of the same key).
const poolLabel = "trainyard.dev/e2e-pool"

// TestWorkloadGangScheduling: three pods of a gang with minCount 3 each need
// 4 of a node's 8 GPUs. With one node two would fit, but the gang holds all
// three Pending; a second node lets all three bind. On 1.36 (v1alpha2) and 1.37
// (v1beta1).
func TestWorkloadGangScheduling(t *testing.T) {
	c := cluster.Shared(t)
	ns := cluster.NewNamespace(t, c)
	ctx := context.Background()
	addPoolNode := func(name string) {
		t.Helper()
		if _, err := c.AddNode(ctx, cluster.NodeSpec{
			Name:   name,
			Labels: map[string]string{poolLabel: ns},
			Taints: []corev1.Taint{{Key: poolLabel, Value: ns, Effect: corev1.TaintEffectNoSchedule}},
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := c.RemoveNode(context.Background(), name); err != nil {
				t.Error(err)
			}
		})
	}
	addPoolNode(ns + "-a")

	gv := c.WorkloadAPI()
	workloadYAML, podGroupYAML := workloadManifests(gv)
	workload, podGroup := object(t, workloadYAML), object(t, podGroupYAML)
	workloadGVR, podGroupGVR := gv.WithResource("workloads"), gv.WithResource("podgroups")
	if _, err := c.Dynamic().Resource(workloadGVR).Namespace(ns).Create(ctx, workload, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Workload: %v", err)
	}
	if _, err := c.Dynamic().Resource(podGroupGVR).Namespace(ns).Create(ctx, podGroup, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PodGroup: %v", err)
	}
	for i := range 3 {
		if _, err := c.Client().CoreV1().Pods(ns).Create(ctx, gangPod(fmt.Sprintf("trainer-%d", i), ns, "trainer-0"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod: %v", err)
		}
	}

	cluster.Eventually(t, 60*time.Second, "all gang pods marked unschedulable", func(ctx context.Context) (bool, string) {
		pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		unschedulable := 0
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					unschedulable++
				}
			}
		}
		return unschedulable == 3, describePods(pods.Items)
	})
	if pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Logf("with one node: %s", describePods(pods.Items))
	}
	cluster.Consistently(t, 3*time.Second, "no gang pod binds with one node", func(ctx context.Context) (bool, string) {
		pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return true, "" // transient; binding is what is checked
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				return false, describePods(pods.Items)
			}
		}
		return true, ""
	})

	addPoolNode(ns + "-b")

	cluster.Eventually(t, 90*time.Second, "all three gang pods bound to the pool", func(ctx context.Context) (bool, string) {
		pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		bound := 0
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Spec.NodeName, ns+"-") {
				bound++
			}
		}
		return bound == 3, describePods(pods.Items)
	})
	if pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Logf("with two nodes: %s", describePods(pods.Items))
	}
}

// gangPod asks for 4 GPUs on the test's pool and belongs to podGroup.
func gangPod(name, pool, podGroup string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:    map[string]string{poolLabel: pool},
			Tolerations:     []corev1.Toleration{{Key: poolLabel, Operator: corev1.TolerationOpEqual, Value: pool, Effect: corev1.TaintEffectNoSchedule}},
			SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To(podGroup)},
			Containers: []corev1.Container{{
				Name: "trainer", Image: "registry.example/trainer:latest",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{cluster.ResourceGPU: resource.MustParse("4")},
					Limits:   corev1.ResourceList{cluster.ResourceGPU: resource.MustParse("4")},
				},
			}},
		},
	}
}

func describePods(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		reason := ""
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				reason = fmt.Sprintf("%s/%s %q", cond.Status, cond.Reason, cond.Message)
			}
		}
		fmt.Fprintf(&b, "[%s node=%q phase=%s scheduled=%s] ", p.Name, p.Spec.NodeName, p.Status.Phase, reason)
	}
	return b.String()
}
