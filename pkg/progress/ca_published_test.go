package progress

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
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
