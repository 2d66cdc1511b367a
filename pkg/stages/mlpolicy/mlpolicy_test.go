package mlpolicy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

func TestJAX(t *testing.T) {
	rt := plantest.UpstreamRuntimeFile(t, "runtimes/jax_distributed.yaml")
	cases := map[string]struct {
		trainer   *trainer.Trainer
		wantNodes string
	}{
		"numNodes 2": {trainer: &trainer.Trainer{NumNodes: ptr.To[int32](2)}, wantNodes: "2"},
		"no spec.trainer (upstream quirk 1: env)": {wantNodes: "1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := nodeContainer(t, mustBuild(t, plantest.TrainJob(rt.Name, tc.trainer), rt))
			want := []corev1.EnvVar{
				env("JAX_NUM_PROCESSES", tc.wantNodes),
				rankEnv("JAX_PROCESS_ID"),
				env("JAX_COORDINATOR_ADDRESS", "test-job-node-0-0.test-job:29500"),
			}
			if diff := cmp.Diff(want, c.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(port29500, c.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
		})
	}
}

func TestXGBoost(t *testing.T) {
	rt := plantest.UpstreamRuntimeFile(t, "runtimes/xgboost_distributed.yaml")
	cases := map[string]struct {
		trainer     *trainer.Trainer
		wantWorkers string
		wantCount   int32
	}{
		"numNodes 2, no GPU": {trainer: &trainer.Trainer{NumNodes: ptr.To[int32](2)}, wantWorkers: "2", wantCount: 2},
		"numNodes 2, 4 GPUs per node": {
			trainer: &trainer.Trainer{
				NumNodes:         ptr.To[int32](2),
				ResourcesPerNode: &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "4")},
			},
			wantWorkers: "8",
			wantCount:   2,
		},
		"no spec.trainer (upstream quirk 1: env)": {wantWorkers: "1", wantCount: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			js := mustBuild(t, plantest.TrainJob(rt.Name, tc.trainer), rt)
			c := nodeContainer(t, js)
			want := []corev1.EnvVar{
				env("DMLC_TRACKER_URI", "test-job-node-0-0.test-job"),
				env("DMLC_TRACKER_PORT", "29500"),
				rankEnv("DMLC_TASK_ID"),
				env("DMLC_NUM_WORKER", tc.wantWorkers),
			}
			if diff := cmp.Diff(want, c.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(port29500, c.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]int32{"node": tc.wantCount}, counts(t, js)); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// XGBoost without a trainer replicatedJob is a no-op (docs/compatibility.md#xgboost).
// Stage 2 refuses such runtimes (mergepatches.validateSteps); the plugin must still not
// fail on a JobSet without a trainer.
func TestXGBoostWithoutTrainer(t *testing.T) {
	rt := plantest.SkeletonRuntime(&trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{XGBoost: &trainer.XGBoostMLPolicySource{}}})
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](3)})
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	delete(js.Spec.ReplicatedJobs[2].Template.Labels, trainer.LabelTrainJobAncestor)
	if err := Apply(tj, &plan.Plan{Runtime: rt, JobSet: js}, DefaultPlugins(SecretNames{})); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	c := plan.Container(plan.PodSpec(plan.ReplicatedJob(js, "node")).Containers, "node")
	if len(c.Env) != 0 || len(c.Ports) != 0 {
		t.Errorf("node env %v, ports %v; want none", c.Env, c.Ports)
	}
}

