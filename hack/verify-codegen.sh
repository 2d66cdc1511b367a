#!/usr/bin/env bash
# Fails when generated files differ from what `make generate` produces, or when a
# generated file is missing or extra. The tree under test (default: this repo; or $1) is
# copied to a temporary folder and regenerated there, so verify never touches the tree.
set -o errexit -o nounset -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TREE=$(cd "${1:-${HERE}/..}" && pwd)
GENERATED=(pkg/clientset pkg/apis charts/trainyard/crds)

WORK=$(mktemp -d)
trap 'rm -rf "${WORK}"' EXIT

# Copy what git tracks plus untracked, not-ignored files: exactly what a commit would hold.
(cd "${TREE}" && git ls-files -z --cached --others --exclude-standard) |
  (cd "${TREE}" && xargs -0 cp --parents -t "${WORK}" 2>/dev/null || true)
# The copy reuses this repo's cached generator binaries (git-ignored _output/tools).
mkdir -p "${WORK}/_output" && ln -s "${HERE}/../_output/tools" "${WORK}/_output/tools" 2>/dev/null || true
mkdir -p "${HERE}/../_output/tools"

(cd "${WORK}" && bash hack/update-codegen.sh >/dev/null)

status=0
for dir in "${GENERATED[@]}"; do
  if ! diff -ruN "${TREE}/${dir}" "${WORK}/${dir}" >"${WORK}/diff.txt"; then
    echo "verify: ${dir} is out of date with the API types; run 'make generate' and commit:" >&2
    head -n 40 "${WORK}/diff.txt" >&2
    status=1
  fi
done
[ "${status}" -eq 0 ] && echo "verify: generated code is up to date"
exit "${status}"
