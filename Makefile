# Trainyard — build, generate, verify, lint and test.
# `make check` is what CI runs (.ci/run); `make dev` runs the main job on a local
# control plane. Tool versions are pinned in hack/tools/go.mod.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -o errexit -o nounset -o pipefail -c
.DEFAULT_GOAL := build

GO       ?= go
OUTPUT   := _output
TOOLS    := $(OUTPUT)/tools
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/trainyard/trainyard/pkg/version.Version=$(VERSION) \
            -X github.com/trainyard/trainyard/pkg/version.GitCommit=$(shell git rev-parse HEAD 2>/dev/null || echo unknown)

export GOWORK := off

.PHONY: all
all: generate build lint test

##@ Build

.PHONY: build
build: ## Build the controller binary into _output/bin.
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(OUTPUT)/bin/ ./cmd/...

##@ Image

# The controller image (issue 38): built without Docker by hack/image, a static binary
# per platform on a base of passwd, group and the trusted roots, as one OCI image index
# in an OCI image layout. Reproducible: the same commit gives the same digest
# (test-image proves it), since every time in it is the commit's.
CHART_APP_VERSION := $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' charts/trainyard/Chart.yaml)
IMAGE_TAG       ?= $(CHART_APP_VERSION)
IMAGE           ?= ghcr.io/trainyard/trainyard:$(IMAGE_TAG)
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_LAYOUT    ?= $(OUTPUT)/image/oci
IMAGE_SOURCE    ?= https://github.com/trainyard/trainyard

.PHONY: image
image: ## Build the controller image for IMAGE_PLATFORMS (default linux/amd64 and linux/arm64) as one OCI index in IMAGE_LAYOUT (_output/image/oci; its digest in IMAGE_LAYOUT/digest). No Docker needed.
	@rm -rf $(OUTPUT)/image/bin
	@binaries=; for p in $(IMAGE_PLATFORMS); do \
	  os=$${p%%/*}; arch=$${p##*/}; \
	  echo "building the controller for $$os/$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' \
	    -o $(OUTPUT)/image/bin/$${os}_$${arch}/trainyard ./cmd/trainyard || exit 1; \
	  binaries="$$binaries --binary=$$p=$(CURDIR)/$(OUTPUT)/image/bin/$${os}_$${arch}/trainyard"; \
	done; \
	cd hack/image && $(GO) run . build --out=$(abspath $(IMAGE_LAYOUT)) --tag=$(IMAGE_TAG) \
	  --version=$(VERSION) --revision=$$(git rev-parse HEAD) --created=$$(git log -1 --format=%ct) \
	  --source=$(IMAGE_SOURCE) $$binaries

.PHONY: image-push
image-push: image ## Build the image, then push it to IMAGE (REGISTRY/REPOSITORY:TAG; credentials from ~/.docker/config.json), e.g. make image-push IMAGE=registry.example.com/platform/trainyard:0.1.0.
	cd hack/image && $(GO) run . push --layout=$(abspath $(IMAGE_LAYOUT)) --image=$(IMAGE)

.PHONY: test-image
test-image: ## Prove the image is reproducible: HEAD built in two fresh worktrees gives one digest (hack/image-reproducible.sh); part of check.
	MAKE="$(MAKE)" hack/image-reproducible.sh

##@ Code generation

.PHONY: generate
generate: ## Regenerate deepcopy, defaults, clientset, listers, informers, applyconfigurations and CRDs.
	hack/update-codegen.sh

.PHONY: verify
verify: ## Fail when generated code or docs/metrics.md are stale or hand-edited, a cited document or heading does not exist in the repository, or a README command or cluster target could skip the host-package step (hack/freshmachine).
	hack/verify-codegen.sh
	hack/verify-metricsdoc.sh
	$(GO) run ./hack/citations
	$(GO) run ./hack/freshmachine

.PHONY: verify-selftest
verify-selftest: ## Prove verify fails on a hand-edited generated file.
	hack/verify-codegen-selftest.sh

##@ Lint

$(TOOLS)/staticcheck: hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && GOBIN=$(CURDIR)/$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck
	touch $@

.PHONY: lint
lint: $(TOOLS)/staticcheck ## gofmt, go vet, staticcheck, the layering check and the forbidden-dependency check.
	@out=$$(find . -name '*.go' -not -path './_output/*' -not -path './.git/*' -print0 | xargs -0 gofmt -l); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...
	cd hack/charttest && $(GO) vet ./... && $(CURDIR)/$(TOOLS)/staticcheck ./...
	cd hack/image && $(GO) vet ./... && $(CURDIR)/$(TOOLS)/staticcheck ./...
	$(GO) run ./hack/layers
	hack/verify-deps.sh

