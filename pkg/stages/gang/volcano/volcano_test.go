package volcano_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/gang/gangtest"
	"github.com/trainyard/trainyard/pkg/stages/gang/volcano"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

func policy(topology *trainer.NetworkTopologySpec) *trainer.PodGroupPolicy {
	return &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
		Volcano: &trainer.VolcanoPodGroupPolicySource{NetworkTopology: topology}}}
}

func served(gv string) bool { return gv == volcano.GroupVersion }

// priorityClass sets the priorityClassName of the replicatedJob named rj.
func priorityClass(rj, name string) func(*plan.Plan) {
	return func(p *plan.Plan) { plan.PodSpec(plan.ReplicatedJob(p.JobSet, rj)).PriorityClassName = name }
}

// trainerFirst moves the trainer replicatedJob "node" to the front of the JobSet, before
// the initializers: a runtime may list its replicatedJobs in any order.
func trainerFirst(p *plan.Plan) {
	rjs := p.JobSet.Spec.ReplicatedJobs
	for i := range rjs {
		if rjs[i].Name == "node" {
			node := rjs[i]
			copy(rjs[1:i+1], rjs[:i])
			rjs[0] = node
			return
		}
	}
}

// The PodGroup of docs/compatibility.md#volcano: named after the TrainJob, controlled by
// it, minMember and minResources of every replicatedJob, the queue of the JobSet's
// annotation, the trainer's priority class whatever the order of the replicatedJobs
// (else the first one set, in runtime order), the policy's network topology; every pod
// template annotated with the PodGroup's name.
func TestPodGroup(t *testing.T) {
	size3 := map[string]any{"minMember": int64(3), "minResources": map[string]any{"cpu": "3"}}
	with := func(extra map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range size3 {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	cases := map[string]struct {
		numNodes    int32
		topology    *trainer.NetworkTopologySpec
		annotations map[string]string // the JobSet's
		edits       []func(*plan.Plan)
		wantSpec    map[string]any
	}{
		"no queue, no priority, no topology": {numNodes: 1, wantSpec: size3},
		"numNodes sizes the gang": {
			numNodes: 6,
			wantSpec: map[string]any{"minMember": int64(8), "minResources": map[string]any{"cpu": "8"}},
		},
		"the queue annotation": {
			numNodes: 1, annotations: map[string]string{volcano.AnnotationQueueName: "research", "other": "x"},
			wantSpec: with(map[string]any{"queue": "research"}),
		},
		"priority class on the trainer only": {
			numNodes: 1, edits: []func(*plan.Plan){priorityClass("node", "high")},
			wantSpec: with(map[string]any{"priorityClassName": "high"}),
		},
		"priority class on the trainer only, trainer listed first": {
			numNodes: 1, edits: []func(*plan.Plan){trainerFirst, priorityClass("node", "high")},
			wantSpec: with(map[string]any{"priorityClassName": "high"}),
		},
		"priority class on an initializer only: the initializer's": {
			numNodes: 1, edits: []func(*plan.Plan){priorityClass("model-initializer", "low")},
			wantSpec: with(map[string]any{"priorityClassName": "low"}),
		},
		"priority class on both, trainer listed last: the trainer's": {
			numNodes: 1, edits: []func(*plan.Plan){priorityClass("dataset-initializer", "low"), priorityClass("node", "high")},
			wantSpec: with(map[string]any{"priorityClassName": "high"}),
		},
		// Upstream (kubeflow/trainer#4084) takes the last one set: "low" here.
		"priority class on both, trainer listed first: the trainer's": {
			numNodes: 1, edits: []func(*plan.Plan){trainerFirst, priorityClass("node", "high"), priorityClass("dataset-initializer", "low")},
			wantSpec: with(map[string]any{"priorityClassName": "high"}),
		},
		// Upstream takes the last one set: "mid" here.
		"priority class on both initializers, none on the trainer: the first in runtime order": {
			numNodes: 1, edits: []func(*plan.Plan){priorityClass("dataset-initializer", "low"), priorityClass("model-initializer", "mid")},
			wantSpec: with(map[string]any{"priorityClassName": "low"}),
		},
		"network topology, both fields": {
			numNodes: 1, topology: &trainer.NetworkTopologySpec{Mode: trainer.NetworkTopologyModeSoft, HighestTierAllowed: ptr.To(3)},
			wantSpec: with(map[string]any{"networkTopology": map[string]any{"mode": "soft", "highestTierAllowed": int64(3)}}),
		},
		"network topology, mode only": {
			numNodes: 1, topology: &trainer.NetworkTopologySpec{Mode: trainer.NetworkTopologyModeHard},
			wantSpec: with(map[string]any{"networkTopology": map[string]any{"mode": "hard"}}),
		},
		"network topology, tier only": {
			numNodes: 1, topology: &trainer.NetworkTopologySpec{HighestTierAllowed: ptr.To(1)},
			wantSpec: with(map[string]any{"networkTopology": map[string]any{"highestTierAllowed": int64(1)}}),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj, p := gangtest.Skeleton(t, policy(tc.topology), tc.numNodes)
			p.JobSet.Annotations = tc.annotations
			for _, edit := range tc.edits {
				edit(p)
			}
			if err := (volcano.Backend{Served: served}).Apply(context.Background(), tj, p); err != nil {
				t.Fatal(err)
			}
			pg := gangtest.OnlyPodGroup(t, tj, p, "scheduling.volcano.sh/v1beta1", "test-job")
			if diff := cmp.Diff(tc.wantSpec, pg.Object["spec"]); diff != "" {
				t.Errorf("PodGroup spec (-want +got):\n%s", diff)
			}
			for _, rj := range p.JobSet.Spec.ReplicatedJobs {
				pod := rj.Template.Spec.Template
				if diff := cmp.Diff(map[string]string{"scheduling.k8s.io/group-name": "test-job"}, pod.Annotations); diff != "" {
					t.Errorf("replicatedJob %s pod annotations (-want +got):\n%s", rj.Name, diff)
				}
				if pod.Spec.SchedulerName != "" {
					t.Errorf("replicatedJob %s: schedulerName %q, want the runtime's (none)", rj.Name, pod.Spec.SchedulerName)
				}
			}
			if diff := cmp.Diff(tc.annotations, p.JobSet.Annotations); diff != "" {
				t.Errorf("JobSet annotations changed (-want +got):\n%s", diff)
			}
			if err := plantest.CheckPlan(tj, p); err != nil {
				t.Error(err)
			}
		})
	}
}

// An empty queue name is upstream's admission error, "Volcano queue name must not be
// empty", reported at the field that set it: the runtime's template, or the last
// runtimePatch that sets it. No PodGroup is planned and no pod annotated.
func TestEmptyQueue(t *testing.T) {
	patch := func(manager, queue string) trainer.RuntimePatch {
		return trainer.RuntimePatch{Manager: manager, TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
			Template: &trainer.JobSetTemplatePatch{Metadata: &metav1.ObjectMeta{Annotations: map[string]string{volcano.AnnotationQueueName: queue}}}}}
	}
	cases := map[string]struct {
		runtimeQueue *string
		patches      []trainer.RuntimePatch
		wantObject   string
		wantField    string
	}{
		"set empty by the runtime": {
			runtimeQueue: ptr.To(""),
			wantObject:   "TrainingRuntime/test-runtime",
			wantField:    "spec.template.metadata.annotations[scheduling.volcano.sh/queue-name]",
		},
		"set empty by a runtime patch": {
			runtimeQueue: ptr.To("research"),
			patches:      []trainer.RuntimePatch{patch("example.com/a", "team-a"), patch("example.com/b", "")},
			wantField:    "spec.runtimePatches[manager=example.com/b].trainingRuntimeSpec.template.metadata.annotations[scheduling.volcano.sh/queue-name]",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := gangtest.WithPolicy(plantest.SkeletonRuntime(nil), policy(nil))
			if tc.runtimeQueue != nil {
				rt.Spec.Template.Annotations = map[string]string{volcano.AnnotationQueueName: *tc.runtimeQueue}
			}
			tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To[int32](2)})
			tj.Spec.RuntimePatches = tc.patches
			p := gangtest.Plan(t, tj, rt)
			if got := p.JobSet.Annotations[volcano.AnnotationQueueName]; got != "" {
				t.Fatalf("merged JobSet queue annotation %q, want it empty", got)
			}
			err := (volcano.Backend{Served: served}).Apply(context.Background(), tj, p)
			var invalid *plan.InvalidInputError
			if !errors.As(err, &invalid) {
				t.Fatalf("err = %v, want an InvalidInputError", err)
			}
			if invalid.Object != tc.wantObject || invalid.Field != tc.wantField || !strings.HasPrefix(invalid.Message, "Volcano queue name must not be empty") {
				t.Errorf("error = %+v, want object %q, field %q, upstream's message", invalid, tc.wantObject, tc.wantField)
			}
			if len(p.Objects) != 0 {
				t.Errorf("planned %d side objects, want none", len(p.Objects))
			}
			for _, rj := range p.JobSet.Spec.ReplicatedJobs {
				if _, ok := rj.Template.Spec.Template.Annotations[volcano.AnnotationGroupName]; ok {
					t.Errorf("replicatedJob %s annotated with a PodGroup that is not planned", rj.Name)
				}
			}
		})
	}
}

