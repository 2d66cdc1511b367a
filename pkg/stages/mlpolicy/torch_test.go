package mlpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// Case 3 of docs/compatibility.md#upstream-test-cases: Torch with explicit numNodes and
// numProcPerNode.
func TestTorchCase3(t *testing.T) {
	rt := plantest.SkeletonRuntime(torchPolicy(100))
	node := &rt.Spec.Template.Spec.ReplicatedJobs[2]
	node.DependsOn = []jobsetv1alpha2.DependsOn{
		{Name: "dataset-initializer", Status: jobsetv1alpha2.DependencyComplete},
		{Name: "model-initializer", Status: jobsetv1alpha2.DependencyComplete},
	}
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](30), NumProcPerNode: ptr.To[int32](3)})
	js := mustBuild(t, tj, rt)

	wantContainer := node.Template.Spec.Template.Spec.Containers[0].DeepCopy()
	wantContainer.Env = petEnv("30", "3")
	wantContainer.Ports = port29500
	if diff := cmp.Diff(wantContainer, nodeContainer(t, js)); diff != "" {
		t.Errorf("node container (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": 30}, counts(t, js)); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(node.DependsOn, plan.TrainerJob(js).DependsOn); diff != "" {
		t.Errorf("dependsOn (-want +got):\n%s", diff)
	}
}

// Case 3 variant: runtime and TrainJob env merge, counts and procs from the runtime.
func TestTorchCase3RuntimeDefaults(t *testing.T) {
	rt := plantest.SkeletonRuntime(torchPolicy(100))
	c := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
	c.Env = []corev1.EnvVar{env("TRAIN_JOB", "original"), env("RUNTIME", "test:runtime")}
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{
		Env:              []corev1.EnvVar{env("TRAIN_JOB", "override"), env("TRAIN_JOB_CUSTOM", "test:trainjob")},
		ResourcesPerNode: &corev1.ResourceRequirements{Requests: quantities("cpu", "1")},
	})
	js := mustBuild(t, tj, rt)
	want := append([]corev1.EnvVar{
		env("TRAIN_JOB", "override"), env("RUNTIME", "test:runtime"), env("TRAIN_JOB_CUSTOM", "test:trainjob"),
	}, petEnv("100", "1")...)
	if diff := cmp.Diff(want, nodeContainer(t, js).Env); diff != "" {
		t.Errorf("node env (-want +got):\n%s", diff)
	}
	if n := plan.Count(plan.TrainerJob(js)); n != 100 {
		t.Errorf("trainer count = %d, want 100", n)
	}
}

