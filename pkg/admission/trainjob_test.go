package admission

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/gang/volcano"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// mutated returns tj changed by mutate.
func mutated(tj *trainer.TrainJob, mutate func(*trainer.TrainJob)) *trainer.TrainJob {
	mutate(tj)
	return tj
}

func policy(s trainer.MLPolicySource) *trainer.MLPolicy { return &trainer.MLPolicy{MLPolicySource: s} }

var (
	torchPolicy   = policy(trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}})
	jaxPolicy     = policy(trainer.MLPolicySource{JAX: &trainer.JAXMLPolicySource{}})
	xgboostPolicy = policy(trainer.MLPolicySource{XGBoost: &trainer.XGBoostMLPolicySource{}})
	fluxPolicy    = policy(trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}})
)

func mpiPolicy(launcherAsNode bool) *trainer.MLPolicy {
	return policy(trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{RunLauncherAsNode: ptr.To(launcherAsNode)}})
}

// volcanoRuntime is the skeleton with Volcano, the annotations and the trainer's
// priorityClassName.
func volcanoRuntime(annotations map[string]string, priorityClass string) *trainer.TrainingRuntimeSpec {
	spec := skeleton(torchPolicy)
	spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{}}}
	spec.Template.Annotations = annotations
	rjob(spec, "node").Template.Spec.Template.Spec.PriorityClassName = priorityClass
	return spec
}

// torchtune returns a runtime named like upstream's torchtune runtimes and a [tune run]
// TrainJob of it with trainer fields set by mutate.
func torchtuneCase(runtimeName string, mutate func(*trainer.Trainer)) (runtime.Object, *trainer.TrainJob) {
	t := &trainer.Trainer{Command: []string{"tune", "run"}}
	if mutate != nil {
		mutate(t)
	}
	return ctr(runtimeName, skeleton(torchPolicy), nil), trainJob(runtimeName, t)
}

