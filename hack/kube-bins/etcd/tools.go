//go:build tools

// Package tools pins the etcd command this module builds.
// The "tools" build tag keeps this file out of every build, while go mod tidy
// still records the requirements in go.mod and go.sum. The e2e/cluster
// builder runs `go build -trimpath` on the imported packages in this folder.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