// numProcPerNode "auto" (docs/compatibility.md#torch step 2): GPUs give "auto", else
// CPUs rounded up, at least 1.
func TestTorchNumProcPerNode(t *testing.T) {
	cases := map[string]struct {
		runtime   *corev1.ResourceRequirements // the runtime node container's resources
		trainer   *corev1.ResourceRequirements // spec.trainer.resourcesPerNode
		numProcs  *int32
		wantNProc string
	}{
		"cpu 4":                        {trainer: &corev1.ResourceRequirements{Requests: quantities("cpu", "4")}, wantNProc: "4"},
		"cpu 2.5 rounds up":            {trainer: &corev1.ResourceRequirements{Requests: quantities("cpu", "2.5")}, wantNProc: "3"},
		"cpu 0.7 rounds up":            {trainer: &corev1.ResourceRequirements{Requests: quantities("cpu", "0.7")}, wantNProc: "1"},
		"cpu 500m rounds up":           {trainer: &corev1.ResourceRequirements{Requests: quantities("cpu", "500m")}, wantNProc: "1"},
		"cpu limits when no requests":  {trainer: &corev1.ResourceRequirements{Limits: quantities("cpu", "3")}, wantNProc: "3"},
		"cpu limits when requests 0":   {trainer: &corev1.ResourceRequirements{Requests: quantities("cpu", "0"), Limits: quantities("cpu", "6")}, wantNProc: "6"},
		"no resources":                 {wantNProc: "1"},
		"nvidia gpu requests":          {trainer: &corev1.ResourceRequirements{Requests: quantities("cpu", "8", "nvidia.com/gpu", "2")}, wantNProc: "auto"},
		"amd gpu limits":               {trainer: &corev1.ResourceRequirements{Limits: quantities("amd.com/GPU", "1")}, wantNProc: "auto"},
		"gpu requests 0, limits 2":     {trainer: &corev1.ResourceRequirements{Requests: quantities("example.com/gpu", "0"), Limits: quantities("example.com/gpu", "2")}, wantNProc: "auto"},
		"explicit numProcPerNode wins": {trainer: &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "8")}, numProcs: ptr.To[int32](5), wantNProc: "5"},
		"runtime resources when the TrainJob has none": {
			runtime: &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "2")}, wantNProc: "auto",
		},
		"TrainJob resources, not the merged ones, as upstream": {
			runtime:   &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "2")},
			trainer:   &corev1.ResourceRequirements{Requests: quantities("cpu", "4")},
			wantNProc: "4",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := plantest.SkeletonRuntime(torchPolicy(1))
			c := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
			c.Resources = corev1.ResourceRequirements{}
			if tc.runtime != nil {
				c.Resources = *tc.runtime
			}
			tj := plantest.TrainJob(rt.Name, &trainer.Trainer{ResourcesPerNode: tc.trainer, NumProcPerNode: tc.numProcs})
			js := mustBuild(t, tj, rt)
			if diff := cmp.Diff(petEnv("1", tc.wantNProc), nodeContainer(t, js).Env); diff != "" {
				t.Errorf("node env (-want +got):\n%s", diff)
			}
		})
	}
}

// PET_* values with the real upstream torch-distributed runtime.
func TestTorchUpstreamTorchDistributed(t *testing.T) {
	rt := plantest.UpstreamRuntimeFile(t, "runtimes/torch_distributed.yaml")
	specBefore := rt.Spec.DeepCopy()
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](2)})
	tj.Spec.RuntimeRef.Kind = ptr.To(trainer.ClusterTrainingRuntimeKind)
	js := mustBuild(t, tj, rt)

	want := corev1.Container{
		Name:  "node",
		Image: "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
		Env:   petEnv("2", "1"),
		Ports: port29500,
	}
	if diff := cmp.Diff(&want, nodeContainer(t, js)); diff != "" {
		t.Errorf("node container (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int32{"node": 2}, counts(t, js)); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(specBefore, rt.Spec); diff != "" {
		t.Errorf("runtime spec changed (-before +after):\n%s", diff)
	}
}

