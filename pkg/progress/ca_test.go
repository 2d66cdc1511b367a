package progress

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/pkg/informers/namespaces"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

const (
	caA = "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"
	caB = "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n"
)

// fakeNamespaces is TrainJobNamespaces over a set the test changes.
type fakeNamespaces struct {
	mu  sync.Mutex
	set map[string]bool
}

func newFakeNamespaces(ns ...string) *fakeNamespaces {
	f := &fakeNamespaces{set: map[string]bool{}}
	for _, n := range ns {
		f.set[n] = true
	}
	return f
}

func (f *fakeNamespaces) Namespaces() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.set))
}

func (f *fakeNamespaces) Has(ns string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.set[ns]
}

func (f *fakeNamespaces) set1(ns string, has bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if has {
		f.set[ns] = true
	} else {
		delete(f.set, ns)
	}
}

// bundle is a CA bundle the test changes.
type bundle struct {
	mu  sync.Mutex
	pem []byte
}

func (b *bundle) get() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pem
}

func (b *bundle) set(pem string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pem = []byte(pem)
}

type caFixture struct {
	t         *testing.T
	client    *fake.Clientset
	ns        *fakeNamespaces
	bundle    *bundle
	publisher *CAPublisher
	cancel    context.CancelFunc
	done      chan struct{}
}

// startPublisher runs a CAPublisher over client until the test ends.
func startPublisher(t *testing.T, client *fake.Clientset, ns *fakeNamespaces, b *bundle) *caFixture {
	t.Helper()
	p, err := NewCAPublisher(CAPublisherOptions{
		Client: client, Bundle: b.get, TrainJobs: ns,
		NotReadyRetry: 20 * time.Millisecond,
		RateLimiter:   workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 50*time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	f := &caFixture{t: t, client: client, ns: ns, bundle: b, publisher: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(f.stop)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return p.HasSynced(), nil
	}); err != nil {
		t.Fatal("cache did not sync")
	}
	return f
}

func (f *caFixture) stop() {
	f.cancel()
	<-f.done
}

// get returns the CA ConfigMap of ns from the API, nil if absent.
func (f *caFixture) get(ns string) *corev1.ConfigMap {
	cm, err := f.client.CoreV1().ConfigMaps(ns).Get(context.Background(), wire.CAConfigMapName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return cm
}

// waitFor polls until cond holds for the CA ConfigMap of ns (nil when absent).
func (f *caFixture) waitFor(ns, what string, cond func(*corev1.ConfigMap) bool) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 2*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return cond(f.get(ns)), nil
	})
	if err != nil {
		f.t.Fatalf("ConfigMap %s/%s: %s: not reached; now %+v", ns, wire.CAConfigMapName, what, f.get(ns))
	}
}

// published reports whether cm is exactly what the publisher applies for pem.
func published(pem string) func(*corev1.ConfigMap) bool {
	return func(cm *corev1.ConfigMap) bool {
		return cm != nil && cm.Data[wire.CAConfigMapKey] == pem && cm.Labels[LabelManagedBy] == ManagedByValue
	}
}

// writes returns the write actions on ConfigMaps the client saw.
func writes(client *fake.Clientset) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range client.Actions() {
		if a.GetResource().Resource != "configmaps" {
			continue
		}
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			out = append(out, a)
		}
	}
	return out
}

// settle waits a little for work that must not happen.
func settle() { time.Sleep(100 * time.Millisecond) }

func TestCAPublisherPublishes(t *testing.T) {
	client := fake.NewClientset()
	f := startPublisher(t, client, newFakeNamespaces("team-a", "team-b"), &bundle{pem: []byte(caA)})
	f.waitFor("team-a", "published", published(caA))
	f.waitFor("team-b", "published", published(caA))
	settle()
	if cm := f.get("team-c"); cm != nil {
		t.Errorf("namespace without TrainJobs got %+v", cm)
	}

	// Exactly one forced apply per namespace, by field manager trainyard, with nothing
	// but the label and ca.crt.
	w := writes(client)
	if len(w) != 2 {
		t.Fatalf("writes = %v, want one apply per namespace", w)
	}
	for _, a := range w {
		patch, ok := a.(k8stesting.PatchAction)
		if !ok || patch.GetPatchType() != types.ApplyPatchType {
			t.Fatalf("write %v is not a server-side apply", a)
		}
		pa, ok := a.(k8stesting.PatchActionImpl)
		if !ok {
			t.Fatalf("write %T: want a PatchActionImpl, which records the apply options", a)
		}
		if pa.PatchOptions.FieldManager != CAFieldManager || pa.PatchOptions.Force == nil || !*pa.PatchOptions.Force {
			t.Errorf("apply options %+v, want field manager %q, forced", pa.PatchOptions, CAFieldManager)
		}
		cm := f.get(a.GetNamespace())
		if len(cm.Data) != 1 || len(cm.Labels) != 1 || len(cm.BinaryData) != 0 {
			t.Errorf("ConfigMap %s: %+v, want only the label and ca.crt", a.GetNamespace(), cm)
		}
	}

	// A TrainJob in a new namespace.
	f.ns.set1("team-c", true)
	f.publisher.EnqueueNamespace("team-c")
	f.waitFor("team-c", "published", published(caA))
}

