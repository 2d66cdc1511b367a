package cluster

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The ClusterQueue spec covers the quota's resources in a stable order, selects
// one namespace (or all), and converts to Kueue's typed fields.
func TestKueueClusterQueueSpec(t *testing.T) {
	spec := KueueClusterQueueSpec("bench", "default", corev1.ResourceList{
		corev1.ResourcePods: resource.MustParse("400"),
		corev1.ResourceCPU:  resource.MustParse("2500m"),
	})
	want := map[string]any{
		"namespaceSelector": map[string]any{"matchLabels": map[string]any{corev1.LabelMetadataName: "bench"}},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{"cpu", "pods"},
			"flavors": []any{map[string]any{"name": "default", "resources": []any{
				map[string]any{"name": "cpu", "nominalQuota": "2500m"},
				map[string]any{"name": "pods", "nominalQuota": "400"},
			}}},
		}},
	}
	if !reflect.DeepEqual(spec, want) {
		t.Errorf("spec = %#v\nwant %#v", spec, want)
	}
	// Every namespace: an empty selector, which Kueue reads as "all" (nil as "none").
	all := KueueClusterQueueSpec("", "default", corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")})
	if sel, ok := all["namespaceSelector"].(map[string]any); !ok || len(sel) != 0 {
		t.Errorf("namespaceSelector for all namespaces = %#v, want an empty map", all["namespaceSelector"])
	}
	// The spec is plain JSON values: it must survive a deep copy as the dynamic client
	// does it.
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	if got := u.DeepCopy(); !reflect.DeepEqual(got.Object["spec"], spec) {
		t.Errorf("deep copy changed the spec: %#v", got.Object["spec"])
	}
}

func TestConditions(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Active", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-11-26T12:00:00Z"},
		"not a condition",
		map[string]any{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "waiting", "lastTransitionTime": "2026-11-26T12:00:01Z"},
	}}}}
	got := Conditions(u)
	if len(got) != 2 || got[0].Type != "Active" || got[0].Status != metav1.ConditionTrue || got[1].Message != "waiting" {
		t.Errorf("Conditions = %+v, want Active True and QuotaReserved False (the string left out)", got)
	}
	if got := Conditions(&unstructured.Unstructured{Object: map[string]any{}}); got != nil {
		t.Errorf("Conditions of an object without status = %+v, want none", got)
	}
}