##@ Test

.PHONY: test
test: ## Unit tests (race detector on), of the main module and of hack/image.
	$(GO) test -race -count=1 ./...
	cd hack/image && $(GO) test -race -count=1 ./...

FUZZ_ROUNDS ?= 200
# Go native fuzz targets (issue 15), as <FuzzName>:<package>:<executions>: what parses
# user input. `go test -fuzz` fuzzes one target of one package per run, so hack/fuzz.sh
# runs them one after another. Crashers are written to <package>/testdata/fuzz/<FuzzName>/;
# commit them with the fix, and `make test` replays them.
# Budgets count executions (-fuzztime=Nx), not time (issue 28): with a wall-clock
# -fuzztime, Go 1.26's fuzzing coordinator can fail a run on its own deadline
# (golang/go#75804, fixed from Go 1.27 only), mostly under load, and CI runs on 2 busy
# cores. A count has no deadline; Go 1.27 would void every cached Kubernetes build.
# Each count is ~30 s of fuzzing on 2 loaded cores (measured for issue 28); less when idle.
FUZZ_TARGETS := \
  FuzzMerge:./pkg/stages/mergepatches:15000 \
  FuzzMLPolicy:./pkg/stages/mlpolicy:15000 \
  FuzzRender:./pkg/render:8000 \
  FuzzAdmissionReview:./pkg/admission:15000 \
  FuzzAdmissionObjects:./pkg/admission:8000 \
  FuzzOptimizationJobAdmission:./pkg/admission:8000 \
  FuzzProgressReport:./pkg/progress:15000
# fuzz-short runs each target's count × FUZZ_SHORT_FACTOR, fuzz × FUZZ_LONG_FACTOR (~10 min
# each). A new input is minimized for at most FUZZ_*_MINIMIZE executions (about the 2 s
# and 30 s they were; counted for the same reason, and Go's default of 60 s would eat a
# short run). Override any on the command line, FUZZ_TARGETS too (one target, own count).
FUZZ_SHORT_FACTOR   ?= 1
FUZZ_LONG_FACTOR    ?= 20
FUZZ_SHORT_MINIMIZE ?= 1000
FUZZ_LONG_MINIMIZE  ?= 15000

.PHONY: fuzz
fuzz: ## Long randomized runs: FUZZ_ROUNDS seeds of the convergence test (issue 18), with the race detector, then every Go fuzz target (FUZZ_TARGETS) for FUZZ_LONG_FACTOR (default 20) times its fuzz-short budget.
	$(GO) test -race -count=1 -timeout 0 -run '^TestConvergence$$' ./cmd/trainyard/app -convergence.rounds=$(FUZZ_ROUNDS)
	GO=$(GO) hack/fuzz.sh $(FUZZ_LONG_FACTOR) $(FUZZ_LONG_MINIMIZE) $(FUZZ_TARGETS)

.PHONY: fuzz-short
fuzz-short: ## Every Go fuzz target (FUZZ_TARGETS: patch merge, ML policies, render, admission, progress reports) for its execution budget (~30 s each on 2 loaded cores); part of check.
	GO=$(GO) hack/fuzz.sh $(FUZZ_SHORT_FACTOR) $(FUZZ_SHORT_MINIMIZE) $(FUZZ_TARGETS)

# The Kubernetes 1.37 leg of test-e2e (issue 16): only the tests whose behavior
# differs from 1.36, in the packages that have them: the Workload API (v1beta1,
# PodGroup spec.workloadRef), PodGroup-level DRA claims (KEP-5729), the DRA tests and
# the version stamp. The rest runs on the default 1.36 alone.
E2E_KUBE137_PACKAGES := ./clustertest/ ./trainjob/
E2E_KUBE137_RUN      := ^(TestWorkload.*|TestDRA.*|TestKubectlVersionReportsTheRelease)$$

