package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The real node (Options.RealNode): kubelet, containerd, runc and the CNI
// plugins run real containers on this machine, CoreDNS serves cluster.local
// to them. Its pod network is one Linux bridge with a private /24 that exists
// only on this machine: pods get no default route, the host forwards nothing
// from the bridge (an iptables rule drops it), and CoreDNS answers nothing
// outside cluster.local, so no pod reaches any address beyond the machine.
const (
	Kubelet    = "kubelet"
	Containerd = "containerd"
	// ContainerdShim is the runc shim containerd starts each pod with; it must
	// sit beside the containerd binary (containerd looks it up in its PATH).
	ContainerdShim = "containerd-shim-runc-v2"
	CoreDNS        = "coredns"
	// Runc is the OCI runtime containerd's shim runs containers with.
	Runc = "runc"
)

// RealNodeName is the Node the kubelet registers.
const RealNodeName = "trainyard-node"

// LabelRealNode marks the real node ("true").
const LabelRealNode = "trainyard.dev/real-node"

// TaintFakeNode is put on every kwok node of a cluster with a real node, so
// that a pod lands on a fake node only when it tolerates it: real training
// goes to the real node without a TrainJob or runtime naming a node, and
// tests that need many nodes or GPUs opt into the fakes.
var TaintFakeNode = corev1.Taint{Key: "trainyard.dev/fake-node", Value: "true", Effect: corev1.TaintEffectNoSchedule}

// ClusterDomain is the DNS domain CoreDNS serves and the kubelet gives pods.
const ClusterDomain = "cluster.local"

// The CNI plugins the real node's network uses (hack/kube-bins/cni), and its
// binaries in the order the cache lists them.
const (
	cniBridge    = "bridge"
	cniHostLocal = "host-local"
	cniLoopback  = "loopback"
	cniPortmap   = "portmap"
)

// Sources of the real node's binaries. kubelet is built in the kubernetes
// build module beside the control plane (one go build, shared packages).
var realNodeSources = []Source{
	{
		Name: "containerd", Module: "github.com/containerd/containerd/v2", Version: "v2.4.2",
		Binaries: map[string]string{
			Containerd:     "github.com/containerd/containerd/v2/cmd/containerd",
			ContainerdShim: "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
		},
	},
	{
		Name: "cni", Module: "github.com/containernetworking/plugins", Version: "v1.10.0",
		Binaries: map[string]string{
			cniBridge:    "github.com/containernetworking/plugins/plugins/main/bridge",
			cniHostLocal: "github.com/containernetworking/plugins/plugins/ipam/host-local",
			cniLoopback:  "github.com/containernetworking/plugins/plugins/main/loopback",
			cniPortmap:   "github.com/containernetworking/plugins/plugins/meta/portmap",
		},
	},
	{
		// CoreDNS v1.15.0 with the few plugins cluster DNS needs
		// (hack/kube-bins/coredns/coredns).
		Name: "coredns", Module: "github.com/coredns/coredns", Version: "v1.15.0",
		Binaries: map[string]string{CoreDNS: "github.com/trainyard/trainyard/hack/kube-bins/coredns/coredns"},
	},
	RegistrySource,
	{
		// runc v1.3.3 with seccomp (cgo, libseccomp-dev): Debian bookworm's runc
		// 1.1.5 cannot start the containers containerd 2.4 specifies, and its
		// crun 1.8.1 refuses their OCI spec version.
		Name: "runc", Module: "github.com/opencontainers/runc", Version: "v1.3.3", Tags: []string{"seccomp"},
		Binaries: map[string]string{Runc: "github.com/opencontainers/runc"},
	},
	{
		Name: "kubelet", BuildModule: "kubernetes", Module: "k8s.io/kubernetes", Version: "v1.36.3", Stamp: kubeStamp,
		Binaries: map[string]string{Kubelet: "k8s.io/kubernetes/cmd/kubelet"},
	},
	kubeProxySource,
}

// RealNodeHostPackages are the Debian packages the real node needs on the
// host: libseccomp for runc (built with cgo), iptables serves the portmap plugin
// and the forwarding guard, iproute2 makes the bridge.
var RealNodeHostPackages = []string{"libseccomp-dev", "iptables", "iproute2"}

