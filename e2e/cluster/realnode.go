package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
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
	return nil
}

// setupPodNetwork creates the first free trainyard<N> bridge with
// 10.244.<N>.1/24 and the guard that keeps its traffic on this machine.
// Creating the link is the lock: of two clusters starting at once, one gets
// each index. The state file records the bridge as soon as it exists, before
// anything is configured on it, so a process killed in between leaves nothing
// that `localcluster down` does not remove.
func (c *Cluster) setupPodNetwork(ctx context.Context) (*RealNodeState, error) {
	used, err := usedSubnets()
	if err != nil {
		return nil, err
	}
	for i := range 256 {
		subnet := fmt.Sprintf("10.244.%d.0/24", i)
		if used[subnet] {
			continue
		}
		bridge := fmt.Sprintf("trainyard%d", i)
		if err := run(ctx, "ip", "link", "add", bridge, "type", "bridge"); err != nil {
			continue // taken by another cluster
		}
		rn := &RealNodeState{
			Index: i, Bridge: bridge, Subnet: subnet, Gateway: fmt.Sprintf("10.244.%d.1", i),
			CgroupRoot:     fmt.Sprintf("/trainyard-%d", i),
			Dir:            filepath.Join(c.workDir, "node"),
			ContainerdRoot: filepath.Join(c.opts.StateDir, "containerd"),
		}
		c.mu.Lock()
		c.realNode = rn
		c.mu.Unlock()
		if err := c.writeState(); err != nil {
			_ = run(ctx, "ip", "link", "del", bridge)
			return nil, err
		}
		if err := errors.Join(
			run(ctx, "ip", "addr", "add", rn.Gateway+"/24", "dev", bridge),
			run(ctx, "ip", "link", "set", bridge, "up"),
			forwardGuard(ctx, "-I", bridge),
		); err != nil {
			_ = run(ctx, "ip", "link", "del", bridge)
			return nil, fmt.Errorf("setting up the pod network on %s: %w", bridge, err)
		}
		return rn, nil
	}
	return nil, errors.New("no free trainyard<N> bridge and 10.244.<N>.0/24 subnet left (N < 256): stop other clusters, or remove stale bridges with `ip link del trainyard<N>`")
}

// forwardGuard inserts (-I) or deletes (-D) the iptables rule that drops
// everything the host would forward from the bridge to any other interface.
func forwardGuard(ctx context.Context, op, bridge string) error {
	return run(ctx, "iptables", "-w", op, "FORWARD", "-i", bridge, "!", "-o", bridge, "-j", "DROP",
		"-m", "comment", "--comment", "trainyard local pod network: stays on this machine")
}

// usedSubnets returns the IPv4 /24 networks of every address on this machine.
func usedSubnets() (map[string]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			used[(&net.IPNet{IP: ipn.IP.Mask(net.CIDRMask(24, 32)), Mask: net.CIDRMask(24, 32)}).String()] = true
		}
	}
	return used, nil
}

// cgroupV1Root is where cgroup v1 hierarchies are mounted.
const cgroupV1Root = "/sys/fs/cgroup"

// cgroupHierarchies returns the mounted cgroup hierarchies (folders, not the
// cpu -> cpu,cpuacct links).
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir(cgroupV1Root)
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && e.Type()&os.ModeSymlink == 0 {
			dirs = append(dirs, filepath.Join(cgroupV1Root, e.Name()))
		}
	}
	return dirs
}

