//go:build tools

// Package tools pins the kwok command built from this module. It is compiled
// only with the "tools" build tag and only by the e2e/cluster builder.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