func TestValidateTrainJobCreate(t *testing.T) {
	const rt = "test-runtime"
	type tc struct {
		fixture      fixture
		tj           *trainer.TrainJob
		wantErrs     []string // "<type>: <field>", sorted
		wantInMsg    string   // in the aggregated message
		wantWarnings []string // substrings, one per warning, in order
	}
	cases := map[string]tc{
		"admitted": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, skeleton(torchPolicy), nil)}},
			tj:      trainJob(rt, &trainer.Trainer{NumNodes: ptr.To[int32](2), Env: []corev1.EnvVar{env("FOO", "1")}}),
		},
		"unsupported kind": {
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef.Kind = ptr.To("Deployment")
			}),
			wantErrs:  []string{"FieldValueInvalid: spec.runtimeRef.kind"},
			wantInMsg: "unsupported runtime: Deployment.trainer.kubeflow.org",
		},
		"unsupported apiGroup": {
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef.APIGroup = ptr.To("example.com")
			}),
			wantErrs:  []string{"FieldValueInvalid: spec.runtimeRef.apiGroup"},
			wantInMsg: "unsupported runtime: ClusterTrainingRuntime.example.com",
		},
		"runtime missing: admitted with a warning, runtime-free rules still apply": {
			tj: mutated(trainJob("nowhere", nil), func(tj *trainer.TrainJob) {
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "kueue"}}
			}),
			wantErrs:     []string{"FieldValueInvalid: spec.runtimePatches[0].manager"},
			wantWarnings: []string{`ClusterTrainingRuntime "nowhere" referenced by spec.runtimeRef not found`},
		},
		"runtime missing: admitted": {
			tj:           trainJob("nowhere", nil),
			wantWarnings: []string{`ClusterTrainingRuntime "nowhere" referenced by spec.runtimeRef not found: the TrainJob waits for it`},
		},
		"manager not domain-prefixed": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, skeleton(torchPolicy), nil)}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "kueue.x-k8s.io/manager"}, {Manager: "UPPER/x"}, {Manager: "nodomain"}}
			}),
			wantErrs:  []string{"FieldValueInvalid: spec.runtimePatches[1].manager", "FieldValueInvalid: spec.runtimePatches[2].manager"},
			wantInMsg: `must be a domain-prefixed path (such as "acme.io/foo")`,
		},
		"env in a patch to node and model-initializer": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, skeleton(torchPolicy), nil)}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{
					podPatch("example.io/a", "node", trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", Env: []corev1.EnvVar{env("A", "1")}}}}),
					podPatch("example.io/b", "model-initializer", trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "model-initializer", Env: []corev1.EnvVar{env("A", "1")}}}}),
				}
			}),
			wantErrs: []string{
				"FieldValueForbidden: spec.runtimePatches[manager=example.io/a].trainingRuntimeSpec.template.spec.replicatedJobs[name=node].template.spec.template.spec.containers[name=node].env",
				"FieldValueForbidden: spec.runtimePatches[manager=example.io/b].trainingRuntimeSpec.template.spec.replicatedJobs[name=model-initializer].template.spec.template.spec.containers[name=model-initializer].env",
			},
			wantInMsg: "must not have envs for the dataset-initializer, model-initializer, node containers: set the \"node\" container's env with spec.trainer.env",
		},
		"patch of a missing replicatedJob, container and init container": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, skeleton(torchPolicy), nil)}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{
					podPatch("example.io/a", "worker", trainer.PodSpecPatch{}),
					podPatch("example.io/b", "node", trainer.PodSpecPatch{
						Containers:     []trainer.ContainerPatch{{Name: "sidecar"}},
						InitContainers: []trainer.ContainerPatch{{Name: "node"}},
					}),
				}
			}),
			wantErrs: []string{
				"FieldValueInvalid: spec.runtimePatches[manager=example.io/a].trainingRuntimeSpec.template.spec.replicatedJobs[name=worker]",
				"FieldValueInvalid: spec.runtimePatches[manager=example.io/b].trainingRuntimeSpec.template.spec.replicatedJobs[name=node].template.spec.template.spec.containers[name=sidecar]",
				"FieldValueInvalid: spec.runtimePatches[manager=example.io/b].trainingRuntimeSpec.template.spec.replicatedJobs[name=node].template.spec.template.spec.initContainers[name=node]",
			},
			wantInMsg: "must not have replicated job that doesn't exist in the runtime job template",
		},
		"patch that fits, plus its metadata": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, skeleton(torchPolicy), nil)}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				p := podPatch("kueue.x-k8s.io/manager", "node", trainer.PodSpecPatch{
					NodeSelector: map[string]string{"pool": "a"},
					Containers:   []trainer.ContainerPatch{{Name: "node", VolumeMounts: []corev1.VolumeMount{{Name: "x", MountPath: "/x"}}}},
				})
				p.TrainingRuntimeSpec.Template.Metadata = &metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{p}
			}),
		},
		"dataset initializer without its replicatedJob": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, without(skeleton(torchPolicy), "dataset-initializer"), nil)}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.Initializer = &trainer.Initializer{Dataset: &trainer.DatasetInitializer{}, Model: &trainer.ModelInitializer{}}
			}),
			wantErrs:  []string{"FieldValueInvalid: spec.initializer.dataset"},
			wantInMsg: "must have dataset-initializer job when trainJob is configured with input datasetConfig",
		},
		"model initializer without its container": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(torchPolicy)
				rj := rjob(spec, "model-initializer")
				rj.Template.Labels = nil // else the step rule fires first
				rj.Template.Spec.Template.Spec.Containers[0].Name = "fetch"
				return spec
			}(), nil)}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.Initializer = &trainer.Initializer{Model: &trainer.ModelInitializer{}}
			}),
			wantErrs:  []string{"FieldValueInvalid: spec.initializer.model"},
			wantInMsg: "must have container with name - model-initializer in the model-initializer job",
		},
		"model initializer without the initializer volume mount: a warning (upstream denies)": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(torchPolicy)
				rjob(spec, "model-initializer").Template.Spec.Template.Spec.Containers[0].VolumeMounts = nil
				return spec
			}(), nil)}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.Initializer = &trainer.Initializer{Model: &trainer.ModelInitializer{}}
			}),
			wantWarnings: []string{`spec.initializer.model: the "model-initializer" container of runtime ClusterTrainingRuntime/test-runtime mounts no volume "initializer"`},
		},
		"torch reserved env": {
			fixture:   fixture{runtimes: []runtime.Object{ctr(rt, skeleton(torchPolicy), nil)}},
			tj:        trainJob(rt, &trainer.Trainer{Env: []corev1.EnvVar{env("PET_NNODES", "2"), env("PET_MASTER_PORT", "1"), env("OK", "1")}}),
			wantErrs:  []string{"FieldValueInvalid: spec.trainer.env"},
			wantInMsg: "must not have reserved envs, invalid envs configured: [PET_MASTER_PORT PET_NNODES]",
		},
		"xgboost reserved env": {
			fixture:   fixture{runtimes: []runtime.Object{ctr(rt, skeleton(xgboostPolicy), nil)}},
			tj:        trainJob(rt, &trainer.Trainer{Env: []corev1.EnvVar{env("OK", "1"), env("DMLC_NUM_WORKER", "2")}}),
			wantErrs:  []string{"FieldValueForbidden: spec.trainer.env[1]"},
			wantInMsg: "DMLC_NUM_WORKER is reserved for the XGBoost runtime",
		},
		"mpi reserved env": {
			fixture:   fixture{runtimes: []runtime.Object{ctr(rt, withLauncher(skeleton(mpiPolicy(false))), nil)}},
			tj:        trainJob(rt, &trainer.Trainer{Env: []corev1.EnvVar{env("OMPI_MCA_orte_default_hostfile", "x")}}),
			wantErrs:  []string{"FieldValueInvalid: spec.trainer.env"},
			wantInMsg: "must not have reserved envs, invalid envs configured: [OMPI_MCA_orte_default_hostfile]",
		},
		"mpi numNodes 2 with the launcher as the only node": {
			fixture:   fixture{runtimes: []runtime.Object{ctr(rt, without(withLauncher(skeleton(mpiPolicy(true))), "node"), nil)}},
			tj:        trainJob(rt, &trainer.Trainer{NumNodes: ptr.To[int32](2)}),
			wantErrs:  []string{"FieldValueInvalid: spec.trainer.numNodes"},
			wantInMsg: "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node",
		},
		"mpi numNodes whose hostfile does not fit in its ConfigMap": {
			fixture:   fixture{runtimes: []runtime.Object{ctr(rt, withLauncher(skeleton(mpiPolicy(true))), nil)}},
			tj:        trainJob(rt, &trainer.Trainer{NumNodes: ptr.To[int32](1<<31 - 1)}),
			wantErrs:  []string{"FieldValueInvalid: spec.trainer.numNodes"},
			wantInMsg: "the MPI hostfile would list 2147483647 hosts in more than the 1048576 bytes a ConfigMap holds",
		},
		"mpi runtime without a launcher": {
			fixture:   fixture{runtimes: []runtime.Object{ctr(rt, skeleton(mpiPolicy(false)), nil)}},
			tj:        trainJob(rt, nil),
			wantErrs:  []string{"FieldValueInvalid: spec.runtimeRef"},
			wantInMsg: `ClusterTrainingRuntime/test-runtime spec.template.spec.replicatedJobs: mlPolicy.mpi needs a replicatedJob named "launcher"`,
		},
		"jax numProcPerNode 4": {
			fixture:   fixture{runtimes: []runtime.Object{ctr(rt, skeleton(jaxPolicy), nil)}},
			tj:        trainJob(rt, &trainer.Trainer{NumProcPerNode: ptr.To[int32](4)}),
			wantErrs:  []string{"FieldValueInvalid: spec.trainer.numProcPerNode"},
			wantInMsg: "does not support numProcPerNode 4",
		},
		"flux runtime declaring flux-installer": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(fluxPolicy)
				rjob(spec, "node").Template.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "flux-installer"}}
				return spec
			}(), nil)}},
			tj:        trainJob(rt, nil),
			wantErrs:  []string{"FieldValueInvalid: spec.runtimeRef"},
			wantInMsg: "initContainers[name=flux-installer]: InitContainer 'flux-installer' is reserved",
		},
		"runtime step without its container": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, func() *trainer.TrainingRuntimeSpec {
				spec := skeleton(torchPolicy)
				rjob(spec, "node").Template.Spec.Template.Spec.Containers[0].Name = "main"
				return spec
			}(), nil)}},
			tj:        trainJob(rt, nil),
			wantErrs:  []string{"FieldValueInvalid: spec.runtimeRef"},
			wantInMsg: "must contain the required container for the ancestor: trainer",
		},
		"volcano empty queue in the runtime": {
			fixture:   fixture{runtimes: []runtime.Object{ctr(rt, volcanoRuntime(map[string]string{volcano.AnnotationQueueName: ""}, ""), nil)}},
			tj:        trainJob(rt, nil),
			wantErrs:  []string{"FieldValueInvalid: spec.runtimeRef"},
			wantInMsg: "spec.template.metadata.annotations[scheduling.volcano.sh/queue-name]: Volcano queue name must not be empty",
		},
		"volcano empty queue in a patch": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, volcanoRuntime(map[string]string{volcano.AnnotationQueueName: "a"}, ""), nil)}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "example.io/q", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
					Template: &trainer.JobSetTemplatePatch{Metadata: &metav1.ObjectMeta{Annotations: map[string]string{volcano.AnnotationQueueName: ""}}}}}}
			}),
			wantErrs:  []string{"FieldValueInvalid: spec.runtimePatches[manager=example.io/q].trainingRuntimeSpec.template.metadata.annotations[scheduling.volcano.sh/queue-name]"},
			wantInMsg: "Volcano queue name must not be empty",
		},
		"volcano PriorityClass missing": {
			fixture:   fixture{runtimes: []runtime.Object{ctr(rt, volcanoRuntime(nil, "high"), nil)}},
			tj:        trainJob(rt, nil),
			wantErrs:  []string{"FieldValueInvalid: spec.runtimeRef"},
			wantInMsg: `PriorityClass "high" doesn't exist`,
		},
		"volcano PriorityClass present": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, volcanoRuntime(map[string]string{volcano.AnnotationQueueName: "a"}, "high"), nil)},
				priorityClasses: []string{"high"}},
			tj: trainJob(rt, nil),
		},
		"volcano system PriorityClass": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, volcanoRuntime(nil, "system-node-critical"), nil)}},
			tj:      trainJob(rt, nil),
		},
		"deprecated ClusterTrainingRuntime": {
			fixture: fixture{runtimes: []runtime.Object{ctr(rt, skeleton(torchPolicy), map[string]string{trainer.LabelSupport: trainer.SupportDeprecated})}},
			tj:      trainJob(rt, nil),
			wantWarnings: []string{`Referenced ClusterTrainingRuntime "test-runtime" is deprecated and will be removed in a future release of Kubeflow Trainer. ` +
				"See runtime deprecation policy: https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"},
		},
		"numProcPerNode ignored without a framework": {
			fixture:      fixture{runtimes: []runtime.Object{ctr(rt, skeleton(nil), nil)}},
			tj:           trainJob(rt, &trainer.Trainer{NumProcPerNode: ptr.To[int32](2)}),
			wantWarnings: []string{"spec.trainer.numProcPerNode is ignored: runtime ClusterTrainingRuntime/test-runtime has no mlPolicy"},
		},
		"TrainingRuntime in the TrainJob's namespace": {
			fixture: fixture{runtimes: []runtime.Object{func() runtime.Object {
				obj := utiltesting.MakeTrainingRuntime("default", rt)
				obj.Spec = *skeleton(torchPolicy)
				return obj
			}()}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef.Kind = ptr.To(trainer.TrainingRuntimeKind)
			}),
		},
		"TrainingRuntime of another namespace is missing": {
			fixture: fixture{runtimes: []runtime.Object{utiltesting.MakeTrainingRuntime("other", rt)}},
			tj: mutated(trainJob(rt, nil), func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef.Kind = ptr.To(trainer.TrainingRuntimeKind)
			}),
			wantWarnings: []string{`TrainingRuntime "test-runtime" referenced by spec.runtimeRef not found in namespace "default"`},
		},
	}
	for name, c := range torchtuneCases() {
		cases["torchtune: "+name] = tc{fixture: fixture{runtimes: []runtime.Object{c.runtime}}, tj: c.tj, wantErrs: c.wantErrs, wantInMsg: c.wantInMsg}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			warnings, errs := c.fixture.deps(t).ValidateTrainJob(nil, c.tj)
			if diff := cmp.Diff(c.wantErrs, fields(errs)); diff != "" {
				t.Errorf("errors (-want +got):\n%s\n%v", diff, errs)
			}
			if c.wantInMsg != "" && !strings.Contains(errs.ToAggregate().Error(), c.wantInMsg) {
				t.Errorf("message %q does not contain %q", errs.ToAggregate(), c.wantInMsg)
			}
			if len(warnings) != len(c.wantWarnings) {
				t.Fatalf("warnings = %q, want %d containing %q", warnings, len(c.wantWarnings), c.wantWarnings)
			}
			for i := range warnings {
				if !strings.Contains(warnings[i], c.wantWarnings[i]) {
					t.Errorf("warning %d = %q, want it to contain %q", i, warnings[i], c.wantWarnings[i])
				}
			}
		})
	}
}