# Everything the legs of test-e2e run, built before the first one starts: the 1.36
# binaries with Kueue's and the real node's, and the real node's images beside them (a
# cold build pays the longer of the two, about 25 minutes on 2 cores, not their sum, as it
# would if the real-node leg built its images after the other legs), then the 1.37
# servers. Cached, it takes seconds.
.PHONY: e2e-build
e2e-build: localcluster ## Build (once; cached by recipe) every binary and image the e2e legs need: Kubernetes 1.36 and 1.37, JobSet, kwok, Kueue, the real node and its images, the helm CLI, Prometheus and promtool.
	$(LOCALCLUSTER) build $(LOCALCLUSTER_FLAGS) --kueue --real-node --helm --prometheus
	$(LOCALCLUSTER) build $(LOCALCLUSTER_FLAGS) --kube-version=1.37

.PHONY: test-e2e
test-e2e: e2e-build ## End-to-end tests on the local control plane (each test package starts its own cluster), then the 1.37 leg (test-e2e-137), the real-node leg (test-e2e-realnode) and the Helm leg (test-e2e-helm).
	cd e2e && $(GO) test -count=1 $(E2E_TEST_FLAGS) ./...
	$(MAKE) test-e2e-137
	$(MAKE) test-e2e-realnode
	$(MAKE) test-e2e-helm

# The real-node leg (issue 23): real pods on the local control plane's real node
# (root; e2e/cluster/realnode.go): cluster DNS, torch DDP, MPI over SSH, XGBoost,
# progress reports and the certificate modes, failure, deadline, suspend/resume.
# Cached, it takes about 5 minutes; a cold one first builds the node's binaries with
# the control plane's and, beside them, its images from Debian's packages.
E2E_REALNODE_RUN ?= .

.PHONY: test-e2e-realnode
test-e2e-realnode: host-packages ## The e2e tests of real processes on a real node (e2e/realnode; E2E_REALNODE_RUN selects): cluster DNS, DDP, MPI, XGBoost, progress and certificates, failure, deadline, suspend.
	cd e2e && E2E_REAL_NODE=1 $(GO) test -count=1 $(E2E_TEST_FLAGS) -run '$(E2E_REALNODE_RUN)' ./realnode/

# The Helm leg (issue 38): the chart installed with the helm CLI, the controller image of
# `make image` running as Pods on the real node, Services routed by kube-proxy.
.PHONY: test-e2e-helm
test-e2e-helm: host-packages image ## Helm leg: the chart deployed as users deploy it (e2e/helm): helm install with its CRDs and the controller image as 2 Pods on the real node, admission and progress through the chart's Service, a DDP TrainJob to Complete, helm uninstall.
	cd e2e && E2E_HELM=1 E2E_IMAGE_LAYOUT=$(abspath $(IMAGE_LAYOUT)) $(GO) test -count=1 $(E2E_TEST_FLAGS) ./helm/

.PHONY: test-e2e-137
test-e2e-137: host-packages ## The e2e tests whose behavior differs on Kubernetes 1.37 (E2E_KUBE137_RUN in E2E_KUBE137_PACKAGES), on 1.37 clusters.
	cd e2e && E2E_KUBE_VERSION=1.37 $(GO) test -count=1 $(E2E_TEST_FLAGS) -run '$(E2E_KUBE137_RUN)' $(E2E_KUBE137_PACKAGES)

##@ Run

.PHONY: run
run: host-packages build cluster-ensure ## The controller in the foreground against the local control plane, scraped by the cluster's Prometheus (PROMETHEUS=1) as the chart's ServiceMonitor would (/metrics on 127.0.0.1:8080: HTTPS, a token with the chart's metrics-reader role): admission webhooks registered with the API server over 127.0.0.1:9443 (removed again on Ctrl-C), the training-progress server on port 10443 (the port of the URL injected into trainer pods) of the address pods reach the host at: the real node's bridge address, 127.0.0.1 without one.
	$(if $(CLUSTER_PROMETHEUS_FLAGS),$(LOCALCLUSTER) scrape $(LOCALCLUSTER_FLAGS) --metrics-address=127.0.0.1:8080)
	$(OUTPUT)/bin/trainyard --kubeconfig=$(CURDIR)/_output/cluster/kubeconfig --log-format=text --v=2 \
	  --metrics-bind-address=127.0.0.1:8080 --metrics-secure=true --health-probe-bind-address=127.0.0.1:8081 \
	  --webhook-bind-address=127.0.0.1:9443 --webhook-register-url=https://127.0.0.1:9443 \
	  --status-server-bind-address=$$($(LOCALCLUSTER) status $(LOCALCLUSTER_FLAGS) --host-address):10443

