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
	clienttesting "k8s.io/client-go/testing"

	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/status"
)

// recordingApplier logs the side-object writes into log, shared with the JobSet apply.
type recordingApplier struct {
	log       *[]string
	created   []*unstructured.Unstructured
	createErr error
}

func (r *recordingApplier) Apply(_ context.Context, obj *unstructured.Unstructured) error {
	*r.log = append(*r.log, "apply "+obj.GetKind()+" "+obj.GetName())
	return nil
}

func (r *recordingApplier) Create(_ context.Context, obj *unstructured.Unstructured) error {
	*r.log = append(*r.log, "create "+obj.GetKind()+" "+obj.GetName())
	r.created = append(r.created, obj)
	return r.createErr
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

// DynamicApplier.Create creates an absent object, takes an existing one as success
// without reading or changing it, and reports other errors.
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
	if err := a.Create(ctx, secret("second")); err != nil {
		t.Fatalf("Create of an existing object = %v, want success", err)
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
