// Package dashboard builds Trainyard's Grafana dashboard, shipped as
// charts/trainyard/dashboards/trainyard.json, with Grafana's Foundation SDK
// (github.com/grafana/grafana-foundation-sdk/go), so that the JSON's shape is
// Grafana's dashboard model by construction. The JSON is generated so that
// every panel follows the same conventions (datasource variable, units,
// legends, $__rate_interval) and so that queries are built from a few helpers
// instead of being copied; hack/charttest checks the committed file is current
// and that every query parses and names only metrics the binary exports, and
// hack/dashboardpng draws its main panels from a Prometheus.
//
// The SDK lives in this module, not in the main one: only this generator and
// its tests use it, and the controller's module keeps its dependencies to what
// the binary runs.
//
// Regenerate with: cd hack/charttest && go run ./cmd/gendashboard
package dashboard
