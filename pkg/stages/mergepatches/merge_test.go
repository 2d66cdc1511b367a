package mergepatches

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// wantJobSet is the JobSet Merge builds from rt for the plantest TrainJob without
// patches or overrides: rt's spec, counts per replicatedJob name (default 1),
// suspend false, owned by the TrainJob.
func wantJobSet(rt plan.Runtime, counts map[string]int32) *jobsetv1alpha2.JobSet {
	js := &jobsetv1alpha2.JobSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      plantest.TrainJobName,
			Namespace: plantest.TrainJobNamespace,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "trainer.kubeflow.org/v1alpha1",
				Kind:               "TrainJob",
				Name:               plantest.TrainJobName,
				UID:                plantest.TrainJobUID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: *rt.Spec.Template.Spec.DeepCopy(),
	}
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		n, ok := counts[rj.Name]
		if !ok {
			n = 1
		}
		rj.Template.Spec.Parallelism = ptr.To(n)
		rj.Template.Spec.Completions = ptr.To(n)
	}
	js.Spec.Suspend = ptr.To(false)
	return js
}

func pod(js *jobsetv1alpha2.JobSet, rj string) *corev1.PodSpec {
	return plan.PodSpec(plan.ReplicatedJob(js, rj))
}

func container(js *jobsetv1alpha2.JobSet, rj, name string) *corev1.Container {
	return plan.Container(pod(js, rj).Containers, name)
}

func patchEntry(manager string, rjps ...trainer.ReplicatedJobPatch) trainer.RuntimePatch {
	return trainer.RuntimePatch{
		Manager: manager,
		TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
			Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: rjps},
		}},
	}
}

func podPatch(rj string, spec trainer.PodSpecPatch) trainer.ReplicatedJobPatch {
	return trainer.ReplicatedJobPatch{Name: rj, Template: &trainer.JobTemplatePatch{
		Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: &spec}},
	}}
}

func quantities(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func mustMerge(t *testing.T, tj *trainer.TrainJob, rt plan.Runtime) *jobsetv1alpha2.JobSet {
	t.Helper()
	js, err := Merge(tj, rt)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	return js
}

// Case 2 of docs/compatibility.md#upstream-test-cases: the TrainJob overrides image,
// command, args, resources and env of the trainer container; counts come from the
// runtime's mlPolicy.
func TestMergeCase2TrainerOverrides(t *testing.T) {
	rt := plantest.SkeletonRuntime(&trainer.MLPolicy{NumNodes: ptr.To[int32](100)})
	node := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
	node.Env = []corev1.EnvVar{plantest.Env("TRAIN_JOB", "original"), plantest.Env("RUNTIME", "test:runtime")}
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{
		Image:   ptr.To("test:trainjob"),
		Command: []string{"trainjob"},
		Args:    []string{"trainjob"},
		Env: []corev1.EnvVar{
			plantest.Env("TRAIN_JOB", "override"),
			plantest.Env("TRAIN_JOB_CUSTOM", "test:trainjob"),
		},
		ResourcesPerNode: &corev1.ResourceRequirements{Requests: quantities("cpu", "1")},
	})

	want := wantJobSet(rt, map[string]int32{"node": 100})
	c := container(want, "node", "node")
	c.Image = "test:trainjob"
	c.Command = []string{"trainjob"}
	c.Args = []string{"trainjob"}
	c.Env = []corev1.EnvVar{
		plantest.Env("TRAIN_JOB", "override"), // replaced in place
		plantest.Env("RUNTIME", "test:runtime"),
		plantest.Env("TRAIN_JOB_CUSTOM", "test:trainjob"), // appended
	}
	if diff := cmp.Diff(want, mustMerge(t, tj, rt)); diff != "" {
		t.Errorf("JobSet (-want +got):\n%s", diff)
	}
}

// Case 7 of docs/compatibility.md#upstream-test-cases: resourcesPerNode merges per
// resource name; keys only in the runtime are kept.
func TestMergeCase7Resources(t *testing.T) {
	rt := plantest.SkeletonRuntime(&trainer.MLPolicy{NumNodes: ptr.To[int32](1)})
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{
		NumNodes:         ptr.To[int32](1),
		ResourcesPerNode: &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "4")},
	})
	want := corev1.ResourceRequirements{
		Requests: quantities("cpu", "1"),
		Limits:   quantities("nvidia.com/gpu", "4"),
	}
	if diff := cmp.Diff(want, container(mustMerge(t, tj, rt), "node", "node").Resources); diff != "" {
		t.Errorf("node resources (-want +got):\n%s", diff)
	}
}

