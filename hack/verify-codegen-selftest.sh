#!/usr/bin/env bash
# Proves that verify-codegen.sh can fail: it must pass on this tree and fail on a copy
# in which one generated file was edited by hand.
set -o errexit -o nounset -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "${HERE}/.." && pwd)
COPY=$(mktemp -d)
trap 'rm -rf "${COPY}"' EXIT

(cd "${ROOT}" && git ls-files -z --cached --others --exclude-standard) |
  (cd "${ROOT}" && xargs -0 cp --parents -t "${COPY}")
(cd "${COPY}" && git init -q && git add -A)
echo "// edited by hand" >>"${COPY}/pkg/apis/trainer/v1alpha1/zz_generated.deepcopy.go"

if bash "${HERE}/verify-codegen.sh" "${COPY}" >/dev/null 2>&1; then
  echo "verify-codegen-selftest: FAIL: verify passed on a hand-edited generated file" >&2
  exit 1
fi
echo "verify-codegen-selftest: ok (verify rejects a hand-edited generated file)"
