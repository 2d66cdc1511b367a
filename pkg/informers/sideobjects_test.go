package informers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
)

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secrets    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// sideObject returns the metadata of a v1 kind object in namespace "a", labelled for
// the TrainJob label (none when empty) and controlled by controller (none when nil).
func sideObject(kind, name, label string, controller *metav1.OwnerReference) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, UID: types.UID(name + "-uid"),
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"}},
	}
	if label != "" {
		m.Labels = map[string]string{objectkeys.LabelTrainJobName: label}
	}
	if controller != nil {
		m.OwnerReferences = []metav1.OwnerReference{*controller}
	}
	return m
}

func trainJobRef(name string, uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind,
		Name: name, UID: uid, Controller: new(true)}
}

// TestSideObjectsNeverWatchSecrets: Secrets are not among the side-object resources,
// and Watch refuses them.
func TestSideObjectsNeverWatchSecrets(t *testing.T) {
	for _, gvr := range SideObjectResources {
		if gvr.GroupResource() == secrets.GroupResource() {
			t.Errorf("SideObjectResources lists %v", gvr)
		}
	}
	s := &SideObjects{Client: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())}
	if err := s.Watch(secrets); err == nil {
		t.Error("Watch(secrets) = nil error, want a refusal")
	}
}

// TestSideObjects: the cache holds the labelled ConfigMaps only, trimmed to
// identity, labels and owners; a deletion routes the TrainJobs the object names (label
// and controller) to the build stage, and nothing else routes.
func TestSideObjects(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	hostfile := sideObject("ConfigMap", "llm-mpi-hostfile", "llm", trainJobRef("llm", "uid-1"))
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	for _, obj := range []*metav1.PartialObjectMetadata{
		hostfile,
		sideObject("ConfigMap", "unlabelled", "", trainJobRef("llm", "uid-1")),
		sideObject("ConfigMap", "llm-earlier", "llm", trainJobRef("llm", "uid-0")), // an earlier TrainJob's
		sideObject("ConfigMap", "copied-label", "llm", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d", Controller: new(true)}),
		sideObject("Secret", "llm-mpi-ssh-auth-abcdefghij", "llm", trainJobRef("llm", "uid-1")),
	} {
		gvr := configMaps
		if obj.Kind == "Secret" {
			gvr = secrets
		}
		if _, err := client.Resource(gvr).Namespace("a").(metadatafake.MetadataClient).CreateFake(obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s := &SideObjects{Client: client, Logger: logger}
	r := &fakeRouter{}
	for _, gvr := range SideObjectResources {
		if err := s.Watch(gvr); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Route(r, build); err != nil {
		t.Fatal(err)
	}
	s.Start(ctx)
	defer func() { cancel(); s.Shutdown() }() // Shutdown waits for the stop
	if !cache.WaitForCacheSync(ctx.Done(), s.HasSynced) {
		t.Fatal("caches did not sync")
	}

	got := s.Get(configMaps.GroupResource(), "a", "llm-mpi-hostfile")
	if got == nil {
		t.Fatal("the labelled ConfigMap is not cached")
	}
	want := &metav1.PartialObjectMetadata{TypeMeta: hostfile.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: "a", Name: "llm-mpi-hostfile", UID: hostfile.UID, ResourceVersion: got.GetResourceVersion(),
		Labels: hostfile.Labels, OwnerReferences: hostfile.OwnerReferences}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cached ConfigMap (-want +got):\n%s", diff)
	}
	if got := s.Get(configMaps.GroupResource(), "a", "unlabelled"); got != nil {
		t.Errorf("the unlabelled ConfigMap is cached: %v", got)
	}
	if obj, complete := (SideObjectCache{Objects: s}).Lookup(configMaps.GroupResource(), "a", "llm-earlier"); obj == nil || complete {
		t.Errorf("Lookup of a cached ConfigMap = %v, complete %v; want it, not complete (a label-filtered cache)", obj, complete)
	}
	// Secrets are never listed or watched, labelled or not (the controller has no read
	// access to them).
	if obj, _ := (SideObjectCache{Objects: s}).Lookup(secrets.GroupResource(), "a", "llm-mpi-ssh-auth-abcdefghij"); obj != nil {
		t.Errorf("Lookup of a labelled Secret = %v, want nil: Secrets are not cached", obj)
	}
	for _, a := range client.Actions() {
		if a.GetResource() == secrets && a.GetVerb() != "create" { // the test's own creates
			t.Errorf("the side-object informers called %s on Secrets", a.GetVerb())
		}
	}
	if obj, _ := (SideObjectCache{Objects: s}).Lookup(schema.GroupResource{Group: "scheduling.k8s.io", Resource: "workloads"}, "a", "llm"); obj != nil {
		t.Errorf("Lookup of an unwatched resource = %v, want nil", obj)
	}
	if n := len(r.snapshot()); n != 0 {
		t.Errorf("the initial list routed %v, want nothing", r.snapshot())
	}

	for _, c := range []struct {
		gvr  schema.GroupVersionResource
		name string
		want []route
	}{
		{configMaps, "llm-mpi-hostfile", []route{{build, cache.ObjectName{Namespace: "a", Name: "llm"}}}},
		{configMaps, "llm-earlier", []route{{build, cache.ObjectName{Namespace: "a", Name: "llm"}}}},
		{configMaps, "copied-label", []route{{build, cache.ObjectName{Namespace: "a", Name: "llm"}}}},
	} {
		r.reset()
		if err := client.Resource(c.gvr).Namespace("a").Delete(ctx, c.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 10e6, timeout, true, func(context.Context) (bool, error) {
			return len(r.snapshot()) >= len(c.want), nil
		}); err != nil {
			t.Fatalf("deleting %s %s routed %v, want %v", c.gvr.Resource, c.name, r.snapshot(), c.want)
		}
		if diff := cmp.Diff(c.want, r.snapshot()); diff != "" {
			t.Errorf("deleting %s %s routed (-want +got):\n%s", c.gvr.Resource, c.name, diff)
		}
	}
}

// SideObjectKeys names the labelled TrainJob and the controlling one, once each.
func TestSideObjectKeys(t *testing.T) {
	key := func(name string) cache.ObjectName { return cache.ObjectName{Namespace: "a", Name: name} }
	for name, c := range map[string]struct {
		obj  *metav1.PartialObjectMetadata
		want []cache.ObjectName
	}{
		"ours":                 {sideObject("ConfigMap", "x", "llm", trainJobRef("llm", "u")), []cache.ObjectName{key("llm")}},
		"label only":           {sideObject("ConfigMap", "x", "llm", nil), []cache.ObjectName{key("llm")}},
		"controller only":      {sideObject("ConfigMap", "x", "", trainJobRef("llm", "u")), []cache.ObjectName{key("llm")}},
		"label and controller": {sideObject("ConfigMap", "x", "llm", trainJobRef("other", "u")), []cache.ObjectName{key("llm"), key("other")}},
		"neither":              {sideObject("ConfigMap", "x", "", nil), nil},
	} {
		if diff := cmp.Diff(c.want, SideObjectKeys(c.obj)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

// PodGroups.Get finds a PodGroup of a watched API in any version and says whether the
// API is watched; a PodGroup's deletion routes its TrainJob to the build stage (the
// status stage then re-creates it), adds and updates to the status stage.
func TestPodGroupsGetAndDeleteRoute(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gvr := schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup"}}
	pg.SetNamespace("a")
	pg.SetName("llm")
	pg.SetOwnerReferences([]metav1.OwnerReference{*trainJobRef("llm", "uid-1")})
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "PodGroupList"}, pg)
	p := &PodGroups{Client: client, Logger: logger}
	if err := p.Watch(gvr); err != nil {
		t.Fatal(err)
	}
	r := &fakeRouter{}
	if err := p.Route(r, Routes{Build: build, Status: status}); err != nil {
		t.Fatal(err)
	}
	p.Start(ctx)
	defer func() { cancel(); p.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), p.HasSynced) {
		t.Fatal("caches did not sync")
	}
	if obj, watched := p.Get(gvr.GroupResource(), "a", "llm"); obj == nil || !watched {
		t.Errorf("Get = %v, watched %v; want the PodGroup", obj, watched)
	}
	if obj, watched := p.Get(gvr.GroupResource(), "a", "other"); obj != nil || !watched {
		t.Errorf("Get of a missing PodGroup = %v, watched %v; want nil, watched", obj, watched)
	}
	volcano := schema.GroupResource{Group: "scheduling.volcano.sh", Resource: "podgroups"}
	if obj, watched := p.Get(volcano, "a", "llm"); obj != nil || watched {
		t.Errorf("Get of an unwatched API = %v, watched %v; want nil, not watched", obj, watched)
	}
	if obj, complete := (SideObjectCache{PodGroups: p}).Lookup(gvr.GroupResource(), "a", "other"); obj != nil || !complete {
		t.Errorf("Lookup of a missing PodGroup = %v, complete %v; want nil, complete", obj, complete)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10e6, timeout, true, func(context.Context) (bool, error) {
		return len(r.snapshot()) == 1, nil
	}); err != nil {
		t.Fatalf("the initial add routed %v, want the status stage", r.snapshot())
	}
	r.reset()
	if err := client.Resource(gvr).Namespace("a").Delete(ctx, "llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10e6, timeout, true, func(context.Context) (bool, error) {
		return len(r.snapshot()) > 0, nil
	}); err != nil {
		t.Fatal("the deletion routed nothing")
	}
	if diff := cmp.Diff([]route{{build, cache.ObjectName{Namespace: "a", Name: "llm"}}}, r.snapshot()); diff != "" {
		t.Errorf("deletion routed (-want +got):\n%s", diff)
	}
}
