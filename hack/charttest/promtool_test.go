package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtool returns the promtool binary named by $PROMTOOL (make test-chart
// links the one e2e/cluster builds: `localcluster tool promtool`), skipping the test without it.
func promtool(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("PROMTOOL")
	if bin == "" {
		t.Skip("PROMTOOL is not set; run make test-chart, or set PROMTOOL to the path `cd e2e && go run ./cmd/localcluster tool promtool` prints")
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("PROMTOOL=%s: %v", bin, err)
	}
	return bin
}

func runPromtool(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

// TestPromtoolCheckRules runs `promtool check rules` on the PrometheusRule of
// every value combination that renders one.
func TestPromtoolCheckRules(t *testing.T) {
	bin := promtool(t)
	for _, name := range []string{"monitoring", "everything"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeRuleFile(t, filepath.Join(dir, "rules.yaml"), renderedRules(t, combinations[name]), false)
			runPromtool(t, bin, dir, "check", "rules", "rules.yaml")
		})
	}
}

// TestPromtoolAlerts runs the alert unit tests in testdata/alerts_test.yaml
// against the rules rendered with default values.
func TestPromtoolAlerts(t *testing.T) {
	bin := promtool(t)
	dir := t.TempDir()
	writeRuleFile(t, filepath.Join(dir, "rules.yaml"), renderedRules(t, "metrics: {prometheusRule: {enabled: true}}"), true)
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), mustReadFile(t, "testdata/alerts_test.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, bin, dir, "test", "rules", "alerts_test.yaml")
}

// writeRuleFile writes a PrometheusRule spec as a Prometheus rule file,
// without the alerts' annotations when stripAnnotations is set (the unit tests
// pin expressions and labels; the annotations are checked by check rules).
func writeRuleFile(t *testing.T, path string, spec []byte, stripAnnotations bool) {
	t.Helper()
	var rules struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(spec, &rules); err != nil {
		t.Fatal(err)
	}
	if stripAnnotations {
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				delete(r, "annotations")
			}
		}
	}
	data, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
