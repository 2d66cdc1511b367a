package v1alpha1_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

var trainerKinds = []string{trainer.TrainJobKind, trainer.TrainingRuntimeKind, trainer.ClusterTrainingRuntimeKind}

// TestUpstreamDocumentsRoundTrip decodes every upstream TrainJob and runtime strictly
// (unknown or duplicate fields are errors) and re-encodes it: no field may be lost or
// changed. This is the wire-compatibility contract
// (docs/design/architecture.md#upstream-objects-decode-unchanged).
func TestUpstreamDocumentsRoundTrip(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := trainer.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	strict := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

	docs := utiltesting.UpstreamDocuments(t, trainerKinds...)
	if len(docs) < 20 {
		t.Fatalf("found %d upstream documents of kinds %v, expected at least 20: is shared/upstream complete?", len(docs), trainerKinds)
	}
	for _, doc := range docs {
		t.Run(doc.Name(), func(t *testing.T) {
			obj, gvk, err := strict.Decode(doc.JSON, nil, nil)
			if err != nil {
				t.Fatalf("strict decode: %v", err)
			}
			if gvk.Kind != doc.Kind {
				t.Fatalf("decoded kind %q, document says %q", gvk.Kind, doc.Kind)
			}
			encoded, err := json.Marshal(obj)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			var want, got map[string]any
			if err := json.Unmarshal(doc.JSON, &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(encoded, &got); err != nil {
				t.Fatal(err)
			}
			dropEncodingArtifacts(want, got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip changed the document (-upstream +re-encoded):\n%s", diff)
			}
		})
	}
}

// TestStrictDecodingRejectsUnknownFields guards the strictness the round trip relies on.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := trainer.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	strict := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	for name, doc := range map[string]string{
		"removed spec.podSpecOverrides": `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"a"},"spec":{"runtimeRef":{"name":"r"},"podSpecOverrides":[]}}`,
		"typo in trainer":               `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"a"},"spec":{"runtimeRef":{"name":"r"},"trainer":{"numNode":2}}}`,
		"unknown mlPolicy member":       `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"ClusterTrainingRuntime","metadata":{"name":"a"},"spec":{"mlPolicy":{"tensorflow":{}},"template":{"spec":{}}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := strict.Decode([]byte(doc), nil, nil); err == nil {
				t.Errorf("strict decode accepted %s", doc)
			}
		})
	}
}

// dropEncodingArtifacts removes from got the keys that Go's encoding of Kubernetes types
// adds although the document lacks them (empty objects such as `metadata: {}` or
// `resources: {}` of non-pointer struct fields), and rewrites in want the numbers that a
// resource.Quantity re-encodes as its canonical string (2 → "2"). Anything else that
// differs, and every key the document has, still counts.
func dropEncodingArtifacts(want, got any) {
	switch g := got.(type) {
	case map[string]any:
		w, _ := want.(map[string]any)
		for k, v := range g {
			wv, inWant := w[k]
			if !inWant {
				if m, ok := v.(map[string]any); (ok && len(m) == 0) || v == nil {
					delete(g, k)
				}
				continue
			}
			if n, isNumber := wv.(float64); isNumber {
				if s, isString := v.(string); isString {
					if q, err := resource.ParseQuantity(s); err == nil && q.AsApproximateFloat64() == n {
						w[k] = s
					}
				}
			}
			dropEncodingArtifacts(wv, v)
		}
	case []any:
		w, _ := want.([]any)
		for i := range g {
			if i < len(w) {
				dropEncodingArtifacts(w[i], g[i])
			}
		}
	}
}
