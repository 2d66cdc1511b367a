//go:build tools

// Package tools pins the registry command this module builds: distribution's
// OCI registry, which the e2e cluster runs on 127.0.0.1 to serve the container
// images of e2e/images to a real node's containerd (through registry mirrors).
// The "tools" build tag keeps this file out of every build, while go mod tidy
// still records the requirements in go.mod and go.sum. The e2e/cluster
// builder runs `go build -trimpath` on the imported packages in this folder.
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
