package gang

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// API groups of the PodGroups the backends create.
const (
	groupWorkload     = "scheduling.k8s.io"
	groupCoscheduling = "scheduling.x-k8s.io"
	groupVolcano      = "scheduling.volcano.sh"
)

// workloadScheduledConditions are the Workload API PodGroup condition types that say
// whether the scheduler placed the gang: PodGroupScheduled (v1alpha2),
// PodGroupInitiallyScheduled (v1alpha3, v1beta1). The scheduler sets them False, reason
// Unschedulable or SchedulerError, only after a scheduling attempt failed.
var workloadScheduledConditions = []string{"PodGroupScheduled", "PodGroupInitiallyScheduled"}

// coschedulingWaitingPhases are the scheduler-plugins PodGroup phases in which enough
// pods exist but fewer than minMember are scheduled.
var coschedulingWaitingPhases = []string{"PreScheduling", "Scheduling"}

// Waiting explains why the gangs of podGroups (the PodGroups one TrainJob controls, as
// cached by informers.PodGroups) are not scheduled, e.g. "waiting for 3 pods to be
// schedulable together; ... (PodGroup gang-node: 0/1 nodes are available: ...)"; ""
// when none reports waiting. The source of truth per backend:
//
//   - Workload API (scheduling.k8s.io): status condition PodGroupScheduled or
//     PodGroupInitiallyScheduled False; the count is spec.schedulingPolicy.gang.minCount.
//   - coscheduling (scheduling.x-k8s.io): status.phase PreScheduling or Scheduling with
//     status.scheduled < spec.minMember.
//   - Volcano (scheduling.volcano.sh): status condition Unschedulable True while
//     status.phase is Pending or Inqueue; the count is spec.minMember.
//
// KAI's PodGroups are KAI's own and not read.
func Waiting(podGroups []*unstructured.Unstructured) string {
	var parts []string
	var pods int64
	for _, pg := range podGroups {
		n, why, waiting := podGroupWaiting(pg)
		if !waiting {
			continue
		}
		pods += n
		part := "PodGroup " + pg.GetName()
		if why != "" {
			part += ": " + why
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return fmt.Sprintf("waiting for %d pods to be schedulable together; they start when the cluster can place all of them at once "+
		"(add capacity, or lower spec.trainer.numNodes or the pods' requests) (%s)", pods, strings.Join(parts, "; "))
}

// podGroupWaiting reports whether pg says its gang is waiting, with the number of pods
// that must start together and the scheduler's explanation.
func podGroupWaiting(pg *unstructured.Unstructured) (pods int64, why string, waiting bool) {
	conditions := conditionsOf(pg)
	switch pg.GroupVersionKind().Group {
	case groupWorkload:
		pods, _, _ = unstructured.NestedInt64(pg.Object, "spec", "schedulingPolicy", "gang", "minCount")
		for _, c := range conditions {
			if slices.Contains(workloadScheduledConditions, c.Type) && c.Status == metav1.ConditionFalse {
				return pods, c.Message, true
			}
		}
	case groupCoscheduling:
		pods, _, _ = unstructured.NestedInt64(pg.Object, "spec", "minMember")
		phase, _, _ := unstructured.NestedString(pg.Object, "status", "phase")
		scheduled, _, _ := unstructured.NestedInt64(pg.Object, "status", "scheduled")
		if slices.Contains(coschedulingWaitingPhases, phase) && scheduled < pods {
			return pods, fmt.Sprintf("phase %s, %d of %d pods scheduled", phase, scheduled, pods), true
		}
	case groupVolcano:
		pods, _, _ = unstructured.NestedInt64(pg.Object, "spec", "minMember")
		phase, _, _ := unstructured.NestedString(pg.Object, "status", "phase")
		if phase != "Pending" && phase != "Inqueue" {
			return 0, "", false
		}
		for _, c := range conditions {
			if c.Type == "Unschedulable" && c.Status == metav1.ConditionTrue {
				return pods, c.Message, true
			}
		}
	}
	return 0, "", false
}

// conditionsOf decodes status.conditions; Volcano's conditions have metav1.Condition's
// type, status, reason and message fields too. Undecodable entries are skipped.
func conditionsOf(pg *unstructured.Unstructured) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(pg.Object, "status", "conditions")
	out := make([]metav1.Condition, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition

		c.Type, _, _ = unstructured.NestedString(m, "type")
		status, _, _ := unstructured.NestedString(m, "status")
		c.Status = metav1.ConditionStatus(status)
		c.Message, _, _ = unstructured.NestedString(m, "message")
		out = append(out, c)
	}
	return out
}