// The backend asks whether scheduling.volcano.sh/v1beta1 is served, and only that; a nil
// Served means served. Unserved: an UnsupportedError naming the policy and the API, and
// the plan untouched.
func TestServed(t *testing.T) {
	var asked []string
	tj, p := gangtest.Skeleton(t, policy(nil), 2)
	before := p.DeepCopy()
	err := (volcano.Backend{Served: func(gv string) bool { asked = append(asked, gv); return false }}).Apply(context.Background(), tj, p)
	if diff := cmp.Diff([]string{volcano.GroupVersion}, asked); diff != "" {
		t.Errorf("APIs asked about (-want +got):\n%s", diff)
	}
	var unsupported *plan.UnsupportedError
	if !errors.As(err, &unsupported) || !strings.Contains(unsupported.Feature, "podGroupPolicy.volcano: the PodGroup API scheduling.volcano.sh/v1beta1 is not served") {
		t.Fatalf("err = %v, want an UnsupportedError naming podGroupPolicy.volcano and scheduling.volcano.sh/v1beta1", err)
	}
	if diff := cmp.Diff(before, p); diff != "" {
		t.Errorf("an unserved API changed the plan (-before +after):\n%s", diff)
	}

	tj, p = gangtest.Skeleton(t, policy(nil), 2)
	if err := (volcano.Backend{}).Apply(context.Background(), tj, p); err != nil || len(gangtest.ObjectsOf(p, "PodGroup")) != 1 {
		t.Errorf("nil Served: err %v, %d PodGroups; want the PodGroup (assumed served)", err, len(gangtest.ObjectsOf(p, "PodGroup")))
	}
}

