package v1alpha1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// upstreamCRDDir returns the CRDs of upstream Kubeflow Trainer v2.3.0 in the Go module
// cache (hack/kube-bins/trainer requires that module: the scale benchmark's peer mode
// builds it), skipping the test when the cache lacks them.
func upstreamCRDDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "github.com", "kubeflow", "trainer", "v2@v2.3.0", "manifests", "base", "crds")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("upstream Trainer v2.3.0 CRDs not in the module cache (%v): run go mod download github.com/kubeflow/trainer/v2 in hack/kube-bins/trainer", err)
	}
	return dir
}

// topFields returns the names of the properties of spec and status in schema, as
// "spec.<name>" and "status.<name>", sorted.
func topFields(schema map[string]any) []string {
	var out []string
	props, _ := schema["properties"].(map[string]any)
	for _, part := range []string{"spec", "status"} {
		sub, _ := props[part].(map[string]any)
		fields, _ := sub["properties"].(map[string]any)
		for name := range fields {
			out = append(out, part+"."+name)
		}
	}
	slices.Sort(out)
	return out
}

// TestFieldsAddedToUpstream: the fields Trainyard's TrainJob and runtime CRDs have at
// the top of spec and status beyond upstream v2.3.0's are exactly KEP-2899's, as
// kubeflow/trainer #4052 lists them (docs/compatibility.md#ttl-and-run-policy), and
// none of upstream's is missing.
func TestFieldsAddedToUpstream(t *testing.T) {
	upstream := upstreamCRDDir(t)
	for file, want := range map[string][]string{
		"trainer.kubeflow.org_trainjobs.yaml":               {"spec.ttlSecondsAfterFinished", "status.completionTime", "status.startTime"},
		"trainer.kubeflow.org_trainingruntimes.yaml":        {"spec.runPolicy"},
		"trainer.kubeflow.org_clustertrainingruntimes.yaml": {"spec.runPolicy"},
	} {
		t.Run(file, func(t *testing.T) {
			theirs := topFields(schemaOf(t, filepath.Join(upstream, file)))
			ours := topFields(schemaOf(t, filepath.Join(crdDir, file)))
			var added, missing []string
			for _, f := range ours {
				if !slices.Contains(theirs, f) {
					added = append(added, f)
				}
			}
			for _, f := range theirs {
				if !slices.Contains(ours, f) {
					missing = append(missing, f)
				}
			}
			if diff := cmp.Diff(want, added); diff != "" {
				t.Errorf("fields added to upstream's (-want +got):\n%s", diff)
			}
			if len(missing) > 0 {
				t.Errorf("upstream's fields missing: %v", missing)
			}
		})
	}
}
