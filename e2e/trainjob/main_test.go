// Package trainjob holds the end-to-end tests of the Trainyard controller on the local
// control plane: a real API server, scheduler, Job and JobSet controllers and kwok
// nodes, with the controller binary run as its own process (so tests can kill and
// restart it).
package trainjob

import (
	"fmt"
	"os"
	"testing"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
)

// controllerBinary is the trainyard binary built once for the package by TestMain.
var controllerBinary string

func TestMain(m *testing.M) {
	bin, err := ctrlproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	controllerBinary = bin
	os.Exit(cluster.ForTests(m))
}
