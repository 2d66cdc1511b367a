package admissiontest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Cases returns the table, its namespaced objects in namespace and its cluster-scoped
// ones (ClusterTrainingRuntimes, PriorityClasses) named "<namespace>-<name>":
// TrainJobCases, then RuntimeCases, then OptimizationJobCases.
func Cases(namespace string) []Case {
	return append(append(TrainJobCases(namespace), RuntimeCases(namespace)...), OptimizationJobCases(namespace)...)
}

// TrainJobCases are the rules and warnings of the TrainJob webhook (package admission's
// ValidateTrainJob), each with a TrainJob sent for CREATE.
func TrainJobCases(namespace string) []Case {
	b := builder{ns: namespace}
	torch := b.runtime("torch", Skeleton(torchPolicy))
	withRuntime := func(c Case, runtimes ...Object) Case {
		c.Existing = append(runtimes, c.Existing...)
		return c
	}
	tj := func(name string, t *trainer.Trainer, edit func(*trainer.TrainJob)) *trainer.TrainJob {
		obj := b.trainJob(name, torch.Name, t)
		if edit != nil {
			edit(obj)
		}
		return obj
	}
	of := func(rt Object, name string, t *trainer.Trainer) *trainer.TrainJob {
		obj := b.trainJob(name, rt.GetName(), t)
		if _, ok := rt.(*trainer.ClusterTrainingRuntime); ok {
			obj.Spec.RuntimeRef.Kind = ptr.To(trainer.ClusterTrainingRuntimeKind)
		}
		return obj
	}

	cases := []Case{
		withRuntime(Case{
			Name:   "TrainJob: admitted",
			Object: tj("admitted", &trainer.Trainer{NumNodes: ptr.To[int32](2), Env: []corev1.EnvVar{env("FOO", "1")}}, nil),
		}, torch),
		{
			Name: "TrainJob: runtimeRef.kind not a runtime",
			Object: tj("bad-kind", nil, func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef.Kind = ptr.To("Deployment")
			}),
			Errors:  []Violation{invalid("spec.runtimeRef.kind")},
			Message: "unsupported runtime: Deployment.trainer.kubeflow.org",
		},
		{
			Name: "TrainJob: runtimeRef.apiGroup not trainer.kubeflow.org",
			Object: tj("bad-api-group", nil, func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef.APIGroup = ptr.To("example.com")
			}),
			Errors:  []Violation{invalid("spec.runtimeRef.apiGroup")},
			Message: "unsupported runtime: TrainingRuntime.example.com",
		},
		withRuntime(Case{
			Name: "TrainJob: runtimePatches[].manager not a domain-prefixed path",
			Object: tj("bad-manager", nil, func(tj *trainer.TrainJob) {
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "kueue.x-k8s.io/manager"}, {Manager: "UPPER/x"}, {Manager: "nodomain"}}
			}),
			Errors:  []Violation{invalid("spec.runtimePatches[1].manager"), invalid("spec.runtimePatches[2].manager")},
			Message: `must be a domain-prefixed path (such as "acme.io/foo")`,
		}, torch),
		{
			Name: "TrainJob: runtime missing: admitted with a warning, the rules without the runtime still apply",
			Object: tj("missing-runtime-bad-manager", nil, func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef.Name = "nowhere"
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "kueue"}}
			}),
			Errors:   []Violation{invalid("spec.runtimePatches[0].manager")},
			Message:  "must be a domain-prefixed path",
			Warnings: []string{`TrainingRuntime "nowhere" referenced by spec.runtimeRef not found in namespace "` + namespace + `"`},
		},
		{
			Name:     "TrainJob: TrainingRuntime missing: admitted with a warning",
			Object:   b.trainJob("missing-runtime", "nowhere", nil),
			Warnings: []string{`TrainingRuntime "nowhere" referenced by spec.runtimeRef not found in namespace "` + namespace + `": the TrainJob waits for it`},
		},
		{
			Name:     "TrainJob: ClusterTrainingRuntime missing: admitted with a warning",
			Object:   b.ofClusterRuntime(b.trainJob("missing-cluster-runtime", "", nil), "nowhere"),
			Warnings: []string{`ClusterTrainingRuntime "` + b.clusterName("nowhere") + `" referenced by spec.runtimeRef not found: the TrainJob waits for it`},
		},
		withRuntime(Case{
			Name: "TrainJob: env in runtimePatches to the node, model-initializer and dataset-initializer containers",
			Object: tj("patch-env", nil, func(tj *trainer.TrainJob) {
				withEnv := func(name string) trainer.PodSpecPatch {
					return trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: name, Env: []corev1.EnvVar{env("A", "1")}}}}
				}
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{
					podPatch("example.io/a", "node", withEnv("node")),
					podPatch("example.io/b", "model-initializer", withEnv("model-initializer")),
					podPatch("example.io/c", "dataset-initializer", withEnv("dataset-initializer")),
				}
			}),
			Errors: []Violation{
				forbidden(patchPath("example.io/a", "node") + ".template.spec.template.spec.containers[name=node].env"),
				forbidden(patchPath("example.io/b", "model-initializer") + ".template.spec.template.spec.containers[name=model-initializer].env"),
				forbidden(patchPath("example.io/c", "dataset-initializer") + ".template.spec.template.spec.containers[name=dataset-initializer].env"),
			},
			Message: "must not have envs for the dataset-initializer, model-initializer, node containers: set the \"node\" container's env with spec.trainer.env",
		}, torch),
		withRuntime(Case{
			Name: "TrainJob: runtimePatches to a replicatedJob, container and init container the runtime lacks",
			Object: tj("patch-misfit", nil, func(tj *trainer.TrainJob) {
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{
					podPatch("example.io/a", "worker", trainer.PodSpecPatch{}),
					podPatch("example.io/b", "node", trainer.PodSpecPatch{
						Containers:     []trainer.ContainerPatch{{Name: "sidecar"}},
						InitContainers: []trainer.ContainerPatch{{Name: "node"}},
					}),
				}
			}),
			Errors: []Violation{
				invalid(patchPath("example.io/a", "worker")),
				invalid(patchPath("example.io/b", "node") + ".template.spec.template.spec.containers[name=sidecar]"),
				invalid(patchPath("example.io/b", "node") + ".template.spec.template.spec.initContainers[name=node]"),
			},
			Message: "must not have replicated job that doesn't exist in the runtime job template",
		}, torch),
		withRuntime(Case{
			Name: "TrainJob: runtimePatch that fits, with template metadata: admitted",
			Object: tj("patch-fits", nil, func(tj *trainer.TrainJob) {
				p := podPatch("kueue.x-k8s.io/manager", "node", trainer.PodSpecPatch{
					NodeSelector: map[string]string{"pool": "a"},
					Containers:   []trainer.ContainerPatch{{Name: "node", VolumeMounts: []corev1.VolumeMount{{Name: "x", MountPath: "/x"}}}},
				})
				p.TrainingRuntimeSpec.Template.Metadata = &metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}
				tj.Spec.RuntimePatches = []trainer.RuntimePatch{p}
			}),
		}, torch),
		withRuntime(Case{
			Name:    "TrainJob: torch reserved PET_ env",
			Object:  tj("torch-env", &trainer.Trainer{Env: []corev1.EnvVar{env("PET_NNODES", "2"), env("PET_MASTER_PORT", "1"), env("OK", "1")}}, nil),
			Errors:  []Violation{invalid("spec.trainer.env")},
			Message: "must not have reserved envs, invalid envs configured: [PET_MASTER_PORT PET_NNODES]",
		}, torch),
		withRuntime(Case{
			Name:     "TrainJob: numProcPerNode ignored by a runtime without a framework: a warning",
			Object:   of(b.runtime("plain", Skeleton(nil)), "plain-procs", &trainer.Trainer{NumProcPerNode: ptr.To[int32](2)}),
			Warnings: []string{`spec.trainer.numProcPerNode is ignored: runtime TrainingRuntime/plain has no mlPolicy`},
		}, b.runtime("plain", Skeleton(nil))),
		withRuntime(Case{
			Name:     "TrainJob: GPUs per node not derivable from the trainer's DRA claims: a warning",
			Object:   of(b.runtime("shared-gpus", sharedClaimRuntime()), "shared-gpus", nil),
			Warnings: []string{`cannot derive GPUs per node from the trainer's DRA claims (claim "gpu" is the shared ResourceClaim "shared"`},
		}, b.resourceClaim("shared", 2), b.runtime("shared-gpus", sharedClaimRuntime())),
		withRuntime(Case{
			Name:   "TrainJob: DRA claims with numProcPerNode: admitted",
			Object: of(b.runtime("shared-gpus", sharedClaimRuntime()), "shared-gpus-procs", &trainer.Trainer{NumProcPerNode: ptr.To[int32](2)}),
		}, b.resourceClaim("shared", 2), b.runtime("shared-gpus", sharedClaimRuntime())),
	}

	deprecated := b.clusterRuntime("deprecated", Skeleton(torchPolicy))
	deprecated.Labels = map[string]string{trainer.LabelSupport: trainer.SupportDeprecated}
	cases = append(cases, withRuntime(Case{
		Name:   "TrainJob: deprecated ClusterTrainingRuntime: a warning",
		Object: of(deprecated, "of-deprecated", nil),
		Warnings: []string{`Referenced ClusterTrainingRuntime "` + deprecated.Name + `" is deprecated and will be removed in a future release of Kubeflow Trainer. ` +
			"See runtime deprecation policy: https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"},
	}, deprecated))

	// Rules of the ML policies, each against a runtime of its policy.
	xgboost := b.runtime("xgboost", Skeleton(xgboostPolicy))
	mpi := b.runtime("mpi", WithLauncher(Skeleton(mpiPolicy(false))))
	launcherOnly := b.runtime("mpi-launcher-only", Without(WithLauncher(Skeleton(mpiPolicy(true))), "node"))
	mpiAsNode := b.runtime("mpi-launcher-as-node", WithLauncher(Skeleton(mpiPolicy(true))))
	jax := b.runtime("jax", Skeleton(jaxPolicy))
	cases = append(cases,
		withRuntime(Case{
			Name:    "TrainJob: xgboost reserved DMLC_ env",
			Object:  of(xgboost, "xgboost-env", &trainer.Trainer{Env: []corev1.EnvVar{env("OK", "1"), env("DMLC_NUM_WORKER", "2")}}),
			Errors:  []Violation{forbidden("spec.trainer.env[1]")},
			Message: "DMLC_NUM_WORKER is reserved for the XGBoost runtime",
		}, xgboost),
		withRuntime(Case{
			Name:    "TrainJob: xgboost numProcPerNode other than 1",
			Object:  of(xgboost, "xgboost-procs", &trainer.Trainer{NumProcPerNode: ptr.To[int32](2)}),
			Errors:  []Violation{invalid("spec.trainer.numProcPerNode")},
			Message: "does not support numProcPerNode 2",
		}, xgboost),
		withRuntime(Case{
			Name:    "TrainJob: mpi reserved OMPI_MCA_ env",
			Object:  of(mpi, "mpi-env", &trainer.Trainer{Env: []corev1.EnvVar{env("OMPI_MCA_orte_default_hostfile", "x")}}),
			Errors:  []Violation{invalid("spec.trainer.env")},
			Message: "must not have reserved envs, invalid envs configured: [OMPI_MCA_orte_default_hostfile]",
		}, mpi),
		withRuntime(Case{
			Name:    "TrainJob: mpi numNodes 2 with runLauncherAsNode and the launcher as the only node",
			Object:  of(launcherOnly, "mpi-nodes", &trainer.Trainer{NumNodes: ptr.To[int32](2)}),
			Errors:  []Violation{invalid("spec.trainer.numNodes")},
			Message: "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node",
		}, launcherOnly),
		withRuntime(Case{
			Name:    "TrainJob: mpi numNodes whose hostfile does not fit in its ConfigMap",
			Object:  of(mpiAsNode, "mpi-hostfile", &trainer.Trainer{NumNodes: ptr.To[int32](1<<31 - 1)}),
			Errors:  []Violation{invalid("spec.trainer.numNodes")},
			Message: "the MPI hostfile would list 2147483647 hosts in more than the 1048576 bytes a ConfigMap holds",
		}, mpiAsNode),
		withRuntime(Case{
			Name:    "TrainJob: jax numProcPerNode other than 1",
			Object:  of(jax, "jax-procs", &trainer.Trainer{NumProcPerNode: ptr.To[int32](4)}),
			Errors:  []Violation{invalid("spec.trainer.numProcPerNode")},
			Message: "does not support numProcPerNode 4",
		}, jax),
	)

	// A runtime that breaks a runtime rule (created past the runtime webhook) fails
	// every TrainJob of it, at spec.runtimeRef, naming the runtime's field.
	brokenRuntime := func(name string, spec *trainer.TrainingRuntimeSpec, message string) Case {
		rt := disabled(b.runtime(name, spec))
		return withRuntime(Case{
			Name:    "TrainJob: runtime " + name,
			Object:  of(rt, "of-"+name, nil),
			Errors:  []Violation{invalid("spec.runtimeRef")},
			Message: message,
		}, rt)
	}
	cases = append(cases,
		brokenRuntime("mpi-without-launcher", Skeleton(mpiPolicy(false)),
			`TrainingRuntime/mpi-without-launcher spec.template.spec.replicatedJobs: mlPolicy.mpi needs a replicatedJob named "launcher"`),
		brokenRuntime("flux-installer", edited(Skeleton(fluxPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "node").Template.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "flux-installer", Image: "busybox"}}
		}), "initContainers[name=flux-installer]: InitContainer 'flux-installer' is reserved"),
		brokenRuntime("flux-without-node", edited(Skeleton(fluxPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "node").Name = "trainer"
		}), `mlPolicy.flux runs a Flux broker in the "node" container`),
		brokenRuntime("trainer-without-node-container", edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "node").Template.Spec.Template.Spec.Containers[0].Name = "main"
		}), "must contain the required container for the ancestor: trainer"),
	)

	// Initializers: the runtime has the step spec.initializer asks for.
	noDataset := b.runtime("no-dataset-initializer", Without(Skeleton(torchPolicy), "dataset-initializer"))
	modelWithoutContainer := b.runtime("model-initializer-unlabelled", edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
		rj := ReplicatedJob(spec, "model-initializer")
		rj.Template.Labels = nil // else the runtime's step rule fires first
		rj.Template.Spec.Template.Spec.Containers[0].Name = "fetch"
	}))
	modelWithoutMount := b.runtime("model-initializer-without-mount", edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
		ReplicatedJob(spec, "model-initializer").Template.Spec.Template.Spec.Containers[0].VolumeMounts = nil
	}))
	withInitializer := func(tj *trainer.TrainJob, in trainer.Initializer) *trainer.TrainJob {
		tj.Spec.Initializer = &in
		return tj
	}
	cases = append(cases,
		withRuntime(Case{
			Name:    "TrainJob: dataset initializer without its replicatedJob",
			Object:  withInitializer(of(noDataset, "no-dataset-initializer", nil), trainer.Initializer{Dataset: &trainer.DatasetInitializer{}, Model: &trainer.ModelInitializer{}}),
			Errors:  []Violation{invalid("spec.initializer.dataset")},
			Message: "must have dataset-initializer job when trainJob is configured with input datasetConfig",
		}, noDataset),
		withRuntime(Case{
			Name:    "TrainJob: model initializer without its container",
			Object:  withInitializer(of(modelWithoutContainer, "no-model-container", nil), trainer.Initializer{Model: &trainer.ModelInitializer{}}),
			Errors:  []Violation{invalid("spec.initializer.model")},
			Message: "must have container with name - model-initializer in the model-initializer job",
		}, modelWithoutContainer),
		withRuntime(Case{
			Name:   "TrainJob: model initializer without the initializer volume mount: a warning (upstream denies)",
			Object: withInitializer(of(modelWithoutMount, "no-model-mount", nil), trainer.Initializer{Model: &trainer.ModelInitializer{}}),
			Warnings: []string{`spec.initializer.model: the "model-initializer" container of runtime TrainingRuntime/model-initializer-without-mount ` +
				`mounts no volume "initializer"`},
		}, modelWithoutMount),
	)

	// Volcano: the queue annotation is not empty; the pods' PriorityClass exists.
	high := b.priorityClass("high")
	emptyQueue := b.runtime("volcano-empty-queue", volcanoRuntime(map[string]string{VolcanoQueueAnnotation: ""}, ""))
	queue := b.runtime("volcano-queue", volcanoRuntime(map[string]string{VolcanoQueueAnnotation: "a"}, ""))
	missingClass := b.runtime("volcano-missing-class", volcanoRuntime(nil, b.clusterName("missing")))
	presentClass := b.runtime("volcano-class", volcanoRuntime(map[string]string{VolcanoQueueAnnotation: "a"}, high.Name))
	systemClass := b.runtime("volcano-system-class", volcanoRuntime(nil, "system-node-critical"))
	cases = append(cases,
		withRuntime(Case{
			Name:    "TrainJob: Volcano queue annotation empty in the runtime",
			Object:  of(emptyQueue, "volcano-empty-queue", nil),
			Errors:  []Violation{invalid("spec.runtimeRef")},
			Message: "spec.template.metadata.annotations[scheduling.volcano.sh/queue-name]: Volcano queue name must not be empty",
		}, emptyQueue),
		withRuntime(Case{
			Name: "TrainJob: Volcano queue annotation empty in a runtimePatch",
			Object: func() *trainer.TrainJob {
				obj := of(queue, "volcano-patch-empty-queue", nil)
				obj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "example.io/q", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
					Template: &trainer.JobSetTemplatePatch{Metadata: &metav1.ObjectMeta{Annotations: map[string]string{VolcanoQueueAnnotation: ""}}}}}}
				return obj
			}(),
			Errors:  []Violation{invalid("spec.runtimePatches[manager=example.io/q].trainingRuntimeSpec.template.metadata.annotations[scheduling.volcano.sh/queue-name]")},
			Message: "Volcano queue name must not be empty",
		}, queue),
		withRuntime(Case{
			Name:    "TrainJob: Volcano PriorityClass missing",
			Object:  of(missingClass, "volcano-missing-class", nil),
			Errors:  []Violation{invalid("spec.runtimeRef")},
			Message: `PriorityClass "` + b.clusterName("missing") + `" doesn't exist`,
		}, missingClass),
		withRuntime(Case{
			Name:   "TrainJob: Volcano PriorityClass present: admitted",
			Object: of(presentClass, "volcano-class", nil),
		}, high, presentClass),
		withRuntime(Case{
			Name:   "TrainJob: Volcano system PriorityClass: admitted",
			Object: of(systemClass, "volcano-system-class", nil),
		}, systemClass),
	)
	return append(cases, torchtuneCases(b)...)
}

