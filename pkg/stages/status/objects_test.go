package status_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/status"
)

// recordingApplier is an ObjectApplier over an in-memory store that stands for the
// API server and the informer caches at once; it logs the writes into log, shared with
// the JobSet apply.
type recordingApplier struct {
	log       *[]string
	created   []*unstructured.Unstructured
	createErr error
	applyErr  error // what Apply returns, after logging the attempt; nil applies
	// objects are the existing objects by "Kind name"; uncached ones only the API
	// server shows (no informer cache holds them).
	objects  map[string]metav1.Object
	uncached map[string]bool
	// liveLookups counts lookups that reached the API server.
	liveLookups int
	// secretLookups counts lookups of Secrets, which the controller may not read.
	secretLookups int
}

func objectKeyOf(obj *unstructured.Unstructured) string { return obj.GetKind() + " " + obj.GetName() }

func (r *recordingApplier) Apply(_ context.Context, obj *unstructured.Unstructured) error {
	*r.log = append(*r.log, "apply "+objectKeyOf(obj))
	if r.applyErr != nil {
		return r.applyErr
	}
	r.put(obj)
	return nil
}

func (r *recordingApplier) Create(_ context.Context, obj *unstructured.Unstructured) error {
	*r.log = append(*r.log, "create "+objectKeyOf(obj))
	if r.createErr != nil {
		return r.createErr
	}
	if r.objects[objectKeyOf(obj)] != nil {
		return apierrors.NewAlreadyExists(schema.GroupResource{Resource: obj.GetKind()}, obj.GetName())
	}
	r.created = append(r.created, obj)
	r.put(obj)
	return nil
}

func (r *recordingApplier) Lookup(_ context.Context, obj *unstructured.Unstructured, cacheOnly bool) (metav1.Object, bool, error) {
	k := objectKeyOf(obj)
	if obj.GetKind() == "Secret" {
		r.secretLookups++
	}
	if !r.uncached[k] {
		return r.objects[k], r.objects[k] != nil, nil
	}
	if cacheOnly {
		return nil, false, nil
	}
	r.liveLookups++
	return r.objects[k], false, nil
}

func (r *recordingApplier) put(obj *unstructured.Unstructured) {
	if r.objects == nil {
		r.objects = map[string]metav1.Object{}
	}
	r.objects[objectKeyOf(obj)] = obj.DeepCopy()
	delete(r.uncached, objectKeyOf(obj))
}

// planWithSideObjects is desiredPlan plus a create-only Secret whose content Generate
// fills with value, and an applied ConfigMap.
func planWithSideObjects(t *testing.T, value string) *plan.Plan {
	t.Helper()
	tj := makeTrainJob().Obj()
	p := desiredPlan(t, tj)
	secret := plan.OwnedObject(tj, "v1", "Secret", tjName+"-secret")
	p.CreateOnly = []plan.CreateOnlyObject{{Object: secret, Generate: func(obj *unstructured.Unstructured) error {
		obj.Object["data"] = map[string]any{"key": value}
		return nil
	}}}
	cm := plan.OwnedObject(tj, "v1", "ConfigMap", tjName+"-config")
	cm.Object["data"] = map[string]any{"hostfile": "a slots=1\n"}
	p.Objects = []*unstructured.Unstructured{cm}
	return p
}

// Side objects are written before the JobSet: create-only objects first, generated
// right before creation; the generated content stays out of the stored plan and out of
// the JobSet hash.
func TestSyncWritesSideObjects(t *testing.T) {
	syncPlan := func(t *testing.T, p *plan.Plan) (log []string, applier *recordingApplier, hash string) {
		t.Helper()
		tj := makeTrainJob().Obj()
		f := newFixture(t, tj, nil)
		applier = &recordingApplier{log: &log}
		f.stage.Objects = applier
		f.jobsets.PrependReactor("patch", "jobsets", func(clienttesting.Action) (bool, runtime.Object, error) {
			log = append(log, "apply JobSet")
			return false, nil, nil
		})
		f.plans.Put(key, tj.UID, tj.Generation, p)
		if _, err := f.sync(t); err != nil {
			t.Fatalf("Sync: %v", err)
		}
		applies := f.jobSetApplies()
		if len(applies) != 1 {
			t.Fatalf("JobSet applies = %d, want 1", len(applies))
		}
		return log, applier, appliedHash(t, applies[0])
	}

	p := planWithSideObjects(t, "first")
	log, applier, hash := syncPlan(t, p)
	want := []string{"create Secret llm-secret", "apply ConfigMap llm-config", "apply JobSet"}
	if diff := cmp.Diff(want, log); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if got, _, _ := unstructured.NestedString(applier.created[0].Object, "data", "key"); got != "first" {
		t.Errorf("created Secret data.key = %q, want the generated %q", got, "first")
	}
	if _, ok := p.CreateOnly[0].Object.Object["data"]; ok {
		t.Error("generating modified the plan's object")
	}

	_, _, other := syncPlan(t, planWithSideObjects(t, "second"))
	if other != hash {
		t.Errorf("hash with other generated content = %s, want %s: create-only objects must not enter the hash", other, hash)
	}
	withoutCreateOnly := planWithSideObjects(t, "first")
	withoutCreateOnly.CreateOnly = nil
	if _, _, h := syncPlan(t, withoutCreateOnly); h != hash {
		t.Errorf("hash without the create-only object = %s, want %s", h, hash)
	}
	changedConfig := planWithSideObjects(t, "first")
	changedConfig.Objects[0].Object["data"] = map[string]any{"hostfile": "b slots=1\n"}
	if _, _, h := syncPlan(t, changedConfig); h == hash {
		t.Error("a changed applied side object did not change the hash")
	}
}