// Case 2 of docs/compatibility.md#upstream-test-cases through both stages: PlainML only
// sizes the trainer.
func TestPlainML(t *testing.T) {
	cases := map[string]struct {
		policy    *trainer.MLPolicy
		numNodes  *int32
		wantCount int32
	}{
		"runtime numNodes":            {policy: &trainer.MLPolicy{NumNodes: ptr.To[int32](100)}, wantCount: 100},
		"spec.trainer.numNodes wins":  {policy: &trainer.MLPolicy{NumNodes: ptr.To[int32](100)}, numNodes: ptr.To[int32](30), wantCount: 30},
		"no mlPolicy, trainer sizes":  {numNodes: ptr.To[int32](4), wantCount: 4},
		"no mlPolicy, no numNodes: 1": {wantCount: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := plantest.SkeletonRuntime(tc.policy)
			c := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
			c.Env = []corev1.EnvVar{env("TRAIN_JOB", "original"), env("RUNTIME", "test:runtime")}
			tj := plantest.TrainJob(rt.Name, &trainer.Trainer{
				Image:    ptr.To("test:trainjob"),
				Command:  []string{"trainjob"},
				Args:     []string{"trainjob"},
				NumNodes: tc.numNodes,
				Env:      []corev1.EnvVar{env("TRAIN_JOB", "override"), env("TRAIN_JOB_CUSTOM", "test:trainjob")},
			})
			js := mustBuild(t, tj, rt)
			want := c.DeepCopy()
			want.Image, want.Command, want.Args = "test:trainjob", []string{"trainjob"}, []string{"trainjob"}
			want.Env = []corev1.EnvVar{env("TRAIN_JOB", "override"), env("RUNTIME", "test:runtime"), env("TRAIN_JOB_CUSTOM", "test:trainjob")}
			if diff := cmp.Diff(want, nodeContainer(t, js)); diff != "" {
				t.Errorf("node container (-want +got):\n%s", diff)
			}
			wantCounts := map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": tc.wantCount}
			if diff := cmp.Diff(wantCounts, counts(t, js)); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// The decisions on upstream quirks (docs/compatibility.md#upstream-quirks), see the
// package doc.
func TestQuirkDecisions(t *testing.T) {
	t.Run("quirk 1: PET_* without spec.trainer", func(t *testing.T) {
		rt := plantest.SkeletonRuntime(torchPolicy(3))
		c := nodeContainer(t, mustBuild(t, plantest.TrainJob(rt.Name, nil), rt))
		if diff := cmp.Diff(petEnv("3", "1"), c.Env); diff != "" {
			t.Errorf("env (-want +got):\n%s", diff)
		}
	})
	t.Run("quirk 3: numNodes 0 gives 0 pods", func(t *testing.T) {
		rt := plantest.SkeletonRuntime(torchPolicy(3))
		js := mustBuild(t, plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](0)}), rt)
		if diff := cmp.Diff(map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": 0}, counts(t, js)); diff != "" {
			t.Errorf("counts (-want +got):\n%s", diff)
		}
		if got := nodeContainer(t, js).Env[0]; got != env("PET_NNODES", "0") {
			t.Errorf("env[0] = %v, want PET_NNODES=0", got)
		}
	})
	t.Run("quirk 4: coordinator is the actual trainer pod 0", func(t *testing.T) {
		rt := plantest.SkeletonRuntime(torchPolicy(2))
		rt.Spec.Template.Spec.ReplicatedJobs[2].Name = "trainer"
		rt.Spec.Template.Spec.Network = &jobsetv1alpha2.Network{Subdomain: "custom"}
		c := nodeContainer(t, mustBuild(t, plantest.TrainJob(rt.Name, nil), rt))
		if got := c.Env[3]; got != env("PET_MASTER_ADDR", "test-job-trainer-0-0.custom") {
			t.Errorf("env[3] = %v, want PET_MASTER_ADDR=test-job-trainer-0-0.custom", got)
		}
	})
	t.Run("quirk 16: the rendezvous port does not replace an unnamed port", func(t *testing.T) {
		rt := plantest.SkeletonRuntime(torchPolicy(1))
		c := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
		c.Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
		got := nodeContainer(t, mustBuild(t, plantest.TrainJob(rt.Name, nil), rt)).Ports
		want := []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 29500}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ports (-want +got):\n%s", diff)
		}
	})
	t.Run("a declared 29500 is replaced in place", func(t *testing.T) {
		rt := plantest.SkeletonRuntime(torchPolicy(1))
		c := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
		c.Ports = []corev1.ContainerPort{{Name: "rdzv", ContainerPort: 29500}, {Name: "metrics", ContainerPort: 8080}}
		got := nodeContainer(t, mustBuild(t, plantest.TrainJob(rt.Name, nil), rt)).Ports
		want := []corev1.ContainerPort{{ContainerPort: 29500}, {Name: "metrics", ContainerPort: 8080}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ports (-want +got):\n%s", diff)
		}
	})
}