// sharedClaimRuntime is the skeleton whose trainer's "node" container uses the shared
// ResourceClaim "shared" (claim "gpu"): its GPUs per node cannot be derived.
func sharedClaimRuntime() *trainer.TrainingRuntimeSpec {
	return edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
		pod := &ReplicatedJob(spec, "node").Template.Spec.Template.Spec
		pod.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared")}}
		pod.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	})
}

// volcanoRuntime is the skeleton with Volcano, the JobSet annotations and the
// trainer's priorityClassName.
func volcanoRuntime(annotations map[string]string, priorityClass string) *trainer.TrainingRuntimeSpec {
	return edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
		spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{}}}
		spec.Template.Annotations = annotations
		ReplicatedJob(spec, "node").Template.Spec.Template.Spec.PriorityClassName = priorityClass
	})
}

// torchtuneCases are upstream's torchtune rules (docs/compatibility.md#torchtune): a
// TrainJob running [tune run] on a runtime named like upstream's torchtune runtimes.
func torchtuneCases(b builder) []Case {
	gpus := func(n string) *corev1.ResourceRequirements {
		return &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}}
	}
	c := func(rule, runtimeName, name string, edit func(*trainer.Trainer), errs []Violation, message string) Case {
		rt := b.runtime(runtimeName, Skeleton(torchPolicy))
		t := &trainer.Trainer{Command: []string{"tune", "run"}}
		if edit != nil {
			edit(t)
		}
		return Case{Name: "TrainJob: torchtune " + rule, Existing: []Object{rt}, Object: b.trainJob(name, runtimeName, t), Errors: errs, Message: message}
	}
	return []Case{
		c("supported model: admitted", "torchtune-llama3.2-1b", "tune-supported", nil, nil, ""),
		c("unsupported model", "torchtune-mistral-7b", "tune-unsupported", nil, []Violation{invalid("spec.runtimeRef.name")},
			`must have a supported pretrained model, invalid model configured: "mistral/7B"`),
		c("several nodes for a small model", "torchtune-llama3.2-3b", "tune-small-multi-node", func(t *trainer.Trainer) { t.NumNodes = ptr.To[int32](2) },
			[]Violation{invalid("spec.trainer.numNodes")}, "must be 1 for llama3_2/3B model"),
		c("several nodes for 70B: admitted", "torchtune-llama3.3-70b", "tune-70b-multi-node", func(t *trainer.Trainer) { t.NumNodes = ptr.To[int32](2) }, nil, ""),
		c("LoRA on several nodes", "torchtune-llama3.3-70b", "tune-lora-multi-node", func(t *trainer.Trainer) {
			t.NumNodes = ptr.To[int32](2)
			t.Args = []string{"model.lora_attn_modules=[q_proj]"}
		}, []Violation{invalid("spec.trainer.numNodes")}, "LoRA fine-tuning is not supported for multi-node training in TorchTune"),
		c("QLoRA on qwen", "torchtune-qwen2.5-1.5b", "tune-qlora-qwen", func(t *trainer.Trainer) { t.Args = []string{"model.quantize_base=True"} },
			[]Violation{invalid("spec.runtimeRef.name")}, "QLoRA is not supported for qwen2_5/1.5B model"),
		c("distributed QLoRA on llama 1B", "torchtune-llama3.2-1b", "tune-qlora-distributed", func(t *trainer.Trainer) {
			t.Args = []string{"model.quantize_base=true"}
			t.ResourcesPerNode = gpus("2")
		}, []Violation{invalid("spec.trainer.numProcPerNode"), invalid("spec.trainer.resourcesPerNode")},
			"must be auto or 1 for llama3_2/1B model when using QLoRA"),
		c("single-device QLoRA on llama 1B: admitted", "torchtune-llama3.2-1b", "tune-qlora-single", func(t *trainer.Trainer) {
			t.Args = []string{"model.quantize_base=true"}
			t.ResourcesPerNode = gpus("1")
		}, nil, ""),
		c("runtime-managed arg", "torchtune-llama3.2-1b", "tune-managed-arg", func(t *trainer.Trainer) { t.Args = []string{"epochs=1", "output_dir=/tmp"} },
			[]Violation{invalid("spec.trainer.args[1]")}, `must not set immutable config "output_dir" in trainer args`),
	}
}