// RealNodeState is the real node's per-cluster layout, recorded in the state file. Index picks the bridge
// (trainyard<Index>) and the pod subnet (10.244.<Index>.0/24), so that two
// clusters on one machine never share either.
type RealNodeState struct {
	Index      int    `json:"index"`
	Bridge     string `json:"bridge"`
	Gateway    string `json:"gateway"` // the host's address on the bridge: kubelet, CoreDNS
	Subnet     string `json:"subnet"`
	CgroupRoot string `json:"cgroupRoot"` // the kubelet's cgroupRoot, e.g. "/trainyard-0"
	Dir        string `json:"dir"`        // everything it mounts lives under here
	// ContainerdRoot keeps pulled images across runs of one StateDir (it
	// holds no mounts), so a warm start unpacks nothing.
	ContainerdRoot string `json:"containerdRoot"`
	// RoutedServices records that kube-proxy's tables and the guard are this
	// cluster's to remove (Options.RoutedServices).
	RoutedServices bool `json:"routedServices,omitempty"`
}

// Keys of Cluster.ports for the real node.
const (
	portKubeletHealth = "kubelet-health"
	portCoreDNSHealth = "coredns-health"
	portCoreDNSReady  = "coredns-ready"
)

// realNodeReadyTimeout bounds the real node's start: containerd, CoreDNS, the
// kubelet's registration and its first Ready.
const realNodeReadyTimeout = 2 * time.Minute

// checkRealNodeHost reports what the host lacks for a real node, naming the
// fix.
func checkRealNodeHost(opts *Options) error {
	if opts.Images == nil {
		return errors.New("Options.RealNode needs Options.Images (images.Publisher) to serve the node's images")
	}
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root (kubelet, containerd and the pod network change the host); run as root or without RealNode")
	}
	var missing []string
	for _, bin := range []string{"iptables", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("a real node needs %s on PATH: apt-get install -y %s", strings.Join(missing, ", "), strings.Join(RealNodeHostPackages, " "))
	}
	if opts.RoutedServices {
		return checkRoutedServicesHost(context.Background())
	}
	return nil
}

// startRealNode sets up the pod network, then runs containerd, CoreDNS and
// the kubelet, and waits for the node to be Ready.
func (c *Cluster) startRealNode(ctx context.Context) error {
	rn, err := c.setupPodNetwork(ctx)
	if err != nil {
		return err
	}
	if err := setupCgroupRoot(rn.CgroupRoot); err != nil {
		return err
	}
	if err := c.startRegistry(ctx); err != nil {
		return err
	}
	if err := c.startContainerd(ctx); err != nil {
		return err
	}
	if err := c.startCoreDNS(ctx); err != nil {
		return err
	}
	if err := c.startKubelet(ctx); err != nil {
		return err
	}
	start := time.Now()
	node, err := c.waitNodeReady(ctx, RealNodeName)
	if err != nil {
		return &StartError{Component: Kubelet, LogPath: filepath.Join(c.opts.LogDir, Kubelet+".log"), Err: err, LogTail: tailFile(filepath.Join(c.opts.LogDir, Kubelet+".log"), 15)}
	}
	fmt.Fprintf(c.opts.Progress, "real node %s ready in %s (%s cpu, %s memory; pods on %s, DNS %s)\n", node.Name,
		time.Since(start).Round(100*time.Millisecond), node.Status.Allocatable.Cpu(), node.Status.Allocatable.Memory(), rn.Subnet, rn.Gateway)
	if !c.opts.RoutedServices {
		return nil
	}
	start = time.Now()
	if err := c.startRoutedServices(ctx); err != nil {
		return err
	}
	fmt.Fprintf(c.opts.Progress, "Services routed by kube-proxy (nftables) in %s; the API server at %s:443 for pods\n", time.Since(start).Round(100*time.Millisecond), KubernetesServiceIP)
	return nil
}

// fakeNodeTaints is TaintFakeNode for every kwok node of a cluster with a real
// node; see TaintFakeNode.
func (c *Cluster) fakeNodeTaints() []corev1.Taint {
	if c.opts.RealNode {
		return []corev1.Taint{TaintFakeNode}
	}
	return nil
}

// run runs a host command, its output in the error.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
