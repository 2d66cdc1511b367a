// Package workload is the Kubernetes Workload API gang backend (podGroupPolicy.workload;
// Kubeflow Trainer issue 3015, first draft of KEP-3015). For a TrainJob it plans:
//
//   - a scheduling.k8s.io Workload named after the TrainJob, controllerRef → the
//     TrainJob, with one podGroupTemplate per gang: every replicatedJob except the
//     dataset and model initializers, named after the replicatedJob, with
//     gang.minCount = its pods (parallelism × replicas);
//   - one PodGroup per template, "<trainjob>-<replicatedJob>", referencing it;
//   - spec.schedulingGroup.podGroupName on each gang's pod template;
//   - the gang's shared claims (pod claims naming a resourceClaimName, at most
//     MaxPodGroupResourceClaims) in the PodGroup's and its template's resourceClaims,
//     so the scheduler reserves each claim once for the PodGroup instead of once per pod
//     (KEP-5729; a claim can be reserved for at most 256 consumers). Pods keep their
//     identical claim entry, which is how they consume a PodGroup's claim. Only
//     v1beta1 and v1alpha3 (Kubernetes 1.37, feature gate DRAWorkloadResourceClaims,
//     beta) get them: v1alpha2 has the field behind an alpha gate discovery cannot
//     see, so there the claims stay pod-level and the condition PodGroupResourceClaims
//     =False says that reserving them for the PodGroup needs Kubernetes 1.37; where they
//     move, PodGroupResourceClaims=True (reason ReservedForPodGroup) says so. Claims
//     from ResourceClaimTemplates stay pod-level everywhere: one claim per pod.
//
// Initializers get no group: they must finish before the trainer starts (dependsOn), so
// putting them in the trainer's gang would deadlock it, and a one-pod step needs no gang.
// Every object is owned by the TrainJob (controller), so deleting the TrainJob deletes
// them; the PodGroups do not also name the Workload as owner because its UID is not
// known when the plan is built.
//
// API versions (Versions, newest first): Kubernetes 1.37 serves scheduling.k8s.io
// v1beta1 and v1alpha3, whose PodGroup points at its template with
// spec.workloadRef{workloadName, templateName}; Kubernetes 1.36 serves v1alpha2, whose
// PodGroup uses spec.podGroupTemplateRef.workload{workloadName, podGroupTemplateName}.
// The Workload's shape is the same in all three. The backend builds the newest version
// the API server serves; when it serves none, the TrainJob gets a condition saying how
// to enable the API, and it proceeds once the API is served (informers.ServedAPIs).
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
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Versions are the Workload API versions Trainyard speaks, newest first: the backend
// uses the first one the API server serves. k8s.io/api v0.36 has Go types only for
// v1alpha2; the newer shapes are built as unstructured objects (see reshape).
var Versions = []string{"scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3", schedulingv1alpha2.SchemeGroupVersion.String()}

// Resources are the resources a version must serve for the backend to use it.
var Resources = []string{"workloads", "podgroups"}

// maxTemplates is the API's limit on podGroupTemplates per Workload.
const maxTemplates = 8

// MaxPodGroupResourceClaims is the API's limit on resourceClaims per PodGroup; further
// shared claims stay pod-level.
const MaxPodGroupResourceClaims = schedulingv1alpha2.MaxPodGroupResourceClaims

// podGroupClaims reports whether version takes PodGroup-level resourceClaims without an
// alpha gate (see the package doc).
func podGroupClaims(version string) bool {
	return version != schedulingv1alpha2.SchemeGroupVersion.String()
}

// Backend is the Workload API backend. Served reports whether the API server serves a
// version's workloads and podgroups (informers.ServedAPIs.Served); nil means every
// version is served, so the newest is used.
type Backend struct {
	Served func(groupVersion string) bool
}

// Version returns the newest of Versions the API server serves, "" when none.
func (b Backend) Version() string {
	for _, v := range Versions {
		if b.Served == nil || b.Served(v) {
			return v
		}
	}
	return ""
}

// Name returns the podGroupPolicy member it serves.
func (Backend) Name() string { return "workload" }

// Enabled reports whether the runtime selects the Workload API.
func (Backend) Enabled(policy *trainer.PodGroupPolicy) bool { return policy.Workload != nil }

