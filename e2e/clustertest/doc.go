// Package clustertest holds the end-to-end tests of the local control plane
// (package cluster): JobSet and Job lifecycles on kwok nodes, Workload API
// gang scheduling, DRA allocation, and clean start and stop.
//
// The tests share one cluster started by TestMain; set TRAINYARD_E2E_REUSE=1
// to run them against a cluster started with `make cluster-up` instead.
package clustertest
