package namespaces

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
)

func configMap(namespace, name, team string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"team": team}}}
}

// TestMergedInformer checks that an informer over namespaces a and b lists and watches
// those two only, answers keys, lists and indexes across them, delivers both
// namespaces' events to one handler, and never shows an object of namespace c.
func TestMergedInformer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(
		configMap("a", "x", "red"), configMap("b", "x", "red"), configMap("b", "y", "blue"), configMap("c", "x", "red"))

	watched := Set{"a", "b"}
	inf := watched.Informer(func(namespace string) cache.SharedIndexInformer {
		return coreinformers.NewConfigMapInformer(client, namespace, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	})
	byTeam := func(obj any) ([]string, error) { return []string{obj.(*corev1.ConfigMap).Labels["team"]}, nil }
	if err := inf.AddIndexers(cache.Indexers{"team": byTeam}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var added []string
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		mu.Lock()
		defer mu.Unlock()
		added = append(added, cache.MetaObjectToName(obj.(*corev1.ConfigMap)).String())
	}})
	if err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, reg.HasSynced) {
		t.Fatal("did not sync")
	}

	mu.Lock()
	sort.Strings(added)
	if diff := cmp.Diff([]string{"a/x", "b/x", "b/y"}, added); diff != "" {
		t.Errorf("added (-want +got):\n%s", diff)
	}
	mu.Unlock()
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("unexpected %s", a.GetVerb())
		}
		if !slices.Contains(watched, a.GetNamespace()) {
			t.Errorf("%s %s in namespace %q, want only %v", a.GetVerb(), a.GetResource().Resource, a.GetNamespace(), watched)
		}
	}

	idx := inf.GetIndexer()
	lister := corelisters.NewConfigMapLister(idx)
	all, err := lister.List(labels.Everything())
	if err != nil || len(all) != 3 {
		t.Errorf("List = %d objects, %v; want 3", len(all), err)
	}
	if got, err := lister.ConfigMaps("b").List(labels.Everything()); err != nil || len(got) != 2 {
		t.Errorf("ConfigMaps(b).List = %d objects, %v; want 2", len(got), err)
	}
	if _, err := lister.ConfigMaps("a").Get("x"); err != nil {
		t.Errorf("ConfigMaps(a).Get(x): %v", err)
	}
	if _, err := lister.ConfigMaps("c").Get("x"); err == nil {
		t.Error("ConfigMaps(c).Get(x) found an object of an unwatched namespace")
	}
	if got, err := idx.ByIndex("team", "red"); err != nil || len(got) != 2 {
		t.Errorf(`ByIndex(team, red) = %d objects, %v; want 2 (a/x, b/x)`, len(got), err)
	}
	if keys, err := idx.IndexKeys("team", "blue"); err != nil || !cmp.Equal(keys, []string{"b/y"}) {
		t.Errorf("IndexKeys(team, blue) = %v, %v; want [b/y]", keys, err)
	}
	if got := idx.ListIndexFuncValues("team"); !cmp.Equal(got, []string{"blue", "red"}) {
		t.Errorf("ListIndexFuncValues(team) = %v, want [blue red]", got)
	}
	if keys := idx.ListKeys(); len(keys) != 3 {
		t.Errorf("ListKeys = %v, want 3 keys", keys)
	}
	if err := idx.Add(configMap("c", "z", "red")); err == nil {
		t.Error("Add of an object of an unwatched namespace succeeded")
	}
	if err := idx.Add(configMap("a", "z", "red")); err != nil {
		t.Errorf("Add to a watched namespace: %v", err)
	} else if _, ok, _ := idx.GetByKey("a/z"); !ok {
		t.Error("an object added to namespace a is not found by key")
	}
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Errorf("RemoveEventHandler: %v", err)
	}
}

// TestSet checks the namespaces a Set builds informers for, and that an informer over
// one namespace (or all) is the namespace's own, not a merged one.
func TestSet(t *testing.T) {
	if got := (Set{}).Each(); !cmp.Equal(got, []string{metav1.NamespaceAll}) {
		t.Errorf("Set{}.Each() = %q, want every namespace", got)
	}
	if !(Set{}).Contains("kube-system") || (Set{"a"}).Contains("kube-system") || !(Set{"a"}).Contains("a") {
		t.Error("Contains: want every namespace in an empty Set, only its own in another")
	}
	client := fake.NewClientset()
	var one cache.SharedIndexInformer
	got := Set{"a"}.Informer(func(namespace string) cache.SharedIndexInformer {
		one = coreinformers.NewConfigMapInformer(client, namespace, 0, cache.Indexers{})
		return one
	})
	if got != one {
		t.Error("an informer over one namespace is wrapped")
	}
}