// fakePlugin records its runs and sets the parallelism of one replicatedJob.
type fakePlugin struct {
	name    string
	enabled bool
	rj      string
	count   int32
	ran     *[]string
}

func (f fakePlugin) Name() string                   { return f.name }
func (f fakePlugin) Enabled(*trainer.MLPolicy) bool { return f.enabled }
func (f fakePlugin) ValidateRuntime(*trainer.TrainingRuntimeSpec) field.ErrorList {
	return nil
}
func (f fakePlugin) ValidateTrainJob(*trainer.TrainJob, *plan.Plan) field.ErrorList { return nil }
func (f fakePlugin) Apply(_ *trainer.TrainJob, p *plan.Plan) error {
	*f.ran = append(*f.ran, f.name)
	plan.ReplicatedJob(p.JobSet, f.rj).Template.Spec.Parallelism = ptr.To(f.count)
	return nil
}

// Apply runs the enabled plugins in list order, then syncs completions.
func TestApplyOrderAndSync(t *testing.T) {
	rt := plantest.SkeletonRuntime(nil)
	tj := plantest.TrainJob(rt.Name, nil)
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	plugins := []Plugin{
		fakePlugin{name: "b", enabled: true, rj: "node", count: 5, ran: &ran},
		fakePlugin{name: "skipped", enabled: false, rj: "node", count: 9, ran: &ran},
		fakePlugin{name: "a", enabled: true, rj: "model-initializer", count: 2, ran: &ran},
	}
	if err := Apply(tj, &plan.Plan{Runtime: rt, JobSet: js}, plugins); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b", "a"}, ran); diff != "" {
		t.Errorf("plugins run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int32{"dataset-initializer": 1, "model-initializer": 2, "node": 5}, counts(t, js)); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

func TestDefaultPluginsSelection(t *testing.T) {
	cases := map[string]struct {
		policy *trainer.MLPolicy
		want   []string
	}{
		"none":    {want: []string{"PlainML"}},
		"empty":   {policy: &trainer.MLPolicy{}, want: []string{"PlainML"}},
		"torch":   {policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}}, want: []string{"Torch"}},
		"jax":     {policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{JAX: &trainer.JAXMLPolicySource{}}}, want: []string{"JAX"}},
		"xgboost": {policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{XGBoost: &trainer.XGBoostMLPolicySource{}}}, want: []string{"XGBoost", "PlainML"}},
		"mpi":     {policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{}}}, want: []string{"MPI"}},
		"flux":    {policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}}}, want: []string{"Flux", "PlainML"}},
	}
	for name, tc := range cases {
		var got []string
		for _, p := range DefaultPlugins(SecretNames{}) {
			if p.Enabled(tc.policy) {
				got = append(got, p.Name())
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: enabled plugins (-want +got):\n%s", name, diff)
		}
	}
}

