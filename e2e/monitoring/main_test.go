package monitoring

import (
	"fmt"
	"os"
	"testing"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
)

// controllerBinary is the trainyard binary built once for the package by TestMain.
var controllerBinary string

// TestMain builds the controller and runs the tests on one local control plane with
// Prometheus (built once into the cache with promtool) and the helm CLI, which renders
// the chart's ServiceMonitor, PrometheusRule and RBAC.
func TestMain(m *testing.M) {
	bin, err := ctrlproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	controllerBinary = bin
	os.Exit(cluster.ForTestsWith(m, func(o *cluster.Options) {
		o.Prometheus = true
		o.Build.Helm = true
	}))
}
