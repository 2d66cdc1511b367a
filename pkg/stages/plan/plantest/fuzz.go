package plantest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// FuzzInput is a runtime and a TrainJob for it, each one YAML document with apiVersion,
// kind and metadata: a seed of the fuzz targets that build plans or review objects
// (packages mergepatches, mlpolicy, render, admission).
type FuzzInput struct {
	// Name says where the seed comes from, e.g. "upstream runtimes/mpi_distributed.yaml#0
	// + minimal" or "skeleton MPI + runtime patches".
	Name              string
	Runtime, TrainJob []byte
}

// FuzzInputs returns the seeds of the plan-building fuzz targets:
//
//   - hand-written edge cases: the skeleton runtime (SkeletonRuntime) with each ML policy
//     and gang-scheduling policy, each with TrainJobs that set every field the merge and
//     the policies read (runtimePatches on every patchable pod field, DRA claims,
//     resources, initializers, numNodes 0, numProcPerNode, patches naming what the runtime
//     lacks);
//   - every runtime under shared/upstream with each upstream example TrainJob that
//     references it, or a minimal TrainJob when none does. These are read in place at
//     test time, never copied into the repository; when shared/upstream is absent the
//     reason is logged and only the hand-written seeds are returned, so the fuzz target
//     and its regression seeds still run.
func FuzzInputs(tb testing.TB) []FuzzInput {
	tb.Helper()
	var out []FuzzInput
	trainJobs := handTrainJobs()
	for _, rt := range handRuntimes() {
		rtDoc := mustYAML(tb, rt.obj)
		for _, tj := range trainJobs {
			out = append(out, FuzzInput{Name: "skeleton " + rt.name + " + " + tj.name, Runtime: rtDoc, TrainJob: mustYAML(tb, tj.obj)})
		}
	}
	out = append(out, FuzzInput{Name: "duplicates", Runtime: []byte(duplicatesRuntime), TrainJob: []byte(duplicatesTrainJob)})
	if dir, why := utiltesting.LookupUpstreamDir(tb); dir == "" {
		tb.Logf("fuzz seeds: skipping the upstream runtimes and TrainJobs: %s", why)
		return out
	}
	runtimes := utiltesting.UpstreamDocuments(tb, trainer.ClusterTrainingRuntimeKind, trainer.TrainingRuntimeKind)
	examples := utiltesting.UpstreamDocuments(tb, trainer.TrainJobKind)
	for _, doc := range runtimes {
		var rt trainer.ClusterTrainingRuntime // both kinds share the spec
		if err := yaml.Unmarshal(doc.JSON, &rt); err != nil {
			tb.Fatalf("%s: %v", doc.Name(), err)
		}
		rtDoc := jsonToYAML(tb, doc.JSON)
		found := false
		for _, ex := range examples {
			var tj trainer.TrainJob
			if err := yaml.Unmarshal(ex.JSON, &tj); err != nil {
				tb.Fatalf("%s: %v", ex.Name(), err)
			}
			if tj.Spec.RuntimeRef.Name != rt.Name || ptr.Deref(tj.Spec.RuntimeRef.Kind, trainer.ClusterTrainingRuntimeKind) != doc.Kind {
				continue
			}
			found = true
			out = append(out, FuzzInput{Name: "upstream " + doc.Name() + " + " + ex.Name(), Runtime: rtDoc, TrainJob: jsonToYAML(tb, ex.JSON)})
		}
		if !found {
			tj := TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](2)})
			tj.Spec.RuntimeRef.Kind = ptr.To(doc.Kind)
			if strings.HasPrefix(rt.Name, "torchtune-") {
				tj.Spec.Trainer = &trainer.Trainer{Command: []string{"tune", "run"}}
			}
			out = append(out, FuzzInput{Name: "upstream " + doc.Name() + " + minimal", Runtime: rtDoc, TrainJob: mustYAML(tb, tj)})
		}
	}
	return out
}

// DecodeFuzzInput decodes the documents of a FuzzInput (or what a fuzzer made of one):
// runtime as a TrainingRuntime when its kind says so, else as a ClusterTrainingRuntime,
// and the TrainJob, with namespace TrainJobNamespace and uid TrainJobUID when unset.
// Decoding is not strict: a field name the fuzzer mutated is ignored and the rest of
// the document still explores the code. ok is false when either does not decode or
// the CRDs would refuse them (CRDRefuses).
func DecodeFuzzInput(runtime, trainJob []byte) (*trainer.TrainJob, plan.Runtime, bool) {
	var rt trainer.ClusterTrainingRuntime
	if err := yaml.Unmarshal(runtime, &rt); err != nil {
		return nil, plan.Runtime{}, false
	}
	tj := new(trainer.TrainJob)
	if err := yaml.Unmarshal(trainJob, tj); err != nil {
		return nil, plan.Runtime{}, false
	}
	if tj.Namespace == "" {
		tj.Namespace = TrainJobNamespace
	}
	if tj.UID == "" {
		tj.UID = TrainJobUID
	}
	kind := trainer.ClusterTrainingRuntimeKind
	if rt.Kind == trainer.TrainingRuntimeKind {
		kind = trainer.TrainingRuntimeKind
	}
	if CRDRefuses(tj, &rt.Spec) {
		return nil, plan.Runtime{}, false
	}
	return tj, plan.Runtime{Kind: kind, Name: rt.Name, Spec: &rt.Spec}, true
}