type torchtuneTC struct {
	runtime   runtime.Object
	tj        *trainer.TrainJob
	wantErrs  []string
	wantInMsg string
}

// torchtuneCases are upstream's torchtune admission rules (trainer-compat §3.1.1).
func torchtuneCases() map[string]torchtuneTC {
	gpus := func(n string) *corev1.ResourceRequirements {
		return &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}}
	}
	c := func(runtimeName string, mutate func(*trainer.Trainer), wantErrs []string, wantInMsg string) torchtuneTC {
		rt, tj := torchtuneCase(runtimeName, mutate)
		return torchtuneTC{runtime: rt, tj: tj, wantErrs: wantErrs, wantInMsg: wantInMsg}
	}
	return map[string]torchtuneTC{
		"supported model": c("torchtune-llama3.2-1b", nil, nil, ""),
		"unsupported model": c("torchtune-mistral-7b", nil, []string{"FieldValueInvalid: spec.runtimeRef.name"},
			`must have a supported pretrained model, invalid model configured: "mistral/7B"`),
		"multi-node for a small model": c("torchtune-llama3.2-3b", func(t *trainer.Trainer) { t.NumNodes = ptr.To[int32](2) },
			[]string{"FieldValueInvalid: spec.trainer.numNodes"}, "must be 1 for llama3_2/3B model"),
		"multi-node 70B": c("torchtune-llama3.3-70b", func(t *trainer.Trainer) { t.NumNodes = ptr.To[int32](2) }, nil, ""),
		"LoRA on several nodes": c("torchtune-llama3.3-70b", func(t *trainer.Trainer) {
			t.NumNodes = ptr.To[int32](2)
			t.Args = []string{"model.lora_attn_modules=[q_proj]"}
		}, []string{"FieldValueInvalid: spec.trainer.numNodes"}, "LoRA fine-tuning is not supported for multi-node training in TorchTune"),
		"QLoRA on qwen": c("torchtune-qwen2.5-1.5b", func(t *trainer.Trainer) { t.Args = []string{"model.quantize_base=True"} },
			[]string{"FieldValueInvalid: spec.runtimeRef.name"}, "QLoRA is not supported for qwen2_5/1.5B model"),
		"distributed QLoRA on llama 1B": c("torchtune-llama3.2-1b", func(t *trainer.Trainer) {
			t.Args = []string{"model.quantize_base=true"}
			t.ResourcesPerNode = gpus("2")
		}, []string{"FieldValueInvalid: spec.trainer.numProcPerNode", "FieldValueInvalid: spec.trainer.resourcesPerNode"},
			"must be auto or 1 for llama3_2/1B model when using QLoRA"),
		"single-device QLoRA on llama 1B": c("torchtune-llama3.2-1b", func(t *trainer.Trainer) {
			t.Args = []string{"model.quantize_base=true"}
			t.ResourcesPerNode = gpus("1")
		}, nil, ""),
		"runtime-managed arg": c("torchtune-llama3.2-1b", func(t *trainer.Trainer) { t.Args = []string{"epochs=1", "output_dir=/tmp"} },
			[]string{"FieldValueInvalid: spec.trainer.args[1]"}, `must not set immutable config "output_dir" in trainer args`),
	}
}

