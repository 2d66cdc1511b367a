// Package plan is the in-memory model the pipeline stages build for one TrainJob
// generation: the resolved runtime, the desired JobSet and the side objects to apply
// with it. A Plan lives only in memory (engine.Plans, keyed by TrainJob UID and
// generation); nothing in it must survive a restart, everything is rebuilt from the API.
//
// Plans are immutable once stored: a stage that changes one makes a copy (DeepCopy),
// changes the copy and stores it, so a stage working on an older generation never
// races with one working on the newer.
package plan

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Plan is what stages 1–5 hand to the status stage for one TrainJob generation.
type Plan struct {
	// Runtime is the runtime resolved by stage 1 (resolve runtime).
	Runtime Runtime

	// JobSet is the desired JobSet, built by stage 2 (merge patches) and refined by
	// stages 3–5 (ML policy, gang scheduling, DRA claims). Nil before stage 2.
	JobSet *jobsetv1alpha2.JobSet

	// Objects are side objects (e.g. a PodGroup or Workload) the status stage applies
	// before the JobSet, in order, each owned by the TrainJob.
	Objects []*unstructured.Unstructured

	// Conditions are TrainJob conditions a build stage asks the status stage to set
	// when it applies this plan's JobSet (warnings about how it was built, such as
	// ProcsPerNodeDerived=False), in the status patch that apply already causes or the
	// next one. LastTransitionTime is set by the status stage.
	Conditions []metav1.Condition

	// CreateOnly are side objects the status stage creates, when absent, before
	// Objects, and never updates (e.g. the MPI SSH Secret). They are not part of the
	// desired state's hash.
	CreateOnly []CreateOnlyObject

	// Stage is the index of the last stage that completed for this plan (1-based:
	// 1 = resolve runtime ... 5 = DRA claims). A stage refuses a plan that has not
	// reached the stage before it and restarts the TrainJob from stage 1.
	Stage int
}

// Runtime is a resolved TrainingRuntime or ClusterTrainingRuntime.
type Runtime struct {
	// Kind is TrainingRuntime or ClusterTrainingRuntime.
	Kind string
	// Name is the runtime's name (TrainingRuntimes live in the TrainJob's namespace).
	Name string
	// Spec is the runtime's spec. It is shared with the informer cache: read only.
	Spec *trainer.TrainingRuntimeSpec
	// Snapshot is the objectkeys.AnnotationRuntimeSnapshot value the JobSet carries: Spec as
	// recorded when the TrainJob was first built (EncodeSnapshot, DecodeSnapshot).
	// Empty leaves the JobSet without one (tests, offline tools).
	Snapshot string
}

// DeepCopy returns a copy of p that shares only Runtime.Spec (read-only by contract).
func (p *Plan) DeepCopy() *Plan {
	if p == nil {
		return nil
	}
	out := &Plan{Runtime: p.Runtime, Stage: p.Stage}
	if p.JobSet != nil {
		out.JobSet = p.JobSet.DeepCopy()
	}
	if p.Objects != nil {
		out.Objects = make([]*unstructured.Unstructured, len(p.Objects))
		for i, o := range p.Objects {
			out.Objects[i] = o.DeepCopy()
		}
	}
	if p.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(p.Conditions))
		copy(out.Conditions, p.Conditions)
	}
	if p.CreateOnly != nil {
		out.CreateOnly = make([]CreateOnlyObject, len(p.CreateOnly))
		for i, o := range p.CreateOnly {
			out.CreateOnly[i] = o.DeepCopy()
		}
	}
	return out
}
