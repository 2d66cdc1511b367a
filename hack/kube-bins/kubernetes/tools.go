//go:build tools

// Package tools pins the Kubernetes control-plane commands built from this
// module. It is compiled only with the "tools" build tag and only by the
// e2e/cluster builder (go build -trimpath <package>).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
