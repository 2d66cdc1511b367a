// Package helm is the Helm leg of the e2e tests (issue 38): Trainyard deployed as its
// users deploy it. The helm CLI (v3.22.0, built into the cache) installs
// charts/trainyard with its CRDs on a local control plane whose real node runs the
// controller image of `make image` as Pods, with Services routed by kube-proxy
// (cluster.Options.RoutedServices): the API server calls the webhooks through the
// chart's Service and trainers report progress through it. `make test-e2e-helm` runs
// it (part of `make check`); it needs what the real-node leg needs, and
// E2E_IMAGE_LAYOUT naming the OCI image layout `make image` wrote.
package helm

import (
	"fmt"
	"os"
	"testing"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/images"
)

// EnvHelm=1 runs this package, as `make test-e2e-helm` does: it needs root and changes
// the host, so a plain `go test ./...` skips it.
const EnvHelm = "E2E_HELM"

// EnvHelmSet adds `--set` values to the install (the upgrade reuses them): how a
// step is shown to fail when what it guards is broken, e.g.
// E2E_HELM_SET=shutdownDelay=0s (e2e/README.md#the-helm-leg-broken-on-purpose).
const EnvHelmSet = "E2E_HELM_SET"

// EnvImageLayout names the OCI image layout of the controller image (`make image`:
// _output/image/oci).
const EnvImageLayout = "E2E_IMAGE_LAYOUT"

func TestMain(m *testing.M) {
	if os.Getenv(EnvHelm) != "1" {
		fmt.Fprintln(os.Stderr, "e2e/helm: skipped: set "+EnvHelm+"=1 (and "+EnvImageLayout+") to run the Helm leg, as make test-e2e-helm does")
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e/helm: skipped: the controller runs as Pods on the real node, which needs root")
		os.Exit(0)
	}
	if layout := os.Getenv(EnvImageLayout); layout == "" {
		fmt.Fprintln(os.Stderr, "e2e/helm: "+EnvImageLayout+" is not set: run make test-e2e-helm, which builds the image first")
		os.Exit(1)
	}
	os.Exit(cluster.ForTestsWith(m, func(o *cluster.Options) {
		o.RealNode = true
		o.RoutedServices = true
		o.Images = images.Publisher(images.Options{})
		o.Build.Helm = true
		o.Prometheus = true // scrapes the controller Pods (prometheus_test.go)
		o.Nodes = 1
	}))
}
