package app

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/resolveruntime"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

type recordingRouter struct {
	mu   sync.Mutex
	keys []string
}

func (r *recordingRouter) Enqueue(stage string, key cache.ObjectName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, stage+":"+key.String())
}

func (r *recordingRouter) EnqueueAfter(stage string, key cache.ObjectName, _ time.Duration) {
	r.Enqueue(stage, key)
}

func (r *recordingRouter) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

// TestDRAServedLater: when resource.k8s.io/v1 is not served at start-up, TrainJobs with
// claims are rejected as NotSupported; once discovery lists it, the controller starts
// the DRA informers, the claims stage reads them (a missing template is now a plain
// input error, not NotSupported), and the TrainJobs rejected for the missing API go
// back to stage 1.
func TestDRAServedLater(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	kube := kubefake.NewClientset()
	disc := kube.Discovery().(*fakediscovery.FakeDiscovery)
	rejected := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "waits"},
		Status: trainer.TrainJobStatus{Conditions: []metav1.Condition{{Type: trainjob.ConditionJobSetReady,
			Status: metav1.ConditionFalse, Reason: trainjob.ReasonUnsupported}}}}
	running := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "runs"}}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, tj := range []*trainer.TrainJob{rejected, running} {
		if err := indexer.Add(tj); err != nil {
			t.Fatal(err)
		}
	}
	router := &recordingRouter{}
	claims := &dra.Claims{}
	apis := &optionalAPIs{
		served:    &informers.ServedAPIs{Discovery: disc},
		podGroups: &informers.PodGroups{Client: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Logger: logger},
		claims:    claims, kube: kube, trainJobs: trainerlisters.NewTrainJobLister(indexer), router: router, logger: logger,
	}
	if err := apis.register(ctx); err != nil {
		t.Fatal(err)
	}
	apis.start(ctx)
	defer func() { cancel(); apis.shutdown() }() // shutdown waits for the stop
	if err := apis.lead(); err != nil {
		t.Fatal(err)
	}

	withClaim := func() *plan.Plan {
		return &plan.Plan{Runtime: plan.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &trainer.TrainingRuntimeSpec{}},
			JobSet: &jobsetv1alpha2.JobSet{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node"}}}}}
	}
	p := withClaim()
	p.JobSet.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("gpus")}}
	var unsupported *plan.UnsupportedError
	if err := claims.Step()(ctx, running, p); !errors.As(err, &unsupported) {
		t.Fatalf("claims before resource.k8s.io/v1 is served: err = %v, want *plan.UnsupportedError", err)
	}

	disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: "resource.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "resourceclaimtemplates"}, {Name: "resourceclaims"}, {Name: "deviceclasses"}, {Name: "resourceslices"}}})
	apis.served.CheckMissing(ctx)

	err := claims.Step()(ctx, running, p)
	var invalid *plan.InvalidInputError
	if !errors.As(err, &invalid) {
		t.Errorf("claims once resource.k8s.io/v1 is served: err = %v, want *plan.InvalidInputError (template not found)", err)
	}
	want := []string{resolveruntime.Name + ":a/waits"}
	if got := router.snapshot(); !slices.Equal(got, want) {
		t.Errorf("routed %v, want %v (only the TrainJob rejected as NotSupported)", got, want)
	}
	if !apis.HasSynced() {
		t.Error("HasSynced = false after the DRA informers synced")
	}
}

// TestWorkloadAPIServedLater: the side-object informers watch ConfigMaps and Secrets
// from the start and Workloads once the Workload API is served; they sync with the
// optional APIs, and a Workload's deletion routes its TrainJob to stage 1 (which
// rebuilds it, so the status stage re-creates the Workload).
func TestWorkloadAPIServedLater(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	kube := kubefake.NewClientset()
	disc := kube.Discovery().(*fakediscovery.FakeDiscovery)
	workloads := schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}
	meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	workload := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "scheduling.k8s.io/v1alpha2", Kind: "Workload"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "llm", Labels: map[string]string{objectkeys.LabelTrainJobName: "llm"}}}
	if _, err := meta.Resource(workloads).Namespace("a").(metadatafake.MetadataClient).CreateFake(workload, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sideObjects := &informers.SideObjects{Client: meta, Logger: logger}
	for _, gvr := range informers.SideObjectResources {
		if err := sideObjects.Watch(gvr); err != nil {
			t.Fatal(err)
		}
	}
	router := &recordingRouter{}
	podGroups := schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups"}
	apis := &optionalAPIs{
		served: &informers.ServedAPIs{Discovery: disc},
		podGroups: &informers.PodGroups{Logger: logger, Client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{podGroups: "PodGroupList"})},
		sideObjects: sideObjects,
		claims:      &dra.Claims{}, kube: kube, router: router, logger: logger,
		trainJobs: trainerlisters.NewTrainJobLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
	}
	if err := apis.register(ctx); err != nil {
		t.Fatal(err)
	}
	apis.start(ctx)
	defer func() { cancel(); apis.shutdown() }()
	if err := apis.lead(); err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), apis.HasSynced) {
		t.Fatal("caches did not sync")
	}
	if got := sideObjects.Get(workloads.GroupResource(), "a", "llm"); got != nil {
		t.Fatalf("a Workload is cached before the Workload API is served: %v", got)
	}

	disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: "scheduling.k8s.io/v1alpha2",
		APIResources: []metav1.APIResource{{Name: "workloads"}, {Name: "podgroups"}}})
	apis.served.CheckMissing(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), apis.HasSynced) {
		t.Fatal("caches did not sync")
	}
	if got := sideObjects.Get(workloads.GroupResource(), "a", "llm"); got == nil {
		t.Fatal("the Workload is not cached once the Workload API is served")
	}
	if err := meta.Resource(workloads).Namespace("a").Delete(ctx, "llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{resolveruntime.Name + ":a/llm"}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return slices.Equal(router.snapshot(), want), nil
	}); err != nil {
		t.Errorf("routed %v, want %v", router.snapshot(), want)
	}
}
