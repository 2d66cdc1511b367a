//go:build tools

// Package tools pins runc, the OCI runtime the real node's containerd starts
// containers with. The "tools" build tag keeps this file out of every build,
// while go mod tidy still records the requirements in go.mod and go.sum.
package tools

import (
	_ "github.com/opencontainers/runc"
)
