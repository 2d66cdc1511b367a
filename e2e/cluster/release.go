package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// Kubernetes minor versions the local control plane can run ([Options.KubeVersion]).
const (
	// KubeVersion136 is the default: k8s.io/kubernetes v1.36.3.
	KubeVersion136 = "1.36"
	// KubeVersion137 is k8s.io/kubernetes v1.37.2, built from
	// hack/kube-bins/kubernetes-1.37.
	KubeVersion137 = "1.37"
	// DefaultKubeVersion is what [Up] runs when Options.KubeVersion is "".
	DefaultKubeVersion = KubeVersion136
)

// EnvKubeVersion, read by [TestOptions] (so by [ForTests] and [ForTestsWith]),
// chooses the Kubernetes version of the clusters e2e tests start, e.g.
// E2E_KUBE_VERSION=1.37; unset or empty means [DefaultKubeVersion].
const EnvKubeVersion = "E2E_KUBE_VERSION"

// KubeRelease is what differs between the Kubernetes versions the local
// control plane runs: the build of the three control-plane binaries, the
// feature gates and API versions they are started with, and the Workload API
// version they then serve. Everything else (etcd v3.6.8, and the clients
// JobSet, kwok and kubectl of [Sources], within Kubernetes' one-minor version
// skew) is shared by all releases and cached once.
type KubeRelease struct {
	// Version is the minor version, "1.37".
	Version string
	// Source builds kube-apiserver, kube-controller-manager and
	// kube-scheduler, stamped with the release (kubeReleaseStamp). Its Name is
	// "kubernetes" for every release: the cache folder is
	// kubernetes-<Source.Version>-<recipe>.
	Source Source
	// FeatureGates is the default of Options.FeatureGates.
	FeatureGates string
	// RuntimeConfig is kube-apiserver's --runtime-config: the Workload API
	// version, which is off by default (alpha in 1.36, a new beta in 1.37).
	RuntimeConfig string
	// WorkloadAPI is the scheduling.k8s.io version of Workload and PodGroup
	// that RuntimeConfig turns on, e.g. "scheduling.k8s.io/v1beta1".
	WorkloadAPI string
}

// kubeReleases are the releases by minor version. 1.36's Source is the
// "kubernetes" entry of [Sources].
var kubeReleases = map[string]KubeRelease{
	KubeVersion136: {
		Version: KubeVersion136,
		Source:  Sources[slices.IndexFunc(Sources, func(s Source) bool { return s.Name == "kubernetes" })],
		// DRA is GA and locked on in 1.36; named so the intent is explicit.
		FeatureGates:  "GenericWorkload=true,GangScheduling=true,DynamicResourceAllocation=true",
		RuntimeConfig: "scheduling.k8s.io/v1alpha2=true",
		WorkloadAPI:   "scheduling.k8s.io/v1alpha2",
	},
	KubeVersion137: {
		Version: KubeVersion137,
		Source: Source{
			Name: "kubernetes", BuildModule: "kubernetes-1.37", Module: "k8s.io/kubernetes", Version: "v1.37.2",
			// The tag's time on the proxy; see kubeStamp.
			Stamp: kubeReleaseStamp("v1.37.2", "", "2026-10-27T12:01:04Z"),
			Binaries: map[string]string{
				KubeAPIServer:         "k8s.io/kubernetes/cmd/kube-apiserver",
				KubeControllerManager: "k8s.io/kubernetes/cmd/kube-controller-manager",
				KubeScheduler:         "k8s.io/kubernetes/cmd/kube-scheduler",
			},
		},
		// 1.37 folds the GangScheduling gate into GenericWorkload (beta, off
		// by default; an unknown gate stops the components at start-up).
		// DRAWorkloadResourceClaims (beta, off by default) lets PodGroups hold
		// resourceClaims that the resourceclaim controller reserves for the
		// PodGroup (KEP-5729).
		FeatureGates:  "GenericWorkload=true,DRAWorkloadResourceClaims=true,DynamicResourceAllocation=true",
		RuntimeConfig: "scheduling.k8s.io/v1beta1=true",
		WorkloadAPI:   "scheduling.k8s.io/v1beta1",
	},
}

// LookupKubeRelease returns the release of a minor version ("1.37"; "" means
// [DefaultKubeVersion]). The error lists the versions there are.
func LookupKubeRelease(version string) (KubeRelease, error) {
	if version == "" {
		version = DefaultKubeVersion
	}
	r, ok := kubeReleases[strings.TrimPrefix(version, "v")]
	if !ok {
		return KubeRelease{}, fmt.Errorf("unknown Kubernetes version %q: the local control plane runs %s",
			version, strings.Join(slices.Sorted(maps.Keys(kubeReleases)), " or "))
	}
	return r, nil
}

// release returns the cluster's KubeRelease; an attached cluster whose server
// runs no known release is taken for DefaultKubeVersion.
func (c *Cluster) release() KubeRelease {
	r, err := LookupKubeRelease(c.opts.KubeVersion)
	if err != nil {
		return kubeReleases[DefaultKubeVersion]
	}
	return r
}

// KubeVersion returns the Kubernetes minor version the cluster runs, "1.37":
// Options.KubeVersion for a cluster started by [Up], the server's /version
// for one from [Attach].
func (c *Cluster) KubeVersion() string { return c.release().Version }

// WorkloadAPI returns the scheduling.k8s.io group version of Workload and
// PodGroup the cluster serves: "scheduling.k8s.io/v1alpha2" on 1.36,
// "scheduling.k8s.io/v1beta1" on 1.37.
func (c *Cluster) WorkloadAPI() schema.GroupVersion {
	gv, _ := schema.ParseGroupVersion(c.release().WorkloadAPI)
	return gv
}

// serverMinor returns "<major>.<minor>" of the API server's /version, e.g.
// "1.37" (a "+" that some distributions append to the minor is dropped).
func serverMinor(client kubernetes.Interface) (string, error) {
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		return "", fmt.Errorf("/version: %w", err)
	}
	return v.Major + "." + strings.TrimSuffix(v.Minor, "+"), nil
}
