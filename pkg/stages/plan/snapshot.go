package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
)

// MaxSnapshotBytes bounds an encoded snapshot: all of an object's annotations together
// may hold 256 KiB, and the runtime template's own annotations share that budget.
const MaxSnapshotBytes = 128 << 10

// EncodeSnapshot returns r as the value of objectkeys.AnnotationRuntimeSnapshot: a JSON runtime
// object with apiVersion, kind, metadata (name, namespace for a TrainingRuntime, uid,
// generation) and spec — the shape upstream stores in its snapshot ConfigMap, without
// the rest of the metadata. uid and generation say which version was recorded.
//
// Errors: *UnsupportedError when the encoding exceeds MaxSnapshotBytes.
func EncodeSnapshot(r Runtime, meta metav1.ObjectMeta) (string, error) {
	doc := trainer.TrainingRuntime{
		TypeMeta: metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: r.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name: r.Name, Namespace: meta.Namespace, UID: meta.UID, Generation: meta.Generation,
		},
		Spec: *r.Spec,
	}
	if r.Kind != trainer.TrainingRuntimeKind {
		doc.Namespace = ""
	}
	b, err := json.Marshal(&doc)
	if err != nil {
		return "", fmt.Errorf("encoding the runtime snapshot of %s: %w", r.Ref(), err)
	}
	if len(b) > MaxSnapshotBytes {
		return "", &UnsupportedError{Object: r.Ref(), Feature: fmt.Sprintf(
			"a runtime whose JSON is %d bytes: the JobSet annotation %s that freezes the runtime for a started TrainJob holds at most %d bytes; shrink the runtime's template",
			len(b), objectkeys.AnnotationRuntimeSnapshot, MaxSnapshotBytes)}
	}
	return string(b), nil
}

// SnapshotHash returns the objectkeys.AnnotationRuntimeSnapshotHash value for value, an
// objectkeys.AnnotationRuntimeSnapshot value: the hex SHA-256 of its bytes, first 128 bits. Two
// snapshots with the same hash are the same bytes (a collision is as unlikely as the
// JobSet hash's), so a runtime whose encoding has it is the recorded runtime.
func SnapshotHash(value string) string {
	sum := sha256.Sum256([]byte(value))
	return hex.EncodeToString(sum[:16])
}

// DecodeSnapshot returns the runtime recorded in value, an objectkeys.AnnotationRuntimeSnapshot
// value on the TrainJob's JobSet jobSet, for a TrainJob whose spec.runtimeRef resolves
// to kind and name. Snapshot is
// set to value, so a rebuild records exactly the same bytes.
//
// Errors: *InvalidInputError naming the annotation when value is not a runtime object
// or records another runtime (spec.runtimeRef is immutable, so only a hand edit of the
// annotation does that).
func DecodeSnapshot(value, kind, name, jobSet string) (Runtime, error) {
	object, field := "JobSet/"+jobSet, "metadata.annotations["+objectkeys.AnnotationRuntimeSnapshot+"]"
	const fix = "; restore the annotation's value"
	var doc trainer.TrainingRuntime
	if err := json.Unmarshal([]byte(value), &doc); err != nil {
		return Runtime{}, &InvalidInputError{Object: object, Field: field,
			Message: "not a runtime snapshot: " + err.Error() + fix}
	}
	if doc.Kind != kind || doc.Name != name || doc.APIVersion != trainer.SchemeGroupVersion.String() {
		return Runtime{}, &InvalidInputError{Object: object, Field: field, Message: fmt.Sprintf(
			"the snapshot records %s %s/%s but spec.runtimeRef names %s/%s%s",
			doc.APIVersion, doc.Kind, doc.Name, kind, name, fix)}
	}
	return Runtime{Kind: kind, Name: name, Spec: &doc.Spec, Snapshot: value}, nil
}
