package mlpolicy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// rendezvousPort is the trainer's rendezvous, coordinator or tracker port, declared on
// the trainer container by Torch, JAX and XGBoost.
var rendezvousPort = corev1.ContainerPort{ContainerPort: trainer.ContainerPortRendezvous}

// rendezvousPortString is rendezvousPort as an env value.
var rendezvousPortString = strconv.Itoa(int(trainer.ContainerPortRendezvous))

// overrideTrainerCount sets the trainer replicatedJob's count to spec.trainer.numNodes
// when set; every framework does this first (docs/compatibility.md#torch–3.5).
//
// Upstream quirk 3 (docs/compatibility.md#upstream-quirks), reproduced: numNodes 0
// (accepted by the CRD) yields parallelism and completions 0, the count Kueue computes
// too.
func overrideTrainerCount(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) {
	if tj.Spec.Trainer == nil || tj.Spec.Trainer.NumNodes == nil {
		return
	}
	if rj := plan.TrainerJob(js); rj != nil {
		plan.SetCount(rj, *tj.Spec.Trainer.NumNodes)
	}
}

// trainerCount is the number of trainer pods: the trainer replicatedJob's count, 1 when
// the runtime has no trainer replicatedJob (as upstream).
func trainerCount(js *jobsetv1alpha2.JobSet) int32 {
	if rj := plan.TrainerJob(js); rj != nil {
		return plan.Count(rj)
	}
	return 1
}

// trainerContainer returns the "node" container of the trainer replicatedJob, or nil.
func trainerContainer(js *jobsetv1alpha2.JobSet) *corev1.Container {
	rj := plan.TrainerJob(js)
	if rj == nil {
		return nil
	}
	return plan.Container(plan.PodSpec(rj).Containers, trainer.ContainerNode)
}

// coordinatorHost is the DNS name of the first trainer pod, where rank 0 listens:
// "<name>-<trainer rJob>-0-0.<subdomain>".
//
// Upstream quirk 4 (docs/compatibility.md#upstream-quirks), not reproduced: upstream
// always writes "<name>-node-0-0.<name>", which names no pod when the trainer
// replicatedJob is not called "node" or the runtime sets network.subdomain. Both forms
// agree for every shipped runtime.
func coordinatorHost(js *jobsetv1alpha2.JobSet) string {
	name := trainer.ReplicatedJobNode
	if rj := plan.TrainerJob(js); rj != nil {
		name = rj.Name
	}
	return plan.Endpoint(js, name, 0, 0)
}

// nodeResources returns the per-node resources the frameworks size themselves from
// (docs/compatibility.md#the-build-model "runtime resources per node"):
// spec.trainer.resourcesPerNode when set, else the resources of the first "node"
// container that declares any, in the first replicatedJob named "node" or with the
// trainer ancestor (after runtime patches). Nil when there are none. The result is
// shared: read only.
func nodeResources(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) *corev1.ResourceRequirements {
	if t := tj.Spec.Trainer; t != nil && t.ResourcesPerNode != nil {
		return t.ResourcesPerNode
	}
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		if rj.Name != trainer.ReplicatedJobNode && plan.Ancestor(rj) != trainer.AncestorTrainer {
			continue
		}
		containers := plan.PodSpec(rj).Containers
		for j := range containers {
			if r := &containers[j].Resources; containers[j].Name == trainer.ContainerNode && hasResources(r) {
				return r
			}
		}
		return nil
	}
	return nil
}

func hasResources(r *corev1.ResourceRequirements) bool {
	return len(r.Limits) > 0 || len(r.Requests) > 0 || len(r.Claims) > 0
}

// gpuCount is the number of GPUs per node in res: the value, rounded up, of the first
// resource whose name contains "gpu" (case-insensitive) in requests, or in limits when
// that is 0 (docs/compatibility.md#the-build-model "GPU count per node").
//
// Upstream takes the first match in Go map order; Trainyard takes the first in name
// order, so a node declaring several GPU resources always gets the same answer.
func gpuCount(res *corev1.ResourceRequirements) int64 {
	if res == nil {
		return 0
	}
	if n := firstGPU(res.Requests); n > 0 {
		return n
	}
	return firstGPU(res.Limits)
}

func firstGPU(list corev1.ResourceList) int64 {
	var first corev1.ResourceName
	for name := range list {
		if strings.Contains(strings.ToLower(string(name)), "gpu") && (first == "" || name < first) {
			first = name
		}
	}
	if first == "" {
		return 0
	}
	q := list[first]
	return q.Value() // rounds up
}

// cpuCount is the CPUs per node in res, rounded up: requests.cpu when set and non-zero,
// else limits.cpu, else 0 (docs/compatibility.md#torch step 2).
func cpuCount(res *corev1.ResourceRequirements) int64 {
	if res == nil {
		return 0
	}
	if q, ok := res.Requests[corev1.ResourceCPU]; ok && !q.IsZero() {
		return q.Value()
	}
	if q, ok := res.Limits[corev1.ResourceCPU]; ok {
		return q.Value()
	}
	return 0
}

// Paths of the findings the plugins' validations return.
var (
	trainerPath        = field.NewPath("spec", "trainer")
	replicatedJobsPath = field.NewPath("spec", "template", "spec", "replicatedJobs")
)

// runtimeJobSet wraps a runtime spec's JobSet template for the plan helpers. It shares
// the runtime's replicatedJobs: read only.
func runtimeJobSet(spec *trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
	return &jobsetv1alpha2.JobSet{Spec: spec.Template.Spec}
}

// onePerNode rejects spec.trainer.numProcPerNode other than 1 for a policy that starts
// a fixed number of processes per node and would otherwise ignore it silently: JAX (one
// process per node) and XGBoost (one worker per GPU). Upstream ignores the field there;
// a TrainJob asking for 4 processes per node and getting 1 is a mistake to report, not
// to run (see docs/compatibility.md). policy names the runtime's policy, e.g. "jax".
func onePerNode(tj *trainer.TrainJob, rt plan.Runtime, policy, processes string) field.ErrorList {
	t := tj.Spec.Trainer
	if t == nil || t.NumProcPerNode == nil || *t.NumProcPerNode == 1 {
		return nil
	}
	return field.ErrorList{field.Invalid(trainerPath.Child("numProcPerNode"), *t.NumProcPerNode, fmt.Sprintf(
		"runtime %s uses mlPolicy.%s, which starts %s and does not support numProcPerNode %d: "+
			"remove spec.trainer.numProcPerNode (or set it to 1), or use a runtime with mlPolicy.torch, mpi or flux",
		rt.Ref(), policy, processes, *t.NumProcPerNode))}
}

// reservedEnv rejects the entries of spec.trainer.env named in reserved, variables the
// policy sets itself (owner names it), in one error at spec.trainer.env whose message
// starts with upstream's admission text (docs/compatibility.md#torch,
// docs/compatibility.md#mpi).
func reservedEnv(tj *trainer.TrainJob, reserved []string, owner string) field.ErrorList {
	t := tj.Spec.Trainer
	if t == nil {
		return nil
	}
	var bad []string
	for _, e := range t.Env {
		if slices.Contains(reserved, e.Name) {
			bad = append(bad, e.Name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return field.ErrorList{field.Invalid(trainerPath.Child("env"), field.OmitValueType{}, fmt.Sprintf(
		"must not have reserved envs, invalid envs configured: %v: %s sets them; remove %s from spec.trainer.env",
		bad, owner, strings.Join(bad, ", ")))}
}
