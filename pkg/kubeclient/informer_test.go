package kubeclient

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// The informer lists and watches through the typed client given, with the tweak applied
// to every request's options, and keeps the indexes asked for.
func TestNewInformerListsAndWatchesWithTheTweak(t *testing.T) {
	labelled := func(name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels}}
	}
	client := fake.NewClientset(labelled("mine", map[string]string{"app": "trainyard"}), labelled("other", nil))
	var (
		mu        sync.Mutex
		selectors []string // of every list and watch, in order
	)
	client.PrependReactor("list", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		selectors = append(selectors, "list "+a.(k8stesting.ListAction).GetListRestrictions().Labels.String())
		return false, nil, nil
	})
	client.PrependWatchReactor("configmaps", func(a k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		selectors = append(selectors, "watch "+a.(k8stesting.WatchAction).GetWatchRestrictions().Labels.String())
		return false, nil, nil
	})
	inf := NewInformer(client, client.CoreV1().ConfigMaps("ns"), &corev1.ConfigMap{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) { o.LabelSelector = "app=trainyard" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	if keys := inf.GetStore().ListKeys(); len(keys) != 1 || keys[0] != "ns/mine" {
		t.Fatalf("listed %v, want only ns/mine", keys)
	}
	if _, err := client.CoreV1().ConfigMaps("ns").Create(ctx, labelled("new", map[string]string{"app": "trainyard"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok, _ := inf.GetStore().GetByKey("ns/new"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch did not deliver ns/new")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if byNamespace, err := inf.GetIndexer().ByIndex(cache.NamespaceIndex, "ns"); err != nil || len(byNamespace) != 2 {
		t.Fatalf("namespace index: %d objects (error %v), want 2 (mine, new)", len(byNamespace), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(selectors) < 2 || selectors[0] != "list app=trainyard" || selectors[1] != "watch app=trainyard" {
		t.Fatalf("requests %q, want a list then a watch, both with app=trainyard", selectors)
	}
}
