package cluster

import "strings"

// Component names. They name binaries, log files (<name>.log) and the
// processes recorded in the state file.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	JobSet                = "jobset"
	Kwok                  = "kwok"
	// Kueue is the Kueue controller manager, run only with Options.Kueue.
	Kueue = "kueue"
)

// Kubectl names the kubectl binary of [Sources]: a client, not a component,
// for tests that act as a user does (`kubectl apply`, the admission warnings
// it prints). Locate it with [Binaries.Path].
const Kubectl = "kubectl"

// TrainerControllerManager names the binary of [UpstreamTrainer].
const TrainerControllerManager = "trainer-controller-manager"

// components lists the processes of a cluster in start order.
var components = []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, JobSet, Kwok, Kueue, Prometheus}

// Source is one pinned Go module from which binaries are built and/or
// manifest files are taken.
type Source struct {
	// Name keys the cache folder <cache>/bin/<Name>-<Version>-<recipe>/.
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
	// Stamp maps package variables ("<import path>.<name>") to the values
	// the linker sets (go build -ldflags -X), as a release build stamps its
	// version into its binaries; see kubeReleaseStamp.
	Stamp map[string]string
	// Tags are the build tags (go build -tags), e.g. runc's "seccomp".
	Tags []string
	// Patches are applied to the module's source tree for the build only
	// (go build -overlay): the module stays the pinned, checksum-verified one.
	Patches []SourcePatch
}

// kubeReleaseStamp is what a Kubernetes release build links into its
// binaries (kube::version::ldflags in kubernetes/kubernetes
// hack/lib/version.sh): the version /version and `kubectl version` report,
// in k8s.io/component-base/version (servers) and k8s.io/client-go/pkg/version
// (clients such as kubectl). Without it a binary built from the module
// reports "v0.0.0-master+$Format:%H$", which clients refuse to parse (Kueue
// at start-up: "could not parse pre-release/metadata") and Helm's
// kubeVersion constraints and kubectl's skew check misjudge.
//
// gitVersion is the release ("v1.36.3"), from which gitMajor and gitMinor
// ("1", "36") are derived; gitCommit is the tag's commit, "" when unknown;
// buildDate (RFC 3339) is fixed so that builds are reproducible.
func kubeReleaseStamp(gitVersion, gitCommit, buildDate string) map[string]string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(gitVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	stamp := map[string]string{}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		stamp[pkg+".gitVersion"] = gitVersion
		stamp[pkg+".gitMajor"] = major
		stamp[pkg+".gitMinor"] = minor
		stamp[pkg+".gitCommit"] = gitCommit
		stamp[pkg+".gitTreeState"] = "clean"
		stamp[pkg+".buildDate"] = buildDate
	}
	return stamp
}

