// Package workload is the Kubernetes Workload API gang backend (podGroupPolicy.workload;
// Kubeflow Trainer issue 3015, first draft of KEP-3015). For a TrainJob it plans:
//
//   - a scheduling.k8s.io Workload named after the TrainJob, controllerRef → the
//     TrainJob, with one podGroupTemplate per gang: every replicatedJob except the
//     dataset and model initializers, named after the replicatedJob, with
//     gang.minCount = its pods (parallelism × replicas);
//   - one PodGroup per template, "<trainjob>-<replicatedJob>", referencing it;
//   - spec.schedulingGroup.podGroupName on each gang's pod template.
//
// Initializers get no group: they must finish before the trainer starts (dependsOn), so
// putting them in the trainer's gang would deadlock it, and a one-pod step needs no gang.
// Every object is owned by the TrainJob (controller), so deleting the TrainJob deletes
// them; the PodGroups do not also name the Workload as owner because its UID is not
// known when the plan is built.
//
// The API server must serve scheduling.k8s.io/v1alpha2 (Kubernetes 1.36 with the
// GenericWorkload and GangScheduling feature gates); when it does not, the TrainJob gets
// a condition saying so.
package workload

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// GroupVersion is the Workload API version Trainyard speaks.
var GroupVersion = schedulingv1alpha2.SchemeGroupVersion

// maxTemplates is the API's limit on podGroupTemplates per Workload.
const maxTemplates = 8

// Backend is the Workload API backend. Served reports whether the API server serves
// GroupVersion's workloads and podgroups (gang.ServedCheck); nil means it is assumed
// served.
type Backend struct {
	Served func(ctx context.Context) bool
}

// Name returns the podGroupPolicy member it serves.
func (Backend) Name() string { return "workload" }

// Enabled reports whether the runtime selects the Workload API.
func (Backend) Enabled(policy *trainer.PodGroupPolicy) bool { return policy.Workload != nil }

// Apply adds the Workload and PodGroups to p.Objects and points the gangs' pod templates
// at their PodGroups. It returns *plan.UnsupportedError when the API is not served and
// *plan.InvalidInputError when the runtime has more gangs than a Workload allows.
func (b Backend) Apply(ctx context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
	if b.Served != nil && !b.Served(ctx) {
		return &plan.UnsupportedError{Object: p.Runtime.Ref(), Feature: fmt.Sprintf(
			"podGroupPolicy.workload: the Workload API (%s workloads, podgroups) is not served by this cluster; "+
				"enable the GenericWorkload and GangScheduling feature gates and --runtime-config=%s=true on the API server and scheduler, "+
				"or remove podGroupPolicy.workload from the runtime", GroupVersion, GroupVersion)}
	}
	owner := *metav1.NewControllerRef(tj, trainer.SchemeGroupVersion.WithKind(trainer.TrainJobKind))
	workload := &schedulingv1alpha2.Workload{
		TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "Workload"},
		ObjectMeta: metav1.ObjectMeta{Name: tj.Name, Namespace: tj.Namespace, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: schedulingv1alpha2.WorkloadSpec{
			ControllerRef: &schedulingv1alpha2.TypedLocalObjectReference{APIGroup: trainer.GroupName, Kind: trainer.TrainJobKind, Name: tj.Name},
		},
	}
	var podGroups []runtime.Object
	for i := range p.JobSet.Spec.ReplicatedJobs {
		rj := &p.JobSet.Spec.ReplicatedJobs[i]
		switch plan.Ancestor(rj) {
		case trainer.AncestorDatasetInitializer, trainer.AncestorModelInitializer:
			continue
		}
		minCount := ptr.Deref(rj.Template.Spec.Parallelism, 1) * max(rj.Replicas, 1)
		if minCount < 1 {
			continue // numNodes 0: nothing to schedule
		}
		policy := schedulingv1alpha2.PodGroupSchedulingPolicy{Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: minCount}}
		workload.Spec.PodGroupTemplates = append(workload.Spec.PodGroupTemplates,
			schedulingv1alpha2.PodGroupTemplate{Name: rj.Name, SchedulingPolicy: policy})
		name := PodGroupName(tj.Name, rj.Name)
		podGroups = append(podGroups, &schedulingv1alpha2.PodGroup{
			TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "PodGroup"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tj.Namespace, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: schedulingv1alpha2.PodGroupSpec{
				PodGroupTemplateRef: &schedulingv1alpha2.PodGroupTemplateReference{Workload: &schedulingv1alpha2.WorkloadPodGroupTemplateReference{
					WorkloadName: tj.Name, PodGroupTemplateName: rj.Name}},
				SchedulingPolicy: policy,
			},
		})
		rj.Template.Spec.Template.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
	}
	if n := len(workload.Spec.PodGroupTemplates); n > maxTemplates {
		return &plan.InvalidInputError{Object: p.Runtime.Ref(), Field: "spec.template.spec.replicatedJobs",
			Message: fmt.Sprintf("podGroupPolicy.workload gangs every replicatedJob except initializers, %d here, but a Workload holds at most %d", n, maxTemplates)}
	}
	if len(workload.Spec.PodGroupTemplates) == 0 {
		return nil
	}
	// The Workload first: the PodGroups reference it.
	for _, obj := range append([]runtime.Object{workload}, podGroups...) {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return fmt.Errorf("encoding %T: %w", obj, err)
		}
		p.Objects = append(p.Objects, &unstructured.Unstructured{Object: u})
	}
	return nil
}

// PodGroupName is the name of a TrainJob's PodGroup for one replicatedJob.
func PodGroupName(trainJob, replicatedJob string) string {
	return trainJob + "-" + replicatedJob
}
