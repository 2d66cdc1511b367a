package render

import (
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/pkg/stages/status"
)

// Redacted replaces every value of a Secret's data and stringData in the output, and the
// JobSet hash annotation when the hash covers redacted data: generated keys are secret
// and differ on every build.
const Redacted = "<redacted>"

// Objects returns what the status stage writes for r, in its order: the create-only
// objects (generated as the status stage generates them right before creating them),
// the applied side objects, then the JobSet as its server-side apply request; Secrets
// redacted. The maps are copies.
func (r *Result) Objects() ([]map[string]any, error) {
	out := make([]map[string]any, 0, len(r.Plan.CreateOnly)+len(r.Desired.Objects)+1)
	for _, o := range r.Plan.CreateOnly {
		obj := o.Object.DeepCopy()
		if o.Generate != nil {
			if err := o.Generate(obj); err != nil {
				return nil, fmt.Errorf("generating %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
		}
		if obj.GetAPIVersion() == "v1" && obj.GetKind() == "Secret" {
			redactSecret(obj) // not in the hash: the hash needs no redaction
		}
		out = append(out, obj.Object)
	}
	redacted := false
	for _, obj := range r.Desired.Objects {
		o := obj.DeepCopy()
		if o.GetAPIVersion() == "v1" && o.GetKind() == "Secret" {
			redacted = redactSecret(o) || redacted
		}
		out = append(out, o.Object)
	}
	js, err := r.Desired.JobSetObject()
	if err != nil {
		return nil, err
	}
	if redacted {
		if err := unstructured.SetNestedField(js, Redacted, "metadata", "annotations", status.AnnotationJobSetHash); err != nil {
			return nil, err
		}
	}
	return append(out, js), nil
}

// redactSecret replaces the values of s's data and stringData; it reports whether there
// were any.
func redactSecret(s *unstructured.Unstructured) bool {
	found := false
	for _, field := range []string{"data", "stringData"} {
		m, ok := s.Object[field].(map[string]any)
		if !ok {
			continue
		}
		for k := range m {
			m[k] = Redacted
			found = true
		}
	}
	return found
}

// WriteYAML writes every object of results as a YAML stream, each TrainJob's objects
// under a comment naming it and its origin, followed by its effective run policy when
// it has one (RunPolicyComment) and the events the stages recorded, as comments.
func WriteYAML(w io.Writer, results []*Result) error {
	for _, r := range results {
		objs, err := r.Objects()
		if err != nil {
			return err
		}
		for i, obj := range objs {
			data, err := yaml.Marshal(obj)
			if err != nil {
				return fmt.Errorf("encoding %v: %w", obj["kind"], err)
			}
			header := "---\n"
			if i == 0 {
				header += fmt.Sprintf("# Source: TrainJob %s from %s\n", objectName(r.TrainJob.Namespace, r.TrainJob.Name), r.Origin)
				if c := r.RunPolicyComment(); c != "" {
					header += "# RunPolicy: " + c + "\n"
				}
				for _, e := range r.Events {
					header += "# Event: " + e + "\n"
				}
			}
			if _, err := io.WriteString(w, header+string(data)); err != nil {
				return err
			}
		}
	}
	return nil
}

// RunPolicyComment describes r's effective run policy, each value with where it comes
// from, e.g. "activeDeadlineSeconds=3600 (runtime), ttlSecondsAfterFinished=60
// (TrainJob)"; "" when neither is set.
func (r *Result) RunPolicyComment() string {
	from := func(own bool) string {
		if own {
			return "TrainJob"
		}
		return "runtime"
	}
	var parts []string
	if v := r.RunPolicy.ActiveDeadlineSeconds; v != nil {
		parts = append(parts, fmt.Sprintf("activeDeadlineSeconds=%d (%s)", *v, from(r.TrainJob.Spec.ActiveDeadlineSeconds != nil)))
	}
	if v := r.RunPolicy.TTLSecondsAfterFinished; v != nil {
		parts = append(parts, fmt.Sprintf("ttlSecondsAfterFinished=%d (%s)", *v, from(r.TrainJob.Spec.TTLSecondsAfterFinished != nil)))
	}
	return strings.Join(parts, ", ")
}
