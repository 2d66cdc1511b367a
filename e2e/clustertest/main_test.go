package clustertest

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
)

func TestMain(m *testing.M) { os.Exit(cluster.ForTests(m)) }

// object parses a YAML manifest into an unstructured object.
func object(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("parsing manifest: %v\n%s", err, manifest)
	}
	return u
}