.PHONY: dev
dev: host-packages cluster-ensure ## The main job: local control plane, torch-distributed runtime, a TrainJob run to Complete, the controller scraped by the cluster's Prometheus as the chart's ServiceMonitor would (PROMETHEUS=1); KUEUE=1: through Kueue (queued, admitted, then run); OPTIMIZE=1: the hyperparameter search of examples/digits-search (8 trials, 2 at a time) on the real node, naming the best trial.
	cd e2e && $(GO) run ./cmd/dev --repo=$(CURDIR) --kubeconfig=$(CURDIR)/_output/cluster/kubeconfig $(CLUSTER_KUEUE_FLAGS) $(if $(filter 1,$(OPTIMIZE)),--optimize)

##@ Benchmarks

BENCH_N           ?= 2000
BENCH_LIFECYCLE_N ?= 500

.PHONY: bench
bench: host-packages ## Scale benchmark on its own local control plane (issue 9): admission of BENCH_N TrainJobs vs the raw-create limit, again with webhooks on (issue 13: review latency, throughput within 10%), then BENCH_LIFECYCLE_N to Complete. Results: bench/results/.
	cd e2e && $(GO) run ./cmd/bench --mode=admission --n=$(BENCH_N)
	cd e2e && $(GO) run ./cmd/bench --mode=admission --n=$(BENCH_N) --webhooks --out=../bench/results/admission-n$(BENCH_N)-webhooks \
	  --baseline=../bench/results/admission-n$(BENCH_N)/result.json --baseline-tolerance=0.1
	cd e2e && $(GO) run ./cmd/bench --mode=lifecycle --n=$(BENCH_LIFECYCLE_N)

BENCH_SCALE_N ?= $(or $(N),10000)

.PHONY: bench-scale
bench-scale: host-packages ## Admission of BENCH_SCALE_N (or N) TrainJobs, compared with the BENCH_N run of `make bench` (issue 9: within 20%), then a controller restart with all of them and their JobSets present (issue 17: ready, writes, peak RSS). `make bench-scale N=50000` for issue 17's size.
	cd e2e && $(GO) run ./cmd/bench --mode=admission --n=$(BENCH_SCALE_N) --restart --timeout=60m --baseline=../bench/results/admission-n$(BENCH_N)/result.json

BENCH_PROGRESS_N           ?= 1000
BENCH_PROGRESS_DURATION    ?= 60s
BENCH_PROGRESS_INTERVAL    ?= 1s
BENCH_PROGRESS_ADMISSION_N ?= 500

.PHONY: bench-progress
bench-progress: host-packages ## Progress reports (issue 14): BENCH_PROGRESS_N TrainJobs × 4 Running pods, each pod reporting every BENCH_PROGRESS_INTERVAL for BENCH_PROGRESS_DURATION; report latency, trainerStatus writes per TrainJob per period (≤ 1), controller and API server CPU, admission of BENCH_PROGRESS_ADMISSION_N TrainJobs with vs without the reports (drop < 10%). Results: bench/results/progress-n<N>/.
	cd e2e && $(GO) run ./cmd/bench --mode=progress --n=$(BENCH_PROGRESS_N) --duration=$(BENCH_PROGRESS_DURATION) \
	  --report-interval=$(BENCH_PROGRESS_INTERVAL) --admission-n=$(BENCH_PROGRESS_ADMISSION_N)

BENCH_PEER_SIZES       ?= 2000,10000
BENCH_PEER_LIFECYCLE_N ?= 500
BENCH_PEER_ROUNDS      ?= 2
BENCH_PEER_FLAGS       ?=

.PHONY: bench-peer
bench-peer: host-packages ## Trainyard vs upstream Kubeflow Trainer v2.3.0 (issue 17) on one local control plane: admission of each of BENCH_PEER_SIZES and BENCH_PEER_LIFECYCLE_N to Complete, each controller BENCH_PEER_ROUNDS times, alternating; figures side by side with Trainyard ÷ upstream. Builds upstream's controller manager once (hack/kube-bins/trainer). Results: bench/results/peer-<date>/.
	cd e2e && $(GO) run ./cmd/bench --mode=peer --sizes=$(BENCH_PEER_SIZES) --lifecycle-n=$(BENCH_PEER_LIFECYCLE_N) --rounds=$(BENCH_PEER_ROUNDS) $(BENCH_PEER_FLAGS)

BENCH_PEER_KUEUE_N      ?= 2000
BENCH_PEER_KUEUE_QUOTA  ?= 200
BENCH_PEER_KUEUE_ROUNDS ?= 1

