package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
)

func TestJobSetWithTwoPodsCompletes(t *testing.T) {
	c := cluster.Shared(t)
	ns := cluster.NewNamespace(t, c)
	ctx := context.Background()
	js := object(t, fmt.Sprintf(`
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: two-pods
spec:
  replicatedJobs:
  - name: workers
    replicas: 1
    template:
      spec:
        parallelism: 2
        completions: 2
        backoffLimit: 0
        template:
          metadata:
            annotations:
              %s: 1s
          spec:
            restartPolicy: Never
            containers:
            - name: worker
              image: registry.example/trainer:latest
              resources:
                requests: {cpu: "1", memory: 1Gi}
`, cluster.AnnotationCompleteDelay))

	if _, err := c.Dynamic().Resource(cluster.JobSetGVR).Namespace(ns).Create(ctx, js, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating JobSet: %v", err)
	}

	cluster.Eventually(t, 90*time.Second, "JobSet terminalState Completed", func(ctx context.Context) (bool, string) {
		got, err := c.Dynamic().Resource(cluster.JobSetGVR).Namespace(ns).Get(ctx, "two-pods", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		state, _, _ := unstructured.NestedString(got.Object, "status", "terminalState")
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		return state == "Completed", fmt.Sprintf("terminalState=%q conditions=%v", state, conds)
	})
	pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("got %d pods, want 2", len(pods.Items))
	}
	for _, p := range pods.Items {
		node, err := c.Client().CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node of pod %s: %v", p.Name, err)
		}
		if node.Labels[cluster.LabelFakeNode] != "true" || p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s: phase %s on node %s (labels %v), want Succeeded on a fake node", p.Name, p.Status.Phase, node.Name, node.Labels)
		}
	}
}

func TestPodFailureFailsItsJob(t *testing.T) {
	c := cluster.Shared(t)
	ns := cluster.NewNamespace(t, c)
	ctx := context.Background()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "fails"},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{cluster.AnnotationFailAfter: "1s"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "trainer", Image: "registry.example/trainer:latest",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
					}},
				},
			},
		},
	}

	if _, err := c.Client().BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Job: %v", err)
	}

	cluster.Eventually(t, 60*time.Second, "Job condition Failed=True", func(ctx context.Context) (bool, string) {
		got, err := c.Client().BatchV1().Jobs(ns).Get(ctx, "fails", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("active=%d failed=%d conditions=%v", got.Status.Active, got.Status.Failed, got.Status.Conditions)
	})
	pods, err := c.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("got %d pods, want 1", len(pods.Items))
	}
	p := pods.Items[0]
	if p.Status.Phase != corev1.PodFailed || len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: phase %s, container statuses %v; want Failed with one container", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
	}
	if term := p.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 1 {
		t.Errorf("container state %+v, want terminated with exit code 1", p.Status.ContainerStatuses[0].State)
	}
}
