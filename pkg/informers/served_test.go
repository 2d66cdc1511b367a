package informers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// TestServedAPIs: an API served at Add is reported served and its hook never runs; a
// missing one is reported missing until discovery lists all its resources, then its
// hook runs exactly once.
func TestServedAPIs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	disc := kubefake.NewClientset().Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: "scheduling.k8s.io/v1alpha2",
		APIResources: []metav1.APIResource{{Name: "workloads"}, {Name: "podgroups"}}}}
	s := &ServedAPIs{Discovery: disc}
	calls := map[string]int{}
	hook := func(gv string) func(context.Context) { return func(context.Context) { calls[gv]++ } }

	if !s.Add("scheduling.k8s.io/v1alpha2", []string{"workloads", "podgroups"}, hook("v1alpha2")) {
		t.Error("v1alpha2 served at Add: Add = false")
	}
	if s.Add("scheduling.k8s.io/v1beta1", []string{"workloads", "podgroups"}, hook("v1beta1")) {
		t.Error("v1beta1 not served: Add = true")
	}
	if s.Served("scheduling.k8s.io/v1beta1") || s.Served("never.added/v1") || !s.Served("scheduling.k8s.io/v1alpha2") {
		t.Error("Served does not reflect the checks")
	}

	// Half of the resources is not enough.
	disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: "scheduling.k8s.io/v1beta1",
		APIResources: []metav1.APIResource{{Name: "workloads"}}})
	s.CheckMissing(ctx)
	if s.Served("scheduling.k8s.io/v1beta1") || calls["v1beta1"] != 0 {
		t.Errorf("v1beta1 without podgroups: served %v, hook calls %d; want false, 0", s.Served("scheduling.k8s.io/v1beta1"), calls["v1beta1"])
	}

	disc.Resources[1].APIResources = append(disc.Resources[1].APIResources, metav1.APIResource{Name: "podgroups"})
	s.CheckMissing(ctx)
	s.CheckMissing(ctx)
	if !s.Served("scheduling.k8s.io/v1beta1") {
		t.Error("v1beta1 served now: Served = false")
	}
	if diff := cmp.Diff(map[string]int{"v1beta1": 1}, calls); diff != "" {
		t.Errorf("hook calls (-want +got):\n%s", diff)
	}
}

// TestEnqueueRejected: only unfinished TrainJobs rejected with one of the reasons go
// back to the stage.
func TestEnqueueRejected(t *testing.T) {
	rejected := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionFalse, Reason: reason}}
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, tj := range []*trainer.TrainJob{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "unsupported"}, Status: trainer.TrainJobStatus{Conditions: rejected(trainjob.ReasonUnsupported)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "invalid"}, Status: trainer.TrainJobStatus{Conditions: rejected(trainjob.ReasonInvalidSpec)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "running"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "failed-unsupported"}, Status: trainer.TrainJobStatus{Conditions: append(rejected(trainjob.ReasonUnsupported),
			metav1.Condition{Type: trainer.TrainJobFailed, Status: metav1.ConditionTrue})}},
	} {
		if err := indexer.Add(tj); err != nil {
			t.Fatal(err)
		}
	}
	r := &fakeRouter{}
	if err := EnqueueRejected(trainerlisters.NewTrainJobLister(indexer), r, build, trainjob.ReasonUnsupported); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]route{{build, cache.ObjectName{Namespace: "a", Name: "unsupported"}}}, r.snapshot(), cmp.AllowUnexported(route{})); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
}

// TestTrimPodGroup keeps identity, owners, gang size and status, and drops the rest.
func TestTrimPodGroup(t *testing.T) {
	in := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
		"metadata": map[string]any{"name": "job-node", "namespace": "a", "uid": "u1", "resourceVersion": "7",
			"labels": map[string]any{"x": "y"}, "managedFields": []any{map[string]any{"manager": "m"}},
			"ownerReferences": []any{map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job", "uid": "t1", "controller": true}}},
		"spec": map[string]any{"podGroupTemplateRef": map[string]any{"workload": map[string]any{"workloadName": "job"}},
			"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(3)}}},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "PodGroupScheduled", "status": "False"}}},
	}}
	out, err := TrimPodGroup(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
		"metadata": map[string]any{"name": "job-node", "namespace": "a", "uid": "u1", "resourceVersion": "7",
			"ownerReferences": []any{map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job", "uid": "t1", "controller": true}}},
		"spec":   map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(3)}}},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "PodGroupScheduled", "status": "False"}}},
	}
	if diff := cmp.Diff(want, out.(*unstructured.Unstructured).Object); diff != "" {
		t.Errorf("trimmed (-want +got):\n%s", diff)
	}
	if got := ControllerTrainJob(out.(*unstructured.Unstructured)); got != "job" {
		t.Errorf("ControllerTrainJob(trimmed) = %q, want job (the owner index needs it)", got)
	}
}