// Apply adds the Workload and PodGroups, in the newest served version, to p.Objects and
// points the gangs' pod templates at their PodGroups. It returns *plan.UnsupportedError
// when no version is served and *plan.InvalidInputError when the runtime has more gangs
// than a Workload allows.
func (b Backend) Apply(_ context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
	version := b.Version()
	if version == "" {
		return &plan.UnsupportedError{Object: p.Runtime.Ref(), Feature: fmt.Sprintf(
			"podGroupPolicy.workload: the Workload API (scheduling.k8s.io workloads and podgroups, one of %v) is not served by this cluster; "+
				"enable the GenericWorkload and GangScheduling feature gates and --runtime-config=scheduling.k8s.io/<version>=true "+
				"on the API server and scheduler (the TrainJob proceeds by itself once it is served), "+
				"or remove podGroupPolicy.workload from the runtime", Versions)}
	}
	workload, podGroups, podLevel, atGroup := planGangs(tj, p, version)
	if n := len(workload.Spec.PodGroupTemplates); n > maxTemplates {
		return &plan.InvalidInputError{Object: p.Runtime.Ref(), Field: "spec.template.spec.replicatedJobs",
			Message: fmt.Sprintf("podGroupPolicy.workload gangs every replicatedJob except initializers, %d here, but a Workload holds at most %d", n, maxTemplates)}
	}
	if len(workload.Spec.PodGroupTemplates) == 0 {
		return nil
	}
	setClaimsCondition(tj, p, version, podLevel, atGroup)
	// The Workload first: the PodGroups reference it.
	for _, obj := range append([]runtime.Object{workload}, podGroups...) {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return fmt.Errorf("encoding %T: %w", obj, err)
		}
		out := &unstructured.Unstructured{Object: u}
		if err := reshape(out, version); err != nil {
			return err
		}
		p.Objects = append(p.Objects, out)
	}
	return nil
}

