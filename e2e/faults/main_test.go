// Package faults is the fault suite of issue 15: end-to-end tests that break the
// controller and the control plane on purpose during bursts of TrainJobs — the
// controller SIGKILLed, its leader SIGKILLed, the API server stopped, etcd restarted,
// connections cut, a namespace whose JobSets are all denied — and prove that every
// TrainJob still gets exactly one JobSet, with the figures in the test output.
//
// The package runs a cluster of its own (it stops and restarts its components), with
// the API server's audit log on and without the JobSet controller: nothing acts on a
// JobSet once it is created, so the machine's two cores go to the controller and the
// API server, and what is checked is the controller's work alone.
package faults

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
)

var (
	// burstSize is the TrainJob count of TestControllerKilledDuringBurst.
	burstSize = flag.Int("faults.burst", 2000, "TrainJobs in the burst during which the controller is SIGKILLed three times")
	// tenantBursts are the TrainJob counts of one namespace's burst in
	// TestBurstDoesNotDelayAnotherNamespace, one subtest each: issue 43's 3,000 and
	// 10,000 (-faults.tenantburst=10000 runs one).
	tenantBursts = flag.String("faults.tenantburst", "3000,10000", "TrainJob counts (comma-separated) of one namespace's burst during which another namespace creates one")
	// seed drives every random choice of the suite (kill points, cut periods); 0 picks
	// one from the clock. The tests log it: -faults.seed=<it> repeats a run.
	seed = flag.Int64("faults.seed", 0, "seed of the random kill points and connection cuts; 0: from the clock")
)

// controllerBinary is the trainyard binary built once for the package by TestMain.
var controllerBinary string

func TestMain(m *testing.M) {
	flag.Parse()
	bin, err := ctrlproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	controllerBinary = bin
	os.Exit(cluster.ForTestsWith(m, func(o *cluster.Options) {
		o.AuditLog = true
		o.WithoutJobSetController = true
		o.Nodes = -1 // no pod ever runs: no JobSet controller
	}))
}
