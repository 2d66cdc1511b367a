// Package volcano is the Volcano gang backend (podGroupPolicy.volcano;
// docs/compatibility.md#volcano): a scheduling.volcano.sh/v1beta1 PodGroup named after
// the TrainJob with minMember, minResources, the queue from the JobSet annotation
// scheduling.volcano.sh/queue-name, the trainer's priorityClassName (priorityClassName:
// not upstream's, kubeflow/trainer#4084), and the network topology; and the annotation
// scheduling.k8s.io/group-name on every pod. The runtime names the volcano scheduler in
// its pod templates.
package volcano

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/gang"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

const (
	// GroupVersion is Volcano's PodGroup API.
	GroupVersion = "scheduling.volcano.sh/v1beta1"
	// AnnotationGroupName names a pod's PodGroup for Volcano.
	AnnotationGroupName = "scheduling.k8s.io/group-name"
	// AnnotationQueueName on the JobSet (runtime template metadata or a runtimePatch)
	// chooses the Volcano queue.
	AnnotationQueueName = "scheduling.volcano.sh/queue-name"
)

// Backend is the Volcano backend. Served reports whether the API server serves
// GroupVersion podgroups (informers.ServedAPIs.Served); nil means assumed served.
type Backend struct {
	Served func(groupVersion string) bool
}

// Name returns the podGroupPolicy member it serves.
func (Backend) Name() string { return "volcano" }

// Enabled reports whether the runtime selects Volcano.
func (Backend) Enabled(policy *trainer.PodGroupPolicy) bool { return policy.Volcano != nil }

// Apply adds the PodGroup and annotates the pods. It returns *plan.UnsupportedError
// when the PodGroup CRD is not served and *plan.InvalidInputError for an empty queue
// annotation (upstream's admission check, "Volcano queue name must not be empty").
func (b Backend) Apply(ctx context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
	spec, err := gang.PodGroupSpec(ctx, p, b.Served, b.Name(), GroupVersion)
	if err != nil {
		return err
	}
	if object, errs := ValidateQueue(tj, p.Runtime, p.JobSet.Annotations); len(errs) > 0 {
		return plan.FirstInvalid(object, errs)
	}
	if queue, ok := p.JobSet.Annotations[AnnotationQueueName]; ok {
		spec["queue"] = queue
	}
	if name := priorityClassName(p); name != "" {
		spec["priorityClassName"] = name
	}
	if nt := p.Runtime.Spec.PodGroupPolicy.Volcano.NetworkTopology; nt != nil {
		topology := map[string]any{}
		if nt.Mode != "" {
			topology["mode"] = string(nt.Mode)
		}
		if nt.HighestTierAllowed != nil {
			topology["highestTierAllowed"] = int64(*nt.HighestTierAllowed)
		}
		spec["networkTopology"] = topology
	}
	p.Objects = append(p.Objects, gang.PodGroup(tj, GroupVersion, spec))
	gang.SetPodAnnotation(p, AnnotationGroupName, tj.Name)
	return nil
}

// priorityClassName is the PodGroup's priority class: the trainer replicatedJob's
// (plan.TrainerJob, the first with the trainer ancestor label) pod template
// priorityClassName, whatever the order of the replicatedJobs. When the trainer sets
// none, the first replicatedJob in runtime order that sets one: a runtime that gives
// only an initializer a priority class still meant the TrainJob to have one, and
// upstream keeps it too. "" when none does. Upstream takes the last replicatedJob that
// sets one, so an initializer listed after the trainer wins there (kubeflow/trainer#4084;
// docs/compatibility.md#deliberate-differences).
func priorityClassName(p *plan.Plan) string {
	if rj := plan.TrainerJob(p.JobSet); rj != nil {
		if name := plan.PodSpec(rj).PriorityClassName; name != "" {
			return name
		}
	}
	for i := range p.JobSet.Spec.ReplicatedJobs {
		if name := plan.PodSpec(&p.JobSet.Spec.ReplicatedJobs[i]).PriorityClassName; name != "" {
			return name
		}
	}
	return ""
}

// ValidateQueue rejects an empty AnnotationQueueName among annotations, the desired
// JobSet's (the runtime's template metadata overlaid by tj's runtimePatches):
// upstream's admission rule and text, "Volcano queue name must not be empty"
// (docs/compatibility.md#volcano). The error names where the value comes from: the last
// runtimePatch that sets it (object "", at
// spec.runtimePatches[manager=<m>].trainingRuntimeSpec.template.metadata.
// annotations[...]), else the runtime (object rt.Ref(), at spec.template.metadata.
// annotations[...]). Upstream names spec.annotations[...], a field no kind has. The
// Volcano backend and the TrainJob admission webhook both call it.
func ValidateQueue(tj *trainer.TrainJob, rt plan.Runtime, annotations map[string]string) (object string, errs field.ErrorList) {
	if queue, ok := annotations[AnnotationQueueName]; !ok || queue != "" {
		return "", nil
	}
	const message = "Volcano queue name must not be empty: set a queue or remove the annotation"
	for i := len(tj.Spec.RuntimePatches) - 1; i >= 0; i-- {
		p := &tj.Spec.RuntimePatches[i]
		if s := p.TrainingRuntimeSpec; s == nil || s.Template == nil || s.Template.Metadata == nil {
			continue
		}
		if _, ok := p.TrainingRuntimeSpec.Template.Metadata.Annotations[AnnotationQueueName]; ok {
			return "", field.ErrorList{field.Invalid(field.NewPath("spec", "runtimePatches").Key("manager="+p.Manager).
				Child("trainingRuntimeSpec", "template", "metadata", "annotations").Key(AnnotationQueueName), "", message)}
		}
	}
	return rt.Ref(), field.ErrorList{field.Invalid(
		field.NewPath("spec", "template", "metadata", "annotations").Key(AnnotationQueueName), "", message)}
}
