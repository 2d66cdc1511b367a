package gang

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// PodGroup returns an unstructured PodGroup of apiVersion named after the TrainJob, in
// its namespace and controlled by it, with spec: what the coscheduling and Volcano
// backends apply (docs/compatibility.md#gang-scheduling: one PodGroup per TrainJob,
// name <trainjob>).
func PodGroup(tj *trainer.TrainJob, apiVersion string, spec map[string]any) *unstructured.Unstructured {
	pg := plan.OwnedObject(tj, apiVersion, "PodGroup", tj.Name)
	pg.Object["spec"] = spec
	return pg
}

// PodGroupSpec checks that the backend's PodGroup API is served and returns the spec
// fields the coscheduling and Volcano PodGroups share: minMember and minResources of the
// whole JobSet (Size). It returns *plan.UnsupportedError naming member and groupVersion
// when served reports the API missing (nil served means assumed served).
func PodGroupSpec(_ context.Context, p *plan.Plan, served func(groupVersion string) bool, member, groupVersion string) (map[string]any, error) {
	if served != nil && !served(groupVersion) {
		return nil, NotServed(p, member, groupVersion)
	}
	minMember, minResources := Size(p.JobSet)
	resources, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&minResources)
	if err != nil {
		return nil, fmt.Errorf("encoding minResources: %w", err)
	}
	return map[string]any{"minMember": int64(minMember), "minResources": resources}, nil
}

// NotServed is the error of a backend whose PodGroup CRD the cluster does not serve.
func NotServed(p *plan.Plan, member, groupVersion string) error {
	return &plan.UnsupportedError{Object: p.Runtime.Ref(), Feature: fmt.Sprintf(
		"podGroupPolicy.%s: the PodGroup API %s is not served by this cluster; install its CRD (and scheduler; the TrainJob proceeds by itself once it is served), or remove podGroupPolicy.%s from the runtime",
		member, groupVersion, member)}
}

// SetPodLabel sets a label on every pod template of the plan's JobSet.
func SetPodLabel(p *plan.Plan, key, value string) {
	for i := range p.JobSet.Spec.ReplicatedJobs {
		meta := &p.JobSet.Spec.ReplicatedJobs[i].Template.Spec.Template.ObjectMeta
		if meta.Labels == nil {
			meta.Labels = map[string]string{}
		}
		meta.Labels[key] = value
	}
}

// SetPodAnnotation sets an annotation on every pod template of the plan's JobSet.
func SetPodAnnotation(p *plan.Plan, key, value string) {
	for i := range p.JobSet.Spec.ReplicatedJobs {
		meta := &p.JobSet.Spec.ReplicatedJobs[i].Template.Spec.Template.ObjectMeta
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		meta.Annotations[key] = value
	}
}
