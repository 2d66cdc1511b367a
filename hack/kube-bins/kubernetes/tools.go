//go:build tools

// Package tools pins the commands this module builds.
// The "tools" build tag keeps this file out of every build, while go mod tidy
// still records the requirements in go.mod and go.sum. The e2e/cluster
// builder runs `go build -trimpath` on the imported packages in this folder.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "sigs.k8s.io/jobset"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
