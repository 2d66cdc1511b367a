//go:build tools

// Package tools pins kube-proxy, which the real node runs when Services are routed
// (e2e/cluster/realnode_services.go). It is its own build module, not part of
// ../kubernetes, so adding it left the control plane's cached builds valid; it
// requires the same Kubernetes release, so the two share Go's build cache.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
