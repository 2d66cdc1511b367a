package informers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	cborserializer "k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetscheme "sigs.k8s.io/jobset/client-go/clientset/versioned/scheme"

	"github.com/trainyard/trainyard/pkg/objectkeys"
)

// apiServerJobSet returns testdata/jobset.json compacted, as the API server sends a
// JobSet: a torch JobSet Trainyard applied and the JobSet controller completed, with
// its managedFields (Trainyard's apply, the JobSet controller's status update) and the
// runtime snapshot annotation, fetched with `kubectl get --raw` after `make dev`.
func apiServerJobSet(t testing.TB) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/jobset.json")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// generatedDecode is what the generated clientset and TrimJobSet make of data: the
// cache's JobSet before NewJobSetWatchClient.
func generatedDecode(t testing.TB, data []byte) *jobsetv1alpha2.JobSet {
	t.Helper()
	decoder := jobsetscheme.Codecs.WithoutConversion().DecoderToVersion(jsonSerializer(t, jobsetscheme.Codecs), jobsetv1alpha2.GroupVersion)
	obj, _, err := decoder.Decode(data, nil, &jobsetv1alpha2.JobSet{})
	if err != nil {
		t.Fatal(err)
	}
	trimmed, _ := TrimJobSet(obj)
	js := trimmed.(*jobsetv1alpha2.JobSet)
	return js
}

// variants returns JobSet JSONs that exercise what the trimmed decoding keeps and
// skips: the API server's JobSet as is, with one replicatedJob mounting a side
// object's Secret (MPI's SSH key: kept) and a runtime's own Secret (dropped), without
// status and suspended, and a watch bookmark.
func variants(t testing.TB) map[string][]byte {
	t.Helper()
	base := apiServerJobSet(t)
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	return map[string][]byte{
		"as served": base,
		"side object Secret mounted": edit(func(m map[string]any) {
			name := m["metadata"].(map[string]any)["name"].(string)
			rj := m["spec"].(map[string]any)["replicatedJobs"].([]any)[0].(map[string]any)
			pod := rj["template"].(map[string]any)["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			pod["volumes"] = []any{
				map[string]any{"name": "ssh-auth", "secret": map[string]any{"secretName": name + "-mpi-ssh", "defaultMode": 384,
					"items": []any{map[string]any{"key": "ssh-privatekey", "path": "id_rsa"}}}},
				map[string]any{"name": "hub-token", "secret": map[string]any{"secretName": "hub-token"}},
				map[string]any{"name": "scratch", "emptyDir": map[string]any{}},
			}
		}),
		"suspended, no status": edit(func(m map[string]any) {
			delete(m, "status")
			m["spec"].(map[string]any)["suspend"] = true
		}),
		"bookmark": []byte(`{"kind":"JobSet","apiVersion":"jobset.x-k8s.io/v1alpha2","metadata":{"resourceVersion":"4711","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"replicatedJobs":null},"status":{}}`),
	}
}