// Every upstream runtime, with a minimal TrainJob of 2 nodes, builds a sound JobSet.
func TestAllUpstreamRuntimes(t *testing.T) {
	runtimes := plantest.UpstreamRuntimes(t)
	if len(runtimes) == 0 {
		t.Fatal("no upstream runtimes")
	}
	for _, r := range runtimes {
		t.Run(r.Doc, func(t *testing.T) {
			rt := r.Runtime
			specBefore := rt.Spec.DeepCopy()
			tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](2)})
			tj.Spec.RuntimeRef.Kind = ptr.To(rt.Kind)
			js, err := build(t, tj, rt)
			if diff := cmp.Diff(specBefore, rt.Spec); diff != "" {
				t.Errorf("runtime spec changed (-before +after):\n%s", diff)
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			for i := range js.Spec.ReplicatedJobs {
				s := js.Spec.ReplicatedJobs[i].Template.Spec
				if s.Parallelism == nil || s.Completions == nil || *s.Parallelism != *s.Completions || *s.Parallelism < 1 {
					t.Errorf("%s: parallelism %v, completions %v; want equal and >= 1",
						js.Spec.ReplicatedJobs[i].Name, ptr.Deref(s.Parallelism, -1), ptr.Deref(s.Completions, -1))
				}
			}
			rj := plan.TrainerJob(js)
			if rj == nil {
				t.Fatal("no trainer replicatedJob")
			}
			if p := rt.Spec.MLPolicy; p != nil && p.MPI != nil {
				// The launcher is the trainer; numNodes sizes the "node" workers, one
				// fewer when the launcher is also a node (docs/compatibility.md#mpi).
				if diff := cmp.Diff(map[string]int32{"launcher": 1, "node": 1}, counts(t, js)); diff != "" {
					t.Errorf("counts (-want +got):\n%s", diff)
				}
			} else if got := plan.Count(rj); got != 2 {
				t.Errorf("trainer parallelism = %d, want 2", got)
			}
			if len(js.OwnerReferences) != 1 || js.OwnerReferences[0].UID != plantest.TrainJobUID ||
				!ptr.Deref(js.OwnerReferences[0].Controller, false) {
				t.Errorf("ownerReferences = %v, want the TrainJob as controller", js.OwnerReferences)
			}
			if rt.Spec.MLPolicy != nil && rt.Spec.MLPolicy.Torch != nil {
				if got := nodeContainer(t, js).Env; !containsEnv(got, env("PET_NNODES", "2")) {
					t.Errorf("node env %v lacks PET_NNODES=2", got)
				}
			}
		})
	}
}

func containsEnv(list []corev1.EnvVar, want corev1.EnvVar) bool {
	for _, e := range list {
		if cmp.Equal(e, want) {
			return true
		}
	}
	return false
}

// BenchmarkMergeAndApply measures the two stages for one TrainJob: the skeleton runtime
// (docs/compatibility.md#upstream-test-cases) with a Torch policy, a TrainJob
// overriding image, command, env and resources, with and without a Kueue-style runtime
// patch.
func BenchmarkMergeAndApply(b *testing.B) {
	rt := plantest.SkeletonRuntime(torchPolicy(1))
	newTrainJob := func() *trainer.TrainJob {
		return plantest.TrainJob(rt.Name, &trainer.Trainer{
			Image:            ptr.To("test:trainjob"),
			Command:          []string{"torchrun", "train.py"},
			NumNodes:         ptr.To[int32](4),
			Env:              []corev1.EnvVar{env("EPOCHS", "10")},
			ResourcesPerNode: &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "8")},
		})
	}
	withPatch := newTrainJob()
	withPatch.Spec.RuntimePatches = []trainer.RuntimePatch{{
		Manager: "kueue.x-k8s.io/manager",
		TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
			Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
				Name: "node",
				Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{
					Spec: &trainer.PodSpecPatch{
						NodeSelector:    map[string]string{"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
						Tolerations:     []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}},
						SchedulingGates: []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/topology"}},
					},
				}}},
			}}},
		}},
	}}
	for name, tj := range map[string]*trainer.TrainJob{"no-patch": newTrainJob(), "kueue-patch": withPatch} {
		b.Run(name, func(b *testing.B) {
			plugins := DefaultPlugins(SecretNames{})
			b.ReportAllocs()
			for b.Loop() {
				js, err := mergepatches.Merge(tj, rt)
				if err != nil {
					b.Fatal(err)
				}
				if err := Apply(tj, &plan.Plan{Runtime: rt, JobSet: js}, plugins); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
