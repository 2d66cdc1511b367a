package admissiontest

import (
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// Skeleton returns a copy of the spec of plantest's skeleton runtime (replicatedJobs
// dataset-initializer, model-initializer and node, each the step of its name) with
// policy, to modify.
func Skeleton(policy *trainer.MLPolicy) *trainer.TrainingRuntimeSpec {
	return plantest.SkeletonRuntime(policy).Spec.DeepCopy()
}

// WithLauncher adds a "launcher" replicatedJob (a copy of "node" without ancestor) to
// spec and returns it.
func WithLauncher(spec *trainer.TrainingRuntimeSpec) *trainer.TrainingRuntimeSpec {
	if rj := ReplicatedJob(spec, trainer.ReplicatedJobNode); rj != nil {
		launcher := *rj.DeepCopy()
		launcher.Name = trainer.ReplicatedJobLauncher
		launcher.Template.Labels = nil
		spec.Template.Spec.ReplicatedJobs = append(spec.Template.Spec.ReplicatedJobs, launcher)
	}
	return spec
}

// Without drops the replicatedJob name from spec and returns it.
func Without(spec *trainer.TrainingRuntimeSpec, name string) *trainer.TrainingRuntimeSpec {
	var kept []jobsetv1alpha2.ReplicatedJob
	for _, rj := range spec.Template.Spec.ReplicatedJobs {
		if rj.Name != name {
			kept = append(kept, rj)
		}
	}
	spec.Template.Spec.ReplicatedJobs = kept
	return spec
}

// ReplicatedJob returns the replicatedJob name of spec, nil if none.
func ReplicatedJob(spec *trainer.TrainingRuntimeSpec, name string) *jobsetv1alpha2.ReplicatedJob {
	for i := range spec.Template.Spec.ReplicatedJobs {
		if spec.Template.Spec.ReplicatedJobs[i].Name == name {
			return &spec.Template.Spec.ReplicatedJobs[i]
		}
	}
	return nil
}

// edited returns spec changed by edit.
func edited(spec *trainer.TrainingRuntimeSpec, edit func(*trainer.TrainingRuntimeSpec)) *trainer.TrainingRuntimeSpec {
	edit(spec)
	return spec
}

func policy(s trainer.MLPolicySource) *trainer.MLPolicy { return &trainer.MLPolicy{MLPolicySource: s} }

var (
	torchPolicy   = policy(trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}})
	jaxPolicy     = policy(trainer.MLPolicySource{JAX: &trainer.JAXMLPolicySource{}})
	xgboostPolicy = policy(trainer.MLPolicySource{XGBoost: &trainer.XGBoostMLPolicySource{}})
	fluxPolicy    = policy(trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}})
)

func mpiPolicy(launcherAsNode bool) *trainer.MLPolicy {
	return policy(trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{RunLauncherAsNode: &launcherAsNode}})
}
