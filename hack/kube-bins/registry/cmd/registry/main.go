// Command registry is distribution's registry (github.com/distribution/distribution/v3)
// with the filesystem storage driver only: the e2e cluster's image registry
// (e2e/cluster RegistrySource). Upstream's cmd/registry also links the S3,
// GCS and Azure drivers, the pull-through proxy and token auth, which nearly
// double a cold build (about 6.5 CPU-minutes instead of 3.7) and the binary
// (56 MB instead of 25 MB) for nothing a local cluster uses.
//
// The e2e cache keys the binary by this module's go.mod and go.sum, not by
// this file: a change here that must rebuild it goes with a go.mod change.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
