package informers

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
)

// TestDRARoute: ResourceClaimTemplates and user ResourceClaims added to a namespace
// route that namespace's unfinished TrainJobs to the build stage, DeviceClasses every
// unfinished TrainJob; the initial list and pod-generated claims route nothing.
func TestDRARoute(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	done := metav1.Condition{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue}
	trainJobs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, tj := range []*trainer.TrainJob{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "waiting"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "done"}, Status: trainer.TrainJobStatus{Conditions: []metav1.Condition{done}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "other"}},
	} {
		if err := trainJobs.Add(tj); err != nil {
			t.Fatal(err)
		}
	}
	kube := kubefake.NewClientset(
		&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "existing"}},
		&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"}},
	)
	d := NewDRA(kube, 0, nil)
	r := &fakeRouter{}
	if err := d.Route(logger, r, build, trainerlisters.NewTrainJobLister(trainJobs)); err != nil {
		t.Fatal(err)
	}
	d.Start(ctx)
	defer func() { cancel(); d.Shutdown() }() // Shutdown waits for the stop
	if !d.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}

	podClaim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "worker-0-gpus",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "worker-0", UID: "u", Controller: new(true)}}}}
	want := func(keys ...string) []route {
		out := []route{}
		for _, k := range keys {
			ns, name, _ := cache.SplitMetaNamespaceKey(k)
			out = append(out, route{build, cache.ObjectName{Namespace: ns, Name: name}})
		}
		return out
	}
	steps := []struct {
		name   string
		create func() error
		want   []route
	}{
		{"template", func() error {
			_, err := kube.ResourceV1().ResourceClaimTemplates("a").Create(ctx,
				&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}}, metav1.CreateOptions{})
			return err
		}, want("a/waiting")},
		{"pod-generated claim, then a user claim", func() error {
			if _, err := kube.ResourceV1().ResourceClaims("b").Create(ctx, podClaim, metav1.CreateOptions{}); err != nil {
				return err
			}
			// Handlers run in order: had the pod's claim routed b/other, it would show first.
			_, err := kube.ResourceV1().ResourceClaims("a").Create(ctx,
				&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}, metav1.CreateOptions{})
			return err
		}, want("a/waiting")},
		{"device class", func() error {
			_, err := kube.ResourceV1().DeviceClasses().Create(ctx,
				&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "rdma.example.com"}}, metav1.CreateOptions{})
			return err
		}, want("a/waiting", "b/other")},
	}
	for _, step := range steps {
		r.reset()
		if err := step.create(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		var got []route
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			got = r.snapshot()
			return len(got) >= len(step.want), nil
		})
		if err != nil {
			t.Fatalf("%s: routes %v, want %v", step.name, got, step.want)
		}
		sortRoutes := cmpopts.SortSlices(func(a, b route) bool { return a.String() < b.String() })
		if diff := cmp.Diff(step.want, got, sortRoutes); diff != "" {
			t.Errorf("%s: routes (-want +got):\n%s", step.name, diff)
		}
	}
}
