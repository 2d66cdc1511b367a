#!/usr/bin/env bash
# make check: everything CI runs. The binaries and images of the e2e legs (make e2e-build)
# are built in the background from the start, beside the verify, lint, unit, fuzz and chart
# steps: those leave a core idle about half the time on a cold machine (measured: 36 CPU
# minutes in 33 minutes of wall time), and the images' Debian downloads wait on the network,
# so a cold run pays for most of the build in time it already spends. The e2e legs start once
# both are done. e2e/README.md#what-a-run-costs gives the figures.
set -o errexit -o nounset -o pipefail
MAKE=${MAKE:-make}
OUTPUT=${OUTPUT:-_output}
log="$OUTPUT/e2e-build.log"
mkdir -p "$OUTPUT"

set -m # the build gets a process group of its own, so a failure stops all of it
"$MAKE" --no-print-directory e2e-build >"$log" 2>&1 &
build=$!
set +m
stop_build() { kill -- "-$build" 2>/dev/null || true; }
trap stop_build EXIT
echo "check: e2e-build runs in the background (log: $log)"

"$MAKE" --no-print-directory verify verify-selftest lint test fuzz-short test-chart test-image

echo "check: waiting for e2e-build"
if ! wait "$build"; then
  echo "check: e2e-build failed; its log:" >&2
  cat "$log" >&2
  exit 1
fi
trap - EXIT
cat "$log"
"$MAKE" --no-print-directory test-e2e
