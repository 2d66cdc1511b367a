package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// containerd, the real node's container runtime: its configuration, every
// path of which is the cluster's own, and its start.

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

func dialUnix(ctx context.Context, path string) error {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return err
	}
	return conn.Close()
}
