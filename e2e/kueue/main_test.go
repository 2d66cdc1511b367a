// Package kueue holds the end-to-end tests of Trainyard under Kueue (issue 16): a
// local control plane running the Kueue v0.19.1 controller manager with its TrainJob
// integration and webhooks (cluster.Options.Kueue), real Kueue objects
// (ResourceFlavors with node labels and tolerations for tainted kwok nodes,
// ClusterQueues with quota, LocalQueues), and the Trainyard controller binary.
//
// Kueue computes a TrainJob's pod sets with upstream's runtime library, suspends the
// TrainJob at creation, writes its admission into a runtimePatches entry (manager
// kueue.x-k8s.io/manager) while the TrainJob is still suspended, then unsuspends it in
// a second request; it frees quota when the TrainJob's Complete condition is set.
// Each test works in its own namespace, flavor, node and ClusterQueue, so the tests
// run in parallel against one controller.
package kueue

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
	os.Exit(cluster.ForTestsWith(m, func(o *cluster.Options) {
		o.Kueue = true
		o.KueueWaitForPodsReady = podsReadyTimeout
	}))
}
