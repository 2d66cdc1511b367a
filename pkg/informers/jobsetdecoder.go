package informers

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"
	jobsetscheme "sigs.k8s.io/jobset/client-go/clientset/versioned/scheme"

	"github.com/trainyard/trainyard/pkg/objectkeys"
)

// NewJobSetWatchClient returns a JobSet clientset for the JobSet informers only: its
// lists and watch events decode straight into the shape TrimJobSet leaves, so the
// parts of a JobSet the cache drops — metadata.managedFields (~3 KB, the API
// server's), the Job templates (most of the spec) and the runtime snapshot annotation
// — are skipped over in the JSON, never built as Go objects and then thrown away
// (docs/design/memory.md, "Decoding watch events"). Errors (a metav1.Status, in an
// answer or a watch's ERROR event) and anything that is not a JobSet or a JobSetList
// decode as the generated clientset's do.
//
// Use it to list and watch JobSets, never to write them: an object it returns lacks
// the fields it skipped. c is copied; its content type is set to JSON (the API server
// serves custom resources as JSON). Errors: an invalid configuration.
func NewJobSetWatchClient(c *rest.Config) (jobsetclient.Interface, error) {
	config := rest.CopyConfig(c)
	config.ContentType, config.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	config.GroupVersion = &jobsetv1alpha2.GroupVersion
	config.APIPath = "/apis"
	info, err := jobSetWatchSerializer()
	if err != nil {
		return nil, err
	}
	config.NegotiatedSerializer = runtime.NewSimpleNegotiatedSerializer(info)
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	restClient, err := rest.RESTClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("creating the JobSet watch client: %w", err)
	}
	return jobsetclient.New(restClient), nil
}

// jobSetWatchSerializer returns the generated JobSet clientset's JSON serializer with
// the decoding of JobSets and of watch events replaced: trimmedJobSetSerializer and
// watchEventSerializer. Errors: the scheme has no JSON serializer (a build defect).
func jobSetWatchSerializer() (runtime.SerializerInfo, error) {
	codecs := jobsetscheme.Codecs.WithoutConversion()
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok || info.StreamSerializer == nil {
		return info, fmt.Errorf("the JobSet scheme has no %s serializer for watches", runtime.ContentTypeJSON)
	}
	info.Serializer = trimmedJobSetSerializer{Serializer: info.Serializer}
	stream := *info.StreamSerializer
	stream.Serializer = watchEventSerializer{Serializer: stream.Serializer}
	info.StreamSerializer = &stream
	return info, nil
}

// trimmedJobSetSerializer is the JSON serializer of JobSets with a Decode that skips
// what TrimJobSet would drop; Encode and Identifier are the generated clientset's.
type trimmedJobSetSerializer struct {
	runtime.Serializer
}

var jobSetKind = jobsetv1alpha2.GroupVersion.WithKind("JobSet")

// Decode decodes data, one JSON object, into into (a *JobSet, a *JobSetList or nil).
// A JobSet (into a *JobSet or nil) or a JobSetList (into a *JobSetList) comes back as
// TrimJobSet would leave it, its TypeMeta empty like the generated clientset's; an
// object of another kind (a metav1.Status) or into of another type is decoded by the
// generated clientset's serializer, without its version. Errors: data is not JSON of
// the JobSet API's shape.
func (s trimmedJobSetSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	switch out := into.(type) {
	case nil, *jobsetv1alpha2.JobSet:
		var w wireJobSet
		if err := utiljson.Unmarshal(data, &w); err != nil {
			if kindOf(data) != jobSetKind.Kind {
				break // a Status, whose fields are not a JobSet's
			}
			return nil, nil, fmt.Errorf("decoding a JobSet: %w", err)
		}
		if w.Kind != jobSetKind.Kind {
			break
		}
		js, _ := out.(*jobsetv1alpha2.JobSet)
		if js == nil {
			js = &jobsetv1alpha2.JobSet{}
		}
		w.into(js)
		return js, &jobSetKind, nil
	case *jobsetv1alpha2.JobSetList:
		var w wireJobSetList
		if err := utiljson.Unmarshal(data, &w); err != nil {
			if kindOf(data) != "JobSetList" {
				break
			}
			return nil, nil, fmt.Errorf("decoding a JobSetList: %w", err)
		}
		if w.Kind != "JobSetList" {
			break
		}
		*out = jobsetv1alpha2.JobSetList{ListMeta: w.ListMeta, Items: make([]jobsetv1alpha2.JobSet, len(w.Items))}
		for i := range w.Items {
			w.Items[i].into(&out.Items[i])
		}
		gvk := jobsetv1alpha2.GroupVersion.WithKind("JobSetList")
		return out, &gvk, nil
	}
	return runtime.WithoutVersionDecoder{Decoder: s.Serializer}.Decode(data, defaults, into)
}

