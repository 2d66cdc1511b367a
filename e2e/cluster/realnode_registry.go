package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// ImageRegistry is the registry on 127.0.0.1 that serves the real node's
// images; containerd reaches it as a mirror of every upstream registry.
const ImageRegistry = "registry"

// PauseImage is the real node's sandbox image: containerd's pinned sandbox
// image, served by ImageRegistry like every other image.
const PauseImage = "registry.k8s.io/pause:3.10"

// mirroredRegistries are the registries whose images the local registry
// stands in for: those the upstream runtimes and this repository's examples
// name. "_default" catches every other one, so that a pull of an image the
// registry lacks fails at once instead of leaving the machine.
var mirroredRegistries = []string{"docker.io", "ghcr.io", "nvcr.io", "registry.k8s.io", "_default"}

// writeRegistryMirrors writes containerd's registry hosts configuration
// (<dir>/<registry>/hosts.toml): every registry's server is the local one, so
// containerd never falls back to the real registry.
func (c *Cluster) writeRegistryMirrors(dir string) error {
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", c.registryURL(), c.registryURL())
	for _, reg := range mirroredRegistries {
		d := filepath.Join(dir, reg)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(hosts), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// registryURL is the local registry's address as containerd dials it.
func (c *Cluster) registryURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d", c.ports[ImageRegistry])
}
