// Command crdtrim removes the field descriptions under one path of a generated CRD's
// schema, in place: crdtrim FILE PATH, PATH being dotted property names from the
// version's openAPIV3Schema, e.g. spec.trainJobTemplate.spec.
//
// The OptimizationJob CRD embeds the whole TrainJob spec in its trainJobTemplate; with
// its descriptions it would put the chart's release Secret over three quarters of the
// 1 MiB a Secret may hold (hack/charttest TestReleaseFitsInASecret). The fields are the
// TrainJob CRD's, documented there (`kubectl explain trainjob.spec`); everything else
// of the schema is kept as generated.
package main

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: crdtrim FILE PATH")
		os.Exit(2)
	}
	if err := trim(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "crdtrim:", err)
		os.Exit(1)
	}
}

// trim rewrites file without the descriptions below path in every version's schema.
// Errors: the file does not read or parse, or a version has no property at path.
func trim(file, path string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	versions, _ := dig(crd, "spec", "versions").([]any)
	for _, v := range versions {
		node, _ := dig(v, "schema", "openAPIV3Schema").(map[string]any)
		for _, name := range strings.Split(path, ".") {
			node, _ = dig(node, "properties", name).(map[string]any)
		}
		if node == nil {
			return fmt.Errorf("%s: no property %s in the schema", file, path)
		}
		for _, child := range node {
			dropDescriptions(child)
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(file, append([]byte("---\n"), out...), 0o644)
}

// dig returns the value at keys in nested maps, or nil.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// dropDescriptions removes every "description" key below v.
func dropDescriptions(v any) {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "description")
		for _, child := range v {
			dropDescriptions(child)
		}
	case []any:
		for _, child := range v {
			dropDescriptions(child)
		}
	}
}