// A restart finds every ConfigMap current and writes nothing.
func TestCAPublisherRestartWritesNothing(t *testing.T) {
	client := fake.NewClientset()
	ns := newFakeNamespaces("team-a", "team-b")
	b := &bundle{pem: []byte(caA)}
	first := startPublisher(t, client, ns, b)
	first.waitFor("team-a", "published", published(caA))
	first.waitFor("team-b", "published", published(caA))
	first.stop()

	client.ClearActions()
	second := startPublisher(t, client, ns, b)
	for _, n := range ns.Namespaces() {
		second.publisher.EnqueueNamespace(n) // as the TrainJob informer's replay does
	}
	settle()
	if w := writes(client); len(w) != 0 {
		t.Errorf("restart wrote %v", w)
	}
}

// Without a CA bundle nothing is written; once there is one, CAChanged publishes it, and
// a new bundle replaces it everywhere, in namespaces whose TrainJobs are gone too.
func TestCAPublisherBundleChanges(t *testing.T) {
	client := fake.NewClientset()
	b := &bundle{}
	f := startPublisher(t, client, newFakeNamespaces("team-a", "team-b"), b)
	settle()
	if w := writes(client); len(w) != 0 {
		t.Fatalf("wrote %v without a CA bundle", w)
	}

	b.set(caA)
	// Retried on its own (NotReadyRetry); CAChanged only speeds it up.
	f.waitFor("team-a", "published", published(caA))
	f.waitFor("team-b", "published", published(caA))

	f.ns.set1("team-b", false) // its TrainJobs are gone; the ConfigMap stays
	b.set(caB)
	f.publisher.CAChanged()
	f.waitFor("team-a", "rotated", published(caB))
	f.waitFor("team-b", "rotated", published(caB))
}

// A ConfigMap of that name that someone else created, with another CA, is taken over:
// the forced apply replaces ca.crt and adds the label; the squatter's other keys stay
// (pods mount ca.crt only).
func TestCAPublisherTakesOverSquatter(t *testing.T) {
	squatter := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: wire.CAConfigMapName, Namespace: "team-a", Labels: map[string]string{"owner": "mallory"}},
		Data:       map[string]string{wire.CAConfigMapKey: "-----BEGIN CERTIFICATE-----\nEVIL\n-----END CERTIFICATE-----\n", "other": "x"},
	}
	client := fake.NewClientset()
	if _, err := client.CoreV1().ConfigMaps("team-a").Create(context.Background(), squatter, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
	f := startPublisher(t, client, newFakeNamespaces("team-a"), &bundle{pem: []byte(caA)})
	f.waitFor("team-a", "taken over", published(caA))
}