// SourcePatch replaces the one occurrence of Old in File (a path in the
// module) by New. The build fails when Old does not occur exactly once, so
// a version bump cannot silently drop a patch.
type SourcePatch struct {
	File, Old, New string
	// Why says what the patch is for; it is part of the recipe.
	Why string
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
		Name: "kubernetes", Module: "k8s.io/kubernetes", Version: "v1.36.3", Stamp: kubeStamp,
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
		Name: "kubectl", Module: "k8s.io/kubernetes", Version: "v1.36.3", Stamp: kubeStamp,
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

// Helm names the helm CLI's binary (HelmSource).
const Helm = "helm"

// HelmSource is the helm CLI at the version hack/charttest's Go library tests run
// (helm.sh/helm/v3 v3.22.0), built only for the Helm leg (BuildOptions.Helm), stamped
// as Helm's own Makefile stamps a release, so `helm version` names it.
var HelmSource = Source{
	Name: "helm", Module: "helm.sh/helm/v3", Version: "v3.22.0",
	Binaries: map[string]string{Helm: "helm.sh/helm/v3/cmd/helm"},
	Stamp: map[string]string{
		"helm.sh/helm/v3/internal/version.version":      "v3.22.0",
		"helm.sh/helm/v3/internal/version.gitTreeState": "clean",
	},
}

// kubeStamp is the release stamp of the Kubernetes binaries (k8s.io/kubernetes
// v1.36.3). The proxy serves that module without its origin, so the commit is
// left empty rather than made up; the date is the tag's time on the proxy.
var kubeStamp = kubeReleaseStamp("v1.36.3", "", "2026-07-22T18:07:38Z")

// KueueSource is the Kueue controller manager and its CRDs and webhook
// manifests, built only for a cluster with Options.Kueue (BuildOptions.Kueue).
// v0.19.1 manages TrainJobs through a runtimePatches entry (manager
// kueue.x-k8s.io/manager) and computes their pod sets with upstream's runtime
// library (github.com/kubeflow/trainer/v2 v2.2.1).
var KueueSource = Source{
	Name: "kueue", Module: "sigs.k8s.io/kueue", Version: "v0.19.1",
	Binaries: map[string]string{Kueue: "sigs.k8s.io/kueue/cmd/kueue"},
	// As Kueue's Makefile stamps a release (the tag, its commit and time).
	Stamp: map[string]string{
		"sigs.k8s.io/kueue/pkg/version.GitVersion": "v0.19.1",
		"sigs.k8s.io/kueue/pkg/version.GitCommit":  "df3d3656004f7b2478004a37b34ad8efa9ffabf0",
		"sigs.k8s.io/kueue/pkg/version.BuildDate":  "2026-08-12T11:41:17Z",
	},
	Assets: kueueAssets(),
	Patches: []SourcePatch{{
		File: "cmd/kueue/main.go",
		Old:  `metricsCertPath := "/etc/kueue/metrics/certs"`,
		New: `metricsCertPath := "/etc/kueue/metrics/certs"; ` +
			`if dir := os.Getenv("` + EnvKueueMetricsCertDir + `"); dir != "" { metricsCertPath = dir }`,
		Why: "without internal certificate management Kueue reads its metrics certificate from a fixed " +
			"/etc/kueue/metrics/certs and exits when it is absent; a process of the local control plane " +
			"has its certificates in its data folder",
	}},
}

// EnvKueueMetricsCertDir tells the patched Kueue (KueueSource.Patches) where its
// metrics serving certificate is.
const EnvKueueMetricsCertDir = "KUEUE_METRICS_CERT_DIR"

// Names of Kueue's manifest assets: its CRDs, one asset each, and its webhooks.
const (
	assetKueueCRDPrefix = "kueue-crd-"
	assetKueueWebhooks  = "kueue-webhooks.yaml"
)

// kueueCRDKinds are the kinds of config/components/crd/bases.
var kueueCRDKinds = []string{
	"admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters", "multikueueconfigs",
	"provisioningrequestconfigs", "resourceflavors", "topologies", "workloadpriorityclasses", "workloads",
}

func kueueAssets() map[string]string {
	assets := map[string]string{assetKueueWebhooks: "config/components/webhook/manifests.yaml"}
	for _, kind := range kueueCRDKinds {
		assets[assetKueueCRDPrefix+kind+".yaml"] = "config/components/crd/bases/kueue.x-k8s.io_" + kind + ".yaml"
	}
	return assets
}

// Prometheus and Promtool name the binaries of [PrometheusSource].
const (
	Prometheus = "prometheus"
	Promtool   = "promtool"
)

// PrometheusSource is the Prometheus server and promtool of Prometheus 3.16.0
// (github.com/prometheus/prometheus v0.316.0), built only when asked for
// (BuildOptions.Prometheus): the server scrapes the controller and evaluates the chart's
// recording and alerting rules in the monitoring e2e tests (e2e/monitoring) and beside
// `make run`/`make dev`; promtool checks and unit-tests those rules (make test-chart).
// Both come from one build module and one go build, so the packages they share are
// compiled once.
//
// Tags: remove_all_sd leaves out Prometheus' service-discovery plugins (its
// plugins/plugin_*.go, each built with `!remove_all_sd || enable_<name>_sd`),
// enable_kubernetes_sd keeps the one a ServiceMonitor generates. promtool imports
// discovery/kubernetes itself, so keeping it costs the server no compile, only a link.
// Without the tags the two binaries need 1,527 packages, with them 1,284. The web UI's
// assets are left out by default (no builtinassets tag): the tests use the HTTP API.
var PrometheusSource = Source{
	Name: "prometheus", Module: "github.com/prometheus/prometheus", Version: "v0.316.0",
	Binaries: map[string]string{
		Prometheus: "github.com/prometheus/prometheus/cmd/prometheus",
		Promtool:   "github.com/prometheus/prometheus/cmd/promtool",
	},
	Tags: []string{"remove_all_sd", "enable_kubernetes_sd"},
	// As Prometheus' release build (.promu.yml) stamps the version `--version` and
	// /api/v1/status/buildinfo report; the date is the tag's time on the proxy.
	Stamp: map[string]string{
		"github.com/prometheus/common/version.Version":   "3.16.0",
		"github.com/prometheus/common/version.Branch":    "HEAD",
		"github.com/prometheus/common/version.BuildDate": "20261105-15:06:51",
	},
}
