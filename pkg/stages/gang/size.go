package gang

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
)

// Size returns what a PodGroup of the whole JobSet must admit at once
// (docs/compatibility.md#gang-scheduling): minMember, the sum over replicatedJobs of
// their pod counts (parallelism, initializers included), and minResources, the sum of
// each pod's effective requests (Kubernetes pod-request semantics: init containers,
// sidecars, overhead) times its count. Like upstream, replicatedJob replicas are not
// multiplied in (the trainer and initializers always have one replica).
func Size(js *jobsetv1alpha2.JobSet) (minMember int32, minResources corev1.ResourceList) {
	minResources = corev1.ResourceList{}
	for i := range js.Spec.ReplicatedJobs {
		template := &js.Spec.ReplicatedJobs[i].Template.Spec
		count := ptr.Deref(template.Parallelism, 1)
		minMember += count
		pod := &corev1.Pod{Spec: template.Template.Spec}
		for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			q.Mul(int64(count))
			total := minResources[name]
			total.Add(q)
			minResources[name] = total
		}
	}
	return minMember, minResources
}
