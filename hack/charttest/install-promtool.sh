#!/usr/bin/env bash
# Installs promtool, Prometheus' rule checker, into _output/tools/promtool from
# Debian's prometheus package (promtool cannot be `go install`ed: Prometheus'
# go.mod has replace directives). Prints the path. Idempotent.
set -o errexit -o nounset -o pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest="${root}/_output/tools"
if [ -x "${dest}/promtool" ]; then
  echo "${dest}/promtool"
  exit 0
fi
mkdir -p "${dest}"
tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT
cd "${tmp}"
if ! apt-get download prometheus >/dev/null 2>&1; then
  # No package lists yet (fresh container): fetch them, then retry.
  apt-get update >/dev/null
  apt-get download prometheus >/dev/null
fi
dpkg -x prometheus_*.deb pkg
install -m 0755 pkg/usr/bin/promtool "${dest}/promtool"
"${dest}/promtool" --version >&2
echo "${dest}/promtool"
