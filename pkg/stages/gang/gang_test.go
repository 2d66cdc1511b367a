package gang_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/gang"
	"github.com/trainyard/trainyard/pkg/stages/gang/coscheduling"
	"github.com/trainyard/trainyard/pkg/stages/gang/kai"
	"github.com/trainyard/trainyard/pkg/stages/gang/volcano"
	"github.com/trainyard/trainyard/pkg/stages/gang/workload"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// built returns the plan of the skeleton runtime of
// docs/compatibility.md#upstream-test-cases (dataset and model initializers, trainer
// "node") for a TrainJob of numNodes, through the real merge and ML stages.
func built(t *testing.T, policy *trainer.PodGroupPolicy, numNodes int32) (*trainer.TrainJob, *plan.Plan) {
	t.Helper()
	rt := plantest.SkeletonRuntime(&trainer.MLPolicy{NumNodes: ptr.To[int32](1), MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}})
	spec := rt.Spec.DeepCopy()
	spec.PodGroupPolicy = policy
	rt.Spec = spec
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To(numNodes)})
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{Runtime: rt, JobSet: js}
	if err := mlpolicy.Apply(tj, p, mlpolicy.DefaultPlugins(mlpolicy.SecretNames{})); err != nil {
		t.Fatal(err)
	}
	return tj, p
}

func backends(served bool) []gang.Backend {
	return []gang.Backend{
		// The v1alpha2 shape: TestWorkload decodes into its Go types.
		workload.Backend{Served: func(gv string) bool { return served && gv == schedulingv1alpha2.SchemeGroupVersion.String() }},
		kai.Backend{},
	}
}

func TestNoPodGroupPolicyPassesThrough(t *testing.T) {
	tj, p := built(t, nil, 3)
	before := p.DeepCopy()
	if err := gang.Step(backends(true))(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, p); diff != "" {
		t.Errorf("plan changed without a podGroupPolicy (-before +after):\n%s", diff)
	}
}

func TestPolicyWithoutBackendIsUnsupported(t *testing.T) {
	tj, p := built(t, &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}}, 2)
	err := gang.Step(backends(true))(context.Background(), tj, p)
	if !plan.IsInputError(err) || !strings.Contains(err.Error(), "coscheduling") {
		t.Errorf("coscheduling without a backend: err = %v, want an UnsupportedError naming coscheduling", err)
	}
}

func TestKAI(t *testing.T) {
	tj, p := built(t, &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{Queue: "team-a"}}}, 2)
	if err := gang.Step(backends(true))(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	if got := p.JobSet.Labels[kai.LabelQueue]; got != "team-a" {
		t.Errorf("JobSet label %s = %q, want team-a", kai.LabelQueue, got)
	}
	for _, rj := range p.JobSet.Spec.ReplicatedJobs {
		pod := rj.Template.Spec.Template
		if pod.Spec.SchedulerName != kai.SchedulerName || pod.Labels[kai.LabelQueue] != "team-a" {
			t.Errorf("replicatedJob %s: schedulerName %q, queue label %q; want %s and team-a", rj.Name, pod.Spec.SchedulerName, pod.Labels[kai.LabelQueue], kai.SchedulerName)
		}
	}
	if len(p.Objects) != 0 {
		t.Errorf("KAI planned %d side objects; KAI's podgrouper owns PodGroups", len(p.Objects))
	}

	_, conflicting := built(t, p.Runtime.Spec.PodGroupPolicy, 2)
	conflicting.JobSet.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.SchedulerName = "volcano"
	if err := gang.Step(backends(true))(context.Background(), tj, conflicting); !plan.IsInputError(err) || !strings.Contains(err.Error(), "replicatedJobs[name=node]") {
		t.Errorf("a pod template on another scheduler: err = %v, want an input error naming replicatedJobs[name=node]", err)
	}
}