func TestEnabled(t *testing.T) {
	b := volcano.Backend{}
	if b.Name() != "volcano" {
		t.Errorf("Name() = %q, want volcano", b.Name())
	}
	if !b.Enabled(policy(nil)) {
		t.Error("Enabled(volcano) = false")
	}
	if b.Enabled(&trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}}) {
		t.Error("Enabled(coscheduling) = true")
	}
}

// Upstream's Volcano example (examples/yaml/04-volcano-integration.yaml): a Torch runtime
// with podGroupPolicy.volcano and a TrainJob of 4 nodes, each requesting 1 CPU and 2Gi:
// the PodGroup admits the 4 pods and their 4 CPUs and 8Gi at once, with no queue or
// priority class (the example sets none).
func TestUpstreamVolcanoExample(t *testing.T) {
	const file = "examples/yaml/04-volcano-integration.yaml"
	rt := plantest.UpstreamRuntimeFile(t, file)
	tj := plantest.UpstreamTrainJob(t, file)
	p := gangtest.Plan(t, tj, rt)
	if !(volcano.Backend{}).Enabled(rt.Spec.PodGroupPolicy) {
		t.Fatalf("%s: the runtime does not select Volcano", file)
	}
	if err := (volcano.Backend{Served: served}).Apply(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	pgs := gangtest.ObjectsOf(p, "PodGroup")
	if len(pgs) != 1 {
		t.Fatalf("planned %d PodGroups, want 1", len(pgs))
	}
	gangtest.CheckOwned(t, tj, pgs[0], volcano.GroupVersion, "volcano-example")
	want := map[string]any{"minMember": int64(4), "minResources": map[string]any{"cpu": "4", "memory": "8Gi"}}
	if diff := cmp.Diff(want, pgs[0].Object["spec"]); diff != "" {
		t.Errorf("PodGroup spec (-want +got):\n%s", diff)
	}
	node := plan.TrainerJob(p.JobSet)
	if got := node.Template.Spec.Template.Annotations[volcano.AnnotationGroupName]; got != "volcano-example" {
		t.Errorf("node pod annotation %q, want volcano-example", got)
	}
	if got := node.Template.Spec.Template.Spec.Containers[0].Resources.Requests; !got[corev1.ResourceMemory].Equal(resource.MustParse("2Gi")) {
		t.Errorf("node requests %v: the example's resourcesPerNode did not reach the pods", got)
	}
}
