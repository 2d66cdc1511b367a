//go:build tools

// Package tools pins the helm CLI, built by e2e/cluster for the Helm leg of the e2e
// tests (e2e/helm): the version hack/charttest's Go library tests are run with, so that
// every "tested with" of the chart's documentation is one Helm.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
