#!/usr/bin/env bash
# The controller binary must not depend on controller-runtime or k8s.io/kubernetes
# (docs/design/architecture.md#no-controller-runtime). Fails naming the offending packages.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bad=$(GOWORK=off go list -deps ./cmd/... ./pkg/... |
  grep -E '^(sigs\.k8s\.io/controller-runtime|k8s\.io/kubernetes)(/|$)' || true)
if [ -n "${bad}" ]; then
  echo "verify-deps: forbidden dependencies in the controller's graph:" >&2
  echo "${bad}" >&2
  exit 1
fi
echo "verify-deps: no controller-runtime, no k8s.io/kubernetes"
