//go:build tools

// Package tools pins the CNI plugins of the local control plane's real node:
// bridge (the pods' veth pairs on one host bridge), host-local (addresses from
// the node's pod CIDR), loopback and portmap (hostPort). The "tools" build tag
// keeps this file out of every build, while go mod tidy still records the
// requirements in go.mod and go.sum.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/meta/portmap"
)
