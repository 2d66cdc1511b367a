package progress

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Issue 25, item 1: Published says whether every CA ConfigMap carries a bundle, and
// since when, so the serving certificate switches to a new CA only once trainer pods
// can mount it.
func TestCAPublisherPublished(t *testing.T) {
	client := fake.NewClientset()
	b := &bundle{pem: []byte(caA)}
	ns := newFakeNamespaces("team-a", "team-b")
	p, err := NewCAPublisher(CAPublisherOptions{Client: client, Bundle: b.get, TrainJobs: ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Published([]byte(caA)); ok {
		t.Error("Published before Run (a follower's publisher) = true, want false: it keeps no ConfigMaps")
	}

	f := startPublisher(t, client, ns, b)
	publishedSince := func(pem string) (time.Time, bool) { return f.publisher.Published([]byte(pem)) }
	waitPublished := func(pem string) time.Time {
		t.Helper()
		var since time.Time
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			var ok bool
			since, ok = publishedSince(pem)
			return ok, nil
		}); err != nil {
			t.Fatalf("Published never true for the bundle every ConfigMap should carry")
		}
		return since
	}
	first := waitPublished(caA)
	if again, ok := publishedSince(caA); !ok || !again.Equal(first) {
		t.Errorf("Published again = %v, %v; want the time it was first seen, %v", again, ok, first)
	}
	if _, ok := publishedSince(caB); ok {
		t.Error("Published(a bundle no ConfigMap carries) = true")
	}

	// A namespace with TrainJobs whose ConfigMap is not written yet holds the bundle back.
	ns.set1("team-c", true)
	if _, ok := publishedSince(caA); ok {
		t.Error("Published = true while team-c, which has TrainJobs, has no CA ConfigMap")
	}
	f.publisher.EnqueueNamespace("team-c")
	f.waitFor("team-c", "published", published(caA))
	if since := waitPublished(caA); !since.After(first) {
		t.Errorf("Published since %v after team-c lagged; want a later time than %v: the wait starts again", since, first)
	}

	// A new bundle: false until every ConfigMap has it, the one of a namespace whose
	// TrainJobs are gone included.
	ns.set1("team-b", false)
	b.set(caB)
	if _, ok := publishedSince(caB); ok {
		t.Error("Published(new bundle) = true before any ConfigMap was updated")
	}
	f.publisher.CAChanged()
	for _, n := range []string{"team-a", "team-b", "team-c"} {
		f.waitFor(n, "rotated", published(caB))
	}
	waitPublished(caB)

	f.stop()
	if _, ok := publishedSince(caB); ok {
		t.Error("Published after Run returned = true, want false")
	}
}

// TestCAPublisherSkipsSystemNamespaces: TrainJobs in kube-system, kube-public and
// kube-node-lease get no CA ConfigMap (the controller writes nothing there; stage 1
// refuses such TrainJobs), a CA ConfigMap found in one (left by an older version) is
// neither rewritten on a new bundle nor deleted, and neither holds a rotation back:
// Published is true once the ordinary namespaces carry the bundle.
func TestCAPublisherSkipsSystemNamespaces(t *testing.T) {
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-public", Name: wire.CAConfigMapName}, Data: map[string]string{wire.CAConfigMapKey: caA}}
	client := fake.NewClientset(old)
	b := &bundle{pem: []byte(caB)}
	f := startPublisher(t, client, newFakeNamespaces("team-a", "kube-system", "kube-public", "kube-node-lease"), b)
	f.waitFor("team-a", "published", published(caB))
	for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease"} {
		f.publisher.EnqueueNamespace(ns)
	}
	f.publisher.CAChanged()
	settle()
	for _, a := range writes(client) {
		if trainjob.IsSystemNamespace(a.GetNamespace()) {
			t.Errorf("wrote in a system namespace: %s %s", a.GetVerb(), a.GetNamespace())
		}
	}
	if cm := f.get("kube-public"); cm == nil || cm.Data[wire.CAConfigMapKey] != caA {
		t.Errorf("the old CA ConfigMap in kube-public became %+v, want it left alone", cm)
	}
	if _, ok := f.publisher.Published([]byte(caB)); !ok {
		t.Error("Published = false: a system namespace holds the rotation back")
	}
}
