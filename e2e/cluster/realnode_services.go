package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Services that route (Options.RoutedServices): kube-proxy from the cluster's own
// Kubernetes build, in nftables mode, programs every Service's ClusterIP on this
// machine as in a real cluster, so the API server reaches webhooks through their
// Service and pods reach each other, the controller and the API server through theirs.
//
// What it may touch is confined: kube-proxy's tables (ip and ip6 "kube-proxy") hold
// rules for the Service range only, with NodePorts on the bridge address alone;
// forwarding is switched on for the cluster's bridge alone (not the host's
// net.ipv4.ip_forward); and a guard table drops every translated (DNAT) packet that
// would leave through any interface but a pod bridge or loopback, so a Service whose
// endpoint is a kwok pod's made-up address or any other address never sends a packet
// off this machine. kube-proxy's tables have fixed names, so one cluster per machine
// can route Services: a second one is refused, naming the first.
const (
	KubeProxy = "kube-proxy"
	// apiServerForwarder listens on the bridge address with the API server's port and
	// forwards to 127.0.0.1, where the API server listens: the address the
	// "kubernetes" Service's endpoint names, so pods' in-cluster clients reach it.
	apiServerForwarder   = "apiserver-forwarder"
	portKubeProxyHealth  = "kube-proxy-health"
	portKubeProxyMetrics = "kube-proxy-metrics"
	// kubeProxyTable is the table kube-proxy's nftables mode owns, in families ip and ip6.
	kubeProxyTable = "kube-proxy"
	// serviceGuardTable is this package's table of the guard (inet family).
	serviceGuardTable = "trainyard-services"
)

// ServiceCIDR is the range of every cluster's ClusterIPs (kube-apiserver
// --service-cluster-ip-range).
const ServiceCIDR = "10.96.0.0/16"

// KubernetesServiceIP is the ClusterIP of the "kubernetes" Service: the first address
// of the Service range the API server is given.
const KubernetesServiceIP = "10.96.0.1"

// RoutedServicesHostPackages are the Debian packages routed Services need: nft for
// kube-proxy's nftables mode and the guard, socat for the API server's forwarder.
var RoutedServicesHostPackages = []string{"nftables", "socat"}

// kubeProxySource is kube-proxy, built in its own build module
// (hack/kube-bins/kube-proxy) of the same Kubernetes release as the kubelet.
var kubeProxySource = Source{
	Name: "kube-proxy", Module: "k8s.io/kubernetes", Version: "v1.36.3", Stamp: kubeStamp,
	Binaries: map[string]string{KubeProxy: "k8s.io/kubernetes/cmd/kube-proxy"},
}

// checkRoutedServicesHost reports what the host lacks for routed Services, or the
// other cluster that routes them already, naming the fix.
func checkRoutedServicesHost(ctx context.Context) error {
	var missing []string
	for _, bin := range []string{"nft", "socat"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("routed Services need %s on PATH: apt-get install -y %s", strings.Join(missing, ", "), strings.Join(RoutedServicesHostPackages, " "))
	}
	if run(ctx, "nft", "list", "table", "ip", kubeProxyTable) == nil {
		return fmt.Errorf("another kube-proxy programs this machine (nft table ip %s exists): stop the local cluster that routes Services (localcluster down with its --state-dir), or remove a stale one with `nft delete table ip %s; nft delete table ip6 %s; nft delete table inet %s`",
			kubeProxyTable, kubeProxyTable, kubeProxyTable, serviceGuardTable)
	}
	return nil
}

// startRoutedServices turns on forwarding for the bridge, installs the guard, starts
// the API server's forwarder and kube-proxy, and points the "kubernetes" Service at
// the forwarder. It runs once the real node is Ready (kube-proxy reads its Node).
func (c *Cluster) startRoutedServices(ctx context.Context) error {
	rn := c.realNode
	if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", rn.Bridge, "forwarding"), []byte("1"), 0o644); err != nil {
		return fmt.Errorf("forwarding on %s: %w", rn.Bridge, err)
	}
	// The Service range is routed to the bridge: a ClusterIP kube-proxy has not
	// programmed (yet) is looked for on the pod network, never through the host's
	// default route; a programmed one is translated before it is routed again.
	if err := run(ctx, "ip", "route", "replace", ServiceCIDR, "dev", rn.Bridge); err != nil {
		return err
	}
	if err := installServiceGuard(ctx); err != nil {
		return err
	}
	apiPort := strconv.Itoa(c.ports[KubeAPIServer])
	socat, err := exec.LookPath("socat")
	if err != nil {
		return err
	}
	if err := c.runComponent(ctx, componentSpec{
		name:   apiServerForwarder,
		binary: socat, // a path: `localcluster down` knows a process by its binary's
		args:   []string{"TCP-LISTEN:" + apiPort + ",bind=" + rn.Gateway + ",fork,reuseaddr", "TCP:127.0.0.1:" + apiPort},
		ready:  httpProbe(c.tokenClientFor("localhost"), "https://"+rn.Gateway+":"+apiPort+"/readyz", "ok"),
	}); err != nil {
		return err
	}
	if err := c.startKubeProxy(ctx); err != nil {
		return err
	}
	return c.pointKubernetesService(ctx)
}

