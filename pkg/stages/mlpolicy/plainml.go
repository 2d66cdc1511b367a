package mlpolicy

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

type plainML struct{}

// PlainML returns the plugin for runtimes without a distributed framework
// (docs/compatibility.md#plainml): no mlPolicy, or one without torch, mpi and jax (so
// it also runs beside xgboost and flux). It only sets the trainer count from
// spec.trainer.numNodes; spec.trainer.env is already merged by package mergepatches
// (docs/compatibility.md#building-the-jobset step 4, which upstream's PlainML repeats).
func PlainML() Plugin { return plainML{} }

func (plainML) Name() string { return "PlainML" }

func (plainML) Enabled(p *trainer.MLPolicy) bool {
	return p == nil || (p.Torch == nil && p.MPI == nil && p.JAX == nil)
}

// ValidateRuntime implements Plugin: PlainML needs nothing of the runtime.
func (plainML) ValidateRuntime(*trainer.TrainingRuntimeSpec) field.ErrorList { return nil }

// ValidateTrainJob implements Plugin: PlainML accepts every TrainJob.
func (plainML) ValidateTrainJob(*trainer.TrainJob, *plan.Plan) field.ErrorList { return nil }

// Apply implements Plugin. It does not fail.
func (plainML) Apply(tj *trainer.TrainJob, p *plan.Plan) error {
	overrideTrainerCount(tj, p.JobSet)
	return nil
}