// Case 6 of docs/compatibility.md#upstream-test-cases: two managers patch two
// replicatedJobs; every patched field lands on its replicatedJob only, lists merge by
// their keys.
func TestMergeCase6TwoManagers(t *testing.T) {
	rt := plantest.SkeletonRuntime(&trainer.MLPolicy{NumNodes: ptr.To[int32](100)})
	initContainer := func(env ...corev1.EnvVar) corev1.Container {
		return corev1.Container{Name: "override-init-container", Image: "test:runtime", Env: env}
	}
	rjs := rt.Spec.Template.Spec.ReplicatedJobs
	datasetPod := &rjs[0].Template.Spec.Template.Spec
	datasetPod.InitContainers = []corev1.Container{
		initContainer(plantest.Env("INIT_ENV", "original_init"), plantest.Env("DATASET_PATH", "runtime")),
	}
	nodePod := &rjs[2].Template.Spec.Template.Spec
	nodePod.InitContainers = []corev1.Container{initContainer(plantest.Env("INIT_ENV", "original_init"))}
	nodePod.Containers[0].Env = []corev1.EnvVar{plantest.Env("TRAIN_JOB", "original")}
	nodePod.Containers = append(nodePod.Containers,
		plantest.Container("override-container", plantest.Env("CONTAINER_ENV", "original_container")))

	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key:      "topology.kubernetes.io/zone",
				Operator: corev1.NodeSelectorOpIn,
				Values:   []string{"antarctica-east1", "antarctica-west1"},
			}},
		}}},
	}}
	nodeSelector := map[string]string{"node.kubernetes.io/instance-type": "p5.48xlarge"}
	gates := []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	tolerations := []corev1.Toleration{{Key: "example.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	secretVolume := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name + "_name"}}}
	}
	claimVolume := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name + "_name"},
		}}
	}
	mounts := func(names ...string) []corev1.VolumeMount {
		var out []corev1.VolumeMount
		for _, n := range names {
			out = append(out, corev1.VolumeMount{Name: n, MountPath: "/" + n})
		}
		return out
	}

	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{
		Image:   ptr.To("test:trainjob"),
		Command: []string{"trainjob"},
		Args:    []string{"trainjob"},
	})
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{
		patchEntry("manager-1", podPatch("dataset-initializer", trainer.PodSpecPatch{
			InitContainers: []trainer.ContainerPatch{{
				Name: "override-init-container",
				Env:  []corev1.EnvVar{plantest.Env("INIT_ENV", "override_init"), plantest.Env("NEW_VALUE", "from_overrides")},
			}},
			Containers:      []trainer.ContainerPatch{{Name: "dataset-initializer", VolumeMounts: mounts("initializer_secret", "initializer_claim")}},
			Affinity:        affinity,
			NodeSelector:    nodeSelector,
			SchedulingGates: gates,
			Tolerations:     tolerations,
			Volumes:         []corev1.Volume{secretVolume("initializer_secret"), claimVolume("initializer_claim")},
		})),
		patchEntry("manager-2", podPatch("node", trainer.PodSpecPatch{
			ServiceAccountName: ptr.To("override-sa"),
			InitContainers: []trainer.ContainerPatch{{
				Name: "override-init-container",
				Env:  []corev1.EnvVar{plantest.Env("INIT_ENV", "override_init")},
			}},
			Containers: []trainer.ContainerPatch{
				{Name: "node", VolumeMounts: mounts("node_secret", "node_claim")},
				{Name: "override-container", Env: []corev1.EnvVar{plantest.Env("CONTAINER_ENV", "override_container")}},
			},
			Affinity:                      affinity,
			NodeSelector:                  nodeSelector,
			SchedulingGates:               gates,
			Tolerations:                   tolerations,
			ImagePullSecrets:              []corev1.LocalObjectReference{{Name: "registry-credential"}},
			TerminationGracePeriodSeconds: ptr.To[int64](300),
			Volumes:                       []corev1.Volume{secretVolume("node_secret"), claimVolume("node_claim")},
		})),
	}

	// Merged lists are in the order apimachinery's strategic merge gives them, as
	// upstream's (it interleaves the patch's entries with the runtime's by position).
	want := wantJobSet(rt, map[string]int32{"node": 100})
	ds := pod(want, "dataset-initializer")
	ds.InitContainers[0].Env = []corev1.EnvVar{
		plantest.Env("INIT_ENV", "override_init"),
		plantest.Env("NEW_VALUE", "from_overrides"),
		plantest.Env("DATASET_PATH", "runtime"),
	}
	ds.Containers[0].VolumeMounts = append(mounts("initializer_secret", "initializer_claim"), ds.Containers[0].VolumeMounts...)
	ds.Affinity = affinity
	ds.NodeSelector = nodeSelector
	ds.SchedulingGates = gates
	ds.Tolerations = tolerations
	ds.Volumes = append([]corev1.Volume{secretVolume("initializer_secret"), claimVolume("initializer_claim")}, ds.Volumes...)

	np := pod(want, "node")
	np.ServiceAccountName = "override-sa"
	np.InitContainers[0].Env = []corev1.EnvVar{plantest.Env("INIT_ENV", "override_init")}
	np.Containers[0].Image = "test:trainjob"
	np.Containers[0].Command = []string{"trainjob"}
	np.Containers[0].Args = []string{"trainjob"}
	np.Containers[0].VolumeMounts = append(mounts("node_secret", "node_claim"), np.Containers[0].VolumeMounts...)
	np.Containers[1].Env = []corev1.EnvVar{plantest.Env("CONTAINER_ENV", "override_container")}
	np.Affinity = affinity
	np.NodeSelector = nodeSelector
	np.SchedulingGates = gates
	np.Tolerations = tolerations
	np.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry-credential"}}
	np.TerminationGracePeriodSeconds = ptr.To[int64](300)
	np.Volumes = append([]corev1.Volume{secretVolume("node_secret"), claimVolume("node_claim")}, np.Volumes...)

	if diff := cmp.Diff(want, mustMerge(t, tj, rt)); diff != "" {
		t.Errorf("JobSet (-want +got):\n%s", diff)
	}
}