func TestWorkload(t *testing.T) {
	policy := &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}}
	tj, p := built(t, policy, 3)
	if err := gang.Step(backends(true))(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	if len(p.Objects) != 2 {
		t.Fatalf("planned %d objects, want a Workload and one PodGroup (initializers get none)", len(p.Objects))
	}
	var wl schedulingv1alpha2.Workload
	var pg schedulingv1alpha2.PodGroup
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(p.Objects[0].Object, &wl); err != nil {
		t.Fatal(err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(p.Objects[1].Object, &pg); err != nil {
		t.Fatal(err)
	}
	gang3 := schedulingv1alpha2.PodGroupSchedulingPolicy{Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: 3}}
	wantWorkload := schedulingv1alpha2.WorkloadSpec{
		ControllerRef:     &schedulingv1alpha2.TypedLocalObjectReference{APIGroup: trainer.GroupName, Kind: trainer.TrainJobKind, Name: tj.Name},
		PodGroupTemplates: []schedulingv1alpha2.PodGroupTemplate{{Name: "node", SchedulingPolicy: gang3}},
	}
	if diff := cmp.Diff(wantWorkload, wl.Spec); diff != "" {
		t.Errorf("Workload spec (-want +got):\n%s", diff)
	}
	wantPodGroup := schedulingv1alpha2.PodGroupSpec{
		PodGroupTemplateRef: &schedulingv1alpha2.PodGroupTemplateReference{Workload: &schedulingv1alpha2.WorkloadPodGroupTemplateReference{WorkloadName: tj.Name, PodGroupTemplateName: "node"}},
		SchedulingPolicy:    gang3,
	}
	if diff := cmp.Diff(wantPodGroup, pg.Spec); diff != "" {
		t.Errorf("PodGroup spec (-want +got):\n%s", diff)
	}
	if pg.Name != "test-job-node" || wl.Name != "test-job" {
		t.Errorf("names: Workload %q PodGroup %q, want test-job and test-job-node", wl.Name, pg.Name)
	}
	for _, obj := range []*schedulingv1alpha2.Workload{&wl} {
		if len(obj.OwnerReferences) != 1 || obj.OwnerReferences[0].UID != tj.UID || !ptr.Deref(obj.OwnerReferences[0].Controller, false) {
			t.Errorf("Workload owners = %+v, want the TrainJob as controller", obj.OwnerReferences)
		}
	}
	for _, rj := range p.JobSet.Spec.ReplicatedJobs {
		got := rj.Template.Spec.Template.Spec.SchedulingGroup
		var want *corev1.PodSchedulingGroup
		if rj.Name == "node" {
			want = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("test-job-node")}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("replicatedJob %s schedulingGroup (-want +got):\n%s", rj.Name, diff)
		}
	}
}

func TestWorkloadNotServed(t *testing.T) {
	policy := &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}}
	tj, p := built(t, policy, 3)
	err := gang.Step(backends(false))(context.Background(), tj, p)
	if !plan.IsInputError(err) || !strings.Contains(err.Error(), "GenericWorkload") || !strings.Contains(err.Error(), "proceeds by itself") {
		t.Errorf("err = %v, want an UnsupportedError telling how to enable the Workload API", err)
	}
}

