#!/usr/bin/env bash
# Regenerates everything derived from the API types in pkg/apis:
#   - zz_generated.deepcopy.go / zz_generated.defaults.go  (code-generator gen_helpers)
#   - pkg/clientset: clientset, listers, informers, applyconfigurations (gen_client)
#   - CRD YAML in charts/trainyard/crds (controller-gen, schema + CEL rules from markers)
# Tool versions are pinned in hack/tools/go.mod; nothing here uses a tool from $PATH.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODULE=github.com/trainyard/trainyard
BOILERPLATE="${ROOT}/hack/boilerplate.go.txt"
BIN="${ROOT}/_output/tools"
mkdir -p "${BIN}"

# Build the pinned generators once; `go install tool` is a no-op when they are current.
(cd "${ROOT}/hack/tools" && GOWORK=off GOBIN="${BIN}" go install tool)
export GOBIN="${BIN}" PATH="${BIN}:${PATH}"

CODEGEN_PKG=$(cd "${ROOT}/hack/tools" && GOWORK=off go list -m -f '{{.Dir}}' k8s.io/code-generator)
# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

kube::codegen::gen_helpers \
  --boilerplate "${BOILERPLATE}" \
  "${ROOT}/pkg/apis"

kube::codegen::gen_client \
  --with-watch \
  --with-applyconfig \
  --applyconfig-externals "sigs.k8s.io/jobset/api/jobset/v1alpha2.JobSetSpec:sigs.k8s.io/jobset/client-go/applyconfiguration/jobset/v1alpha2" \
  --output-dir "${ROOT}/pkg/clientset" \
  --output-pkg "${MODULE}/pkg/clientset" \
  --boilerplate "${BOILERPLATE}" \
  "${ROOT}/pkg/apis"

# CRDs: generateEmbeddedObjectMeta keeps labels/annotations of the templates' metadata
# in the schema (without it the API server would prune them). maxDescLen=0 is not set:
# full descriptions make `kubectl explain` useful.
rm -f "${ROOT}"/charts/trainyard/crds/*.yaml
(cd "${ROOT}" && controller-gen \
  crd:generateEmbeddedObjectMeta=true \
  paths=./pkg/apis/trainer/... \
  output:crd:artifacts:config=charts/trainyard/crds)

# The OptimizationJob CRD carries the whole TrainJob spec in its template: its field
# descriptions stay in the TrainJob CRD only, so the chart's release fits a Secret.
(cd "${ROOT}" && go run ./hack/crdtrim charts/trainyard/crds/trainer.kubeflow.org_optimizationjobs.yaml spec.trainJobTemplate.spec)
