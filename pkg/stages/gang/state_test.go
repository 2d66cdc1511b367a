package gang_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainyard/trainyard/pkg/stages/gang"
)

func podGroup(apiVersion, name string, spec, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": "PodGroup", "spec": spec}}
	if status != nil {
		u.Object["status"] = status
	}
	u.SetName(name)
	return u
}

func condition(typ, status, message string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": "Unschedulable", "message": message}
}

func TestWaiting(t *testing.T) {
	gang3 := map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(3)}}}
	members := map[string]any{"minMember": int64(8)}
	cases := map[string]struct {
		podGroups []*unstructured.Unstructured
		want      []string // fragments; nil means "" (not waiting)
	}{
		"Workload API v1alpha2 unschedulable": {
			podGroups: []*unstructured.Unstructured{podGroup("scheduling.k8s.io/v1alpha2", "job-node", gang3, map[string]any{
				"conditions": []any{condition("PodGroupScheduled", "False", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")}})},
			want: []string{"waiting for 3 pods to be schedulable together", "PodGroup job-node: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."},
		},
		"Workload API v1beta1 unschedulable": {
			podGroups: []*unstructured.Unstructured{podGroup("scheduling.k8s.io/v1beta1", "job-node", gang3, map[string]any{
				"conditions": []any{condition("PodGroupInitiallyScheduled", "False", "no fit")}})},
			want: []string{"waiting for 3 pods", "PodGroup job-node: no fit"},
		},
		"Workload API scheduled": {
			podGroups: []*unstructured.Unstructured{podGroup("scheduling.k8s.io/v1alpha2", "job-node", gang3, map[string]any{
				"conditions": []any{condition("PodGroupScheduled", "True", "")}})},
		},
		"Workload API not tried yet": {
			podGroups: []*unstructured.Unstructured{podGroup("scheduling.k8s.io/v1alpha2", "job-node", gang3, nil)},
		},
		"two gangs waiting add up": {
			podGroups: []*unstructured.Unstructured{
				podGroup("scheduling.k8s.io/v1alpha2", "job-b", gang3, map[string]any{"conditions": []any{condition("PodGroupScheduled", "False", "b")}}),
				podGroup("scheduling.k8s.io/v1alpha2", "job-a", gang3, map[string]any{"conditions": []any{condition("PodGroupScheduled", "False", "a")}}),
			},
			want: []string{"waiting for 6 pods", "(PodGroup job-a: a; PodGroup job-b: b)"},
		},
		"coscheduling scheduling": {
			podGroups: []*unstructured.Unstructured{podGroup("scheduling.x-k8s.io/v1alpha1", "job", members, map[string]any{"phase": "Scheduling", "scheduled": int64(5)})},
			want:      []string{"waiting for 8 pods", "PodGroup job: phase Scheduling, 5 of 8 pods scheduled"},
		},
		"coscheduling running": {
			podGroups: []*unstructured.Unstructured{podGroup("scheduling.x-k8s.io/v1alpha1", "job", members, map[string]any{"phase": "Running", "scheduled": int64(8)})},
		},
		"Volcano unschedulable while pending": {
			podGroups: []*unstructured.Unstructured{podGroup("scheduling.volcano.sh/v1beta1", "job", members, map[string]any{"phase": "Inqueue",
				"conditions": []any{condition("Unschedulable", "True", "8/8 tasks in gang unschedulable")}})},
			want: []string{"waiting for 8 pods", "PodGroup job: 8/8 tasks in gang unschedulable"},
		},
		"Volcano running keeps a stale condition quiet": {
			podGroups: []*unstructured.Unstructured{podGroup("scheduling.volcano.sh/v1beta1", "job", members, map[string]any{"phase": "Running",
				"conditions": []any{condition("Unschedulable", "True", "old")}})},
		},
		"none": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := gang.Waiting(tc.podGroups)
			if tc.want == nil && got != "" {
				t.Errorf("Waiting = %q, want \"\"", got)
			}
			for _, fragment := range tc.want {
				if !strings.Contains(got, fragment) {
					t.Errorf("Waiting = %q, want it to contain %q", got, fragment)
				}
			}
		})
	}
}
