// Package gangtest holds what the gang backends' tests share: the plan a backend
// receives (built by the real merge and ML-policy stages) and the checks every side
// object a backend plans must pass (docs/design/side-objects.md).
package gangtest

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// WithPolicy returns a copy of rt whose spec has podGroupPolicy policy; rt's spec is left
// alone (runtimes share theirs with the informer cache).
func WithPolicy(rt plan.Runtime, policy *trainer.PodGroupPolicy) plan.Runtime {
	spec := rt.Spec.DeepCopy()
	spec.PodGroupPolicy = policy
	rt.Spec = spec
	return rt
}

// Skeleton returns the skeleton runtime (plantest.SkeletonRuntime: dataset and model
// initializers, trainer "node"; Torch, mlPolicy.numNodes 1) with policy, a TrainJob
// test-job of numNodes for it, and the plan a gang backend receives for them.
func Skeleton(t testing.TB, policy *trainer.PodGroupPolicy, numNodes int32) (*trainer.TrainJob, *plan.Plan) {
	t.Helper()
	rt := WithPolicy(plantest.SkeletonRuntime(&trainer.MLPolicy{NumNodes: ptr.To[int32](1),
		MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}}), policy)
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{NumNodes: ptr.To(numNodes)})
	return tj, Plan(t, tj, rt)
}

// Plan returns the plan stages 1–3 build for tj from rt (the merge of the runtime and
// the TrainJob's patches, then the ML policy): what the gang stage, stage 4, receives.
func Plan(t testing.TB, tj *trainer.TrainJob, rt plan.Runtime) *plan.Plan {
	t.Helper()
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		t.Fatalf("merging %s into TrainJob %s: %v", rt.Ref(), tj.Name, err)
	}
	p := &plan.Plan{Runtime: rt, JobSet: js}
	if err := mlpolicy.Apply(tj, p, mlpolicy.DefaultPlugins(mlpolicy.SecretNames{})); err != nil {
		t.Fatalf("ML policy of %s for TrainJob %s: %v", rt.Ref(), tj.Name, err)
	}
	return p
}

// ObjectsOf returns p's side objects of kind, in order.
func ObjectsOf(p *plan.Plan, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range p.Objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// CheckOwned fails the test unless obj is apiVersion, named name, in tj's namespace,
// labelled with tj's name, with exactly one owner reference, tj as controller (its UID),
// and unless an earlier TrainJob of the same name (another UID) would not count as its
// controller: the status stage uses and applies over a side object only when the
// TrainJob's UID controls it (docs/design/side-objects.md).
func CheckOwned(t testing.TB, tj *trainer.TrainJob, obj *unstructured.Unstructured, apiVersion, name string) {
	t.Helper()
	id := obj.GetKind() + " " + obj.GetName()
	if obj.GetAPIVersion() != apiVersion || obj.GetName() != name || obj.GetNamespace() != tj.Namespace {
		t.Errorf("%s: apiVersion %q, name %q, namespace %q; want %q, %q, %q", id, obj.GetAPIVersion(), obj.GetName(), obj.GetNamespace(),
			apiVersion, name, tj.Namespace)
	}
	if got := obj.GetLabels()[objectkeys.LabelTrainJobName]; got != tj.Name {
		t.Errorf("%s: label %s = %q, want %q (the side-object informers select on it)", id, objectkeys.LabelTrainJobName, got, tj.Name)
	}
	refs := obj.GetOwnerReferences()
	want := metav1.OwnerReference{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind, Name: tj.Name, UID: tj.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	if len(refs) != 1 || refs[0].APIVersion != want.APIVersion || refs[0].Kind != want.Kind || refs[0].Name != want.Name ||
		refs[0].UID != want.UID || !ptr.Deref(refs[0].Controller, false) || !ptr.Deref(refs[0].BlockOwnerDeletion, false) {
		t.Errorf("%s: ownerReferences %+v, want exactly the TrainJob as controller, blocking its deletion: %+v", id, refs, want)
	}
	if !metav1.IsControlledBy(obj, tj) {
		t.Errorf("%s: not controlled by TrainJob %s (uid %s)", id, tj.Name, tj.UID)
	}
	earlier := tj.DeepCopy()
	earlier.UID = types.UID(string(tj.UID) + "-earlier")
	if metav1.IsControlledBy(obj, earlier) {
		t.Errorf("%s: counts as controlled by an earlier TrainJob of the same name (uid %s)", id, earlier.UID)
	}
}

// OnlyPodGroup returns the one side object p plans, failing t unless it is a PodGroup
// of apiVersion named name that tj controls (CheckOwned): what the coscheduling and
// Volcano backends plan.
func OnlyPodGroup(t testing.TB, tj *trainer.TrainJob, p *plan.Plan, apiVersion, name string) *unstructured.Unstructured {
	t.Helper()
	if len(p.Objects) != 1 {
		t.Fatalf("planned %d side objects, want one PodGroup", len(p.Objects))
	}
	pg := p.Objects[0]
	if pg.GetKind() != "PodGroup" {
		t.Errorf("kind %q, want PodGroup", pg.GetKind())
	}
	CheckOwned(t, tj, pg, apiVersion, name)
	return pg
}