// Someone changing or deleting a published ConfigMap has it restored; deleted in a
// namespace without TrainJobs, it stays deleted.
func TestCAPublisherRepairs(t *testing.T) {
	client := fake.NewClientset()
	f := startPublisher(t, client, newFakeNamespaces("team-a", "team-b"), &bundle{pem: []byte(caA)})
	f.waitFor("team-a", "published", published(caA))
	f.waitFor("team-b", "published", published(caA))
	ctx := context.Background()

	cm := f.get("team-a")
	cm.Data[wire.CAConfigMapKey] = "tampered"
	if _, err := client.CoreV1().ConfigMaps("team-a").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("team-a", "restored after an update", published(caA))

	if err := client.CoreV1().ConfigMaps("team-a").Delete(ctx, wire.CAConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("team-a", "re-created after a delete", published(caA))

	f.ns.set1("team-b", false)
	if err := client.CoreV1().ConfigMaps("team-b").Delete(ctx, wire.CAConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	settle()
	if cm := f.get("team-b"); cm != nil {
		t.Errorf("re-created in a namespace without TrainJobs: %+v", cm)
	}
}

// A ConfigMap the apply cannot correct (the API server answers Invalid: immutable, or
// ca.crt in binaryData) is deleted, that very object only, and re-created.
func TestCAPublisherReplacesUncorrectable(t *testing.T) {
	squatter := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: wire.CAConfigMapName, Namespace: "team-a", UID: "squatter"},
		BinaryData: map[string][]byte{wire.CAConfigMapKey: []byte("EVIL")},
		Immutable:  ptr.To(true),
	}
	client := fake.NewClientset(squatter)
	// The fake does not validate: answer as the API server would while the squatter's
	// object exists.
	client.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, a.GetNamespace(), wire.CAConfigMapName)
		if err == nil && obj.(*corev1.ConfigMap).UID == "squatter" {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, wire.CAConfigMapName,
				field.ErrorList{field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set")})
		}
		return false, nil, nil
	})
	var deletes []metav1.DeleteOptions
	var mu sync.Mutex
	client.PrependReactor("delete", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		deletes = append(deletes, a.(k8stesting.DeleteActionImpl).DeleteOptions)
		return false, nil, nil
	})
	f := startPublisher(t, client, newFakeNamespaces("team-a"), &bundle{pem: []byte(caA)})
	f.waitFor("team-a", "replaced", func(cm *corev1.ConfigMap) bool {
		return published(caA)(cm) && len(cm.BinaryData) == 0 && cm.Immutable == nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(deletes) != 1 || deletes[0].Preconditions == nil || deletes[0].Preconditions.UID == nil || *deletes[0].Preconditions.UID != "squatter" {
		t.Errorf("deletes = %+v, want one, with the squatter's UID as precondition", deletes)
	}
}

// A namespace being deleted refuses new objects (403, cause NamespaceTerminating)
// while its TrainJobs still exist: that is no failure to retry, and one apply is all
// the publisher sends (seen on a real cluster: an error with a stack trace per retry).
func TestCAPublisherLeavesATerminatingNamespace(t *testing.T) {
	client := fake.NewClientset()
	var applies atomic.Int32
	client.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		applies.Add(1)
		err := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, wire.CAConfigMapName,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", a.GetNamespace()))
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Field: "metadata.namespace"}}
		return true, nil, err
	})
	f := startPublisher(t, client, newFakeNamespaces("leaving"), &bundle{pem: []byte(caA)})
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return applies.Load() > 0, nil
	}); err != nil {
		t.Fatal("no apply")
	}
	settle() // the rate limiter would retry within 1–50 ms
	if n := applies.Load(); n != 1 {
		t.Errorf("%d applies to the terminating namespace, want 1", n)
	}
	if n := f.publisher.queue.NumRequeues("leaving"); n != 0 {
		t.Errorf("namespace requeued %d times, want 0", n)
	}
}

func TestNamespaceIndex(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	x := NamespaceIndex{Indexer: idx}
	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	for _, o := range []*corev1.Pod{pod("a", "1"), pod("a", "2"), pod("b", "1")} {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	if got := slices.Sorted(slices.Values(x.Namespaces())); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Namespaces = %v, want [a b]", got)
	}
	if !x.Has("a") || x.Has("c") {
		t.Errorf("Has(a) = %v, Has(c) = %v; want true, false", x.Has("a"), x.Has("c"))
	}
	if err := idx.Delete(pod("b", "1")); err != nil {
		t.Fatal(err)
	}
	if x.Has("b") || slices.Contains(x.Namespaces(), "b") {
		t.Errorf("namespace b still listed after its last object went: %v", x.Namespaces())
	}
}

func TestNewCAPublisherNeedsItsDependencies(t *testing.T) {
	if _, err := NewCAPublisher(CAPublisherOptions{Client: fake.NewClientset(), TrainJobs: newFakeNamespaces()}); err == nil {
		t.Error("NewCAPublisher without Bundle: want an error")
	}
}

// With Namespaces, the CA ConfigMaps are listed and watched in those namespaces only,
// by name, and published there as usual.
func TestCAPublisherWatchesOnlyItsNamespaces(t *testing.T) {
	client := fake.NewClientset()
	watched := namespaces.Set{"team-a", "team-b"}
	p, err := NewCAPublisher(CAPublisherOptions{
		Client: client, Bundle: (&bundle{pem: []byte(caA)}).get, TrainJobs: newFakeNamespaces("team-a"), Namespaces: watched,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	defer func() { cancel(); <-done }()
	f := &caFixture{t: t, client: client, publisher: p}
	f.waitFor("team-a", "published", published(caA))

	listed := map[string]bool{}
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			continue
		}
		if !slices.Contains(watched, a.GetNamespace()) {
			t.Errorf("%s %s in namespace %q, want only %v", a.GetVerb(), a.GetResource().Resource, a.GetNamespace(), watched)
		}
		if r, ok := a.(k8stesting.ListActionImpl); ok {
			if got := r.GetListRestrictions().Fields.String(); got != "metadata.name="+wire.CAConfigMapName {
				t.Errorf("list in %s selects %q, want the CA ConfigMap's name", a.GetNamespace(), got)
			}
			listed[a.GetNamespace()] = true
		}
	}
	if !listed["team-a"] || !listed["team-b"] {
		t.Errorf("CA ConfigMaps listed in %v, want each of %v", listed, watched)
	}
}
