package coscheduling_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/gang/coscheduling"
	"github.com/trainyard/trainyard/pkg/stages/gang/gangtest"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

func policy(timeout *int32) *trainer.PodGroupPolicy {
	return &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
		Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: timeout}}}
}

func served(gv string) bool { return gv == coscheduling.GroupVersion }

// The PodGroup of docs/compatibility.md#coscheduling: named after the TrainJob,
// controlled by it, minMember the pods of every replicatedJob (initializers included),
// minResources their requests, scheduleTimeoutSeconds the runtime's or 60; every pod
// template labelled with the PodGroup's name, its schedulerName left to the runtime.
func TestPodGroup(t *testing.T) {
	cases := map[string]struct {
		numNodes int32
		timeout  *int32
		// edit changes the plan before the backend runs.
		edit      func(p *plan.Plan)
		wantSpec  map[string]any
		schedName string // every pod template's schedulerName afterwards
	}{
		"one node, default timeout": {
			numNodes: 1,
			wantSpec: map[string]any{"minMember": int64(3), "minResources": map[string]any{"cpu": "3"}, "scheduleTimeoutSeconds": int64(60)},
		},
		"numNodes sizes the gang, the runtime's timeout": {
			numNodes: 8, timeout: ptr.To[int32](300),
			wantSpec: map[string]any{"minMember": int64(10), "minResources": map[string]any{"cpu": "10"}, "scheduleTimeoutSeconds": int64(300)},
		},
		"the runtime's schedulerName is kept": {
			numNodes: 2,
			edit: func(p *plan.Plan) {
				for i := range p.JobSet.Spec.ReplicatedJobs {
					plan.PodSpec(&p.JobSet.Spec.ReplicatedJobs[i]).SchedulerName = "scheduler-plugins-scheduler"
				}
			},
			wantSpec:  map[string]any{"minMember": int64(4), "minResources": map[string]any{"cpu": "4"}, "scheduleTimeoutSeconds": int64(60)},
			schedName: "scheduler-plugins-scheduler",
		},
		// Kubernetes' pod-request rules: an init container's request is a floor, a
		// sidecar's adds to the containers', overhead adds; each times the pod count.
		"pod requests: init containers, sidecars, overhead, GPUs": {
			numNodes: 2,
			edit: func(p *plan.Plan) {
				pod := plan.PodSpec(plan.TrainerJob(p.JobSet))
				pod.Containers[0].Resources.Requests = corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi"), "nvidia.com/gpu": resource.MustParse("4")}
				pod.InitContainers = []corev1.Container{
					{Name: "warm-up", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}}},
					{Name: "sidecar", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}},
				}
				pod.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
			},
			// node: cpu 2 + 0.5 + 0.25, memory max(1Gi, 3Gi), 4 GPUs; times 2; plus two 1-CPU initializers.
			wantSpec: map[string]any{"minMember": int64(4), "scheduleTimeoutSeconds": int64(60),
				"minResources": map[string]any{"cpu": "7500m", "memory": "6Gi", "nvidia.com/gpu": "8"}},
		},
		"numNodes 0: the initializers only": {
			numNodes: 0,
			wantSpec: map[string]any{"minMember": int64(2), "minResources": map[string]any{"cpu": "2"}, "scheduleTimeoutSeconds": int64(60)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj, p := gangtest.Skeleton(t, policy(tc.timeout), tc.numNodes)
			if tc.edit != nil {
				tc.edit(p)
			}
			if err := (coscheduling.Backend{Served: served}).Apply(context.Background(), tj, p); err != nil {
				t.Fatal(err)
			}
			pg := gangtest.OnlyPodGroup(t, tj, p, "scheduling.x-k8s.io/v1alpha1", "test-job")
			if diff := cmp.Diff(tc.wantSpec, pg.Object["spec"]); diff != "" {
				t.Errorf("PodGroup spec (-want +got):\n%s", diff)
			}
			for _, rj := range p.JobSet.Spec.ReplicatedJobs {
				pod := rj.Template.Spec.Template
				if got := pod.Labels["scheduling.x-k8s.io/pod-group"]; got != "test-job" {
					t.Errorf("replicatedJob %s: label scheduling.x-k8s.io/pod-group = %q, want test-job", rj.Name, got)
				}
				if pod.Spec.SchedulerName != tc.schedName {
					t.Errorf("replicatedJob %s: schedulerName %q, want %q (the runtime's)", rj.Name, pod.Spec.SchedulerName, tc.schedName)
				}
				if len(pod.Annotations) != 0 {
					t.Errorf("replicatedJob %s: pod annotations %v, want none", rj.Name, pod.Annotations)
				}
			}
			if err := plantest.CheckPlan(tj, p); err != nil {
				t.Error(err)
			}
		})
	}
}

// The pod-group label joins the runtime's own pod labels instead of replacing them.
func TestPodLabelKeepsTheRuntimes(t *testing.T) {
	tj, p := gangtest.Skeleton(t, policy(nil), 2)
	node := plan.TrainerJob(p.JobSet)
	node.Template.Spec.Template.Labels = map[string]string{"team": "research"}
	if err := (coscheduling.Backend{}).Apply(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"team": "research", coscheduling.LabelPodGroup: "test-job"}
	if diff := cmp.Diff(want, node.Template.Spec.Template.Labels); diff != "" {
		t.Errorf("node pod labels (-want +got):\n%s", diff)
	}
}

