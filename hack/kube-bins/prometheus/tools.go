//go:build tools

// Package tools pins Prometheus (github.com/prometheus/prometheus v0.316.0, Prometheus
// 3.16.0): the server, which e2e/cluster runs beside the controller to scrape it and
// evaluate the chart's rules (issue 39), and promtool, which checks and unit-tests those
// rules (hack/charttest). One build module for both, so a cold build compiles the
// packages they share once.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