// CRDRefuses reports whether the API server would refuse tj or a runtime with spec
// (either may be nil) by the CRDs' own rules, before any webhook or stage sees them,
// for the rules the stages rely on: counts (spec.trainer.numNodes >= 0,
// numProcPerNode >= 1, the MPI and Flux policies' numProcPerNode >= 1), one ML
// policy and one gang-scheduling policy per runtime, and unique replicatedJob names
// (a list-map key). The fuzz targets skip such inputs: the controller never gets them. (The offline renderer does, from files: it does not
// check the CRD schemas, and renders, e.g., numNodes -1 as parallelism -1.)
func CRDRefuses(tj *trainer.TrainJob, spec *trainer.TrainingRuntimeSpec) bool {
	if tj != nil && tj.Spec.Trainer != nil {
		t := tj.Spec.Trainer
		if (t.NumNodes != nil && *t.NumNodes < 0) || (t.NumProcPerNode != nil && *t.NumProcPerNode < 1) {
			return true
		}
	}
	if spec == nil {
		return false
	}
	if p := spec.MLPolicy; p != nil {
		if countTrue(p.Torch != nil, p.MPI != nil, p.JAX != nil, p.XGBoost != nil, p.Flux != nil) > 1 ||
			(p.MPI != nil && p.MPI.NumProcPerNode != nil && *p.MPI.NumProcPerNode < 1) ||
			(p.Flux != nil && p.Flux.NumProcPerNode != nil && *p.Flux.NumProcPerNode < 1) {
			return true
		}
	}
	if g := spec.PodGroupPolicy; g != nil && countTrue(g.Coscheduling != nil, g.Volcano != nil, g.KAIScheduler != nil, g.Workload != nil) > 1 {
		return true
	}
	// replicatedJobs is a list-map keyed by name (x-kubernetes-list-type: map): the API
	// server refuses two entries with the same name.
	names := map[string]bool{}
	for _, rj := range spec.Template.Spec.ReplicatedJobs {
		if names[rj.Name] {
			return true
		}
		names[rj.Name] = true
	}
	return false
}

// duplicatesRuntime and duplicatesTrainJob repeat every list-map key the strategic merge
// and the ML policies merge by (containers, env, volumes, volumeMounts, resource
// claims, replicatedJob patches), in the runtime, the patches and spec.trainer, and leave
// keys empty.
const (
	duplicatesRuntime = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: test-runtime, namespace: default}
