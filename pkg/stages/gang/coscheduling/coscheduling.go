// Package coscheduling is the scheduler-plugins coscheduling gang backend
// (podGroupPolicy.coscheduling; docs/compatibility.md#coscheduling): a
// scheduling.x-k8s.io/v1alpha1 PodGroup named after the TrainJob with minMember,
// minResources and scheduleTimeoutSeconds, and the label scheduling.x-k8s.io/pod-group
// on every pod. Like upstream, Trainyard does not set schedulerName: the runtime names
// the scheduler-plugins scheduler in its pod templates.
package coscheduling

import (
	"context"

	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/gang"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

const (
	// GroupVersion is the scheduler-plugins PodGroup API.
	GroupVersion = "scheduling.x-k8s.io/v1alpha1"
	// LabelPodGroup names a pod's PodGroup.
	LabelPodGroup = "scheduling.x-k8s.io/pod-group"
)

// Backend is the coscheduling backend. Served reports whether the API server serves
// GroupVersion podgroups (informers.ServedAPIs.Served); nil means assumed served.
type Backend struct {
	Served func(groupVersion string) bool
}

// Name returns the podGroupPolicy member it serves.
func (Backend) Name() string { return "coscheduling" }

// Enabled reports whether the runtime selects coscheduling.
func (Backend) Enabled(policy *trainer.PodGroupPolicy) bool { return policy.Coscheduling != nil }

// Apply adds the PodGroup and labels the pods. It returns *plan.UnsupportedError when
// the PodGroup CRD is not served.
func (b Backend) Apply(ctx context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
	spec, err := gang.PodGroupSpec(ctx, p, b.Served, b.Name(), GroupVersion)
	if err != nil {
		return err
	}
	spec["scheduleTimeoutSeconds"] = int64(ptr.Deref(p.Runtime.Spec.PodGroupPolicy.Coscheduling.ScheduleTimeoutSeconds, 60))
	p.Objects = append(p.Objects, gang.PodGroup(tj, GroupVersion, spec))
	gang.SetPodLabel(p, LabelPodGroup, tj.Name)
	return nil
}
