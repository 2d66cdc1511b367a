package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultStateDir is where, relative to the repository root, a cluster keeps
// its kubeconfig, state file and logs unless told otherwise.
const DefaultStateDir = "_output/cluster"

// DefaultFeatureGates is passed to kube-apiserver, kube-controller-manager
// and kube-scheduler of the default release (DefaultKubeVersion): the Workload
// API with gang scheduling, and DRA. Each release has its own, see
// KubeRelease.FeatureGates.
var DefaultFeatureGates = kubeReleases[DefaultKubeVersion].FeatureGates

// Pod annotations understood by the kwok stages (assets/pod-stages.yaml).
const (
	// AnnotationCompleteDelay on a Job's pod sets how long it runs before
	// it succeeds, as a Go duration ("2s"). Default: DefaultPodCompleteDelay.
	AnnotationCompleteDelay = "pod-complete.stage.kwok.x-k8s.io/delay"
	// AnnotationFailAfter on any pod makes it fail that long (a Go
	// duration, "2s") after it starts running: phase Failed, containers
	// terminated with exit code 1.
	AnnotationFailAfter = "trainyard.dev/fail-after"
	// AnnotationFailExitCode overrides the exit code of AnnotationFailAfter
	// ("42"), e.g. to exercise a podFailurePolicy.
	AnnotationFailExitCode = "trainyard.dev/fail-exit-code"
)

// DefaultPodCompleteDelay is how long a Job's pod runs on a fake node before
// it succeeds when AnnotationCompleteDelay is absent.
const DefaultPodCompleteDelay = 3 * time.Second

// NodeShape is the capacity of one fake node; the same values are reported
// as allocatable.
type NodeShape struct {
	// GPUs is the count of the extended resource nvidia.com/gpu and also the
	// number of DRA devices in the node's ResourceSlice.
	GPUs int
	// CPU in cores ("32") and Memory in bytes ("256Gi").
	CPU, Memory resource.Quantity
	// Pods is the maximum number of pods on the node.
	Pods int
}

// DefaultNodeShape is 8 GPUs, 32 CPUs, 256Gi of memory and 110 pods.
func DefaultNodeShape() NodeShape {
	return NodeShape{GPUs: 8, CPU: resource.MustParse("32"), Memory: resource.MustParse("256Gi"), Pods: 110}
}

