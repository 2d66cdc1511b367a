package mergepatches

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// fullPodSpecPatch sets every PodSpecPatch field, each merging with something in the
// plantest skeleton's "node" replicatedJob.
func fullPodSpecPatch() trainer.PodSpecPatch {
	return trainer.PodSpecPatch{
		ServiceAccountName: ptr.To("sa"),
		Volumes: []corev1.Volume{{Name: "extra", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{},
		}}},
		InitContainers: []trainer.ContainerPatch{{Name: "init", Env: []corev1.EnvVar{plantest.Env("B", "patch")}}},
		Containers: []trainer.ContainerPatch{{
			Name:            "node",
			Env:             []corev1.EnvVar{plantest.Env("A", "patch")},
			VolumeMounts:    []corev1.VolumeMount{{Name: "extra", MountPath: "/extra"}},
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000)},
			Resources: &corev1.ResourceRequirements{
				Limits: quantities("memory", "1Gi"),
				Claims: []corev1.ResourceClaim{{Name: "gpu"}},
			},
		}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
		SecurityContext:  &corev1.PodSecurityContext{FSGroup: ptr.To[int64](1000)},
		NodeSelector:     map[string]string{"b": "patch"},
		Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname"},
			}},
		}},
		Tolerations:                   []corev1.Toleration{{Key: "patch", Operator: corev1.TolerationOpExists}},
		SchedulingGates:               []corev1.PodSchedulingGate{{Name: "patch"}},
		TerminationGracePeriodSeconds: ptr.To[int64](300),
		ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}},
	}
}

// Merging only the patched parts (patchReplicatedJob) must give what a strategic merge
// of the whole replicatedJob gives, for every PodSpecPatch field.
func TestPatchPodSpecCoversEveryField(t *testing.T) {
	podPatch := fullPodSpecPatch()
	v := reflect.ValueOf(podPatch)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("fullPodSpecPatch leaves PodSpecPatch.%s unset: set it, and list it in copyPatchedFields",
				v.Type().Field(i).Name)
		}
	}

	rt := plantest.SkeletonRuntime(nil)
	node := &rt.Spec.Template.Spec.ReplicatedJobs[2]
	node.Template.Spec.Template.Labels = map[string]string{"pod": "runtime"}
	p := plan.PodSpec(node)
	p.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Env: []corev1.EnvVar{plantest.Env("B", "runtime")}}}
	p.Containers[0].Env = []corev1.EnvVar{plantest.Env("A", "runtime"), plantest.Env("C", "runtime")}
	p.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}
	p.SecurityContext = &corev1.PodSecurityContext{RunAsGroup: ptr.To[int64](1)}
	p.NodeSelector = map[string]string{"a": "runtime", "b": "runtime"}
	p.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
	p.Tolerations = []corev1.Toleration{{Key: "runtime"}}
	p.SchedulingGates = []corev1.PodSchedulingGate{{Name: "runtime"}}
	p.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "runtime"}}
	p.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic", ResourceClaimTemplateName: ptr.To("nic")}}

	rjp := trainer.ReplicatedJobPatch{Name: "node", Template: &trainer.JobTemplatePatch{
		Metadata: &metav1.ObjectMeta{Labels: map[string]string{"job": "patch"}, Annotations: map[string]string{"a": "b"}},
		Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{
			Metadata: &metav1.ObjectMeta{Labels: map[string]string{"pod": "patch", "new": "patch"}},
			Spec:     &podPatch,
		}},
	}}

	want := wholeReplicatedJobMerge(t, node, &rjp)
	tj := plantest.TrainJob(rt.Name, nil)
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{patchEntry("a.io/one", rjp)}
	got := plan.ReplicatedJob(mustMerge(t, tj, rt), "node")
	got.Template.Spec.Parallelism, got.Template.Spec.Completions = nil, nil // set by Merge, not by the patch
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicatedJob (-whole-object merge +Merge):\n%s", diff)
	}
}

// wholeReplicatedJobMerge is the reference: a strategic merge of the JSON of the whole
// replicatedJob with JobSet v1alpha2's patch metadata, as upstream does it.
func wholeReplicatedJobMerge(t *testing.T, rj *jobsetv1alpha2.ReplicatedJob, rjp *trainer.ReplicatedJobPatch) *jobsetv1alpha2.ReplicatedJob {
	t.Helper()
	original, err := json.Marshal(rj)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(rjp)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := strategicpatch.StrategicMergePatch(original, patch, jobsetv1alpha2.ReplicatedJob{})
	if err != nil {
		t.Fatal(err)
	}
	out := &jobsetv1alpha2.ReplicatedJob{}
	if err := json.Unmarshal(merged, out); err != nil {
		t.Fatal(err)
	}
	return out
}
