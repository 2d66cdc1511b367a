package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// TestDRAClaimFromTemplateIsAllocated: a pod asking, through a
// ResourceClaimTemplate, for 2 devices of the fake GPU DeviceClass gets a
// claim with two devices of its node's ResourceSlice, and runs.
func TestDRAClaimFromTemplateIsAllocated(t *testing.T) {
	c := cluster.Shared(t)
	ns := cluster.NewNamespace(t, c)
	ctx := context.Background()
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "two-gpus"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{
			Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "gpus",
				Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: cluster.DeviceClassName,
					AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
					Count:           2,
				},
			}}},
		}},
	}
	if _, err := c.Client().ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceClaimTemplate: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("two-gpus")}},
			Containers: []corev1.Container{{
				Name: "trainer", Image: "registry.example/trainer:latest",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}},
			}},
		},
	}
	if _, err := c.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}

	var running *corev1.Pod
	cluster.Eventually(t, 60*time.Second, "pod Running", func(ctx context.Context) (bool, string) {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, "trainer", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		running = p
		return p.Status.Phase == corev1.PodRunning, describePods([]corev1.Pod{*p})
	})

	if len(running.Status.ResourceClaimStatuses) != 1 || running.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod claim statuses %v, want one generated claim", running.Status.ResourceClaimStatuses)
	}
	claimName := *running.Status.ResourceClaimStatuses[0].ResourceClaimName
	claim, err := c.Client().ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting claim %s: %v", claimName, err)
	}
	if claim.Status.Allocation == nil {
		t.Fatalf("claim %s is not allocated", claimName)
	}
	results := claim.Status.Allocation.Devices.Results
	if len(results) != 2 {
		t.Fatalf("claim %s allocated %d devices, want 2: %+v", claimName, len(results), results)
	}
	for _, r := range results {
		if r.Driver != cluster.DeviceClassName || r.Pool != running.Spec.NodeName {
			t.Errorf("device %s from driver %s pool %s, want driver %s pool %s (the pod's node)",
				r.Device, r.Driver, r.Pool, cluster.DeviceClassName, running.Spec.NodeName)
		}
	}
	if got := fmt.Sprint(claim.Status.ReservedFor); len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].Name != "trainer" {
		t.Errorf("claim reserved for %s, want the pod", got)
	}
}
