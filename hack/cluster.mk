# Local control plane: a real Kubernetes (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, JobSet, kwok fake nodes) on
# 127.0.0.1, without Docker. Included from the main Makefile:
#
#   include hack/cluster.mk
#
#   make cluster-build     build the pinned binaries once into the cache
#   make cluster-up        start a cluster in the background, return when ready
#   make cluster-ensure    the same, unless a ready one is already running
#   make cluster-status    show the running cluster
#   make cluster-down      stop it (also after a crash) and remove its data
#
# KUBE_VERSION=1.37 runs Kubernetes 1.37 instead of the default 1.36 (its
# kube-apiserver, kube-controller-manager and kube-scheduler built once from
# hack/kube-bins/kubernetes-1.37 and cached beside 1.36's; the Workload API
# served as scheduling.k8s.io/v1beta1) in cluster-build, cluster-up and
# cluster-ensure.
#
# KUEUE=1 adds Kueue (built once, cached like the rest) to cluster-build,
# cluster-up and cluster-ensure: the Kueue controller manager runs as a
# component, with its CRDs, its webhooks and the TrainJob integration.
#
# See e2e/cluster/doc.go for what the cluster provides.

# Repository root, from this file's location, so the targets work whatever
# the including Makefile's directory.
CLUSTER_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)

# Binary cache root; binaries live in $(TRAINYARD_CACHE_DIR)/bin/<name>-<version>-<recipe>/.
TRAINYARD_CACHE_DIR ?= $(HOME)/.cache/trainyard
export TRAINYARD_CACHE_DIR

CLUSTER_STATE_DIR ?= $(CLUSTER_ROOT)/_output/cluster
CLUSTER_LOG_DIR ?= $(CLUSTER_STATE_DIR)/logs
CLUSTER_NODES ?= 4
CLUSTER_NODE_GPUS ?= 8
# Extra flags for `localcluster up`, e.g. --cpu=64 --memory=512Gi --apiserver-port=6443.
CLUSTER_UP_FLAGS ?=
KUEUE ?=
CLUSTER_KUEUE_FLAGS := $(if $(filter 1 true yes,$(KUEUE)),--kueue)
# PROMETHEUS=1 (the default) runs Prometheus 3.16.0 as a component (built once with
# promtool, cached): `make run` has it scrape the controller as the chart's
# ServiceMonitor would, with the chart's rules (localcluster scrape). PROMETHEUS=0: none.
PROMETHEUS ?= 1
CLUSTER_PROMETHEUS_FLAGS := $(if $(filter 1 true yes,$(PROMETHEUS)),--prometheus)
KUBE_VERSION ?=
CLUSTER_KUBE_FLAGS := $(if $(KUBE_VERSION),--kube-version=$(KUBE_VERSION))
# REAL_NODE=1 (the default) adds a real node: kubelet, containerd, runc, CNI and CoreDNS
# on this machine, so TrainJobs train for real (e2e/cluster/realnode.go,
# docs/design/real-node.md; needs root; Kubernetes 1.36 only, so KUBE_VERSION=1.37 turns
# it off). REAL_NODE=0: fake nodes only.
REAL_NODE ?= $(if $(filter 1.37,$(KUBE_VERSION)),0,1)
CLUSTER_REAL_NODE_FLAGS := $(if $(filter 1 true yes,$(REAL_NODE)),--real-node)
# Flags for `make test-e2e`.
E2E_TEST_FLAGS ?= -timeout 30m

LOCALCLUSTER := $(CLUSTER_ROOT)/_output/bin/localcluster
LOCALCLUSTER_FLAGS = --state-dir=$(CLUSTER_STATE_DIR) --log-dir=$(CLUSTER_LOG_DIR)

.PHONY: host-packages localcluster cluster-build cluster-up cluster-ensure cluster-down cluster-status

# host-packages installs the Debian packages the local control plane, its real node and
# their builds need (hack/install-host-packages.sh: nothing when all are there; not root,
# it stops with the one command to run). Every target that builds or starts a cluster
# reaches it through localcluster, so it runs before any build (issue 37;
# hack/freshmachine checks that no such target can skip it).
host-packages:
	@$(CLUSTER_ROOT)/hack/install-host-packages.sh

# The e2e module is separate from the main one; go build is incremental, so
# this is quick once built.
localcluster: host-packages
	cd $(CLUSTER_ROOT)/e2e && GOWORK=off go build -o $(LOCALCLUSTER) ./cmd/localcluster

cluster-build: localcluster
	$(LOCALCLUSTER) build $(LOCALCLUSTER_FLAGS) $(CLUSTER_KUBE_FLAGS) $(CLUSTER_KUEUE_FLAGS) $(CLUSTER_REAL_NODE_FLAGS) $(CLUSTER_PROMETHEUS_FLAGS)

cluster-up: localcluster
	$(LOCALCLUSTER) up --detach $(LOCALCLUSTER_FLAGS) --nodes=$(CLUSTER_NODES) --gpus=$(CLUSTER_NODE_GPUS) $(CLUSTER_KUBE_FLAGS) $(CLUSTER_KUEUE_FLAGS) $(CLUSTER_REAL_NODE_FLAGS) $(CLUSTER_PROMETHEUS_FLAGS) $(CLUSTER_UP_FLAGS)

# cluster-ensure starts a cluster unless a ready one is already recorded in the
# state dir; with KUEUE=1 it must run Kueue too, and with KUBE_VERSION that
# version, else it says to restart it.
cluster-ensure: localcluster
	@status=$$($(LOCALCLUSTER) status $(LOCALCLUSTER_FLAGS) 2>/dev/null || true); \
	if ! grep -qx ready <<<"$$status"; then \
	  $(LOCALCLUSTER) up --detach $(LOCALCLUSTER_FLAGS) --nodes=$(CLUSTER_NODES) --gpus=$(CLUSTER_NODE_GPUS) $(CLUSTER_KUBE_FLAGS) $(CLUSTER_KUEUE_FLAGS) $(CLUSTER_REAL_NODE_FLAGS) $(CLUSTER_PROMETHEUS_FLAGS) $(CLUSTER_UP_FLAGS); \
	elif [ -n "$(KUBE_VERSION)" ] && ! grep -qx 'kubernetes: $(KUBE_VERSION)' <<<"$$status"; then \
	  echo "the running cluster is not Kubernetes $(KUBE_VERSION): make cluster-down, then make cluster-up KUBE_VERSION=$(KUBE_VERSION)" >&2; exit 1; \
	elif [ -n "$(CLUSTER_KUEUE_FLAGS)" ] && ! grep -Eq '^ +kueue +pid [0-9]+ +running' <<<"$$status"; then \
	  echo "the running cluster has no Kueue: make cluster-down, then make cluster-up KUEUE=1" >&2; exit 1; \
	elif [ -n "$(CLUSTER_PROMETHEUS_FLAGS)" ] && ! grep -Eq '^ +prometheus +pid [0-9]+ +running' <<<"$$status"; then \
	  echo "the running cluster has no Prometheus: make cluster-down, then make cluster-up (or PROMETHEUS=0 without it)" >&2; exit 1; \
	fi

cluster-status: localcluster
	$(LOCALCLUSTER) status $(LOCALCLUSTER_FLAGS)

cluster-down: localcluster
	$(LOCALCLUSTER) down $(LOCALCLUSTER_FLAGS)