// Options configures [Up]. The zero value gives the default cluster.
type Options struct {
	// Build locates the binaries; see BuildOptions. Its LogDir defaults to
	// LogDir.
	Build BuildOptions
	// StateDir holds the admin kubeconfig ("kubeconfig"), the state file
	// ("state.json") and, by default, the logs. Default:
	// <RepoRoot>/_output/cluster. Only one running cluster may use a StateDir.
	StateDir string
	// LogDir receives <component>.log for each component. Default: <StateDir>/logs.
	LogDir string
	// TempDir is the parent of the cluster's data folder (etcd data,
	// certificates, configs), which Down removes. Default: os.TempDir().
	TempDir string
	// Nodes is the number of fake nodes registered at start; 0 means 4,
	// negative means none.
	Nodes int
	// NodeShape is the capacity of each node. Zero fields take their value
	// from DefaultNodeShape; negative GPUs mean none.
	NodeShape NodeShape
	// APIServerPort pins kube-apiserver's port on 127.0.0.1; 0 picks a free one.
	APIServerPort int
	// KubeVersion is the Kubernetes minor version of the control plane:
	// "1.36" (DefaultKubeVersion, when "") or "1.37" (see LookupKubeRelease).
	// It chooses the build of kube-apiserver, kube-controller-manager and
	// kube-scheduler (Build.KubeVersion follows it), their default feature
	// gates and the Workload API version served (KubeRelease).
	KubeVersion string
	// FeatureGates for the Kubernetes components. Default: the release's
	// KubeRelease.FeatureGates.
	FeatureGates string
	// Detach lets the components outlive this process (for `localcluster up
	// --detach`); they are then stopped with DownFromState. Without it they
	// are killed when this process dies.
	Detach bool
	// WithoutJobSetController installs the JobSet CRD but runs neither the
	// JobSet controller nor its admission webhooks, so nothing acts on a
	// JobSet once it is created. The scale benchmark uses it to time
	// TrainJob → JobSet alone (issue 9: "the JobSet controller stopped and
	// its webhooks removed").
	WithoutJobSetController bool
	// AuditLog makes kube-apiserver write an audit log, JSON lines, to
	// <StateDir>/audit.log ([Cluster.AuditLogPath]): one event per completed
	// write (create, update, patch, delete, deletecollection) to a resource of
	// trainer.kubeflow.org or jobset.x-k8s.io, at level Metadata (who, with
	// which user agent, on what, when, with which response code; no bodies).
	// Read it with [ReadAuditLog].
	AuditLog bool
	// APIServerFlags are appended to kube-apiserver's flags (a later flag
	// wins), e.g. "--min-request-timeout=30".
	APIServerFlags []string
	// Kueue runs the Kueue controller manager (KueueSource) as a component:
	// its CRDs installed, its TrainJob and Kueue webhooks registered over
	// 127.0.0.1 with the cluster CA, the TrainJob integration enabled
	// (KueueConfiguration). TrainJobs with the kueue.x-k8s.io/queue-name label
	// are then suspended at creation and admitted by Kueue as in a real
	// installation.
	Kueue bool
	// Prometheus runs the Prometheus server (PrometheusSource) as a component, on
	// 127.0.0.1 ([Cluster.PrometheusURL]), with no scrape configs until
	// [Cluster.ConfigurePrometheus] gives it some (the monitoring e2e tests: the
	// chart's ServiceMonitor and rules against the controller process).
	Prometheus bool
	// RealNode runs a real node beside the fake ones (realnode.go): kubelet,
	// containerd with Debian's runc, the CNI bridge and CoreDNS serving
	// cluster.local, on a pod network that exists only on this machine, with
	// the stand-in images of the upstream runtimes served by a registry on
	// 127.0.0.1. The fake nodes then carry TaintFakeNode, so pods that do not
	// tolerate it run for real. It needs root, a cgroup v1 or hybrid host, and
	// RealNodeHostPackages; the kubelet changes a few kernel settings
	// (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1), so it
	// is meant for throw-away machines and CI, not a workstation.
	RealNode bool
	// RoutedServices routes Services on this machine as in a real cluster
	// (realnode_services.go): kube-proxy in nftables mode programs every
	// ClusterIP, the "kubernetes" Service reaches the API server, so the API server
	// calls webhooks through their Service and pods reach Services, the API server
	// included. Needs RealNode and RoutedServicesHostPackages; one cluster per
	// machine at a time.
	RoutedServices bool
	// Images builds the real node's images and publishes them to its registry;
	// required with RealNode (images.Publisher).
	Images ImageSource
	// KueueWaitForPodsReady, above 0, turns on Kueue's waitForPodsReady with this
	// timeout (see KueueConfiguration).
	KueueWaitForPodsReady time.Duration
	// StartTimeout bounds how long each component may take to become ready.
	// Default: 90s.
	StartTimeout time.Duration
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

func (o *Options) withDefaults() error {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Build.Progress == nil {
		o.Build.Progress = o.Progress
	}
	if o.Build.RepoRoot == "" {
		root, err := FindRepoRoot()
		if err != nil {
			return err
		}
		o.Build.RepoRoot = root
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(o.Build.RepoRoot, DefaultStateDir)
	}
	var err error
	if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
		return err
	}
	if o.LogDir == "" {
		o.LogDir = filepath.Join(o.StateDir, "logs")
	}
	if o.LogDir, err = filepath.Abs(o.LogDir); err != nil {
		return err
	}
	o.Build.Kueue = o.Build.Kueue || o.Kueue
	o.Build.Prometheus = o.Build.Prometheus || o.Prometheus
	o.Build.RealNode = o.Build.RealNode || o.RealNode
	if o.RoutedServices && !o.RealNode {
		return errors.New("routed Services need a real node: kube-proxy programs the real node's bridge (set RealNode, --real-node)")
	}
	if o.RealNode && o.KubeVersion != "" && o.KubeVersion != DefaultKubeVersion {
		return fmt.Errorf("a real node runs only with Kubernetes %s (its kubelet is built beside that release), not %s", DefaultKubeVersion, o.KubeVersion)
	}
	release, err := LookupKubeRelease(o.KubeVersion)
	if err != nil {
		return err
	}
	o.KubeVersion, o.Build.KubeVersion = release.Version, release.Version
	if o.Build.LogDir == "" {
		o.Build.LogDir = o.LogDir
	}
	if err := o.Build.withDefaults(); err != nil {
		return err
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	switch {
	case o.Nodes == 0:
		o.Nodes = 4
	case o.Nodes < 0:
		o.Nodes = 0
	}
	o.NodeShape = o.NodeShape.mergedWith(DefaultNodeShape())
	if o.FeatureGates == "" {
		o.FeatureGates = release.FeatureGates
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 90 * time.Second
	}
	if o.APIServerPort < 0 || o.APIServerPort > 65535 {
		return fmt.Errorf("invalid API server port %d", o.APIServerPort)
	}
	return nil
}
