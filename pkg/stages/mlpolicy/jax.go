package mlpolicy

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// Env vars jax.distributed.initialize reads.
const (
	envJAXNumProcesses       = "JAX_NUM_PROCESSES"
	envJAXProcessID          = "JAX_PROCESS_ID"
	envJAXCoordinatorAddress = "JAX_COORDINATOR_ADDRESS"
)

type jax struct{}

// JAX returns the mlPolicy.jax plugin (docs/compatibility.md#jax): trainer count from
// spec.trainer.numNodes, JAX_* env and port 29500 on the trainer "node" container (one
// JAX process per pod).
//
// Upstream quirk 1 (docs/compatibility.md#upstream-quirks), not reproduced: the env and
// port are injected even when the TrainJob has no spec.trainer (see the package doc).
func JAX() Plugin { return jax{} }

func (jax) Name() string { return "JAX" }

func (jax) Enabled(p *trainer.MLPolicy) bool { return p != nil && p.JAX != nil }

// ValidateRuntime implements Plugin: JAX needs nothing of the runtime.
func (jax) ValidateRuntime(*trainer.TrainingRuntimeSpec) field.ErrorList { return nil }

// ValidateTrainJob implements Plugin: spec.trainer.numProcPerNode other than 1 is
// rejected (onePerNode; upstream has no JAX validation).
func (jax) ValidateTrainJob(tj *trainer.TrainJob, p *plan.Plan) field.ErrorList {
	return onePerNode(tj, p.Runtime, "jax", "one JAX process per node")
}

// Apply implements Plugin. It does not fail.
func (jax) Apply(tj *trainer.TrainJob, p *plan.Plan) error {
	js := p.JobSet
	overrideTrainerCount(tj, js)
	c := trainerContainer(js)
	if c == nil {
		return nil
	}
	c.Env = plan.UpsertEnv(c.Env,
		corev1.EnvVar{Name: envJAXNumProcesses, Value: strconv.Itoa(int(trainerCount(js)))},
		plan.CompletionIndexEnv(envJAXProcessID),
		corev1.EnvVar{Name: envJAXCoordinatorAddress, Value: coordinatorHost(js) + ":" + rendezvousPortString},
	)
	c.Ports = plan.UpsertPort(c.Ports, rendezvousPort)
	return nil
}