// setupCgroupRoot creates the kubelet's cgroupRoot in every hierarchy (the
// kubelet refuses a root that does not exist), its cpuset filled from the
// parent's as a new cpuset cgroup starts empty.
func setupCgroupRoot(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("initialising %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

func (c *Cluster) containerdSocket() string {
	return filepath.Join(c.realNode.Dir, "containerd", "containerd.sock")
}

// startContainerd writes containerd's configuration (its CRI plugin on the
// node's pod network, images from the cluster's registry mirrors) and runs it.
func (c *Cluster) startContainerd(ctx context.Context) error {
	rn := c.realNode
	dir := filepath.Join(rn.Dir, "containerd")
	cniConfDir := filepath.Join(rn.Dir, "cni", "net.d")
	for _, d := range []string{dir, cniConfDir, rn.ContainerdRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(cniConfDir, "10-trainyard.conflist"), cniConfig(rn)); err != nil {
		return err
	}
	hostsDir := filepath.Join(dir, "certs.d")
	if err := c.writeRegistryMirrors(hostsDir); err != nil {
		return err
	}
	cniBinDir := filepath.Dir(c.bins.Path(cniBridge))
	config := fmt.Sprintf(containerdConfig,
		rn.ContainerdRoot, filepath.Join(dir, "state"), c.containerdSocket(),
		filepath.Join(dir, "opt"), PauseImage, hostsDir, c.bins.Path(Runc), filepath.Join(dir, "runc"), cniBinDir, cniConfDir)
	configPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	sock := c.containerdSocket()
	return c.runComponent(ctx, componentSpec{
		name:   Containerd,
		binary: c.bins.Path(Containerd),
		args:   []string{"--config=" + configPath},
		// The shim is looked up next to containerd, via PATH.
		env:   []string{"PATH=" + filepath.Dir(c.bins.Path(ContainerdShim)) + ":" + os.Getenv("PATH")},
		ready: func(ctx context.Context) error { return dialUnix(ctx, sock) },
	})
}

// containerdConfig is containerd's configuration (version 3, containerd 2.x);
// its verbs are, in order: root, state, socket, opt dir, sandbox image,
// registry hosts dir, runc binary, runc state root, CNI bin dir, CNI conf dir. Every path
// is the cluster's own, so that several clusters and a host containerd never
// meet, and network namespaces are mounted under the state folder, which
// Down unmounts.
const containerdConfig = `version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]

[grpc]
  address = %q

[plugins.'io.containerd.internal.v1.opt']
  path = %q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %q

[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # Sandboxed machines (CI's among them) refuse to lower oom_score_adj even to
  # root: runc then dies creating every pod ("failed to update
  # /proc/self/oom_score_adj: Permission denied"). Clamp to containerd's own.
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        Root = %q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`

// cniConfig is the node's CNI network: pods on the bridge with addresses of
// the node's subnet and no gateway route (the bridge plugin's isGateway would
// also turn on IP forwarding; the host's address is on the bridge anyway, so
// pods reach it, and each other, within the subnet), hostPort via portmap.
func cniConfig(rn *RealNodeState) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0",
		"name":       "trainyard",
		"plugins": []any{
			map[string]any{
				"type": cniBridge, "bridge": rn.Bridge, "isGateway": false, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    cniHostLocal,
					"ranges":  [][]map[string]string{{{"subnet": rn.Subnet, "rangeStart": strings.TrimSuffix(rn.Gateway, ".1") + ".10"}}},
					"dataDir": filepath.Join(rn.Dir, "cni", "ipam"),
				},
			},
			map[string]any{"type": cniPortmap, "capabilities": map[string]bool{"portMappings": true}},
		},
	}
}

