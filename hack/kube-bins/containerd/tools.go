//go:build tools

// Package tools pins the container runtime of the local control plane's real
// node: containerd with its CRI plugin, and the runc shim it starts pods with.
// The "tools" build tag keeps this file out of every build, while go mod tidy
// still records the requirements in go.mod and go.sum. The e2e/cluster
// builder runs `go build -trimpath` on the imported packages in this folder.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
)
