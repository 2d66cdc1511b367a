package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// The real node's pod network: its bridge with the guard that keeps traffic
// on this machine, the CNI configuration that puts pods on it, and CoreDNS
// on the bridge address.

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
			RoutedServices: c.opts.RoutedServices,
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

// cniConfig is the node's CNI network: pods on the bridge with addresses of
// the node's subnet and no gateway route (the bridge plugin's isGateway would
// also turn on IP forwarding; the host's address is on the bridge anyway, so
// pods reach it, and each other, within the subnet), hostPort via portmap.
// With routed Services, pods also get a route for the Service range through
// the host, where kube-proxy's rules translate it; nothing else.
func cniConfig(rn *RealNodeState) map[string]any {
	ipam := map[string]any{
		"type":    cniHostLocal,
		"ranges":  [][]map[string]string{{{"subnet": rn.Subnet, "rangeStart": strings.TrimSuffix(rn.Gateway, ".1") + ".10"}}},
		"dataDir": filepath.Join(rn.Dir, "cni", "ipam"),
	}
	if rn.RoutedServices {
		ipam["routes"] = []map[string]string{{"dst": ServiceCIDR, "gw": rn.Gateway}}
	}
	return map[string]any{
		"cniVersion": "1.0.0",
		"name":       "trainyard",
		"plugins": []any{
			map[string]any{
				"type": cniBridge, "bridge": rn.Bridge, "isGateway": false, "ipMasq": false, "hairpinMode": true,
				"ipam": ipam,
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