// TestCoscheduling is docs/compatibility.md#coscheduling's example: initializers and
// trainer at 1 CPU each, numNodes 30 → minMember 32 and cpu 32, every pod labelled.
func TestCoscheduling(t *testing.T) {
	policy := &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To[int32](120)}}}
	tj, p := built(t, policy, 30)
	if err := gang.Step(allBackends(true))(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	if len(p.Objects) != 1 {
		t.Fatalf("planned %d objects, want one PodGroup", len(p.Objects))
	}
	pg := p.Objects[0]
	if pg.GetAPIVersion() != coscheduling.GroupVersion || pg.GetName() != tj.Name {
		t.Errorf("PodGroup %s %s, want %s %s", pg.GetAPIVersion(), pg.GetName(), coscheduling.GroupVersion, tj.Name)
	}
	want := map[string]any{"minMember": int64(32), "minResources": map[string]any{"cpu": "32"}, "scheduleTimeoutSeconds": int64(120)}
	if diff := cmp.Diff(want, pg.Object["spec"]); diff != "" {
		t.Errorf("PodGroup spec (-want +got):\n%s", diff)
	}
	for _, rj := range p.JobSet.Spec.ReplicatedJobs {
		if got := rj.Template.Spec.Template.Labels[coscheduling.LabelPodGroup]; got != tj.Name {
			t.Errorf("replicatedJob %s pod label %s = %q, want %q", rj.Name, coscheduling.LabelPodGroup, got, tj.Name)
		}
	}
	if err := gang.Step(allBackends(false))(context.Background(), tj, p); !plan.IsInputError(err) || !strings.Contains(err.Error(), coscheduling.GroupVersion) {
		t.Errorf("CRD not served: err = %v, want an UnsupportedError naming %s", err, coscheduling.GroupVersion)
	}
}

func TestVolcano(t *testing.T) {
	policy := &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{
		NetworkTopology: &trainer.NetworkTopologySpec{Mode: trainer.NetworkTopologyModeHard, HighestTierAllowed: ptr.To(2)}}}}
	tj, p := built(t, policy, 2)
	p.JobSet.Annotations = map[string]string{volcano.AnnotationQueueName: "research"}
	p.JobSet.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.PriorityClassName = "high"
	if err := gang.Step(allBackends(true))(context.Background(), tj, p); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"minMember": int64(4), "minResources": map[string]any{"cpu": "4"},
		"queue": "research", "priorityClassName": "high",
		"networkTopology": map[string]any{"mode": "hard", "highestTierAllowed": int64(2)},
	}
	if diff := cmp.Diff(want, p.Objects[0].Object["spec"]); diff != "" {
		t.Errorf("PodGroup spec (-want +got):\n%s", diff)
	}
	for _, rj := range p.JobSet.Spec.ReplicatedJobs {
		if got := rj.Template.Spec.Template.Annotations[volcano.AnnotationGroupName]; got != tj.Name {
			t.Errorf("replicatedJob %s pod annotation = %q, want %q", rj.Name, got, tj.Name)
		}
	}

	_, empty := built(t, policy, 2)
	empty.JobSet.Annotations = map[string]string{volcano.AnnotationQueueName: ""}
	if err := gang.Step(allBackends(true))(context.Background(), tj, empty); !plan.IsInputError(err) || !strings.Contains(err.Error(), "must not be empty") {
		t.Errorf("empty queue: err = %v, want an input error", err)
	}
}

func allBackends(served bool) []gang.Backend {
	check := func(string) bool { return served }
	return append(backends(served), coscheduling.Backend{Served: check}, volcano.Backend{Served: check})
}

