package status

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// Desired is what the status stage applies for a finished plan (stages 1–5), in apply
// order: Objects first, each as is, then JobSet.
type Desired struct {
	// Objects are the plan's side objects (PodGroups, Workloads, ConfigMaps, Secrets),
	// shared with the plan: read only.
	Objects []*unstructured.Unstructured
	// JobSet is a private copy of the plan's JobSet with TypeMeta set and the
	// AnnotationJobSetHash annotation holding Hash.
	JobSet *jobsetv1alpha2.JobSet
	// Hash is the hex SHA-256 (first 128 bits) of the JobSet without the hash
	// annotation, followed by the side objects, all as JSON: it changes exactly when
	// what the plan would apply changes.
	Hash string
}

// DesiredOf returns what the status stage applies for p, whose JobSet must be set
// (the plan reached the stage before the status stage). It is pure: the controller's status stage and the offline
// renderer (package render) both call it, so they produce the same objects. p is not
// modified. Errors come only from JSON encoding (a bug).
func DesiredOf(p *plan.Plan) (*Desired, error) {
	if p == nil || p.JobSet == nil {
		return nil, fmt.Errorf("status: plan without a JobSet")
	}
	js := p.JobSet.DeepCopy()
	delete(js.Annotations, AnnotationJobSetHash)
	hash, err := hashOf(js, p.Objects)
	if err != nil {
		return nil, err
	}
	if js.Annotations == nil {
		js.Annotations = map[string]string{}
	}
	js.Annotations[AnnotationJobSetHash] = hash
	js.APIVersion, js.Kind = jobsetv1alpha2.SchemeGroupVersion.String(), "JobSet"
	return &Desired{Objects: p.Objects, JobSet: js, Hash: hash}, nil
}

// hashOf returns a hex SHA-256 (128 bits) of js's and the side objects' JSON. js must not
// carry the hash annotation.
func hashOf(js *jobsetv1alpha2.JobSet, objects []*unstructured.Unstructured) (string, error) {
	h := sha256.New()
	enc := json.NewEncoder(h)
	if err := enc.Encode(js); err != nil {
		return "", fmt.Errorf("hashing JobSet: %w", err)
	}
	for _, obj := range objects {
		if err := enc.Encode(obj.Object); err != nil {
			return "", fmt.Errorf("hashing %s: %w", obj.GetKind(), err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// JobSetObject returns the server-side apply request for d.JobSet as a JSON object: the
// JobSet without status and without the null creationTimestamp a typed object carries,
// so the field manager owns exactly the fields the controller sets.
func (d *Desired) JobSetObject() (map[string]any, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d.JobSet)
	if err != nil {
		return nil, fmt.Errorf("encoding JobSet: %w", err)
	}
	delete(obj, "status")
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return obj, nil
}

// jobSetApply is the shape of a JobSet server-side apply request: the JobSet with only
// the metadata the controller sets, and no status. Encoding it is what JobSetObject's
// map gives, without the reflection into a map and the map's sorted-key encoding.
type jobSetApply struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        jobSetApplyMeta           `json:"metadata"`
	Spec            jobsetv1alpha2.JobSetSpec `json:"spec"`
}

type jobSetApplyMeta struct {
	Name            string                  `json:"name"`
	Namespace       string                  `json:"namespace"`
	Labels          map[string]string       `json:"labels,omitempty"`
	Annotations     map[string]string       `json:"annotations,omitempty"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
}

// JobSetApplyBody returns the server-side apply request for d.JobSet as JSON: the same
// object as JobSetObject (a test holds them equal), encoded straight from the typed
// JobSet. Errors: the JobSet sets metadata the apply shape does not carry (a bug in a
// stage), or JSON encoding fails.
func (d *Desired) JobSetApplyBody() ([]byte, error) {
	m := d.JobSet.ObjectMeta
	if m.GenerateName != "" || len(m.Finalizers) > 0 || m.UID != "" || m.ResourceVersion != "" {
		return nil, fmt.Errorf("status: desired JobSet %s/%s sets metadata an apply request does not carry", m.Namespace, m.Name)
	}
	return json.Marshal(jobSetApply{
		TypeMeta: d.JobSet.TypeMeta,
		Metadata: jobSetApplyMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations, OwnerReferences: m.OwnerReferences},
		Spec:     d.JobSet.Spec,
	})
}