func TestJobSetWatchDecodingIsTrimJobSets(t *testing.T) {
	s := trimmedJobSetSerializer{Serializer: jsonSerializer(t, jobsetscheme.Codecs)}
	for name, data := range variants(t) {
		t.Run(name, func(t *testing.T) {
			want := generatedDecode(t, data)
			for _, into := range []runtime.Object{nil, &jobsetv1alpha2.JobSet{Spec: jobsetv1alpha2.JobSetSpec{Network: &jobsetv1alpha2.Network{}}}} {
				got, gvk, err := s.Decode(data, nil, into)
				if err != nil {
					t.Fatalf("Decode(into %T): %v", into, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Decode(into %T) differs from the generated decoding and TrimJobSet (-want +got):\n%s", into, diff)
				}
				if gvk == nil || *gvk != jobSetKind {
					t.Errorf("Decode(into %T) kind = %v, want %v", into, gvk, jobSetKind)
				}
			}
		})
	}
	if got, _, _ := s.Decode(variants(t)["as served"], nil, nil); got.(*jobsetv1alpha2.JobSet).Annotations[objectkeys.AnnotationRuntimeSnapshotHash] == "" {
		t.Errorf("the runtime snapshot's digest annotation is dropped; TrimJobSet keeps it")
	}
}

func TestJobSetWatchDecodingOfAList(t *testing.T) {
	s := trimmedJobSetSerializer{Serializer: jsonSerializer(t, jobsetscheme.Codecs)}
	var items []json.RawMessage
	var want []jobsetv1alpha2.JobSet
	for _, name := range []string{"as served", "side object Secret mounted", "suspended, no status"} {
		data := variants(t)[name]
		items = append(items, data)
		want = append(want, *generatedDecode(t, data))
	}
	list, err := json.Marshal(map[string]any{"kind": "JobSetList", "apiVersion": "jobset.x-k8s.io/v1alpha2",
		"metadata": map[string]any{"resourceVersion": "99", "continue": "next"}, "items": items})
	if err != nil {
		t.Fatal(err)
	}
	got := &jobsetv1alpha2.JobSetList{}
	if _, _, err := s.Decode(list, nil, got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != "99" || got.Continue != "next" {
		t.Errorf("list metadata = %+v, want resourceVersion 99 and continue next", got.ListMeta)
	}
	if diff := cmp.Diff(want, got.Items); diff != "" {
		t.Errorf("items differ from the generated decoding and TrimJobSet (-want +got):\n%s", diff)
	}
}

func TestJobSetWatchDecodingOfAStatus(t *testing.T) {
	s := trimmedJobSetSerializer{Serializer: jsonSerializer(t, jobsetscheme.Codecs)}
	data := []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (4711)","reason":"Expired","code":410}`)
	got, _, err := s.Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, ok := got.(*metav1.Status)
	if !ok || status.Reason != metav1.StatusReasonExpired || status.Code != 410 {
		t.Fatalf("Decode of a Status = %#v, want the *metav1.Status with reason Expired", got)
	}
	if _, _, err := s.Decode([]byte(`{"kind":"JobSet","metadata":[]}`), nil, nil); err == nil {
		t.Errorf("Decode of a JobSet whose metadata is a list: no error")
	}
}

// TestJobSetWatchClientListsAndWatchesTrimmed serves a JobSet list and a watch stream
// (an added JobSet, then an ERROR event) over HTTP as the API server does, and reads
// them with the client NewJobSetWatchClient builds: client-go's request path, not only
// the decoder, must hand out trimmed JobSets and the watch's Status.
func TestJobSetWatchClientListsAndWatchesTrimmed(t *testing.T) {
	data := variants(t)["side object Secret mounted"]
	want := generatedDecode(t, data)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprintf(w, `{"kind":"JobSetList","apiVersion":"jobset.x-k8s.io/v1alpha2","metadata":{"resourceVersion":"7"},"items":[%s]}`, data)
			return
		}
		fmt.Fprintf(w, `{"type":"ADDED","object":%s}`+"\n", data)
		w.(http.Flusher).Flush()
		fmt.Fprintf(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"Expired","code":410}}`+"\n")
	}))
	defer server.Close()
	client, err := NewJobSetWatchClient(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	jobSets := client.JobsetV1alpha2().JobSets("default")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	list, err := jobSets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list.Items) != 1 || list.ResourceVersion != "7" {
		t.Fatalf("List = %d items at resourceVersion %q, want 1 at 7", len(list.Items), list.ResourceVersion)
	}
	if diff := cmp.Diff(*want, list.Items[0]); diff != "" {
		t.Errorf("listed JobSet differs from the trimmed one (-want +got):\n%s", diff)
	}

	w, err := jobSets.Watch(ctx, metav1.ListOptions{ResourceVersion: "7"})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Stop()
	added := <-w.ResultChan()
	if diff := cmp.Diff(watch.Event{Type: watch.Added, Object: want}, added); diff != "" {
		t.Errorf("first watch event differs from the trimmed JobSet added (-want +got):\n%s", diff)
	}
	ev := <-w.ResultChan()
	if status, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || status.Reason != metav1.StatusReasonExpired {
		t.Errorf("second watch event = %s %#v, want ERROR with the Expired Status", ev.Type, ev.Object)
	}
}

// jsonSerializer returns the JSON serializer of codecs (a generated clientset's scheme
// codecs), as a generated clientset decodes with it.
func jsonSerializer(t testing.TB, codecs serializer.CodecFactory) runtime.Serializer {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(codecs.WithoutConversion().SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		t.Fatal("no JSON serializer in the scheme")
	}
	return info.Serializer
}

// BenchmarkDecodeJobSetEvent is the controller's cost of one JobSet watch event's
// object as the API server sends it (testdata/jobset.json, ~12 KB with managedFields):
// the generated clientset's JSON decoding then TrimJobSet (before
// NewJobSetWatchClient), the same through CBOR (KEP-4222: what the API server would
// send with CBORServingAndStorage and the client's ClientsAllowCBOR and
// ClientsPreferCBOR), and the trimmed decoding.
func BenchmarkDecodeJobSetEvent(b *testing.B) {
	data := apiServerJobSet(b)
	full, _, err := jobsetscheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	cbor := cborserializer.NewSerializer(jobsetscheme.Scheme, jobsetscheme.Scheme)
	var cborData bytes.Buffer
	if err := cbor.Encode(full, &cborData); err != nil {
		b.Fatal(err)
	}
	generated := jsonSerializer(b, jobsetscheme.Codecs)
	b.Run(fmt.Sprintf("json+TrimJobSet/%dB", len(data)), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obj, _, err := generated.Decode(data, nil, &jobsetv1alpha2.JobSet{})
			if err != nil {
				b.Fatal(err)
			}
			_, _ = TrimJobSet(obj)
		}
	})
	b.Run(fmt.Sprintf("cbor+TrimJobSet/%dB", cborData.Len()), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obj, _, err := cbor.Decode(cborData.Bytes(), nil, &jobsetv1alpha2.JobSet{})
			if err != nil {
				b.Fatal(err)
			}
			_, _ = TrimJobSet(obj)
		}
	})
	trimmed := trimmedJobSetSerializer{Serializer: generated}
	b.Run(fmt.Sprintf("json-trimmed/%dB", len(data)), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := trimmed.Decode(data, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWatchJobSetEvents is the controller's cost of a JobSet watch event as
// client-go reads it off the stream (testdata/jobset.json as a MODIFIED event): framing,
// the event, its object, and the cache transform. "generated" is the JobSet clientset's
// serializer and TrimJobSet, what the informers used before NewJobSetWatchClient;
// "watch-client" is NewJobSetWatchClient's.
func BenchmarkWatchJobSetEvents(b *testing.B) {
	const events = 64
	var stream bytes.Buffer
	for range events {
		fmt.Fprintf(&stream, `{"type":"MODIFIED","object":%s}`+"\n", apiServerJobSet(b))
	}
	generated, ok := runtime.SerializerInfoForMediaType(jobsetscheme.Codecs.WithoutConversion().SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		b.Fatal("no JSON serializer in the JobSet scheme")
	}
	watchClient, err := jobSetWatchSerializer()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		info runtime.SerializerInfo
	}{{"generated", generated}, {"watch-client", watchClient}} {
		b.Run(c.name, func(b *testing.B) {
			objects := jobsetscheme.Codecs.WithoutConversion().DecoderToVersion(c.info.Serializer, jobsetv1alpha2.GroupVersion)
			b.ReportAllocs()
			b.SetBytes(int64(stream.Len()))
			for b.Loop() {
				frames := c.info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream.Bytes())))
				d := restclientwatch.NewDecoder(streaming.NewDecoder(frames, c.info.StreamSerializer.Serializer), objects)
				for range events {
					_, obj, err := d.Decode()
					if err != nil {
						b.Fatal(err)
					}
					if _, err := TrimJobSet(obj); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}