// Strategic-merge semantics of runtimePatches (docs/compatibility.md#the-build-model
// step 2).
func TestMergeRuntimePatchSemantics(t *testing.T) {
	toleration := func(key string) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists}
	}
	cases := map[string]struct {
		runtime func(*trainer.TrainingRuntimeSpec)
		patches []trainer.RuntimePatch
		want    func(*jobsetv1alpha2.JobSet)
	}{
		"later manager wins on the same nodeSelector key": {
			patches: []trainer.RuntimePatch{
				patchEntry("a.io/one", podPatch("node", trainer.PodSpecPatch{
					NodeSelector: map[string]string{"node.kubernetes.io/instance-type": "p5.48xlarge", "zone": "a"},
				})),
				patchEntry("b.io/two", podPatch("node", trainer.PodSpecPatch{
					NodeSelector: map[string]string{"node.kubernetes.io/instance-type": "p5en.48xlarge"},
				})),
			},
			want: func(js *jobsetv1alpha2.JobSet) {
				pod(js, "node").NodeSelector = map[string]string{"node.kubernetes.io/instance-type": "p5en.48xlarge", "zone": "a"}
			},
		},
		"tolerations replace the runtime's and earlier managers'": {
			runtime: func(s *trainer.TrainingRuntimeSpec) {
				s.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Tolerations = []corev1.Toleration{toleration("runtime")}
			},
			patches: []trainer.RuntimePatch{
				patchEntry("a.io/one", podPatch("node", trainer.PodSpecPatch{Tolerations: []corev1.Toleration{toleration("one")}})),
				patchEntry("b.io/two", podPatch("node", trainer.PodSpecPatch{Tolerations: []corev1.Toleration{toleration("two")}})),
			},
			want: func(js *jobsetv1alpha2.JobSet) {
				pod(js, "node").Tolerations = []corev1.Toleration{toleration("two")}
			},
		},
		"container env merges by name across managers": {
			runtime: func(s *trainer.TrainingRuntimeSpec) {
				p := &s.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec
				p.Containers = append(p.Containers, plantest.Container("sidecar", plantest.Env("A", "runtime"), plantest.Env("B", "runtime")))
			},
			patches: []trainer.RuntimePatch{
				patchEntry("a.io/one", podPatch("node", trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{
					Name: "sidecar", Env: []corev1.EnvVar{plantest.Env("B", "one"), plantest.Env("C", "one")},
				}}})),
				patchEntry("b.io/two", podPatch("node", trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{
					Name: "sidecar", Env: []corev1.EnvVar{plantest.Env("C", "two")},
				}}})),
			},
			want: func(js *jobsetv1alpha2.JobSet) {
				container(js, "node", "sidecar").Env = []corev1.EnvVar{
					plantest.Env("A", "runtime"), plantest.Env("B", "one"), plantest.Env("C", "two"),
				}
			},
		},
		"replicatedJobs keep the runtime order whatever the patch order": {
			patches: []trainer.RuntimePatch{
				patchEntry("a.io/one",
					podPatch("node", trainer.PodSpecPatch{ServiceAccountName: ptr.To("sa-node")}),
					podPatch("model-initializer", trainer.PodSpecPatch{ServiceAccountName: ptr.To("sa-model")}),
					podPatch("dataset-initializer", trainer.PodSpecPatch{ServiceAccountName: ptr.To("sa-dataset")}),
				),
			},
			want: func(js *jobsetv1alpha2.JobSet) {
				pod(js, "dataset-initializer").ServiceAccountName = "sa-dataset"
				pod(js, "model-initializer").ServiceAccountName = "sa-model"
				pod(js, "node").ServiceAccountName = "sa-node"
			},
		},
		"JobSet metadata overlays the runtime template's, later manager wins": {
			runtime: func(s *trainer.TrainingRuntimeSpec) {
				s.Template.Labels = map[string]string{"runtime": "yes", "conflict": "runtime"}
				s.Template.Annotations = map[string]string{"note": "runtime"}
			},
			patches: []trainer.RuntimePatch{
				{Manager: "a.io/one", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
					Metadata: &metav1.ObjectMeta{Labels: map[string]string{"conflict": "one", "one": "yes"}},
				}}},
				{Manager: "b.io/two", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
					Metadata: &metav1.ObjectMeta{
						Labels:      map[string]string{"conflict": "two"},
						Annotations: map[string]string{"note": "two"},
					},
				}}},
			},
			want: func(js *jobsetv1alpha2.JobSet) {
				js.Labels = map[string]string{"runtime": "yes", "conflict": "two", "one": "yes"}
				js.Annotations = map[string]string{"note": "two"}
			},
		},
		"Job and pod template metadata merge key by key": {
			patches: []trainer.RuntimePatch{
				patchEntry("a.io/one", trainer.ReplicatedJobPatch{Name: "node", Template: &trainer.JobTemplatePatch{
					Metadata: &metav1.ObjectMeta{Labels: map[string]string{"job": "one"}},
					Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{
						Metadata: &metav1.ObjectMeta{Annotations: map[string]string{"pod": "one"}},
					}},
				}}),
			},
			want: func(js *jobsetv1alpha2.JobSet) {
				rj := plan.ReplicatedJob(js, "node")
				rj.Template.Labels["job"] = "one"
				rj.Template.Spec.Template.Annotations = map[string]string{"pod": "one"}
			},
		},
		"a patch without spec only changes metadata": {
			patches: []trainer.RuntimePatch{{Manager: "kueue.x-k8s.io/manager"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := plantest.SkeletonRuntime(nil)
			if tc.runtime != nil {
				tc.runtime(rt.Spec)
			}
			tj := plantest.TrainJob(rt.Name, nil)
			tj.Spec.RuntimePatches = tc.patches
			want := wantJobSet(rt, nil)
			if tc.want != nil {
				tc.want(want)
			}
			if diff := cmp.Diff(want, mustMerge(t, tj, rt)); diff != "" {
				t.Errorf("JobSet (-want +got):\n%s", diff)
			}
		})
	}
}

