package mlpolicy

import (
	"fmt"

	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// MPIHosts returns the replicatedJob whose pods the MPI hostfile lists with their
// slots — "node", or the launcher when it runs as the only node — and the slots the
// plan gives each; nil when p's runtime has no MPI policy or no such replicatedJob.
func MPIHosts(tj *trainer.TrainJob, p *plan.Plan) (*jobsetv1alpha2.ReplicatedJob, int64) {
	if p.Runtime.Spec == nil || p.Runtime.Spec.MLPolicy == nil || p.Runtime.Spec.MLPolicy.MPI == nil || p.JobSet == nil {
		return nil, 0
	}
	cfg, err := mpiSettings(tj, p)
	if err != nil {
		return nil, 0
	}
	if rj := plan.ReplicatedJob(p.JobSet, trainer.ReplicatedJobNode); rj != nil {
		return rj, cfg.slots
	}
	if cfg.runLauncherAsNode {
		return plan.ReplicatedJob(p.JobSet, trainer.ReplicatedJobLauncher), cfg.slots
	}
	return nil, 0
}

// MPISlotsFromDevices reports whether tj's MPI slots may come from the GPUs each host
// pod gets (docs/compatibility.md#mpi: spec.trainer.numProcPerNode unset and the
// policy's numProcPerNode unset or 1, the value that becomes the node's GPU count).
func MPISlotsFromDevices(tj *trainer.TrainJob, p *plan.Plan) bool {
	if t := tj.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
		return false
	}
	return ptr.Deref(p.Runtime.Spec.MLPolicy.MPI.NumProcPerNode, 1) == 1
}

// SetMPISlots gives each MPI host n slots in p, a plan the MPI plugin built: the
// hostfile ConfigMap's lines and the launcher's slots variable. The DRA claims stage
// calls it once it knows the GPUs per host pod from their claims (KEP-2782), which the
// plugin, running before it, could not see. Errors: p has no hostfile ConfigMap; the
// hostfile with n slots would not fit in it (*plan.InvalidInputError).
func SetMPISlots(tj *trainer.TrainJob, p *plan.Plan, n int64) error {
	cfg, err := mpiSettings(tj, p)
	if err != nil {
		return err
	}
	cfg.slots = n
	name := tj.Name + mpiHostfileSuffix
	for _, obj := range p.Objects {
		if obj.GetKind() != "ConfigMap" || obj.GetName() != name {
			continue
		}
		content, err := hostfileContent(p.JobSet, cfg)
		if err != nil {
			return err
		}
		obj.Object["data"] = map[string]any{mpiHostfileKey: content}
		if rj := plan.ReplicatedJob(p.JobSet, trainer.ReplicatedJobLauncher); rj != nil {
			if c := plan.Container(plan.PodSpec(rj).Containers, trainer.ContainerNode); c != nil {
				c.Env = plan.UpsertEnv(c.Env, launcherEnv(cfg)...)
			}
		}
		return nil
	}
	return fmt.Errorf("mlpolicy: plan for %s/%s has no MPI hostfile ConfigMap %s", tj.Namespace, tj.Name, name)
}