// planGangs returns tj's Workload, in its v1alpha2 shape, with one podGroupTemplate per
// gang of p's JobSet (every replicatedJob with pods except the initializers), and the
// gangs' PodGroups, and points each gang's pod template at its PodGroup. The gangs'
// shared claims go to the templates and PodGroups when version takes them (atGroup),
// else stay pod-level (podLevel); both list them as "<replicatedJob>/<claim>".
func planGangs(tj *trainer.TrainJob, p *plan.Plan, version string) (workload *schedulingv1alpha2.Workload, podGroups []runtime.Object, podLevel, atGroup []string) {
	owner := *metav1.NewControllerRef(tj, trainer.SchemeGroupVersion.WithKind(trainer.TrainJobKind))
	workload = &schedulingv1alpha2.Workload{
		TypeMeta:   metav1.TypeMeta{APIVersion: schedulingv1alpha2.SchemeGroupVersion.String(), Kind: "Workload"},
		ObjectMeta: metav1.ObjectMeta{Name: tj.Name, Namespace: tj.Namespace, Labels: plan.SideObjectLabels(tj), OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: schedulingv1alpha2.WorkloadSpec{
			ControllerRef: &schedulingv1alpha2.TypedLocalObjectReference{APIGroup: trainer.GroupName, Kind: trainer.TrainJobKind, Name: tj.Name},
		},
	}
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
		claims := sharedClaims(plan.PodSpec(rj))
		for _, c := range claims {
			if podGroupClaims(version) {
				atGroup = append(atGroup, rj.Name+"/"+c.Name)
			} else {
				podLevel = append(podLevel, rj.Name+"/"+c.Name)
			}
		}
		if !podGroupClaims(version) {
			claims = nil
		}
		workload.Spec.PodGroupTemplates = append(workload.Spec.PodGroupTemplates,
			schedulingv1alpha2.PodGroupTemplate{Name: rj.Name, SchedulingPolicy: policy, ResourceClaims: claims})
		name := PodGroupName(tj.Name, rj.Name)
		podGroups = append(podGroups, &schedulingv1alpha2.PodGroup{
			TypeMeta:   metav1.TypeMeta{APIVersion: schedulingv1alpha2.SchemeGroupVersion.String(), Kind: "PodGroup"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tj.Namespace, Labels: plan.SideObjectLabels(tj), OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: schedulingv1alpha2.PodGroupSpec{
				PodGroupTemplateRef: &schedulingv1alpha2.PodGroupTemplateReference{Workload: &schedulingv1alpha2.WorkloadPodGroupTemplateReference{
					WorkloadName: tj.Name, PodGroupTemplateName: rj.Name}},
				SchedulingPolicy: policy,
				ResourceClaims:   claims,
			},
		})
		rj.Template.Spec.Template.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
	}
	return workload, podGroups, podLevel, atGroup
}

// sharedClaims returns the pod's claims that name a ResourceClaim (shared by every pod
// that names it), as PodGroup claims with the same name and reference, at most
// MaxPodGroupResourceClaims, in the pod's order.
func sharedClaims(pod *corev1.PodSpec) []schedulingv1alpha2.PodGroupResourceClaim {
	var out []schedulingv1alpha2.PodGroupResourceClaim
	for _, c := range pod.ResourceClaims {
		if c.ResourceClaimName == nil || len(out) == MaxPodGroupResourceClaims {
			continue
		}
		out = append(out, schedulingv1alpha2.PodGroupResourceClaim{Name: c.Name, ResourceClaimName: ptr.To(*c.ResourceClaimName)})
	}
	return out
}

// setClaimsCondition asks for PodGroupResourceClaims (through p.Conditions, set with
// the JobSet apply) whenever the gangs' pods share claims: False when they stayed
// pod-level for want of a version that takes them (podLevel, "<replicatedJob>/<claim>"),
// True (reason ReservedForPodGroup) when they went to the PodGroups (atGroup, the same
// form), so that a TrainJob on Kubernetes 1.37 says its claims are reserved for its
// PodGroups, and one that moved from 1.36 sees its False turn True. A TrainJob without
// shared claims gets no condition.
func setClaimsCondition(tj *trainer.TrainJob, p *plan.Plan, version string, podLevel, atGroup []string) {
	switch {
	case len(podLevel) > 0:
		p.Conditions = append(p.Conditions, metav1.Condition{
			Type: trainjob.ConditionPodGroupResourceClaims, Status: metav1.ConditionFalse,
			Reason: trainjob.ReasonPodGroupClaimsUnsupported, ObservedGeneration: tj.Generation,
			Message: fmt.Sprintf("the shared ResourceClaims %v are reserved by each pod, not by the PodGroup: PodGroup-level claims (KEP-5729) "+
				"need scheduling.k8s.io/v1beta1 or v1alpha3 (Kubernetes 1.37); this cluster serves %s. The TrainJob runs; "+
				"a claim can be reserved by at most 256 pods", podLevel, version),
		})
	case len(atGroup) > 0:
		p.Conditions = append(p.Conditions, metav1.Condition{
			Type: trainjob.ConditionPodGroupResourceClaims, Status: metav1.ConditionTrue,
			Reason: trainjob.ReasonPodGroupClaims, ObservedGeneration: tj.Generation,
			Message: fmt.Sprintf("the shared ResourceClaims %v are reserved for the PodGroups (%s), once each, not per pod", atGroup, version),
		})
	}
}

// reshape turns a v1alpha2 Workload or PodGroup into version. Only the PodGroup's
// template reference differs: v1alpha3 and v1beta1 replace
// spec.podGroupTemplateRef.workload{workloadName, podGroupTemplateName} with
// spec.workloadRef{workloadName, templateName}.
func reshape(obj *unstructured.Unstructured, version string) error {
	// The Go type encodes an unset schedulingConstraints as null (no omitempty); leave
	// it out rather than apply a null.
	if templates, ok, _ := unstructured.NestedSlice(obj.Object, "spec", "podGroupTemplates"); ok {
		for _, t := range templates {
			if m, ok := t.(map[string]any); ok && m["schedulingConstraints"] == nil {
				delete(m, "schedulingConstraints")
			}
		}
		_ = unstructured.SetNestedSlice(obj.Object, templates, "spec", "podGroupTemplates")
	}
	if version == schedulingv1alpha2.SchemeGroupVersion.String() {
		return nil
	}
	obj.SetAPIVersion(version)
	if obj.GetKind() != "PodGroup" {
		return nil
	}
	ref, found, err := unstructured.NestedStringMap(obj.Object, "spec", "podGroupTemplateRef", "workload")
	if err != nil || !found {
		return fmt.Errorf("PodGroup %s: no spec.podGroupTemplateRef.workload to convert to %s (%v)", obj.GetName(), version, err)
	}
	unstructured.RemoveNestedField(obj.Object, "spec", "podGroupTemplateRef")
	return unstructured.SetNestedStringMap(obj.Object, map[string]string{
		"workloadName": ref["workloadName"], "templateName": ref["podGroupTemplateName"],
	}, "spec", "workloadRef")
}

// PodGroupName is the name of a TrainJob's PodGroup for one replicatedJob.
func PodGroupName(trainJob, replicatedJob string) string {
	return trainJob + "-" + replicatedJob
}