// DRA extensions: pod resourceClaims merge by name, an entry replacing the runtime's
// wholesale; container resources merge per resource name and claims by name.
func TestMergeResourceClaims(t *testing.T) {
	rt := plantest.SkeletonRuntime(nil)
	nodePod := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec
	nodePod.ResourceClaims = []corev1.PodResourceClaim{
		{Name: "gpu", ResourceClaimTemplateName: ptr.To("runtime-gpu")},
		{Name: "nic", ResourceClaimTemplateName: ptr.To("runtime-nic")},
	}
	nodePod.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}, {Name: "nic"}}

	tj := plantest.TrainJob(rt.Name, nil)
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{
		patchEntry("a.io/one", podPatch("node", trainer.PodSpecPatch{
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: "gpu", ResourceClaimName: ptr.To("shared-gpu")},
				{Name: "fpga", ResourceClaimTemplateName: ptr.To("fpga")},
			},
			Containers: []trainer.ContainerPatch{{Name: "node", Resources: &corev1.ResourceRequirements{
				Limits:   quantities("memory", "1Gi"),
				Requests: quantities("cpu", "2"),
				Claims:   []corev1.ResourceClaim{{Name: "gpu", Request: "a100"}, {Name: "fpga"}},
			}}},
		})),
		patchEntry("b.io/two", podPatch("node", trainer.PodSpecPatch{
			Containers: []trainer.ContainerPatch{{Name: "node", Resources: &corev1.ResourceRequirements{
				Claims: []corev1.ResourceClaim{{Name: "extra"}},
			}}},
		})),
	}

	want := wantJobSet(rt, nil)
	wp := pod(want, "node")
	wp.ResourceClaims = []corev1.PodResourceClaim{ // in strategic-merge order
		{Name: "gpu", ResourceClaimName: ptr.To("shared-gpu")}, // replaced, not field-merged
		{Name: "fpga", ResourceClaimTemplateName: ptr.To("fpga")},
		{Name: "nic", ResourceClaimTemplateName: ptr.To("runtime-nic")},
	}
	wp.Containers[0].Resources = corev1.ResourceRequirements{
		Limits:   quantities("memory", "1Gi"),
		Requests: quantities("cpu", "2"),
		Claims:   []corev1.ResourceClaim{{Name: "gpu", Request: "a100"}, {Name: "nic"}, {Name: "fpga"}, {Name: "extra"}},
	}
	if diff := cmp.Diff(want, mustMerge(t, tj, rt)); diff != "" {
		t.Errorf("JobSet (-want +got):\n%s", diff)
	}
}