.PHONY: bench-peer-kueue
bench-peer-kueue: host-packages ## Trainyard vs upstream Kubeflow Trainer v2.3.0 through real Kueue v0.19.1 (issue 27): BENCH_PEER_KUEUE_N TrainJobs through a ClusterQueue with quota for BENCH_PEER_KUEUE_QUOTA at a time, to Complete, each controller BENCH_PEER_KUEUE_ROUNDS times, alternating; writes per TrainJob by client, verb and object (audit log), Kueue's unsuspend → JobSet unsuspended p50/p99, end-to-end time, controller, API-server and Kueue CPU; ratios in result.json. Results: bench/results/peer-kueue-<date>/.
	cd e2e && $(GO) run ./cmd/bench --mode=peer --kueue-n=$(BENCH_PEER_KUEUE_N) --quota=$(BENCH_PEER_KUEUE_QUOTA) --lifecycle-n=-1 --rounds=$(BENCH_PEER_KUEUE_ROUNDS) $(BENCH_PEER_FLAGS)

BENCH_WRITES_N      ?= 500
BENCH_WRITES_ROUNDS ?= 3

.PHONY: bench-writes
bench-writes: host-packages ## What each way of writing a JobSet costs the API server (issue 17): server-side apply, create then merge patch, create then apply; BENCH_WRITES_N JobSets per method, BENCH_WRITES_ROUNDS rounds interleaved; latency, apiserver and etcd CPU per 1,000, stored and managedFields size, watch events, field ownership on later updates. Results: bench/results/writes-<date>/.
	cd e2e && $(GO) run ./cmd/bench --mode=writes --n=$(BENCH_WRITES_N) --rounds=$(BENCH_WRITES_ROUNDS)

BENCH_KUEUE_N     ?= 2000
BENCH_KUEUE_QUOTA ?= 200

.PHONY: bench-kueue
bench-kueue: host-packages ## Trainyard under real Kueue v0.19.1 (issue 16): BENCH_KUEUE_N TrainJobs through one ClusterQueue with quota for BENCH_KUEUE_QUOTA at a time, each run to Complete; end-to-end time and throughput, the most running at once (≤ the quota), Trainyard's writes per TrainJob (and who writes what, from the audit log), Kueue's unsuspend → JobSet exists / unsuspended p50/p99, Kueue's and Trainyard's CPU. Results: bench/results/kueue-n<N>-<date>/.
	cd e2e && $(GO) run ./cmd/bench --mode=kueue --n=$(BENCH_KUEUE_N) --quota=$(BENCH_KUEUE_QUOTA)

BENCH_TTL_N ?= 50000

.PHONY: bench-ttl
bench-ttl: host-packages ## TTLs at scale (issue 40): BENCH_TTL_N TrainJobs finished (their JobSets marked Completed, no JobSet controller), the idle controller's CPU, RSS and live heap without and with a ttlSecondsAfterFinished pending on every one, the TTL patches' cost, and every deletion's lateness against its expiry (p50/p99/max), the JobSets going by garbage collection. Results: bench/results/ttl-n<N>-<date>/.
	cd e2e && $(GO) run ./cmd/bench --mode=ttl --n=$(BENCH_TTL_N) --timeout=60m

.PHONY: bench-micro
bench-micro: ## Go micro-benchmarks of the pure hot paths (merge patches, ML policies, hashing, status), with allocations.
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

include hack/cluster.mk

# promtool of Prometheus 3.16.0, built into the cache with the Prometheus server the
# monitoring e2e tests run (e2e/cluster PrometheusSource: one build for both).
$(TOOLS)/promtool: localcluster
	@mkdir -p $(TOOLS)
	ln -sf $$($(LOCALCLUSTER) tool promtool) $@

.PHONY: test-chart
test-chart: build $(TOOLS)/promtool ## Chart tests: lint, render, schema, RBAC, config vs binary, dashboard/alert PromQL, promtool.
	cd hack/charttest && PROMTOOL=$(CURDIR)/$(TOOLS)/promtool TRAINYARD_BIN=$(CURDIR)/$(OUTPUT)/bin/trainyard $(GO) test -count=1 ./...

.PHONY: check
check: host-packages ## Everything CI runs: verify (and proof it can fail), lint, unit tests, a short run of every fuzz target, chart and e2e tests (e2e-build in the background meanwhile: hack/check.sh).
	MAKE="$(MAKE)" OUTPUT=$(OUTPUT) hack/check.sh

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-18s %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)
