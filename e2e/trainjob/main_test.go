// Package trainjob holds the end-to-end tests of the Trainyard controller on the local
// control plane: a real API server, scheduler, Job and JobSet controllers and kwok
// nodes, with the controller binary run as its own process (so tests can kill and
// restart it).
package trainjob

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// controllerBinary is the trainyard binary built once for the package by TestMain.
var controllerBinary string

func TestMain(m *testing.M) {
	bin, err := buildController()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	controllerBinary = bin
	os.Exit(cluster.ForTests(m))
}

// buildController builds cmd/trainyard of this checkout into _output/e2e/bin.
func buildController() (string, error) {
	root, err := cluster.FindRepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(root, "_output", "e2e", "bin", "trainyard")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/trainyard")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the controller: %v\n%s", err, output)
	}
	return out, nil
}