func TestValidateTrainJobUpdate(t *testing.T) {
	const rt = "test-runtime"
	base := func(suspend bool, patches ...trainer.RuntimePatch) *trainer.TrainJob {
		tj := trainJob(rt, nil)
		tj.Spec.Suspend = ptr.To(suspend)
		tj.Spec.RuntimePatches = patches
		return tj
	}
	stamp := metav1.NewTime(testNow.Truncate(time.Second))
	kueue := func(pool string) trainer.RuntimePatch {
		p := podPatch("kueue.x-k8s.io/manager", "node", trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": pool}})
		p.Time = &stamp
		return p
	}
	jobSet := func(active int32) *jobsetv1alpha2.JobSet {
		return utiltesting.MakeJobSet("default", "test-job").ControlledBy(base(false)).
			ReplicatedJobStatus("node", 0, 0, 0, active, 0).Obj()
	}
	runtimes := []runtime.Object{ctr(rt, skeleton(torchPolicy), nil)}
	cases := map[string]struct {
		fixture  fixture
		old, tj  *trainer.TrainJob
		wantErrs []string
		wantMsg  string
	}{
		"patches changed while running": {
			fixture:  fixture{runtimes: runtimes},
			old:      base(false, kueue("a")),
			tj:       base(false, kueue("b")),
			wantErrs: []string{"FieldValueForbidden: spec.runtimePatches"},
			wantMsg:  "RuntimePatches can only be modified when the TrainJob is suspended before or after the update",
		},
		"patches changed while suspended, JobSet inactive": {
			fixture: fixture{runtimes: runtimes, jobSets: []*jobsetv1alpha2.JobSet{jobSet(0)}},
			old:     base(true, kueue("a")),
			tj:      base(true, kueue("b")),
		},
		"patches changed while suspended, JobSet still active": {
			fixture:  fixture{runtimes: runtimes, jobSets: []*jobsetv1alpha2.JobSet{jobSet(3)}},
			old:      base(true, kueue("a")),
			tj:       base(true, kueue("b")),
			wantErrs: []string{"FieldValueForbidden: spec.runtimePatches"},
			wantMsg:  "RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is still active",
		},
		"patches added in the update that unsuspends": {
			fixture: fixture{runtimes: runtimes},
			old:     base(true),
			tj:      base(false, kueue("a")),
		},
		"patches kept while running": {
			fixture: fixture{runtimes: runtimes},
			old:     base(false, kueue("a")),
			tj:      base(true, kueue("a")),
		},
		"a foreign active JobSet is not the TrainJob's": {
			fixture: fixture{runtimes: runtimes, jobSets: []*jobsetv1alpha2.JobSet{
				utiltesting.MakeJobSet("default", "test-job").ReplicatedJobStatus("node", 0, 0, 0, 2, 0).Obj()}},
			old: base(true, kueue("a")),
			tj:  base(true, kueue("b")),
		},
		"unchanged spec with its runtime gone is admitted": {
			old: base(false, kueue("a")),
			tj:  base(false, kueue("a")),
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, errs := c.fixture.deps(t).ValidateTrainJob(c.old, c.tj)
			if diff := cmp.Diff(c.wantErrs, fields(errs)); diff != "" {
				t.Errorf("errors (-want +got):\n%s\n%v", diff, errs)
			}
			if c.wantMsg != "" && !strings.Contains(errs.ToAggregate().Error(), c.wantMsg) {
				t.Errorf("message %q does not contain %q", errs.ToAggregate(), c.wantMsg)
			}
		})
	}
}