// The upstream multi-node example TrainJob against the upstream runtime.
func TestTorchUpstreamMultiNodeExample(t *testing.T) {
	rt := plantest.UpstreamRuntimeFile(t, "runtimes/torch_distributed.yaml")
	tj := plantest.UpstreamTrainJob(t, "examples/yaml/01-multi-node.yaml")
	js := mustBuild(t, tj, rt)
	c := nodeContainer(t, js)
	if diff := cmp.Diff(tj.Spec.Trainer.Command, c.Command); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	want := append(tj.DeepCopy().Spec.Trainer.Env, []corev1.EnvVar{
		env("PET_NNODES", "3"),
		env("PET_NPROC_PER_NODE", "1"), // no resources anywhere
		rankEnv("PET_NODE_RANK"),
		env("PET_MASTER_ADDR", "multi-node-example-node-0-0.multi-node-example"),
		env("PET_MASTER_PORT", "29500"),
	}...)
	if diff := cmp.Diff(want, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestTorchEnvInjection(t *testing.T) {
	newRuntime := func(targets ...trainer.EnvInjectionTarget) plan.Runtime {
		policy := torchPolicy(1)
		policy.Torch.EnvInjection = &trainer.EnvInjection{Targets: targets}
		rt := plantest.SkeletonRuntime(policy)
		nodePod := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec
		nodePod.InitContainers = []corev1.Container{{Name: "wait", Image: "busybox"}}
		nodePod.Containers = append(nodePod.Containers, corev1.Container{Name: "sidecar", Image: "busybox"})
		return rt
	}

	t.Run("targets get all five PET vars, with and without spec.trainer", func(t *testing.T) {
		rt := newRuntime(
			trainer.EnvInjectionTarget{JobName: "node", ContainerNames: []string{"sidecar", "wait"}},
			trainer.EnvInjectionTarget{JobName: "dataset-initializer", ContainerNames: []string{"dataset-initializer"}},
		)
		for _, tr := range []*trainer.Trainer{nil, {NumNodes: ptr.To[int32](2), NumProcPerNode: ptr.To[int32](4)}} {
			tj := plantest.TrainJob(rt.Name, tr)
			js := mustBuild(t, tj, rt)
			nnodes, nproc := "1", "1"
			if tr != nil {
				nnodes, nproc = "2", "4"
			}
			for _, c := range []*corev1.Container{
				plan.Container(plan.PodSpec(plan.ReplicatedJob(js, "node")).Containers, "sidecar"),
				plan.Container(plan.PodSpec(plan.ReplicatedJob(js, "node")).InitContainers, "wait"),
				plan.Container(plan.PodSpec(plan.ReplicatedJob(js, "dataset-initializer")).Containers, "dataset-initializer"),
			} {
				if diff := cmp.Diff(petEnv(nnodes, nproc), c.Env); diff != "" {
					t.Errorf("trainer %v: %s env (-want +got):\n%s", tr != nil, c.Name, diff)
				}
				if len(c.Ports) != 0 {
					t.Errorf("%s ports = %v, want none", c.Name, c.Ports)
				}
			}
		}
	})

	t.Run("targets get PET_MASTER_* also for torchtune", func(t *testing.T) {
		rt := newRuntime(trainer.EnvInjectionTarget{JobName: "node", ContainerNames: []string{"sidecar"}})
		rt.Name = "torchtune-llama3.2-1b"
		tj := plantest.TrainJob(rt.Name, &trainer.Trainer{Command: []string{"tune", "run"}, NumProcPerNode: ptr.To[int32](1)})
		js := mustBuild(t, tj, rt)
		if diff := cmp.Diff(petEnv("1", "1")[:3], nodeContainer(t, js).Env); diff != "" {
			t.Errorf("node env (-want +got):\n%s", diff)
		}
		sidecar := plan.Container(plan.PodSpec(plan.TrainerJob(js)).Containers, "sidecar")
		if diff := cmp.Diff(petEnv("1", "1"), sidecar.Env); diff != "" {
			t.Errorf("sidecar env (-want +got):\n%s", diff)
		}
	})

	cases := map[string]struct {
		target    trainer.EnvInjectionTarget
		wantField string
		wantMsg   string
	}{
		"missing container": {
			target:    trainer.EnvInjectionTarget{JobName: "node", ContainerNames: []string{"sidecar", "missing"}},
			wantField: "spec.mlPolicy.torch.envInjection.targets[jobName=node].containerNames[1]",
			wantMsg:   `envInjection target podSet "node" container "missing" not found in runtime template`,
		},
		"missing replicatedJob": {
			target:    trainer.EnvInjectionTarget{JobName: "launcher", ContainerNames: []string{"node"}},
			wantField: "spec.mlPolicy.torch.envInjection.targets[jobName=launcher].containerNames[0]",
			wantMsg:   `envInjection target podSet "launcher" container "node" not found in runtime template`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := newRuntime(tc.target)
			_, err := build(t, plantest.TrainJob(rt.Name, nil), rt)
			var invalid *plan.InvalidInputError
			if !errors.As(err, &invalid) {
				t.Fatalf("Apply() = %v, want *plan.InvalidInputError", err)
			}
			want := plan.InvalidInputError{Object: "TrainingRuntime/test-runtime", Field: tc.wantField, Message: invalid.Message}
			if diff := cmp.Diff(want, *invalid); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(invalid.Message, tc.wantMsg) {
				t.Errorf("message = %q, want prefix %q", invalid.Message, tc.wantMsg)
			}
		})
	}
}