// installServiceGuard creates the guard table: a translated packet leaves only through
// a pod bridge (trainyard<N>) or loopback. It replaces a guard left by a crash.
func installServiceGuard(ctx context.Context) error {
	_ = run(ctx, "nft", "delete", "table", "inet", serviceGuardTable)
	rules := `table inet ` + serviceGuardTable + ` {
  chain postrouting {
    type filter hook postrouting priority 300; policy accept;
    ct status dnat oifname != "lo" oifname != "trainyard*" counter drop comment "trainyard routed Services: stays on this machine"
  }
}
`
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("installing the routed-Services guard: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startKubeProxy writes kube-proxy's identity (system:kube-proxy, bound to the
// built-in system:node-proxier ClusterRole) and configuration, and runs it.
func (c *Cluster) startKubeProxy(ctx context.Context) error {
	rn := c.realNode
	dir := filepath.Join(rn.Dir, KubeProxy)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kubeconfig, err := c.identityKubeconfig(ctx, dir, "system:kube-proxy", "system:node-proxier")
	if err != nil {
		return err
	}
	config := map[string]any{
		"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
		"clientConnection":   map[string]any{"kubeconfig": kubeconfig},
		"hostnameOverride":   RealNodeName,
		"bindAddress":        rn.Gateway,
		"healthzBindAddress": fmt.Sprintf("127.0.0.1:%d", c.ports[portKubeProxyHealth]),
		"metricsBindAddress": fmt.Sprintf("127.0.0.1:%d", c.ports[portKubeProxyMetrics]),
		"mode":               "nftables",
		"clusterCIDR":        rn.Subnet,
		"detectLocalMode":    "ClusterCIDR",
		// NodePorts answer on the bridge address only, never on the host's others.
		"nodePortAddresses": []string{rn.Gateway + "/32"},
		// Every Service connection is masqueraded, so replies come back through the
		// host whichever pod answers: no reliance on br_netfilter.
		"nftables": map[string]any{"masqueradeAll": true, "minSyncPeriod": "1s", "syncPeriod": "30s"},
		// kube-proxy leaves the host's conntrack sysctls alone.
		"conntrack": map[string]any{"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
	}
	configPath := filepath.Join(dir, "config.yaml")
	if err := writeYAML(configPath, config); err != nil {
		return err
	}
	return c.runComponent(ctx, componentSpec{
		name:    KubeProxy,
		binary:  c.bins.Path(KubeProxy),
		args:    []string{"--config=" + configPath, "--v=2"},
		ports:   []int{c.ports[portKubeProxyHealth], c.ports[portKubeProxyMetrics]},
		ready:   httpProbe(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports[portKubeProxyHealth]), ""),
		timeout: realNodeReadyTimeout,
	})
}

// pointKubernetesService writes the "kubernetes" Service's EndpointSlice: the
// forwarder on the bridge address. The API server's own endpoint reconciler is off
// (its address, 127.0.0.1, is one an endpoint may not hold).
func (c *Cluster) pointKubernetesService(ctx context.Context) error {
	port := int32(c.ports[KubeAPIServer])
	name := "https"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-local", Namespace: metav1.NamespaceDefault, Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: managedByHostService,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{c.realNode.Gateway}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if err := upsert(ctx, c.client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault), slice, func(cur *discoveryv1.EndpointSlice) {
		cur.Endpoints, cur.Ports = slice.Endpoints, slice.Ports
	}); err != nil {
		return fmt.Errorf("the kubernetes Service's EndpointSlice: %w", err)
	}
	return nil
}

// teardownRoutedServices removes kube-proxy's tables and the guard.
func teardownRoutedServices(ctx context.Context) {
	for _, family := range []string{"ip", "ip6"} {
		_ = run(ctx, "nft", "delete", "table", family, kubeProxyTable)
	}
	_ = run(ctx, "nft", "delete", "table", "inet", serviceGuardTable)
}