func TestMergeInvalidPatches(t *testing.T) {
	cases := map[string]struct {
		patch     trainer.ReplicatedJobPatch
		wantField string
		wantMsg   string
	}{
		"missing replicatedJob": {
			patch:     podPatch("foo", trainer.PodSpecPatch{ServiceAccountName: ptr.To("sa")}),
			wantField: "spec.runtimePatches[manager=example.io/x].trainingRuntimeSpec.template.spec.replicatedJobs[name=foo]",
			wantMsg:   `must not have replicated job that doesn't exist in the runtime job template: replicatedJob "foo" not found: the runtime TrainingRuntime/test-runtime has replicatedJobs [dataset-initializer model-initializer node]`,
		},
		"missing container": {
			patch:     podPatch("node", trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "sidecar"}}}),
			wantField: "spec.runtimePatches[manager=example.io/x].trainingRuntimeSpec.template.spec.replicatedJobs[name=node].template.spec.template.spec.containers[name=sidecar]",
			wantMsg:   `must not have container that doesn't exist in the runtime job node: container "sidecar" not found: replicatedJob "node" has containers [node]`,
		},
		"init container patched as a container's name": {
			patch:     podPatch("node", trainer.PodSpecPatch{InitContainers: []trainer.ContainerPatch{{Name: "node"}}}),
			wantField: "spec.runtimePatches[manager=example.io/x].trainingRuntimeSpec.template.spec.replicatedJobs[name=node].template.spec.template.spec.initContainers[name=node]",
			wantMsg:   `must not have initContainer that doesn't exist in the runtime job node: init container "node" not found: replicatedJob "node" has initContainers []`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := plantest.SkeletonRuntime(nil)
			tj := plantest.TrainJob(rt.Name, nil)
			tj.Spec.RuntimePatches = []trainer.RuntimePatch{patchEntry("example.io/x", tc.patch)}
			js, err := Merge(tj, rt)
			var invalid *plan.InvalidInputError
			if !errors.As(err, &invalid) {
				t.Fatalf("Merge() = %v, %v; want *plan.InvalidInputError", js, err)
			}
			if invalid.Field != tc.wantField {
				t.Errorf("Field = %q, want %q", invalid.Field, tc.wantField)
			}
			if !strings.HasPrefix(invalid.Message, tc.wantMsg) {
				t.Errorf("Message = %q, want prefix %q", invalid.Message, tc.wantMsg)
			}
			if !plan.IsInputError(err) {
				t.Errorf("IsInputError(%v) = false", err)
			}
		})
	}
}

// Counts before the ML policy (docs/compatibility.md#the-build-model step 4) and the
// parallelism sync (docs/compatibility.md#plugin-order); spec.trainer.numNodes is the
// ML policy's.
func TestMergeCounts(t *testing.T) {
	cases := map[string]struct {
		policy      *trainer.MLPolicy
		parallelism map[string]*int32 // template parallelism by replicatedJob
		numNodes    *int32
		want        map[string]int32
	}{
		"no mlPolicy: template parallelism, default 1": {
			parallelism: map[string]*int32{"node": ptr.To[int32](3)},
			want:        map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": 3},
		},
		"mlPolicy numNodes for the trainer only": {
			policy:      &trainer.MLPolicy{NumNodes: ptr.To[int32](5)},
			parallelism: map[string]*int32{"node": ptr.To[int32](3), "model-initializer": ptr.To[int32](2)},
			want:        map[string]int32{"dataset-initializer": 1, "model-initializer": 2, "node": 5},
		},
		"mlPolicy without numNodes: 1": {
			policy:      &trainer.MLPolicy{},
			parallelism: map[string]*int32{"node": ptr.To[int32](3)},
			want:        map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": 1},
		},
		"clamped to at least 1": {
			policy:      &trainer.MLPolicy{NumNodes: ptr.To[int32](0)},
			parallelism: map[string]*int32{"dataset-initializer": ptr.To[int32](0)},
			want:        map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": 1},
		},
		"spec.trainer.numNodes is left to the ML policy": {
			policy:   &trainer.MLPolicy{NumNodes: ptr.To[int32](4)},
			numNodes: ptr.To[int32](30),
			want:     map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": 4},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := plantest.SkeletonRuntime(tc.policy)
			for i := range rt.Spec.Template.Spec.ReplicatedJobs {
				rj := &rt.Spec.Template.Spec.ReplicatedJobs[i]
				rj.Template.Spec.Parallelism = tc.parallelism[rj.Name]
			}
			js := mustMerge(t, plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: tc.numNodes}), rt)
			got := map[string]int32{}
			for i := range js.Spec.ReplicatedJobs {
				rj := &js.Spec.ReplicatedJobs[i]
				if p, c := ptr.Deref(rj.Template.Spec.Parallelism, -1), ptr.Deref(rj.Template.Spec.Completions, -1); p != c {
					t.Errorf("%s: parallelism %d != completions %d", rj.Name, p, c)
				}
				got[rj.Name] = plan.Count(rj)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// resourcesPerNode targets (docs/compatibility.md#the-build-model step 4, upstream
// quirk 2 decided: applied even without mlPolicy).
func TestMergeResourcesPerNode(t *testing.T) {
	mpi := &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{RunLauncherAsNode: ptr.To(true)}}}
	cases := map[string]struct {
		policy *trainer.MLPolicy
		// nodeAncestor is the ancestor of the "node" replicatedJob; a "launcher" with
		// ancestor trainer is added when it is "".
		nodeAncestor string
		want         map[string]corev1.ResourceRequirements // "node" container resources by replicatedJob
	}{
		"trainer with mlPolicy": {
			policy:       &trainer.MLPolicy{},
			nodeAncestor: trainer.AncestorTrainer,
			want: map[string]corev1.ResourceRequirements{"node": {
				Requests: quantities("cpu", "2", "memory", "1Gi"), Limits: quantities("example.com/gpu", "1"),
				Claims: []corev1.ResourceClaim{{Name: "runtime"}, {Name: "tj"}},
			}},
		},
		"trainer without mlPolicy (upstream quirk 2: applied)": {
			nodeAncestor: trainer.AncestorTrainer,
			want: map[string]corev1.ResourceRequirements{"node": {
				Requests: quantities("cpu", "2", "memory", "1Gi"), Limits: quantities("example.com/gpu", "1"),
				Claims: []corev1.ResourceClaim{{Name: "runtime"}, {Name: "tj"}},
			}},
		},
		"MPI runLauncherAsNode: launcher and node": {
			policy: mpi,
			want: map[string]corev1.ResourceRequirements{
				"node": {
					Requests: quantities("cpu", "2", "memory", "1Gi"), Limits: quantities("example.com/gpu", "1"),
					Claims: []corev1.ResourceClaim{{Name: "runtime"}, {Name: "tj"}},
				},
				"launcher": {
					Requests: quantities("cpu", "2", "memory", "1Gi"), Limits: quantities("example.com/gpu", "1"),
					Claims: []corev1.ResourceClaim{{Name: "runtime"}, {Name: "tj"}},
				},
			},
		},
		"MPI without runLauncherAsNode: launcher only": {
			policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{}}},
			want: map[string]corev1.ResourceRequirements{
				"node": {Requests: quantities("cpu", "1"), Claims: []corev1.ResourceClaim{{Name: "runtime"}}},
				"launcher": {
					Requests: quantities("cpu", "2", "memory", "1Gi"), Limits: quantities("example.com/gpu", "1"),
					Claims: []corev1.ResourceClaim{{Name: "runtime"}, {Name: "tj"}},
				},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := plantest.SkeletonRuntime(tc.policy)
			rjs := rt.Spec.Template.Spec.ReplicatedJobs[2:] // node only
			if tc.nodeAncestor == "" {
				delete(rjs[0].Template.Labels, trainer.LabelTrainJobAncestor)
				launcher := *rjs[0].DeepCopy()
				launcher.Name = "launcher"
				launcher.Template.Labels[trainer.LabelTrainJobAncestor] = trainer.AncestorTrainer
				rjs = append(rjs, launcher)
			}
			for i := range rjs {
				rjs[i].Template.Spec.Template.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "runtime"}}
			}
			rt.Spec.Template.Spec.ReplicatedJobs = rjs
			tj := plantest.TrainJob(rt.Name, &trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{
				Requests: quantities("cpu", "2", "memory", "1Gi"),
				Limits:   quantities("example.com/gpu", "1"),
				Claims:   []corev1.ResourceClaim{{Name: "tj"}},
			}})
			js := mustMerge(t, tj, rt)
			got := map[string]corev1.ResourceRequirements{}
			for i := range js.Spec.ReplicatedJobs {
				rj := &js.Spec.ReplicatedJobs[i]
				got[rj.Name] = plan.Container(plan.PodSpec(rj).Containers, "node").Resources
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("node container resources (-want +got):\n%s", diff)
			}
		})
	}
}