spec:
  mlPolicy: {torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                volumes: [{name: a, emptyDir: {}}, {name: a, emptyDir: {}}]
                resourceClaims: [{name: g, resourceClaimTemplateName: t}, {name: g, resourceClaimName: c}]
                containers:
                - name: node
                  image: main
                  env: [{name: A, value: "1"}, {name: A, value: "2"}, {name: PET_NNODES, value: "9"}]
                  ports: [{containerPort: 29500}, {containerPort: 29500, name: x}]
                  volumeMounts: [{name: a, mountPath: /a}, {name: a, mountPath: /a}]
                  resources: {claims: [{name: g}, {name: g}]}
                - {name: node, image: other}
`
	duplicatesTrainJob = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: test-job, namespace: default}
spec:
  runtimeRef: {name: test-runtime, kind: TrainingRuntime}
  trainer:
    env: [{name: A}, {name: A, value: x}]
    resourcesPerNode: {limits: {cpu: "1", nvidia.com/gpu: "2"}, claims: [{name: g}, {name: g}]}
    numNodes: 2
  runtimePatches:
  - manager: example.com/a
    trainingRuntimeSpec:
      template:
        spec:
          replicatedJobs:
          - name: node
            template:
              spec:
                template:
                  spec:
                    volumes: [{name: a, hostPath: {path: /x}}, {name: a, emptyDir: {}}, {name: ""}]
                    resourceClaims: [{name: g, resourceClaimName: z}, {name: g}]
                    containers:
                    - {name: node, volumeMounts: [{name: b, mountPath: /a}, {name: c, mountPath: ""}], resources: {claims: [{name: g}, {name: h}]}}
                    - {name: node, securityContext: {privileged: false}}
          - name: node
            template:
              spec:
                template:
                  spec:
                    tolerations: [{key: a}, {key: a}]
                    containers: [{name: node}]
  - manager: example.com/a
    trainingRuntimeSpec: {template: {metadata: {labels: {a: b}}}}
`
)

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func mustYAML(tb testing.TB, obj any) []byte {
	tb.Helper()
	out, err := yaml.Marshal(obj)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func jsonToYAML(tb testing.TB, js []byte) []byte {
	tb.Helper()
	out, err := yaml.JSONToYAML(js)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

type namedObject struct {
	name string
	obj  any
}

// handRuntimes are the skeleton runtime with each ML policy and each gang-scheduling
// policy, as TrainingRuntime objects.
func handRuntimes() []namedObject {
	policies := []struct {
		name   string
		policy *trainer.MLPolicy
	}{
		{"no mlPolicy", nil},
		{"PlainML", &trainer.MLPolicy{NumNodes: ptr.To[int32](3)}},
		{"Torch", &trainer.MLPolicy{NumNodes: ptr.To[int32](2), MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}}},
		{"Torch envInjection", &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{
			EnvInjection: &trainer.EnvInjection{Targets: []trainer.EnvInjectionTarget{{JobName: "dataset-initializer", ContainerNames: []string{"dataset-initializer"}}}},
		}}}},
		{"MPI OpenMPI", &trainer.MLPolicy{NumNodes: ptr.To[int32](2), MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{
			NumProcPerNode: ptr.To[int32](2), MPIImplementation: ptr.To(trainer.MPIImplementationOpenMPI),
			SSHAuthMountPath: ptr.To("/home/mpiuser/.ssh"), RunLauncherAsNode: ptr.To(true),
		}}}},
		{"MPI Intel", &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{
			MPIImplementation: ptr.To(trainer.MPIImplementationIntel),
		}}}},
		{"MPI MPICH", &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{
			MPIImplementation: ptr.To(trainer.MPIImplementationMPICH), NumProcPerNode: ptr.To[int32](4),
		}}}},
		{"JAX", &trainer.MLPolicy{NumNodes: ptr.To[int32](2), MLPolicySource: trainer.MLPolicySource{JAX: &trainer.JAXMLPolicySource{}}}},
		{"XGBoost", &trainer.MLPolicy{NumNodes: ptr.To[int32](2), MLPolicySource: trainer.MLPolicySource{XGBoost: &trainer.XGBoostMLPolicySource{}}}},
		{"Flux", &trainer.MLPolicy{NumNodes: ptr.To[int32](2), MLPolicySource: trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{NumProcPerNode: ptr.To[int32](2)}}}},
	}
	torch := &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}}
	gangs := []struct {
		name   string
		policy *trainer.PodGroupPolicy
	}{
		{"Torch coscheduling", &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
			Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To[int32](60)}}}},
		{"Torch volcano", &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
			Volcano: &trainer.VolcanoPodGroupPolicySource{NetworkTopology: &trainer.NetworkTopologySpec{Mode: trainer.NetworkTopologyModeHard, HighestTierAllowed: ptr.To(2)}}}}},
		{"Torch kai", &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
			KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{Queue: "research"}}}},
		{"Torch workload", &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
			Workload: &trainer.WorkloadPodGroupPolicySource{}}}},
	}
	var out []namedObject
	add := func(name string, policy *trainer.MLPolicy, gang *trainer.PodGroupPolicy) {
		rt := SkeletonRuntime(policy)
		spec := rt.Spec.DeepCopy()
		spec.PodGroupPolicy = gang
		if policy != nil && policy.MPI != nil {
			// MPI needs a launcher: a copy of node without the ancestor label.
			for _, rj := range spec.Template.Spec.ReplicatedJobs {
				if rj.Name == trainer.ReplicatedJobNode {
					launcher := *rj.DeepCopy()
					launcher.Name, launcher.Template.Labels = trainer.ReplicatedJobLauncher, nil
					spec.Template.Spec.ReplicatedJobs = append(spec.Template.Spec.ReplicatedJobs, launcher)
					break
				}
			}
		}
		out = append(out, namedObject{name: name, obj: &trainer.TrainingRuntime{
			TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainingRuntimeKind},
			ObjectMeta: metav1.ObjectMeta{Name: RuntimeName, Namespace: TrainJobNamespace},
			Spec:       *spec,
		}})
	}
	for _, p := range policies {
		add(p.name, p.policy, nil)
	}
	for _, g := range gangs {
		add(g.name, torch, g.policy)
	}
	return out
}