// RuntimeCases are the rules of the TrainingRuntime and ClusterTrainingRuntime webhooks
// (package admission's ValidateRuntimeSpec), each proven for both kinds, and the
// deprecation warning of a ClusterTrainingRuntime's creation.
func RuntimeCases(namespace string) []Case {
	b := builder{ns: namespace}
	const rjs = "spec.template.spec.replicatedJobs"
	type rule struct {
		name, object string
		spec         *trainer.TrainingRuntimeSpec
		errs         []Violation
		message      string
	}
	rules := []rule{
		{name: "skeleton: admitted", object: "skeleton", spec: Skeleton(torchPolicy)},
		{name: "no mlPolicy: admitted", object: "no-policy", spec: Skeleton(nil)},
		{name: "flux: admitted", object: "flux", spec: Skeleton(fluxPolicy)},
		{name: "mpi with launcher and node: admitted", object: "mpi", spec: WithLauncher(Skeleton(mpiPolicy(false)))},
		{name: "mpi launcher only, as node: admitted", object: "mpi-launcher-as-node", spec: Without(WithLauncher(Skeleton(mpiPolicy(true))), "node")},
		{name: "unlabelled replicatedJob with replicas 2: admitted", object: "launcher-replicas", spec: edited(WithLauncher(Skeleton(torchPolicy)), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "launcher").Replicas = 2
		})},
		{name: "trainer step with replicas 2", object: "trainer-replicas", spec: edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "node").Replicas = 2
		}), errs: []Violation{invalid(rjs + "[name=node].replicas")}, message: "always must be 1"},
		{name: "dataset-initializer step with replicas 3", object: "initializer-replicas", spec: edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "dataset-initializer").Replicas = 3
		}), errs: []Violation{invalid(rjs + "[name=dataset-initializer].replicas")}, message: "always must be 1"},
		{name: "model-initializer step with replicas 2", object: "model-initializer-replicas", spec: edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "model-initializer").Replicas = 2
		}), errs: []Violation{invalid(rjs + "[name=model-initializer].replicas")}, message: "always must be 1"},
		{name: "dataset-initializer step without its container", object: "initializer-container", spec: edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "dataset-initializer").Template.Spec.Template.Spec.Containers[0].Name = "fetch"
		}), errs: []Violation{invalid(rjs + "[name=dataset-initializer].template.spec.template.spec.containers")},
			message: "must contain the required container for the ancestor: dataset-initializer"},
		{name: "trainer step without the node container", object: "trainer-container", spec: edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "node").Template.Spec.Template.Spec.Containers[0].Name = "main"
		}), errs: []Violation{invalid(rjs + "[name=node].template.spec.template.spec.containers")},
			message: "must contain the required container for the ancestor: trainer"},
		{name: "no trainer step", object: "no-trainer", spec: edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			node := ReplicatedJob(spec, "node")
			node.Name, node.Template.Labels = "worker", nil
		}), errs: []Violation{invalid(rjs)}, message: "no replicatedJob is the trainer step"},
		{name: "mpi without launcher nor node", object: "mpi-without-launcher", spec: Without(Skeleton(mpiPolicy(false)), "node"),
			errs: []Violation{invalid(rjs), invalid(rjs)}, message: "set mlPolicy.mpi.runLauncherAsNode to true"},
		{name: "flux declaring the init container flux-installer", object: "flux-installer", spec: edited(Skeleton(fluxPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "node").Template.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "flux-installer", Image: "busybox"}}
		}), errs: []Violation{invalid(rjs + "[name=node].template.spec.template.spec.initContainers[name=flux-installer]")},
			message: "InitContainer 'flux-installer' is reserved"},
		{name: "flux without the replicatedJob node", object: "flux-without-node", spec: edited(Skeleton(fluxPolicy), func(spec *trainer.TrainingRuntimeSpec) {
			ReplicatedJob(spec, "node").Name = "trainer"
		}), errs: []Violation{invalid(rjs)}, message: `mlPolicy.flux runs a Flux broker in the "node" container`},
		{name: "torch envInjection target container missing", object: "env-injection", spec: Skeleton(policy(trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{
			EnvInjection: &trainer.EnvInjection{Targets: []trainer.EnvInjectionTarget{{JobName: "node", ContainerNames: []string{"sidecar"}}}}}})),
			errs:    []Violation{invalid("spec.mlPolicy.torch.envInjection.targets[jobName=node].containerNames[0]")},
			message: `envInjection target podSet "node" container "sidecar" not found in runtime template`},
	}
	var cases []Case
	for _, r := range rules {
		cases = append(cases,
			Case{Name: "TrainingRuntime: " + r.name, Object: b.runtime("rt-"+r.object, r.spec.DeepCopy()), Errors: r.errs, Message: r.message},
			Case{Name: "ClusterTrainingRuntime: " + r.name, Object: b.clusterRuntime("rt-"+r.object, r.spec.DeepCopy()), Errors: r.errs, Message: r.message})
	}
	bad := edited(Skeleton(torchPolicy), func(spec *trainer.TrainingRuntimeSpec) { ReplicatedJob(spec, "node").Replicas = 2 })
	deprecated := b.clusterRuntime("rt-deprecated", Skeleton(torchPolicy))
	deprecated.Labels = map[string]string{trainer.LabelSupport: trainer.SupportDeprecated}
	return append(cases,
		Case{Name: "TrainingRuntime: labelled webhook-validation=disabled: admitted unchecked", Object: disabled(b.runtime("rt-disabled", bad))},
		Case{Name: "ClusterTrainingRuntime: labelled webhook-validation=disabled: admitted unchecked", Object: disabled(b.clusterRuntime("rt-disabled", bad.DeepCopy()))},
		Case{
			Name:   "ClusterTrainingRuntime: deprecated: a warning",
			Object: deprecated,
			Warnings: []string{`ClusterTrainingRuntime "` + deprecated.Name + `" is deprecated and will be removed in a future release of Kubeflow Trainer. ` +
				"See runtime deprecation policy: https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"},
		},
	)
}
