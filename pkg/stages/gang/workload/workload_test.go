package workload_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/gang/gangtest"
	"github.com/trainyard/trainyard/pkg/stages/gang/workload"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

var policy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}}

func servedOnly(versions ...string) workload.Backend {
	return workload.Backend{Served: func(gv string) bool { return slices.Contains(versions, gv) }}
}

// gang is the scheduling policy of a gang of n pods.
func gang(n int64) map[string]any {
	return map[string]any{"gang": map[string]any{"minCount": n}}
}

// templateRef is how a PodGroup of version names its Workload's template: v1alpha2
// (Kubernetes 1.36) spec.podGroupTemplateRef.workload, v1alpha3 and v1beta1 (1.37)
// spec.workloadRef.
func templateRef(version, template string) (string, map[string]any) {
	if version == "scheduling.k8s.io/v1alpha2" {
		return "podGroupTemplateRef", map[string]any{"workload": map[string]any{"workloadName": "test-job", "podGroupTemplateName": template}}
	}
	return "workloadRef", map[string]any{"workloadName": "test-job", "templateName": template}
}

// For each version: the Workload named after the TrainJob, pointing back at it
// (spec.controllerRef), one template per gang; one PodGroup per gang named
// <trainjob>-<replicatedJob> referencing its template in that version's shape, all
// controlled by the TrainJob, the Workload first; the gang's pods point at their
// PodGroup (spec.schedulingGroup), the initializers' at none.
func TestObjectsPerVersion(t *testing.T) {
	for _, version := range workload.Versions {
		t.Run(version, func(t *testing.T) {
			tj, p := gangtest.Skeleton(t, policy, 4)
			if err := servedOnly(version).Apply(context.Background(), tj, p); err != nil {
				t.Fatal(err)
			}
			if len(p.Objects) != 2 {
				t.Fatalf("planned %d objects, want a Workload and one PodGroup (initializers get none)", len(p.Objects))
			}
			wl, pg := p.Objects[0], p.Objects[1]
			if wl.GetKind() != "Workload" || pg.GetKind() != "PodGroup" {
				t.Fatalf("kinds %s, %s; want Workload, then PodGroup (a PodGroup references its Workload)", wl.GetKind(), pg.GetKind())
			}
			gangtest.CheckOwned(t, tj, wl, version, "test-job")
			gangtest.CheckOwned(t, tj, pg, version, "test-job-node")
			wantWorkload := map[string]any{
				"controllerRef":     map[string]any{"apiGroup": "trainer.kubeflow.org", "kind": "TrainJob", "name": "test-job"},
				"podGroupTemplates": []any{map[string]any{"name": "node", "schedulingPolicy": gang(4)}},
			}
			if diff := cmp.Diff(wantWorkload, wl.Object["spec"]); diff != "" {
				t.Errorf("Workload spec (-want +got):\n%s", diff)
			}
			refField, ref := templateRef(version, "node")
			wantPodGroup := map[string]any{"schedulingPolicy": gang(4), refField: ref}
			if diff := cmp.Diff(wantPodGroup, pg.Object["spec"]); diff != "" {
				t.Errorf("PodGroup spec (-want +got):\n%s", diff)
			}
			for _, rj := range p.JobSet.Spec.ReplicatedJobs {
				var want *corev1.PodSchedulingGroup
				if rj.Name == "node" {
					want = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("test-job-node")}
				}
				if diff := cmp.Diff(want, plan.PodSpec(&rj).SchedulingGroup); diff != "" {
					t.Errorf("replicatedJob %s schedulingGroup (-want +got):\n%s", rj.Name, diff)
				}
				if pod := rj.Template.Spec.Template; pod.Spec.SchedulerName != "" || len(pod.Labels) != 0 || len(pod.Annotations) != 0 {
					t.Errorf("replicatedJob %s: schedulerName %q, labels %v, annotations %v; want the runtime's (none)",
						rj.Name, pod.Spec.SchedulerName, pod.Labels, pod.Annotations)
				}
			}
			if len(p.Conditions) != 0 {
				t.Errorf("conditions %v, want none (no shared claims)", p.Conditions)
			}
			if err := plantest.CheckPlan(tj, p); err != nil {
				t.Error(err)
			}
		})
	}
}