// The initializer step (docs/compatibility.md#building-the-jobset step 3).
func TestMergeInitializers(t *testing.T) {
	rt := plantest.SkeletonRuntime(nil)
	rjs := rt.Spec.Template.Spec.ReplicatedJobs
	rjs[0].Replicas = 3
	rjs[0].Template.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{
		plantest.Env("STORAGE_URI", "hf://runtime"), plantest.Env("KEEP", "runtime"),
	}
	tj := plantest.TrainJob(rt.Name, nil)
	tj.Spec.Initializer = &trainer.Initializer{
		Dataset: &trainer.DatasetInitializer{
			StorageUri: ptr.To("hf://tatsu-lab/alpaca"),
			Env:        []corev1.EnvVar{plantest.Env("KEEP", "tj"), plantest.Env("EXTRA", "tj")},
			SecretRef:  &corev1.LocalObjectReference{Name: "hf-secret"},
		},
		Model: &trainer.ModelInitializer{StorageUri: ptr.To("")},
	}

	want := wantJobSet(rt, nil)
	plan.ReplicatedJob(want, "dataset-initializer").Replicas = 1
	ds := container(want, "dataset-initializer", "dataset-initializer")
	ds.Env = []corev1.EnvVar{
		plantest.Env("STORAGE_URI", "hf://tatsu-lab/alpaca"), plantest.Env("KEEP", "tj"), plantest.Env("EXTRA", "tj"),
	}
	ds.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "hf-secret"},
	}}}
	container(want, "model-initializer", "model-initializer").Env = []corev1.EnvVar{plantest.Env("STORAGE_URI", "")}
	if diff := cmp.Diff(want, mustMerge(t, tj, rt)); diff != "" {
		t.Errorf("JobSet (-want +got):\n%s", diff)
	}
}

