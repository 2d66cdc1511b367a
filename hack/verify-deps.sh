#!/usr/bin/env bash
# The controller binary must not depend on controller-runtime or k8s.io/kubernetes
# (docs/design/architecture.md#no-controller-runtime), and must link only the typed
# clients, informers and listers it uses (docs/design/memory.md#linked-packages): no
# package of the main module imports client-go's kubernetes.Clientset package or its
# informers (the all-groups factory, and the per-kind constructors that take a whole
# kubernetes.Interface; pkg/kubeclient replaces both), and no code of those packages is
# linked into ./cmd/trainyard, whatever library would pull it in. Fails naming the
# offenders.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GOWORK=off
bad=$(go list -deps ./cmd/... ./pkg/... |
  grep -E '^(sigs\.k8s\.io/controller-runtime|k8s\.io/kubernetes)(/|$)' || true)
if [ -n "${bad}" ]; then
  echo "verify-deps: forbidden dependencies in the controller's graph:" >&2
  echo "${bad}" >&2
  exit 1
fi
echo "verify-deps: no controller-runtime, no k8s.io/kubernetes"

module=$(go list -m)
# Imports, not TestImports: tests may use client-go's fake clientset.
bad=$(go list -f '{{$p := .ImportPath}}{{range .Imports}}{{$p}} imports {{.}}{{"\n"}}{{end}}' ./cmd/... ./pkg/... |
  grep -E "^${module}/.* imports k8s\.io/client-go/(kubernetes|informers(/.*)?)$" || true)
if [ -n "${bad}" ]; then
  echo "verify-deps: the whole clientset or client-go's informers imported (use pkg/kubeclient):" >&2
  echo "${bad}" >&2
  exit 1
fi
bin=$(mktemp -d)
trap 'rm -rf "${bin}"' EXIT
go build -o "${bin}/trainyard" ./cmd/trainyard
bad=$(go tool nm "${bin}/trainyard" | awk '$2 == "T" || $2 == "t" { print $3 }' |
  grep -E '^k8s\.io/client-go/(kubernetes\.|informers[./])' | head -20 || true)
if [ -n "${bad}" ]; then
  echo "verify-deps: ./cmd/trainyard links code of client-go's kubernetes.Clientset or informers (first 20 symbols):" >&2
  echo "${bad}" >&2
  exit 1
fi
echo "verify-deps: ./cmd/trainyard links no kubernetes.Clientset and no client-go informers"
