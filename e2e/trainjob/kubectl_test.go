package trainjob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// kubectlBinary is the cluster's kubectl (cluster.Kubectl), located once per package.
var kubectlBinary = sync.OnceValues(func() (string, error) {
	bins, err := cluster.Build(context.Background(), cluster.BuildOptions{})
	if err != nil {
		return "", err
	}
	return bins.Path(cluster.Kubectl), nil
})

// kubectl runs kubectl against a cluster with its admin kubeconfig, as a user does.
type kubectl struct {
	binary, kubeconfig, cacheDir string
}

func newKubectl(t *testing.T, c *cluster.Cluster) *kubectl {
	t.Helper()
	binary, err := kubectlBinary()
	if err != nil {
		t.Fatalf("building kubectl: %v", err)
	}
	return &kubectl{binary: binary, kubeconfig: c.Kubeconfig(), cacheDir: t.TempDir()}
}

// kubectlResult is what one kubectl command did.
type kubectlResult struct {
	args           []string
	exitCode       int
	stdout, stderr string
}

// warnings are the lines kubectl printed as "Warning: <text>", the admission warnings
// the API server relayed; each without its prefix.
func (r kubectlResult) warnings() []string {
	var out []string
	for _, line := range strings.Split(r.stderr, "\n") {
		if w, ok := strings.CutPrefix(line, "Warning: "); ok {
			out = append(out, w)
		}
	}
	return out
}

func (r kubectlResult) String() string {
	return fmt.Sprintf("kubectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.exitCode, r.stdout, r.stderr)
}

// run runs kubectl args with stdin; a kubectl that cannot be started fails the test.
func (k *kubectl) run(t *testing.T, stdin []byte, args ...string) kubectlResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(k.binary, append([]string{"--kubeconfig=" + k.kubeconfig, "--cache-dir=" + k.cacheDir}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running kubectl: %v", err)
	}
	return kubectlResult{args: args, exitCode: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// apply runs `kubectl apply -f -` of obj's YAML, with extra flags (--dry-run=server).
func (k *kubectl) apply(t *testing.T, obj any, flags ...string) kubectlResult {
	t.Helper()
	return k.run(t, toYAML(t, obj), append([]string{"apply", "-f", "-"}, flags...)...)
}

// mustApply applies obj and fails the test unless kubectl succeeds.
func (k *kubectl) mustApply(t *testing.T, obj any) kubectlResult {
	t.Helper()
	r := k.apply(t, obj)
	if r.exitCode != 0 {
		t.Fatalf("%s", r)
	}
	return r
}

// toYAML is obj as the YAML a user would pipe to kubectl; obj has its TypeMeta set.
func toYAML(t *testing.T, obj any) []byte {
	t.Helper()
	data, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