// replicas 1 on ancestor replicatedJobs only; suspend from the TrainJob.
func TestMergeReplicasAndSuspend(t *testing.T) {
	rt := plantest.SkeletonRuntime(nil)
	extra := *rt.Spec.Template.Spec.ReplicatedJobs[2].DeepCopy()
	extra.Name = "sidecar-job"
	extra.Template.Labels = nil
	extra.Replicas = 2
	rt.Spec.Template.Spec.ReplicatedJobs[2].Replicas = 4
	rt.Spec.Template.Spec.ReplicatedJobs = append(rt.Spec.Template.Spec.ReplicatedJobs, extra)

	for _, suspend := range []*bool{nil, ptr.To(false), ptr.To(true)} {
		tj := plantest.TrainJob(rt.Name, nil)
		tj.Spec.Suspend = suspend
		js := mustMerge(t, tj, rt)
		got := map[string]int32{}
		for _, rj := range js.Spec.ReplicatedJobs {
			got[rj.Name] = rj.Replicas
		}
		want := map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": 1, "sidecar-job": 2}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("replicas (-want +got):\n%s", diff)
		}
		if got, want := js.Spec.Suspend, ptr.To(ptr.Deref(suspend, false)); !cmp.Equal(got, want) {
			t.Errorf("suspend = %v, want %v", ptr.Deref(got, false), *want)
		}
	}
}

// Merge must not modify the TrainJob or the runtime spec (shared with the informer
// cache), nor return anything aliasing them.
func TestMergeDoesNotAliasInputs(t *testing.T) {
	rt := plantest.SkeletonRuntime(&trainer.MLPolicy{NumNodes: ptr.To[int32](2)})
	rt.Spec.Template.Labels = map[string]string{"runtime": "yes"}
	node := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
	node.Env = []corev1.EnvVar{{Name: "FROM", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{
		Command:          []string{"python"},
		Env:              []corev1.EnvVar{{Name: "REF", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}},
		ResourcesPerNode: &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "1")},
	})
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{
		patchEntry("a.io/one", podPatch("node", trainer.PodSpecPatch{NodeSelector: map[string]string{"a": "b"}})),
	}
	rtBefore, tjBefore := rt.Spec.DeepCopy(), tj.DeepCopy()

	js := mustMerge(t, tj, rt)
	// Scribble over everything reachable from the result.
	js.Labels["runtime"] = "changed"
	for i := range js.Spec.ReplicatedJobs {
		p := plan.PodSpec(&js.Spec.ReplicatedJobs[i])
		for j := range p.Containers {
			c := &p.Containers[j]
			c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("99")
			if c.Resources.Limits != nil {
				c.Resources.Limits["nvidia.com/gpu"] = resource.MustParse("99")
			}
			for k := range c.Env {
				if c.Env[k].ValueFrom != nil {
					c.Env[k].ValueFrom.FieldRef.FieldPath = "changed"
				}
			}
			if len(c.Command) > 0 {
				c.Command[0] = "changed"
			}
		}
	}
	if diff := cmp.Diff(rtBefore, rt.Spec); diff != "" {
		t.Errorf("runtime spec changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(tjBefore, tj); diff != "" {
		t.Errorf("TrainJob changed (-before +after):\n%s", diff)
	}
}