// TestWorkloadVersions: the backend builds the newest served version; v1alpha3 and
// v1beta1 PodGroups reference their template with spec.workloadRef, v1alpha2 with
// spec.podGroupTemplateRef.workload.
func TestWorkloadVersions(t *testing.T) {
	policy := &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}}
	v1alpha2Ref := map[string]any{"podGroupTemplateRef": map[string]any{"workload": map[string]any{"workloadName": "test-job", "podGroupTemplateName": "node"}}}
	newRef := map[string]any{"workloadRef": map[string]any{"workloadName": "test-job", "templateName": "node"}}
	cases := map[string]struct {
		served  []string
		want    string
		wantRef map[string]any
	}{
		"1.37: v1beta1 and v1alpha3 served":  {served: []string{"scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3"}, want: "scheduling.k8s.io/v1beta1", wantRef: newRef},
		"v1alpha3 only":                      {served: []string{"scheduling.k8s.io/v1alpha3"}, want: "scheduling.k8s.io/v1alpha3", wantRef: newRef},
		"1.36: v1alpha2 only":                {served: []string{"scheduling.k8s.io/v1alpha2"}, want: "scheduling.k8s.io/v1alpha2", wantRef: v1alpha2Ref},
		"all three":                          {served: workload.Versions, want: "scheduling.k8s.io/v1beta1", wantRef: newRef},
		"another group's v1beta1 is no help": {served: []string{"scheduling.x-k8s.io/v1beta1", "scheduling.k8s.io/v1alpha2"}, want: "scheduling.k8s.io/v1alpha2", wantRef: v1alpha2Ref},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := workload.Backend{Served: func(gv string) bool { return slices.Contains(tc.served, gv) }}
			if got := b.Version(); got != tc.want {
				t.Errorf("Version() = %q, want %q", got, tc.want)
			}
			tj, p := built(t, policy, 3)
			if err := gang.Step([]gang.Backend{b})(context.Background(), tj, p); err != nil {
				t.Fatal(err)
			}
			if len(p.Objects) != 2 {
				t.Fatalf("planned %d objects, want a Workload and a PodGroup", len(p.Objects))
			}
			for _, obj := range p.Objects {
				if obj.GetAPIVersion() != tc.want {
					t.Errorf("%s apiVersion %q, want %q", obj.GetKind(), obj.GetAPIVersion(), tc.want)
				}
			}
			wantSpec := map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(3)}}}
			for k, v := range tc.wantRef {
				wantSpec[k] = v
			}
			if diff := cmp.Diff(wantSpec, p.Objects[1].Object["spec"]); diff != "" {
				t.Errorf("PodGroup spec (-want +got):\n%s", diff)
			}
			wantTemplates := []any{map[string]any{"name": "node", "schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(3)}}}}
			if diff := cmp.Diff(wantTemplates, p.Objects[0].Object["spec"].(map[string]any)["podGroupTemplates"]); diff != "" {
				t.Errorf("Workload podGroupTemplates (-want +got):\n%s", diff)
			}
		})
	}
	if got := (workload.Backend{Served: func(string) bool { return false }}).Version(); got != "" {
		t.Errorf("Version() with nothing served = %q, want \"\"", got)
	}
}

