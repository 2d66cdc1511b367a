#!/usr/bin/env bash
# Builds the controller image of HEAD twice, each time in a fresh worktree at another
# path, and fails unless both give the same digest: what `make image` promises
# (the same commit, the same image), and what a platform team relies on to check a
# published image against its source. A change that lets a path, a time or the build
# machine into the binary or the image fails here.
set -o errexit -o nounset -o pipefail
MAKE=${MAKE:-make}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/a" >/dev/null 2>&1 || true; git -C "$root" worktree remove --force "$tmp/b" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

digests=()
for w in a b; do
  git -C "$root" worktree add --quiet --detach "$tmp/$w" HEAD
  "$MAKE" --no-print-directory -C "$tmp/$w" image IMAGE_LAYOUT="$tmp/$w-layout" >"$tmp/$w.log" 2>&1 || { cat "$tmp/$w.log" >&2; exit 1; }
  digests+=("$(cat "$tmp/$w-layout/digest")")
done
if [ "${digests[0]}" != "${digests[1]}" ]; then
  echo "test-image: HEAD built twice gave ${digests[0]} and ${digests[1]}: the image is not reproducible" >&2
  exit 1
fi
echo "test-image: HEAD ($(git -C "$root" rev-parse --short HEAD)) built twice, at two paths: ${digests[0]}"