// The upstream runtime-patches example against the upstream torch-distributed runtime.
func TestMergeUpstreamRuntimePatchesExample(t *testing.T) {
	rt := plantest.UpstreamRuntimeFile(t, "runtimes/torch_distributed.yaml")
	tj := plantest.UpstreamTrainJob(t, "examples/yaml/02-runtime-patches.yaml")
	js := mustMerge(t, tj, rt)

	wantLabels := map[string]string{"team": "ml-platform", "cost-center": "research"}
	if diff := cmp.Diff(wantLabels, js.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantAnnotations := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080"}
	if diff := cmp.Diff(wantAnnotations, js.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	p := pod(js, "node")
	if p.ServiceAccountName != "training-sa" {
		t.Errorf("serviceAccountName = %q, want training-sa", p.ServiceAccountName)
	}
	if diff := cmp.Diff(map[string]string{"node-type": "training"}, p.NodeSelector); diff != "" {
		t.Errorf("nodeSelector (-want +got):\n%s", diff)
	}
	wantTolerations := []corev1.Toleration{{Key: "training-workload", Operator: "Equal", Value: "true", Effect: "NoSchedule"}}
	if diff := cmp.Diff(wantTolerations, p.Tolerations); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
	wantResources := corev1.ResourceRequirements{
		Requests: quantities("cpu", "2", "memory", "4Gi"),
		Limits:   quantities("cpu", "4", "memory", "8Gi"),
	}
	if diff := cmp.Diff(wantResources, container(js, "node", "node").Resources); diff != "" {
		t.Errorf("node resources (-want +got):\n%s", diff)
	}
}

// A runtime without a trainer step, or whose steps lack their containers, is bad input
// naming the runtime field (issue #5 acceptance); nothing is built.
func TestMergeInvalidSteps(t *testing.T) {
	cases := map[string]struct {
		mutate    func(rjs []jobsetv1alpha2.ReplicatedJob)
		wantField string
		wantMsg   string
	}{
		"no trainer step": {
			mutate: func(rjs []jobsetv1alpha2.ReplicatedJob) {
				delete(rjs[2].Template.Labels, trainer.LabelTrainJobAncestor)
				rjs[2].Name = "worker"
			},
			wantField: "spec.template.spec.replicatedJobs",
			wantMsg:   `no replicatedJob is the trainer step (replicatedJobs [dataset-initializer model-initializer worker]): label the Job template of the one that trains, usually "node", with trainer.kubeflow.org/trainjob-ancestor-step: trainer`,
		},
		"trainer step without node container": {
			mutate: func(rjs []jobsetv1alpha2.ReplicatedJob) {
				rjs[2].Template.Spec.Template.Spec.Containers[0].Name = "main"
			},
			wantField: "spec.template.spec.replicatedJobs[name=node].template.spec.template.spec.containers",
			wantMsg:   `must contain the required container for the ancestor: trainer (a container named "node"; it has [main])`,
		},
		"unlabelled but named node: the trainer step": {
			mutate: func(rjs []jobsetv1alpha2.ReplicatedJob) {
				delete(rjs[2].Template.Labels, trainer.LabelTrainJobAncestor)
			},
		},
		"dataset initializer without its container": {
			mutate: func(rjs []jobsetv1alpha2.ReplicatedJob) {
				rjs[0].Template.Spec.Template.Spec.Containers[0].Name = "fetch"
			},
			wantField: "spec.template.spec.replicatedJobs[name=dataset-initializer].template.spec.template.spec.containers",
			wantMsg:   `must contain the required container for the ancestor: dataset-initializer (a container named "dataset-initializer"; it has [fetch])`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := plantest.SkeletonRuntime(nil)
			tc.mutate(rt.Spec.Template.Spec.ReplicatedJobs)
			js, err := Merge(plantest.TrainJob(rt.Name, nil), rt)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Merge() = %v, want a JobSet", err)
				}
				return
			}
			var invalid *plan.InvalidInputError
			if !errors.As(err, &invalid) {
				t.Fatalf("Merge() = %v, %v; want *plan.InvalidInputError", js, err)
			}
			if js != nil {
				t.Errorf("Merge() returned a JobSet with its error")
			}
			if invalid.Object != "TrainingRuntime/test-runtime" || invalid.Field != tc.wantField {
				t.Errorf("Object, Field = %q, %q; want %q, %q", invalid.Object, invalid.Field, "TrainingRuntime/test-runtime", tc.wantField)
			}
			if !strings.HasPrefix(invalid.Message, tc.wantMsg) {
				t.Errorf("Message = %q, want prefix %q", invalid.Message, tc.wantMsg)
			}
		})
	}
}

// The runtime snapshot and its digest (which the JobSet cache keeps, so a rebuild reads
// the snapshot only when the runtime changed) ride on the JobSet as annotations
// (docs/compatibility.md#runtime-snapshots) that no runtimePatch overrides; without a
// snapshot the JobSet has neither.
func TestMergeRuntimeSnapshot(t *testing.T) {
	rt := plantest.SkeletonRuntime(nil)
	tj := plantest.TrainJob(rt.Name, nil)
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "a.io/one", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
		Template: &trainer.JobSetTemplatePatch{Metadata: &metav1.ObjectMeta{Annotations: map[string]string{
			objectkeys.AnnotationRuntimeSnapshot: "patched", objectkeys.AnnotationRuntimeSnapshotHash: "patched", "team": "a"}}},
	}}}
	if js := mustMerge(t, tj, rt); js.Annotations[objectkeys.AnnotationRuntimeSnapshot] != "patched" {
		t.Errorf("without a snapshot the patch's annotation stays: %v", js.Annotations)
	}
	rt.Snapshot = `{"kind":"ClusterTrainingRuntime"}`
	js := mustMerge(t, tj, rt)
	want := map[string]string{objectkeys.AnnotationRuntimeSnapshot: rt.Snapshot,
		objectkeys.AnnotationRuntimeSnapshotHash: plan.SnapshotHash(rt.Snapshot), "team": "a"}
	if diff := cmp.Diff(want, js.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
}

// The JobSet records the TrainJob generation it is built from (the informers' routing
// reads it to skip rebuilding a built TrainJob); a TrainJob without one (a file given to
// `trainyard render`) leaves no annotation.
func TestMergeTrainJobGeneration(t *testing.T) {
	rt := plantest.SkeletonRuntime(nil)
	tj := plantest.TrainJob(rt.Name, nil)
	tj.Generation = 0
	if js := mustMerge(t, tj, rt); js.Annotations[objectkeys.AnnotationTrainJobGeneration] != "" {
		t.Errorf("generation 0: annotations %v, want no %s", js.Annotations, objectkeys.AnnotationTrainJobGeneration)
	}
	tj.Generation = 4
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "a.io/one", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
		Template: &trainer.JobSetTemplatePatch{Metadata: &metav1.ObjectMeta{Annotations: map[string]string{objectkeys.AnnotationTrainJobGeneration: "99"}}},
	}}}
	if got := mustMerge(t, tj, rt).Annotations[objectkeys.AnnotationTrainJobGeneration]; got != "4" {
		t.Errorf("%s = %q, want the TrainJob's generation 4 (not the patch's)", objectkeys.AnnotationTrainJobGeneration, got)
	}
}