// Shared claims (resourceClaimName) of a gang's pods are reserved for its PodGroup on
// the 1.37 versions (KEP-5729), at most four, in the pods' order, in both the PodGroup
// and its template; claims from templates stay pod-level; on v1alpha2 nothing moves and
// PodGroupResourceClaims=False explains why; where they move it is True (and an earlier
// False turns True).
func TestWorkloadPodGroupResourceClaims(t *testing.T) {
	policy := &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}}
	claim := func(name string, shared bool) corev1.PodResourceClaim {
		if shared {
			return corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To("rc-" + name)}
		}
		return corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To("tpl-" + name)}
	}
	withClaims := func(t *testing.T) (*trainer.TrainJob, *plan.Plan) {
		tj, p := built(t, policy, 2)
		plan.PodSpec(plan.TrainerJob(p.JobSet)).ResourceClaims = []corev1.PodResourceClaim{
			claim("a", true), claim("per-pod", false), claim("b", true), claim("c", true), claim("d", true), claim("e", true),
		}
		return tj, p
	}
	wantClaims := []any{
		map[string]any{"name": "a", "resourceClaimName": "rc-a"}, map[string]any{"name": "b", "resourceClaimName": "rc-b"},
		map[string]any{"name": "c", "resourceClaimName": "rc-c"}, map[string]any{"name": "d", "resourceClaimName": "rc-d"},
	}
	served := func(versions ...string) workload.Backend {
		return workload.Backend{Served: func(gv string) bool { return slices.Contains(versions, gv) }}
	}

	t.Run("1.37: reserved for the PodGroup", func(t *testing.T) {
		tj, p := withClaims(t)
		if err := gang.Step([]gang.Backend{served("scheduling.k8s.io/v1beta1")})(context.Background(), tj, p); err != nil {
			t.Fatal(err)
		}
		template := p.Objects[0].Object["spec"].(map[string]any)["podGroupTemplates"].([]any)[0].(map[string]any)
		if diff := cmp.Diff(wantClaims, template["resourceClaims"]); diff != "" {
			t.Errorf("Workload podGroupTemplate resourceClaims (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantClaims, p.Objects[1].Object["spec"].(map[string]any)["resourceClaims"]); diff != "" {
			t.Errorf("PodGroup resourceClaims (-want +got):\n%s", diff)
		}
		if got := plan.PodSpec(plan.TrainerJob(p.JobSet)).ResourceClaims; len(got) != 6 {
			t.Errorf("pod claims = %v, want all six kept (pods consume a PodGroup claim through their identical entry)", got)
		}
		if len(p.Conditions) != 1 {
			t.Fatalf("conditions = %v, want PodGroupResourceClaims=True", p.Conditions)
		}
		c := p.Conditions[0]
		if c.Type != trainjob.ConditionPodGroupResourceClaims || c.Status != metav1.ConditionTrue || c.Reason != trainjob.ReasonPodGroupClaims ||
			!strings.Contains(c.Message, "[node/a node/b node/c node/d]") || !strings.Contains(c.Message, "scheduling.k8s.io/v1beta1") {
			t.Errorf("condition = %+v, want True/%s naming the four claims moved and the version", c, trainjob.ReasonPodGroupClaims)
		}
	})
	t.Run("1.36: pod-level, with a condition", func(t *testing.T) {
		tj, p := withClaims(t)
		if err := gang.Step([]gang.Backend{served("scheduling.k8s.io/v1alpha2")})(context.Background(), tj, p); err != nil {
			t.Fatal(err)
		}
		for _, obj := range p.Objects {
			if strings.Contains(fmt.Sprint(obj.Object["spec"]), "resourceClaims") {
				t.Errorf("%s carries resourceClaims on v1alpha2: %v", obj.GetKind(), obj.Object["spec"])
			}
		}
		if len(p.Conditions) != 1 {
			t.Fatalf("conditions = %v, want PodGroupResourceClaims=False", p.Conditions)
		}
		c := p.Conditions[0]
		if c.Type != trainjob.ConditionPodGroupResourceClaims || c.Status != metav1.ConditionFalse || c.Reason != trainjob.ReasonPodGroupClaimsUnsupported ||
			!strings.Contains(c.Message, "node/a") || !strings.Contains(c.Message, "Kubernetes 1.37") || strings.Contains(c.Message, "per-pod") {
			t.Errorf("condition = %+v", c)
		}
	})
	t.Run("healed on 1.37", func(t *testing.T) {
		tj, p := withClaims(t)
		tj.Status.Conditions = []metav1.Condition{{Type: trainjob.ConditionPodGroupResourceClaims, Status: metav1.ConditionFalse, Reason: trainjob.ReasonPodGroupClaimsUnsupported}}
		if err := gang.Step([]gang.Backend{served("scheduling.k8s.io/v1alpha3")})(context.Background(), tj, p); err != nil {
			t.Fatal(err)
		}
		if len(p.Conditions) != 1 || p.Conditions[0].Status != metav1.ConditionTrue || p.Conditions[0].Reason != trainjob.ReasonPodGroupClaims {
			t.Errorf("conditions = %+v, want PodGroupResourceClaims=True", p.Conditions)
		}
	})
	t.Run("no shared claims: nothing to say", func(t *testing.T) {
		tj, p := built(t, policy, 2)
		if err := gang.Step([]gang.Backend{served("scheduling.k8s.io/v1alpha2")})(context.Background(), tj, p); err != nil {
			t.Fatal(err)
		}
		if len(p.Conditions) != 0 {
			t.Errorf("conditions = %v, want none", p.Conditions)
		}
	})
}