// The backend asks whether scheduling.x-k8s.io/v1alpha1 is served, and only that; a nil
// Served means served. Unserved: an UnsupportedError naming the policy, the API and the
// fix, and the plan untouched (no PodGroup, no label).
func TestServed(t *testing.T) {
	var asked []string
	tj, p := gangtest.Skeleton(t, policy(nil), 2)
	before := p.DeepCopy()
	err := (coscheduling.Backend{Served: func(gv string) bool { asked = append(asked, gv); return false }}).Apply(context.Background(), tj, p)
	if diff := cmp.Diff([]string{coscheduling.GroupVersion}, asked); diff != "" {
		t.Errorf("APIs asked about (-want +got):\n%s", diff)
	}
	var unsupported *plan.UnsupportedError
	if !errors.As(err, &unsupported) {
		t.Fatalf("err = %v, want an UnsupportedError", err)
	}
	for _, want := range []string{"podGroupPolicy.coscheduling", "scheduling.x-k8s.io/v1alpha1 is not served", "install its CRD", "proceeds by itself"} {
		if !strings.Contains(unsupported.Feature, want) {
			t.Errorf("error %q does not say %q", unsupported.Feature, want)
		}
	}
	if unsupported.Object != "TrainingRuntime/test-runtime" {
		t.Errorf("error object %q, want the runtime TrainingRuntime/test-runtime", unsupported.Object)
	}
	if diff := cmp.Diff(before, p); diff != "" {
		t.Errorf("an unserved API changed the plan (-before +after):\n%s", diff)
	}

	tj, p = gangtest.Skeleton(t, policy(nil), 2)
	if err := (coscheduling.Backend{}).Apply(context.Background(), tj, p); err != nil || len(gangtest.ObjectsOf(p, "PodGroup")) != 1 {
		t.Errorf("nil Served: err %v, %d PodGroups; want the PodGroup (assumed served)", err, len(gangtest.ObjectsOf(p, "PodGroup")))
	}
}

func TestEnabled(t *testing.T) {
	b := coscheduling.Backend{}
	if b.Name() != "coscheduling" {
		t.Errorf("Name() = %q, want coscheduling (the podGroupPolicy member)", b.Name())
	}
	for name, tc := range map[string]struct {
		policy trainer.PodGroupPolicySource
		want   bool
	}{
		"coscheduling": {trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}, true},
		"volcano":      {trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{}}, false},
		"kaiScheduler": {trainer.PodGroupPolicySource{KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{Queue: "q"}}, false},
		"workload":     {trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}, false},
		"empty":        {trainer.PodGroupPolicySource{}, false},
	} {
		if got := b.Enabled(&trainer.PodGroupPolicy{PodGroupPolicySource: tc.policy}); got != tc.want {
			t.Errorf("Enabled(%s) = %v, want %v", name, got, tc.want)
		}
	}
}

// Upstream's DeepSpeed runtime (MPI, the launcher runs as a node) with coscheduling:
// the gang is the launcher and the node workers (numNodes - 1, at least 1:
// docs/compatibility.md#mpi), and every pod carries the label. The MPI hostfile
// ConfigMap planned before stays first.
func TestUpstreamMPIRuntime(t *testing.T) {
	rt := gangtest.WithPolicy(plantest.UpstreamRuntimeFile(t, "runtimes/deepspeed_distributed.yaml"), policy(ptr.To[int32](120)))
	for numNodes, pods := range map[int32]int64{1: 2, 2: 2, 5: 5} {
		tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To(numNodes)})
		tj.Spec.RuntimeRef.Kind = ptr.To(trainer.ClusterTrainingRuntimeKind)
		p := gangtest.Plan(t, tj, rt)
		if err := (coscheduling.Backend{Served: served}).Apply(context.Background(), tj, p); err != nil {
			t.Fatal(err)
		}
		pgs := gangtest.ObjectsOf(p, "PodGroup")
		if len(pgs) != 1 || p.Objects[len(p.Objects)-1] != pgs[0] {
			t.Fatalf("numNodes %d: PodGroups %d, objects %d; want one PodGroup, after the ML policy's objects", numNodes, len(pgs), len(p.Objects))
		}
		if got, _ := pgs[0].Object["spec"].(map[string]any)["minMember"].(int64); got != pods {
			t.Errorf("numNodes %d: minMember %d, want %d (launcher and workers)", numNodes, got, pods)
		}
		if got := pgs[0].Object["spec"].(map[string]any)["scheduleTimeoutSeconds"]; got != int64(120) {
			t.Errorf("numNodes %d: scheduleTimeoutSeconds %v, want 120", numNodes, got)
		}
		var names []string
		for _, rj := range p.JobSet.Spec.ReplicatedJobs {
			names = append(names, rj.Name)
			if got := rj.Template.Spec.Template.Labels[coscheduling.LabelPodGroup]; got != tj.Name {
				t.Errorf("numNodes %d: replicatedJob %s pod label %q, want %q", numNodes, rj.Name, got, tj.Name)
			}
		}
		if !slices.Contains(names, "launcher") {
			t.Errorf("replicatedJobs %v: no launcher", names)
		}
		if err := plantest.CheckPlan(tj, p); err != nil {
			t.Error(err)
		}
	}
}
