#!/usr/bin/env bash
# Fails when docs/metrics.md differs from what hack/metricsdoc generates from
# pkg/metrics, i.e. a metric was added, renamed or re-documented without
# running `go run ./hack/metricsdoc`.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT
GOWORK=off go run ./hack/metricsdoc -out "${tmp}/metrics.md"
if ! diff -u docs/metrics.md "${tmp}/metrics.md"; then
  echo "verify-metricsdoc: docs/metrics.md is stale; run: go run ./hack/metricsdoc" >&2
  exit 1
fi
echo "verify-metricsdoc: docs/metrics.md is up to date"
