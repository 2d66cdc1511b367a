package cluster

// Component names. They name binaries, log files (<name>.log) and the
// processes recorded in the state file.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	JobSet                = "jobset"
	Kwok                  = "kwok"
)

// Kubectl names the kubectl binary of [Sources]: a client, not a component,
// for tests that act as a user does (`kubectl apply`, the admission warnings
// it prints). Locate it with [Binaries.Path].
const Kubectl = "kubectl"

// TrainerControllerManager names the binary of [UpstreamTrainer].
const TrainerControllerManager = "trainer-controller-manager"

// components lists the processes of a cluster in start order.
var components = []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, JobSet, Kwok}

// Source is one pinned Go module from which binaries are built and/or
// manifest files are taken.
type Source struct {
	// Name keys the cache folder <cache>/bin/<Name>-<Version>/.
	Name string
	// BuildModule is the folder under hack/kube-bins whose go.mod builds
	// Binaries; default: Name.
	BuildModule string
	// Module and Version identify the module on the Go module proxy; Version
	// must equal the one required by the build module's go.mod.
	Module, Version string
	// Binaries maps an output binary name to the package that builds it.
	Binaries map[string]string
	// Assets are files copied from the module's source tree into the cache
	// folder, keyed by their destination name, e.g.
	// "jobset-crd.yaml" -> "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml".
	Assets map[string]string
}

// buildModule returns the build module folder, "" for a source of manifests
// only.
func (s Source) buildModule() string {
	switch {
	case len(s.Binaries) == 0:
		return ""
	case s.BuildModule != "":
		return s.BuildModule
	default:
		return s.Name
	}
}

// Names of the manifest assets the cluster installs.
const (
	assetJobSetCRD       = "jobset-crd.yaml"
	assetJobSetWebhooks  = "jobset-webhooks.yaml"
	assetKwokNodeInit    = "kwok-node-initialize.yaml"
	assetKwokNodeLease   = "kwok-node-heartbeat-with-lease.yaml"
	assetSchedPluginsPGs = "scheduler-plugins-podgroups-crd.yaml"
)

// Sources lists everything the cluster needs, pinned. The versions of the
// built components are mirrored by the go.mod files in hack/kube-bins, whose
// go.sum files make the builds reproducible.
//
// JobSet and kwok are built in the kubernetes build module: about 90% of
// their packages (client-go, apimachinery, api, otel, grpc, ...) are also
// kube-apiserver's, and one module resolves them to one version each, so a
// cold build compiles them once instead of three times (about 6 CPU-minutes
// less). Their k8s.io/* libraries move from v0.36.0/v0.36.1 to v0.36.3.
var Sources = []Source{
	{
		Name: "etcd", Module: "go.etcd.io/etcd/server/v3", Version: "v3.6.8",
		Binaries: map[string]string{Etcd: "go.etcd.io/etcd/server/v3"},
	},
	{
		Name: "kubernetes", Module: "k8s.io/kubernetes", Version: "v1.36.3",
		Binaries: map[string]string{
			KubeAPIServer:         "k8s.io/kubernetes/cmd/kube-apiserver",
			KubeControllerManager: "k8s.io/kubernetes/cmd/kube-controller-manager",
			KubeScheduler:         "k8s.io/kubernetes/cmd/kube-scheduler",
		},
	},
	{
		// A client, in a build module of its own so that its dependencies do
		// not change the recipe of the control plane's cache folders; Go's
		// build cache shares the packages it has in common with them.
		Name: "kubectl", Module: "k8s.io/kubernetes", Version: "v1.36.3",
		Binaries: map[string]string{Kubectl: "k8s.io/kubernetes/cmd/kubectl"},
	},
	{
		Name: "jobset", Module: "sigs.k8s.io/jobset", Version: "v0.12.0", BuildModule: "kubernetes",
		Binaries: map[string]string{JobSet: "sigs.k8s.io/jobset"},
		Assets: map[string]string{
			assetJobSetCRD:      "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
			assetJobSetWebhooks: "config/components/webhook/manifests.yaml",
		},
	},
	{
		Name: "kwok", Module: "sigs.k8s.io/kwok", Version: "v0.8.0", BuildModule: "kubernetes",
		Binaries: map[string]string{Kwok: "sigs.k8s.io/kwok/cmd/kwok"},
		Assets: map[string]string{
			assetKwokNodeInit:  "kustomize/stage/node/fast/node-initialize.yaml",
			assetKwokNodeLease: "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
		},
	},
	{
		// Manifests only: the PodGroup CRD (scheduling.x-k8s.io/v1alpha1) of
		// the coscheduling plugin. Volcano's PodGroup CRD is not shipped by any
		// module the proxy serves, see assets/volcano-podgroups-crd.yaml.
		Name: "scheduler-plugins", Module: "sigs.k8s.io/scheduler-plugins", Version: "v0.33.5",
		Assets: map[string]string{
			assetSchedPluginsPGs: "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml",
		},
	},
}

// UpstreamTrainer is Kubeflow Trainer's own controller manager at the release
// Trainyard is wire-compatible with, built from its Go module in
// hack/kube-bins/trainer (its dependencies exactly as it requires them). It is
// not part of [Sources]: no cluster runs it, and only the scale benchmark's
// peer mode, which measures it beside Trainyard on one control plane (issue
// 17), builds it, with [BuildSources]. It serves the same API as Trainyard's
// CRDs (trainer.kubeflow.org/v1alpha1, the same subresources), so the
// cluster's CRDs need nothing added for it.
var UpstreamTrainer = Source{
	Name: "kubeflow-trainer", BuildModule: "trainer",
	Module: "github.com/kubeflow/trainer/v2", Version: "v2.3.0",
	Binaries: map[string]string{TrainerControllerManager: "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"},
}