// startCoreDNS runs CoreDNS on the bridge address, port 53: cluster.local
// from the API server (Services, headless Services' pods by hostname and
// subdomain, as JobSet names them), NXDOMAIN for every other name, so a pod
// never queries anything outside this machine.
func (c *Cluster) startCoreDNS(ctx context.Context) error {
	rn := c.realNode
	dir := filepath.Join(rn.Dir, "coredns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	corefile := fmt.Sprintf(`%[1]s:53 {
    bind %[2]s
    health 127.0.0.1:%[3]d
    ready 127.0.0.1:%[4]d
    errors
    kubernetes %[1]s {
        kubeconfig %[5]s trainyard
        pods insecure
        ttl 5
    }
}
.:53 {
    bind %[2]s
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
`, ClusterDomain, rn.Gateway, c.ports[portCoreDNSHealth], c.ports[portCoreDNSReady], c.componentKubeconfig())
	path := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o644); err != nil {
		return err
	}
	return c.runComponent(ctx, componentSpec{
		name:   CoreDNS,
		binary: c.bins.Path(CoreDNS),
		args:   []string{"-conf=" + path},
		ports:  []int{c.ports[portCoreDNSHealth], c.ports[portCoreDNSReady]},
		// /ready answers 200 once the kubernetes plugin has synced its caches.
		ready: httpProbe(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/ready", c.ports[portCoreDNSReady]), "OK"),
	})
}

// startKubelet writes the kubelet's identity and configuration and runs it.
// Its serving port is on the bridge address, which is also the node's
// InternalIP: the API server reaches it there for logs, exec and
// port-forward, with a client certificate the kubelet checks against the
// cluster CA.
func (c *Cluster) startKubelet(ctx context.Context) error {
	rn := c.realNode
	dir := filepath.Join(rn.Dir, "kubelet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kubeconfig, err := c.nodeKubeconfig(ctx, dir)
	if err != nil {
		return err
	}
	config := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
		"address": rn.Gateway, "port": c.ports[Kubelet], "readOnlyPort": 0,
		"healthzBindAddress": "127.0.0.1", "healthzPort": c.ports[portKubeletHealth],
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]bool{"enabled": true},
			"x509":      map[string]string{"clientCAFile": c.pki.caFile()},
		},
		"authorization": map[string]string{"mode": "Webhook"},
		// This machine runs cgroup v1, which kubelet 1.36 refuses unless told.
		"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupRoot": rn.CgroupRoot,
		"failSwapOn": false,
		"clusterDNS": []string{rn.Gateway}, "clusterDomain": ClusterDomain,
		// No host resolv.conf: pods know only the cluster's DNS.
		"resolvConf":          "",
		"podLogsDir":          filepath.Join(rn.Dir, "pod-logs"),
		"maxPods":             110,
		"serializeImagePulls": false,
		// A shared development disk is often past the default thresholds; the
		// node must not evict or garbage-collect images because of other work.
		"evictionHard":                map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		"imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
		"containerRuntimeEndpoint":  "unix://" + c.containerdSocket(),
		"staticPodPath":             "",
		"registerNode":              true,
		"nodeStatusReportFrequency": "10s",
	}
	configPath := filepath.Join(dir, "config.yaml")
	if err := writeYAML(configPath, config); err != nil {
		return err
	}
	return c.runComponent(ctx, componentSpec{
		name:   Kubelet,
		binary: c.bins.Path(Kubelet),
		args: []string{
			"--config=" + configPath,
			"--kubeconfig=" + kubeconfig,
			"--root-dir=" + filepath.Join(dir, "root"),
			"--cert-dir=" + filepath.Join(dir, "pki"),
			"--hostname-override=" + RealNodeName,
			"--node-ip=" + rn.Gateway,
			"--node-labels=" + LabelRealNode + "=true",
			"--v=2",
		},
		ports:   []int{c.ports[Kubelet], c.ports[portKubeletHealth]},
		ready:   httpProbe(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports[portKubeletHealth]), "ok"),
		timeout: realNodeReadyTimeout,
	})
}

// nodeKubeconfig writes the kubelet's kubeconfig: a client certificate for
// system:node:<name> in group system:nodes, bound to the built-in system:node
// ClusterRole (the API server runs RBAC alone, without the Node authorizer).
func (c *Cluster) nodeKubeconfig(ctx context.Context, dir string) (string, error) {
	user := "system:node:" + RealNodeName
	certPEM, keyPEM, err := c.pki.clientCert(user, "system:nodes")
	if err != nil {
		return "", err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "trainyard:" + RealNodeName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("binding the node's user to system:node: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["trainyard"] = &clientcmdapi.Cluster{Server: c.serverURL(), CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["trainyard"] = &clientcmdapi.Context{Cluster: "trainyard", AuthInfo: "node"}
	cfg.CurrentContext = "trainyard"
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// kubeletClientCert writes the client certificate the API server presents to
// the kubelet (--kubelet-client-certificate) and returns its files.
func (c *Cluster) kubeletClientCert() (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := c.pki.clientCert("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(c.pki.dir, "kubelet-client.crt"), filepath.Join(c.pki.dir, "kubelet-client.key")
	return certFile, keyFile, errors.Join(os.WriteFile(certFile, certPEM, 0o644), os.WriteFile(keyFile, keyPEM, 0o600))
}

// teardownRealNode undoes everything the real node did to the host, in an
// order that lets each step succeed: the pods' processes, the shims,
// containerd's mounts and network namespaces, the bridge and its guard, the
// cgroups. Processes recorded in the state file are already stopped. Every
// step runs even when an earlier one fails.
func teardownRealNode(rn *RealNodeState) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	killCgroupProcesses(rn.CgroupRoot)
	killShims(rn.Dir)
	errs = append(errs, unmountUnder(rn.Dir))
	if err := run(ctx, "ip", "link", "del", rn.Bridge); err != nil && linkExists(rn.Bridge) {
		errs = append(errs, err)
	}
	for forwardGuard(ctx, "-D", rn.Bridge) == nil { // every copy, should one be left from a crash
	}
	errs = append(errs, removeCgroupRoot(rn.CgroupRoot))
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// killCgroupProcesses SIGKILLs every process in root's cgroups (the pods'
// containers), in the pids hierarchy, which every container joins.
func killCgroupProcesses(root string) {
	_ = filepath.WalkDir(filepath.Join(cgroupV1Root, "pids", root), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		for _, pid := range readPids(path) {
			_ = killPid(pid)
		}
		return nil
	})
}

// killShims SIGKILLs the containerd shims of this node: they outlive
// containerd by design, and each names containerd's socket in its arguments.
func killShims(nodeDir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range procs {
		cmdline, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(cmdline), ContainerdShim) || !strings.Contains(string(cmdline), nodeDir) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(path, "/proc/%d/cmdline", &pid); err == nil {
			_ = killPid(pid)
		}
	}
}

// unmountUnder detaches every mount point below dir, deepest first: the
// pods' volumes and rootfs, network namespaces, overlay snapshots.
func unmountUnder(dir string) error {
	mounts, err := mountPointsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := unmountDetach(mounts[i]); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mounts[i], err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroupRoot removes root's cgroups in every hierarchy, children first.
func removeCgroupRoot(root string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		top := filepath.Join(h, root)
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
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

func dialUnix(ctx context.Context, path string) error {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return err
	}
	return conn.Close()
}

func writeYAML(path string, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
