package dra

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// mpiPlan builds, through the real merge and ML policy, the plan of a 2-node OpenMPI
// TrainJob (launcher + node, shipped-runtime shape) whose node pods claim "gpus" from
// the ResourceClaimTemplate four-gpus.
func mpiPlan(t *testing.T, policyProcs, trainerProcs *int32) (*trainer.TrainJob, *plan.Plan) {
	t.Helper()
	container := func() []corev1.Container { return []corev1.Container{{Name: trainer.ContainerNode, Image: "mpi"}} }
	rt := plan.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "mpi", Spec: &trainer.TrainingRuntimeSpec{
		MLPolicy: &trainer.MLPolicy{NumNodes: ptr.To[int32](2), MLPolicySource: trainer.MLPolicySource{
			MPI: &trainer.MPIMLPolicySource{NumProcPerNode: policyProcs, RunLauncherAsNode: ptr.To(true)}}},
		Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{
			{Name: trainer.ReplicatedJobLauncher, Template: jobTemplate(trainer.AncestorTrainer, corev1.PodSpec{Containers: container()})},
			{Name: trainer.ReplicatedJobNode, Template: jobTemplate("", corev1.PodSpec{Containers: container()})},
		}}},
	}}
	tj := testTrainJob(trainerProcs, patchClaims([]corev1.PodResourceClaim{fromTemplate("gpus", "four-gpus")}, uses("gpus")))
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "mpi", Kind: ptr.To(trainer.TrainingRuntimeKind)}
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Runtime: rt, JobSet: js}
	if err := mlpolicy.Apply(tj, p, mlpolicy.DefaultPlugins(mlpolicy.SecretNames{})); err != nil {
		t.Fatal(err)
	}
	return tj, p
}

func hostfile(t *testing.T, p *plan.Plan) string {
	t.Helper()
	for _, obj := range p.Objects {
		if obj.GetKind() == "ConfigMap" && strings.HasSuffix(obj.GetName(), "-mpi-hostfile") {
			return obj.Object["data"].(map[string]any)["hostfile"].(string)
		}
	}
	t.Fatal("no hostfile ConfigMap")
	return ""
}

// KEP-2782: with DRA-only GPUs the MPI plugin sees none and gives each host 1 slot;
// the DRA stage derives 4 from the node pods' claim template and rewrites the hostfile
// and the launcher's slots variable. An explicit numProcPerNode (TrainJob, or a policy
// value other than 1) wins.
func TestMPISlotsFromClaims(t *testing.T) {
	for name, tc := range map[string]struct {
		policyProcs, trainerProcs *int32
		wantSlots                 string
	}{
		"derived from the claims":       {wantSlots: "4"},
		"policy numProcPerNode 1":       {policyProcs: ptr.To[int32](1), wantSlots: "4"},
		"TrainJob numProcPerNode wins":  {trainerProcs: ptr.To[int32](2), wantSlots: "2"},
		"policy numProcPerNode 3 stays": {policyProcs: ptr.To[int32](3), wantSlots: "3"},
	} {
		t.Run(name, func(t *testing.T) {
			c, rec := newClaims(t, deviceClass(gpuClass), template("four-gpus", request("gpus", gpuClass, 4)))
			tj, p := mpiPlan(t, tc.policyProcs, tc.trainerProcs)
			if err := c.Step()(context.Background(), tj, p); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(hostfile(t, p), "\n"), "\n")
			for _, line := range lines {
				if !strings.HasSuffix(line, " slots="+tc.wantSlots) {
					t.Errorf("hostfile line %q, want slots=%s", line, tc.wantSlots)
				}
			}
			if len(lines) < 2 || !strings.HasPrefix(lines[len(lines)-1], "job-node-0-0.job ") {
				t.Errorf("hostfile lines %q, want the launcher's and the node's pods", lines)
			}
			launcher := plan.Container(plan.PodSpec(plan.ReplicatedJob(p.JobSet, trainer.ReplicatedJobLauncher)).Containers, trainer.ContainerNode)
			if got := envValue(launcher.Env, "OMPI_MCA_orte_set_default_slots"); got != tc.wantSlots {
				t.Errorf("OMPI_MCA_orte_set_default_slots = %q, want %q", got, tc.wantSlots)
			}
			events := drain(rec)
			if tc.wantSlots == "4" && (len(events) != 1 || !strings.Contains(events[0], "the MPI slots per host is 4, the GPUs each MPI host pod claims through DRA")) {
				t.Errorf("events = %q, want one naming the derived slots", events)
			}
		})
	}
}
