// Package kai is the KAI Scheduler gang backend (podGroupPolicy.kaiScheduler; the
// contract of Kubeflow Trainer PR 3186, extended as Trainyard's brief asks): the JobSet
// and every pod template get the label kai.scheduler/queue, and every pod template gets
// schedulerName kai-scheduler. Trainyard creates no PodGroup: KAI's podgrouper derives
// it from the pods' owner chain.
package kai

import (
	"context"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

const (
	// LabelQueue is the label KAI reads a pod's queue from.
	LabelQueue = "kai.scheduler/queue"
	// SchedulerName is the name the KAI scheduler serves pods under.
	SchedulerName = "kai-scheduler"
)

// Backend is the KAI Scheduler backend.
type Backend struct{}

// Name returns the podGroupPolicy member it serves.
func (Backend) Name() string { return "kaiScheduler" }

// Enabled reports whether the runtime selects KAI.
func (Backend) Enabled(policy *trainer.PodGroupPolicy) bool { return policy.KAIScheduler != nil }

// Apply labels the JobSet and its pod templates with the queue and sets schedulerName.
// A pod template that names another scheduler is an error naming the replicatedJob:
// half of a gang on another scheduler would never start.
func (Backend) Apply(_ context.Context, _ *trainer.TrainJob, p *plan.Plan) error {
	queue := p.Runtime.Spec.PodGroupPolicy.KAIScheduler.Queue
	js := p.JobSet
	js.Labels = withLabel(js.Labels, LabelQueue, queue)
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		pod := &rj.Template.Spec.Template
		if name := pod.Spec.SchedulerName; name != "" && name != "default-scheduler" && name != SchedulerName {
			return &plan.InvalidInputError{Object: p.Runtime.Ref(),
				Field:   "spec.template.spec.replicatedJobs[name=" + rj.Name + "].template.spec.template.spec.schedulerName",
				Message: "is " + name + " but podGroupPolicy.kaiScheduler schedules every pod with " + SchedulerName + ": remove schedulerName or the kaiScheduler policy"}
		}
		pod.Spec.SchedulerName = SchedulerName
		pod.Labels = withLabel(pod.Labels, LabelQueue, queue)
	}
	return nil
}

func withLabel(labels map[string]string, key, value string) map[string]string {
	if labels == nil {
		labels = make(map[string]string, 1)
	}
	labels[key] = value
	return labels
}
