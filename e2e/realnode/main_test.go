// Package realnode holds the end-to-end tests that run real processes: the local
// control plane with its real node (cluster.Options.RealNode: kubelet, containerd,
// runc, CNI and CoreDNS on this machine), the upstream runtimes unchanged, their images
// served as stand-ins from the registry on 127.0.0.1. What kwok's fake pods cannot
// show is shown here: containers start, volumes mount, pods resolve each other through
// the cluster DNS, torchrun rendezvous, and a trainer reports its progress to the
// controller over the injected URL, CA and token.
package realnode

import (
	"fmt"
	"os"
	"testing"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	"github.com/trainyard/trainyard/e2e/images"
)

// controllerBinary is the trainyard binary built once for the package by TestMain.
var controllerBinary string

// EnvRealNode=1 runs this package, as `make test-e2e-realnode` (part of `make check`)
// does: it needs root and changes the host, so a plain `go test ./...` skips it.
const EnvRealNode = "E2E_REAL_NODE"

func TestMain(m *testing.M) {
	if os.Getenv(EnvRealNode) != "1" {
		fmt.Fprintln(os.Stderr, "e2e/realnode: skipped: set "+EnvRealNode+"=1 to run the real-node tests (root, runc, iptables, mmdebstrap)")
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e/realnode: skipped: a real node needs root (kubelet, containerd and the pod network change the host)")
		os.Exit(0)
	}
	bin, err := ctrlproc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	controllerBinary = bin
	os.Exit(cluster.ForTestsWith(m, func(o *cluster.Options) {
		o.RealNode = true
		o.RoutedServices = true // services_test.go
		o.Images = images.Publisher(images.Options{})
		o.Nodes = 1 // one fake node, to show real pods never land on it
	}))
}
