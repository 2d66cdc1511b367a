package mlpolicy

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// Env vars torchrun reads (PET_ = "PyTorch Elastic Trainer").
const (
	envPETNNodes       = "PET_NNODES"
	envPETNProcPerNode = "PET_NPROC_PER_NODE"
	envPETNodeRank     = "PET_NODE_RANK"
	envPETMasterAddr   = "PET_MASTER_ADDR"
	envPETMasterPort   = "PET_MASTER_PORT"
)

type torch struct{}

// Torch returns the mlPolicy.torch plugin (docs/compatibility.md#torch): trainer count
// from spec.trainer.numNodes, PET_* env and port 29500 on the trainer "node" container,
// the torchtune command rewrite (docs/compatibility.md#torchtune), and PET_* env on the
// envInjection targets.
func Torch() Plugin { return torch{} }

func (torch) Name() string { return "Torch" }

func (torch) Enabled(p *trainer.MLPolicy) bool { return p != nil && p.Torch != nil }

// torchReservedEnv are the torchrun variables the plugin sets.
var torchReservedEnv = []string{envPETNNodes, envPETNProcPerNode, envPETNodeRank, envPETMasterAddr, envPETMasterPort}

// ValidateRuntime implements Plugin: every container an envInjection target names is a
// container or init container of the replicatedJob jobName. A missing one is Invalid at
// spec.mlPolicy.torch.envInjection.targets[jobName=<job>].containerNames[<i>], the
// message starting with upstream's "envInjection target podSet %q container %q not
// found in runtime template" (docs/compatibility.md#torch step 4; upstream reports it
// at the TrainJob's spec.runtimeRef when a TrainJob is admitted).
func (torch) ValidateRuntime(spec *trainer.TrainingRuntimeSpec) field.ErrorList {
	inj := spec.MLPolicy.Torch.EnvInjection
	if inj == nil {
		return nil
	}
	var errs field.ErrorList
	js := runtimeJobSet(spec)
	targets := field.NewPath("spec", "mlPolicy", "torch", "envInjection", "targets")
	for _, target := range inj.Targets {
		for i, name := range target.ContainerNames {
			if injectionContainer(js, target.JobName, name) != nil {
				continue
			}
			errs = append(errs, field.Invalid(targets.Key("jobName="+target.JobName).Child("containerNames").Index(i), name,
				fmt.Sprintf("envInjection target podSet %q container %q not found in runtime template; "+
					"name a container or init container of that replicatedJob", target.JobName, name)))
		}
	}
	return errs
}

// ValidateTrainJob implements Plugin: spec.trainer.env must not set the PET_* variables
// the plugin injects (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR,
// PET_MASTER_PORT; Invalid at spec.trainer.env, upstream's rule and text,
// docs/compatibility.md#torch), and a torchtune TrainJob must pass validateTorchtune
// (docs/compatibility.md#torchtune).
func (torch) ValidateTrainJob(tj *trainer.TrainJob, p *plan.Plan) field.ErrorList {
	errs := reservedEnv(tj, torchReservedEnv, "mlPolicy.torch (torchrun)")
	if isTorchtune(tj) {
		errs = append(errs, validateTorchtune(tj, p)...)
	}
	return errs
}

// Apply implements Plugin. It does not fail.
//
// Upstream quirk 1 (docs/compatibility.md#upstream-quirks), not reproduced: the PET_*
// env and the port are injected even when the TrainJob has no spec.trainer (see the
// package doc).
func (torch) Apply(tj *trainer.TrainJob, p *plan.Plan) error {
	js := p.JobSet
	overrideTrainerCount(tj, js)

	res := nodeResources(tj, js)
	gpus := gpuCount(res)
	procs := torchProcsPerNode(tj, res, gpus)
	nnodes := trainerCount(js)
	master := coordinatorHost(js)

	env := []corev1.EnvVar{
		{Name: envPETNNodes, Value: strconv.Itoa(int(nnodes))},
		{Name: envPETNProcPerNode, Value: procs.String()},
		plan.CompletionIndexEnv(envPETNodeRank),
		{Name: envPETMasterAddr, Value: master},
		{Name: envPETMasterPort, Value: rendezvousPortString},
	}
	if c := trainerContainer(js); c != nil {
		if isTorchtune(tj) {
			// torchtune gets the rendezvous endpoint on its command line instead.
			c.Command = torchtuneCommand(tj, p.Runtime, torchtuneParams{
				nnodes: nnodes, procs: procs, gpus: gpus, endpoint: master + ":" + rendezvousPortString,
			})
			c.Env = plan.UpsertEnv(c.Env, env[:3]...)
		} else {
			c.Env = plan.UpsertEnv(c.Env, env...)
		}
		c.Ports = plan.UpsertPort(c.Ports, rendezvousPort)
	}
	injectEnv(p.Runtime, js, env)
	return nil
}

// procsPerNode is a numProcPerNode value: a count, or "auto" (torchrun picks the GPU
// count).
type procsPerNode struct {
	n    int32
	auto bool
}

func (p procsPerNode) String() string {
	if p.auto {
		return "auto"
	}
	return strconv.Itoa(int(p.n))
}

// torchProcsPerNode is PET_NPROC_PER_NODE (docs/compatibility.md#torch step 2):
// spec.trainer.numProcPerNode when set; else "auto" when the node has GPUs; else its
// CPU count rounded up, at least 1.
func torchProcsPerNode(tj *trainer.TrainJob, res *corev1.ResourceRequirements, gpus int64) procsPerNode {
	if t := tj.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
		return procsPerNode{n: *t.NumProcPerNode}
	}
	if gpus > 0 {
		return procsPerNode{auto: true}
	}
	return procsPerNode{n: int32(max(cpuCount(res), 1))}
}

// injectEnv upserts env into the containers the runtime's envInjection targets name:
// for each target, the container or init container of that name in the replicatedJob
// named jobName (docs/compatibility.md#torch step 4; ValidateRuntime checked they
// exist). It applies whether or not the TrainJob has spec.trainer, and always includes
// PET_MASTER_*, even for torchtune.
func injectEnv(rt plan.Runtime, js *jobsetv1alpha2.JobSet, env []corev1.EnvVar) {
	inj := rt.Spec.MLPolicy.Torch.EnvInjection
	if inj == nil {
		return
	}
	for _, target := range inj.Targets {
		for _, name := range target.ContainerNames {
			if c := injectionContainer(js, target.JobName, name); c != nil {
				c.Env = plan.UpsertEnv(c.Env, env...)
			}
		}
	}
}

// injectionContainer finds container name in replicatedJob job: containers first, then
// init containers.
func injectionContainer(js *jobsetv1alpha2.JobSet, job, name string) *corev1.Container {
	rj := plan.ReplicatedJob(js, job)
	if rj == nil {
		return nil
	}
	pod := plan.PodSpec(rj)
	if c := plan.Container(pod.Containers, name); c != nil {
		return c
	}
	return plan.Container(pod.InitContainers, name)
}