// handTrainJobs are TrainJobs for the skeleton runtime that together set every field
// the merge and the ML policies read.
func handTrainJobs() []namedObject {
	base := func() *trainer.TrainJob {
		tj := TrainJob(RuntimeName, nil)
		tj.Spec.RuntimeRef.Kind = ptr.To(trainer.TrainingRuntimeKind)
		tj.UID = ""
		return tj
	}
	var out []namedObject
	add := func(name string, mutate func(tj *trainer.TrainJob)) {
		tj := base()
		mutate(tj)
		out = append(out, namedObject{name: name, obj: tj})
	}
	add("runtimeRef only", func(*trainer.TrainJob) {})
	add("trainer", func(tj *trainer.TrainJob) {
		tj.Generation = 3
		tj.Spec.Suspend = ptr.To(true)
		tj.Spec.Trainer = &trainer.Trainer{
			Image: ptr.To("example.com/train:v2"), Command: []string{"torchrun"}, Args: []string{"train.py", "--epochs=3"},
			Env:            []corev1.EnvVar{Env("LR", "0.1"), {Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			NumNodes:       ptr.To[int32](4),
			NumProcPerNode: ptr.To[int32](2),
			ResourcesPerNode: &corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")},
			},
		}
	})
	add("zero nodes, empty command", func(tj *trainer.TrainJob) {
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](0), Command: []string{}, Args: []string{}}
	})
	add("cpu only", func(tj *trainer.TrainJob) {
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](3), ResourcesPerNode: &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2500m")},
		}}
	})
	add("initializers", func(tj *trainer.TrainJob) {
		tj.Spec.Initializer = &trainer.Initializer{
			Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://tatsu-lab/alpaca"), Env: []corev1.EnvVar{Env("A", "1")},
				SecretRef: &corev1.LocalObjectReference{Name: "hf-token"}},
			Model: &trainer.ModelInitializer{StorageUri: ptr.To(""), Env: []corev1.EnvVar{Env(trainer.EnvStorageURI, "s3://x")}},
		}
	})
	add("runtime patches", func(tj *trainer.TrainJob) {
		tj.Spec.RuntimePatches = []trainer.RuntimePatch{
			{Manager: "kueue.x-k8s.io/manager", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
				Metadata: &metav1.ObjectMeta{Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "x"}},
				Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
					Name: trainer.ReplicatedJobNode,
					Template: &trainer.JobTemplatePatch{
						Metadata: &metav1.ObjectMeta{Labels: map[string]string{"job": "label"}},
						Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{
							Metadata: &metav1.ObjectMeta{Annotations: map[string]string{"pod": "annotation"}},
							Spec: &trainer.PodSpecPatch{
								ServiceAccountName: ptr.To("trainer"),
								Volumes:            []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
								Containers: []trainer.ContainerPatch{{
									Name:         trainer.ContainerNode,
									VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}},
									Resources: &corev1.ResourceRequirements{
										Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")},
										Claims: []corev1.ResourceClaim{{Name: "gpu", Request: "a"}},
									},
									SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
								}},
								ImagePullSecrets:              []corev1.LocalObjectReference{{Name: "pull"}},
								SecurityContext:               &corev1.PodSecurityContext{FSGroup: ptr.To[int64](1000)},
								NodeSelector:                  map[string]string{"pool": "gpu"},
								Tolerations:                   []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
								SchedulingGates:               []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}},
								TerminationGracePeriodSeconds: ptr.To[int64](30),
								ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpus")}},
								Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
									NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
								}}},
							},
						}},
					},
				}}},
			}}},
			{Manager: "example.com/second", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
				Metadata: &metav1.ObjectMeta{Labels: map[string]string{"team": "b"}},
				Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
					Name: trainer.AncestorDatasetInitializer,
					Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: &trainer.PodSpecPatch{
						Containers: []trainer.ContainerPatch{{Name: trainer.ContainerDatasetInitializer,
							VolumeMounts: []corev1.VolumeMount{{Name: "initializer", MountPath: "/cache", ReadOnly: true}}}},
						NodeSelector: map[string]string{"pool": "cpu"},
					}}}},
				}}},
			}}},
		}
	})
	add("patch of what the runtime lacks", func(tj *trainer.TrainJob) {
		tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "example.com/x", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
			Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{
				{Name: "missing"},
				{Name: trainer.ReplicatedJobNode, Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: &trainer.PodSpecPatch{
					Containers:     []trainer.ContainerPatch{{Name: "sidecar"}},
					InitContainers: []trainer.ContainerPatch{{Name: "init"}},
				}}}}},
			}},
		}}}}
	})
	add("managed elsewhere", func(tj *trainer.TrainJob) {
		tj.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](1)}
	})
	add("numNodes 64", func(tj *trainer.TrainJob) {
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](64), NumProcPerNode: ptr.To[int32](1)}
	})
	return out
}