// watchEventSerializer is the JSON serializer of a watch's events with a Decode that
// reads an event in one pass; Encode and Identifier are the generated clientset's.
type watchEventSerializer struct {
	runtime.Serializer
}

// Decode decodes data, one watch event ({"type": ..., "object": {...}}), into into, a
// *metav1.WatchEvent, its object's JSON copied into Object.Raw for the watch's object
// decoder. The generated clientset's serializer reads the event twice, first for an
// apiVersion and kind it does not have; into of another type is decoded by it.
// Errors: data is not a JSON object of that shape.
func (s watchEventSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	event, ok := into.(*metav1.WatchEvent)
	if !ok {
		return s.Serializer.Decode(data, defaults, into)
	}
	var w struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := utiljson.Unmarshal(data, &w); err != nil {
		return nil, nil, fmt.Errorf("decoding a watch event: %w", err)
	}
	*event = metav1.WatchEvent{Type: w.Type, Object: runtime.RawExtension{Raw: w.Object}}
	gvk := metav1.SchemeGroupVersion.WithKind("WatchEvent")
	return event, &gvk, nil
}

// wireJobSet is the part of a JobSet's JSON that TrimJobSet keeps; the decoder skips
// the rest. Items of a list carry no kind.
type wireJobSet struct {
	Kind     string         `json:"kind,omitempty"`
	Metadata wireObjectMeta `json:"metadata"`
	Spec     struct {
		Suspend        *bool               `json:"suspend,omitempty"`
		ReplicatedJobs []wireReplicatedJob `json:"replicatedJobs,omitempty"`
	} `json:"spec"`
	Status jobsetv1alpha2.JobSetStatus `json:"status"`
}

// wireObjectMeta is metav1.ObjectMeta but for managedFields, which the outer field of
// the same name takes and skips (Go's JSON decoding gives a name to the shallowest
// field that has it).
type wireObjectMeta struct {
	metav1.ObjectMeta `json:",inline"`
	ManagedFields     skipped `json:"managedFields,omitempty"`
}

// wireReplicatedJob is a replicatedJob's name, replicas and pod volumes: what
// TrimJobSet keeps of one that mounts a side object's Secret.
type wireReplicatedJob struct {
	Name     string `json:"name"`
	Replicas int32  `json:"replicas,omitempty"`
	Template struct {
		Spec struct {
			Template struct {
				Spec struct {
					Volumes []corev1.Volume `json:"volumes,omitempty"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	} `json:"template"`
}

type wireJobSetList struct {
	Kind     string          `json:"kind,omitempty"`
	ListMeta metav1.ListMeta `json:"metadata"`
	Items    []wireJobSet    `json:"items"`
}

// kindOf returns the kind of the JSON object data, "" when it has none or is not JSON.
func kindOf(data []byte) string {
	var t metav1.TypeMeta
	_ = utiljson.Unmarshal(data, &t)
	return t.Kind
}

// skipped is a JSON value read past and dropped: the decoder finds its end without
// building anything.
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// into sets js to the JobSet w holds as TrimJobSet leaves it.
func (w *wireJobSet) into(js *jobsetv1alpha2.JobSet) {
	*js = jobsetv1alpha2.JobSet{ObjectMeta: w.Metadata.ObjectMeta, Status: w.Status}
	delete(js.Annotations, objectkeys.AnnotationRuntimeSnapshot)
	js.Spec.Suspend = w.Spec.Suspend
	for i := range w.Spec.ReplicatedJobs {
		rj := &w.Spec.ReplicatedJobs[i]
		js.Spec.ReplicatedJobs = keepSideObjectMounts(js.Spec.ReplicatedJobs, js.Name, rj.Name, rj.Replicas, rj.Template.Spec.Template.Spec.Volumes)
	}
}