// A gang's size is its pods: parallelism (numNodes for the trainer) times the
// replicatedJob's replicas. Initializers and replicatedJobs without pods get no gang;
// a TrainJob with none gets no object at all.
func TestGangSizes(t *testing.T) {
	cases := map[string]struct {
		numNodes int32
		edit     func(p *plan.Plan)
		want     map[string]int64 // PodGroup name → minCount; nil: no objects
	}{
		"numNodes 1":  {numNodes: 1, want: map[string]int64{"test-job-node": 1}},
		"numNodes 16": {numNodes: 16, want: map[string]int64{"test-job-node": 16}},
		"replicas multiply": {
			numNodes: 3, edit: func(p *plan.Plan) { plan.TrainerJob(p.JobSet).Replicas = 2 },
			want: map[string]int64{"test-job-node": 6},
		},
		"a second gang beside the trainer": {
			numNodes: 2,
			edit: func(p *plan.Plan) {
				extra := *plan.TrainerJob(p.JobSet).DeepCopy()
				extra.Name, extra.Template.Labels = "evaluator", nil
				extra.Template.Spec.Parallelism, extra.Template.Spec.Completions = ptr.To[int32](5), ptr.To[int32](5)
				p.JobSet.Spec.ReplicatedJobs = append(p.JobSet.Spec.ReplicatedJobs, extra)
			},
			want: map[string]int64{"test-job-node": 2, "test-job-evaluator": 5},
		},
		"numNodes 0: nothing to schedule": {numNodes: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj, p := gangtest.Skeleton(t, policy, tc.numNodes)
			if tc.edit != nil {
				tc.edit(p)
			}
			if err := servedOnly("scheduling.k8s.io/v1beta1").Apply(context.Background(), tj, p); err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, pg := range gangtest.ObjectsOf(p, "PodGroup") {
				n, _, _ := unstructured.NestedInt64(pg.Object, "spec", "schedulingPolicy", "gang", "minCount")
				got[pg.GetName()] = n
			}
			if tc.want == nil {
				if len(p.Objects) != 0 {
					t.Errorf("planned %d objects, want none", len(p.Objects))
				}
				for _, rj := range p.JobSet.Spec.ReplicatedJobs {
					if plan.PodSpec(&rj).SchedulingGroup != nil {
						t.Errorf("replicatedJob %s points at a PodGroup that is not planned", rj.Name)
					}
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PodGroup minCounts (-want +got):\n%s", diff)
			}
			templates, _, _ := unstructured.NestedSlice(gangtest.ObjectsOf(p, "Workload")[0].Object, "spec", "podGroupTemplates")
			if len(templates) != len(tc.want) {
				t.Errorf("Workload has %d templates, want %d", len(templates), len(tc.want))
			}
			for _, tmpl := range templates {
				m := tmpl.(map[string]any)
				n, _, _ := unstructured.NestedInt64(m, "schedulingPolicy", "gang", "minCount")
				if want := tc.want[workload.PodGroupName("test-job", m["name"].(string))]; n != want {
					t.Errorf("template %s minCount %d, want %d", m["name"], n, want)
				}
			}
		})
	}
}

// Upstream's DeepSpeed runtime (MPI: node workers, then the launcher that runs as a
// node): two gangs, in the runtime's order, the workers numNodes - 1 (at least 1) and
// the launcher 1, after the MPI hostfile ConfigMap.
func TestUpstreamMPIRuntime(t *testing.T) {
	rt := gangtest.WithPolicy(plantest.UpstreamRuntimeFile(t, "runtimes/deepspeed_distributed.yaml"), policy)
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](4)})
	tj.Spec.RuntimeRef.Kind = ptr.To(trainer.ClusterTrainingRuntimeKind)
	p := gangtest.Plan(t, tj, rt)
	if err := servedOnly("scheduling.k8s.io/v1alpha3").Apply(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range p.Objects {
		kinds = append(kinds, o.GetKind()+" "+o.GetName())
	}
	want := []string{"ConfigMap test-job-mpi-hostfile", "Workload test-job", "PodGroup test-job-node", "PodGroup test-job-launcher"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Fatalf("objects (-want +got):\n%s", diff)
	}
	templates, _, _ := unstructured.NestedSlice(p.Objects[1].Object, "spec", "podGroupTemplates")
	wantTemplates := []any{
		map[string]any{"name": "node", "schedulingPolicy": gang(3)},
		map[string]any{"name": "launcher", "schedulingPolicy": gang(1)},
	}
	if diff := cmp.Diff(wantTemplates, templates); diff != "" {
		t.Errorf("Workload templates (-want +got):\n%s", diff)
	}
	for _, pg := range p.Objects[2:] {
		name := strings.TrimPrefix(pg.GetName(), "test-job-")
		if diff := cmp.Diff(map[string]any{"workloadName": "test-job", "templateName": name}, pg.Object["spec"].(map[string]any)["workloadRef"]); diff != "" {
			t.Errorf("PodGroup %s workloadRef (-want +got):\n%s", pg.GetName(), diff)
		}
		if got := plan.PodSpec(plan.ReplicatedJob(p.JobSet, name)).SchedulingGroup; got == nil || ptr.Deref(got.PodGroupName, "") != pg.GetName() {
			t.Errorf("replicatedJob %s schedulingGroup %+v, want PodGroup %s", name, got, pg.GetName())
		}
	}
	if err := plantest.CheckPlan(tj, p); err != nil {
		t.Error(err)
	}
}