// Every branch of trainer-compat §6.1.
func TestDefaultRuntimePatchTimes(t *testing.T) {
	now := metav1.NewTime(testNow.Truncate(time.Second))
	user := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	older := metav1.NewTime(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))
	patch := func(manager, pool string, at *metav1.Time) trainer.RuntimePatch {
		p := podPatch(manager, "node", trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": pool}})
		p.Time = at
		return p
	}
	tjWith := func(patches ...trainer.RuntimePatch) *trainer.TrainJob {
		tj := trainJob("rt", nil)
		tj.Spec.RuntimePatches = patches
		return tj
	}
	add := func(i string, at metav1.Time) PatchOperation {
		return PatchOperation{Op: "add", Path: "/spec/runtimePatches/" + i + "/time", Value: at}
	}
	cases := map[string]struct {
		old, tj *trainer.TrainJob
		want    []PatchOperation
	}{
		"create: unset gets now, set is kept": {
			tj:   tjWith(patch("a.io/x", "a", nil), patch("b.io/x", "a", &user)),
			want: []PatchOperation{add("0", now)},
		},
		"create: no patches": {tj: tjWith()},
		"update: unchanged keeps the old time": {
			old: tjWith(patch("a.io/x", "a", &older)),
			tj:  tjWith(patch("a.io/x", "a", &older)),
		},
		"update: unchanged with a user time gets the old time back": {
			old:  tjWith(patch("a.io/x", "a", &older)),
			tj:   tjWith(patch("a.io/x", "a", &user)),
			want: []PatchOperation{add("0", older)},
		},
		"update: unchanged whose old patch had no time loses the user's": {
			old:  tjWith(patch("a.io/x", "a", nil)),
			tj:   tjWith(patch("a.io/x", "a", &user)),
			want: []PatchOperation{{Op: "remove", Path: "/spec/runtimePatches/0/time"}},
		},
		"update: changed gets now, the user's time discarded": {
			old:  tjWith(patch("a.io/x", "a", &older)),
			tj:   tjWith(patch("a.io/x", "b", &user)),
			want: []PatchOperation{add("0", now)},
		},
		"update: new manager keeps the user's time or gets now": {
			old:  tjWith(patch("a.io/x", "a", &older)),
			tj:   tjWith(patch("a.io/x", "a", &older), patch("b.io/x", "a", &user), patch("c.io/x", "a", nil)),
			want: []PatchOperation{add("2", now)},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := DefaultRuntimePatchTimes(c.old, c.tj, testNow)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
		})
	}
}
