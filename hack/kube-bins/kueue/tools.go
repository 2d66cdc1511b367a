//go:build tools

// Package tools pins the command this module builds.
// The "tools" build tag keeps this file out of every build, while go mod tidy
// still records the requirements in go.mod and go.sum. The e2e/cluster
// builder runs `go build -trimpath` on the imported package in this folder.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