// A Workload holds at most 8 templates: a ninth gang is an input error naming the
// runtime's replicatedJobs and the count, and nothing is planned.
func TestTooManyGangs(t *testing.T) {
	for _, gangs := range []int{8, 9} {
		tj, p := gangtest.Skeleton(t, policy, 1)
		node := plan.TrainerJob(p.JobSet)
		for i := 1; i < gangs; i++ {
			extra := *node.DeepCopy()
			extra.Name = fmt.Sprintf("worker-%d", i)
			p.JobSet.Spec.ReplicatedJobs = append(p.JobSet.Spec.ReplicatedJobs, extra)
		}
		err := servedOnly(workload.Versions...).Apply(context.Background(), tj, p)
		if gangs == 8 {
			if err != nil || len(gangtest.ObjectsOf(p, "PodGroup")) != 8 {
				t.Errorf("8 gangs: err %v, %d PodGroups; want 8", err, len(gangtest.ObjectsOf(p, "PodGroup")))
			}
			continue
		}
		var invalid *plan.InvalidInputError
		if !errors.As(err, &invalid) || invalid.Field != "spec.template.spec.replicatedJobs" || invalid.Object != "TrainingRuntime/test-runtime" ||
			!strings.Contains(invalid.Message, "9 here, but a Workload holds at most 8") {
			t.Errorf("9 gangs: err = %#v, want an InvalidInputError of the runtime's replicatedJobs naming 9 and 8", err)
		}
		if len(p.Objects) != 0 {
			t.Errorf("9 gangs: planned %d objects, want none", len(p.Objects))
		}
	}
}

// The backend builds the newest version served; with none it returns an
// UnsupportedError that names the versions it speaks and how to enable the API, and
// plans nothing.
func TestNoVersionServed(t *testing.T) {
	var asked []string
	b := workload.Backend{Served: func(gv string) bool { asked = append(asked, gv); return false }}
	tj, p := gangtest.Skeleton(t, policy, 2)
	before := p.DeepCopy()
	err := b.Apply(context.Background(), tj, p)
	if diff := cmp.Diff(workload.Versions, asked); diff != "" {
		t.Errorf("versions asked about, in order (-want +got):\n%s", diff)
	}
	var unsupported *plan.UnsupportedError
	if !errors.As(err, &unsupported) {
		t.Fatalf("err = %v, want an UnsupportedError", err)
	}
	for _, want := range []string{"podGroupPolicy.workload", "scheduling.k8s.io/v1beta1 scheduling.k8s.io/v1alpha3 scheduling.k8s.io/v1alpha2",
		"GenericWorkload", "GangScheduling", "--runtime-config=scheduling.k8s.io/<version>=true", "proceeds by itself"} {
		if !strings.Contains(unsupported.Feature, want) {
			t.Errorf("error %q does not say %q", unsupported.Feature, want)
		}
	}
	if diff := cmp.Diff(before, p); diff != "" {
		t.Errorf("no served version changed the plan (-before +after):\n%s", diff)
	}
}

func TestEnabled(t *testing.T) {
	b := workload.Backend{}
	if b.Name() != "workload" {
		t.Errorf("Name() = %q, want workload", b.Name())
	}
	if !b.Enabled(policy) {
		t.Error("Enabled(workload) = false")
	}
	if b.Enabled(&trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{Queue: "q"}}}) {
		t.Error("Enabled(kaiScheduler) = true")
	}
	if got := b.Version(); got != "scheduling.k8s.io/v1beta1" {
		t.Errorf("nil Served: Version() = %q, want the newest, scheduling.k8s.io/v1beta1", got)
	}
}
