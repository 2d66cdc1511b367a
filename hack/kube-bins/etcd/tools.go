//go:build tools

// Package tools pins the etcd command built from this module. It is compiled
// only with the "tools" build tag and only by the e2e/cluster builder.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