// A failed creation stops the pass before the JobSet, which is retried.
func TestSyncCreateOnlyError(t *testing.T) {
	tj := makeTrainJob().Obj()
	f := newFixture(t, tj, nil)
	var log []string
	f.stage.Objects = &recordingApplier{log: &log, createErr: errors.New("boom")}
	f.plans.Put(key, tj.UID, tj.Generation, planWithSideObjects(t, "x"))
	if _, err := f.sync(t); err == nil {
		t.Fatal("Sync succeeded, want the creation error")
	}
	if diff := cmp.Diff([]string{"create Secret llm-secret"}, log); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if n := len(f.jobSetApplies()); n != 0 {
		t.Errorf("JobSet applies = %d, want none", n)
	}
}

// resettable makes a static RESTMapper a meta.ResettableRESTMapper.
type resettable struct{ meta.RESTMapper }

func (resettable) Reset() {}

// DynamicApplier.Create creates an absent object, reports an existing one as
// AlreadyExists without reading or changing it, and reports other errors.
func TestDynamicApplierCreate(t *testing.T) {
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{secrets: "SecretList"})
	a := &status.DynamicApplier{Client: client, Mapper: resettable{mapper}}
	secret := func(value string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": "s", "namespace": ns},
			"data":     map[string]any{"key": value},
		}}
		return obj
	}
	ctx := context.Background()
	if err := a.Create(ctx, secret("first")); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := a.Create(ctx, secret("second")); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("Create of an existing object = %v, want AlreadyExists", err)
	}
	got, err := client.Resource(secrets).Namespace(ns).Get(ctx, "s", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(got.Object, "data", "key"); v != "first" {
		t.Errorf("data.key = %q, want the first creation's", v)
	}
	var verbs []string
	for _, action := range client.Actions() {
		if action.GetVerb() != "get" || action.GetResource() != secrets {
			verbs = append(verbs, action.GetVerb())
		}
	}
	// The test's own Get above is the only read.
	if diff := cmp.Diff([]string{"create", "create"}, verbs); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}

	client.PrependReactor("create", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(secrets.GroupResource(), "s", errors.New("no"))
	})
	if err := a.Create(ctx, secret("third")); !apierrors.IsForbidden(err) {
		t.Errorf("Create = %v, want the Forbidden error", err)
	}
}

// fakeCache is a status.ObjectCache holding objects by "group/resource namespace/name";
// complete resources answer every miss.
type fakeCache struct {
	objects  map[string]metav1.Object
	complete map[schema.GroupResource]bool
}

func (c fakeCache) Lookup(gr schema.GroupResource, namespace, name string) (metav1.Object, bool) {
	return c.objects[gr.String()+" "+namespace+"/"+name], c.complete[gr]
}

// DynamicApplier.Lookup answers from the cache when it can — a hit, or a miss of a
// resource cached whole — and otherwise lists the object's metadata by name (never a
// get: no Secret data is read); with cacheOnly it never asks the API server.
func TestDynamicApplierLookup(t *testing.T) {
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	podGroups := schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"}, meta.RESTScopeNamespace)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	for _, name := range []string{"other", "squatted"} {
		m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if _, err := client.Resource(secrets).Namespace(ns).(metadatafake.MetadataClient).CreateFake(m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	client.ClearActions()
	cached := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ours"}}
	a := &status.DynamicApplier{Mapper: resettable{mapper}, Metadata: client, Cache: fakeCache{
		objects:  map[string]metav1.Object{"secrets " + ns + "/ours": cached},
		complete: map[schema.GroupResource]bool{podGroups.GroupResource(): true},
	}}
	obj := func(apiVersion, kind, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	ctx := context.Background()
	for _, c := range []struct {
		obj        *unstructured.Unstructured
		cacheOnly  bool
		wantName   string
		wantCached bool
		wantList   bool
	}{
		{obj("v1", "Secret", "ours"), true, "ours", true, false},
		{obj("v1", "Secret", "ours"), false, "ours", true, false},
		{obj("v1", "Secret", "squatted"), true, "", false, false},
		{obj("v1", "Secret", "squatted"), false, "squatted", false, true},
		{obj("v1", "Secret", "absent"), false, "", false, true},
		{obj("scheduling.x-k8s.io/v1alpha1", "PodGroup", "absent"), false, "", false, false},
	} {
		client.ClearActions()
		got, gotCached, err := a.Lookup(ctx, c.obj, c.cacheOnly)
		if err != nil {
			t.Fatalf("Lookup %s %s: %v", c.obj.GetKind(), c.obj.GetName(), err)
		}
		gotName := ""
		if got != nil {
			gotName = got.GetName()
		}
		if gotName != c.wantName || gotCached != c.wantCached {
			t.Errorf("Lookup %s %s (cacheOnly %v) = %q, cached %v; want %q, cached %v", c.obj.GetKind(), c.obj.GetName(), c.cacheOnly, gotName, gotCached, c.wantName, c.wantCached)
		}
		var calls []string
		for _, action := range client.Actions() {
			calls = append(calls, action.GetVerb())
			if l, ok := action.(clienttesting.ListAction); ok {
				if fs := l.GetListRestrictions().Fields.String(); fs != "metadata.name="+c.obj.GetName() {
					t.Errorf("list field selector %q, want metadata.name=%s", fs, c.obj.GetName())
				}
			}
		}
		var want []string
		if c.wantList {
			want = []string{"list"}
		}
		if diff := cmp.Diff(want, calls); diff != "" {
			t.Errorf("Lookup %s %s (cacheOnly %v) API calls (-want +got):\n%s", c.obj.GetKind(), c.obj.GetName(), c.cacheOnly, diff)
		}
	}
}
