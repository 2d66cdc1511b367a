package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// ImageSource provides the real node's images. Package e2e/images provides one
// (images.Publisher), which this package cannot import: images builds on this
// package's cache. progress gets one line per step.
type ImageSource interface {
	// Prepare builds the images that are not cached. Up runs it beside the build
	// of the cluster's binaries, so that a cold start builds both at once.
	Prepare(ctx context.Context, progress io.Writer) error
	// Publish pushes the images to the registry at registryHostPort
	// ("127.0.0.1:<port>"), building first what is not cached.
	Publish(ctx context.Context, registryHostPort string, progress io.Writer) error
}

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
	return fmt.Sprintf("http://127.0.0.1:%d", c.ports[Registry])
}

// startRegistry runs the image registry on 127.0.0.1 with its storage in the
// StateDir (kept across runs, so a warm start pushes no blob again), then has
// Options.Images publish the real node's images to it.
func (c *Cluster) startRegistry(ctx context.Context) error {
	dir := filepath.Join(c.realNode.Dir, Registry)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg := RegistryConfig{Addr: fmt.Sprintf("127.0.0.1:%d", c.ports[Registry]), RootDir: filepath.Join(c.opts.StateDir, "registry")}
	path := filepath.Join(dir, "config.yml")
	if err := WriteRegistryConfig(path, cfg); err != nil {
		return err
	}
	if err := c.runComponent(ctx, componentSpec{
		name:   Registry,
		binary: c.bins.Path(Registry),
		args:   []string{"serve", path},
		env:    RegistryEnv,
		ports:  []int{c.ports[Registry]},
		ready:  httpProbe(http.DefaultClient, cfg.HealthURL(), ""),
	}); err != nil {
		return err
	}
	start := time.Now()
	if err := c.opts.Images.Publish(ctx, cfg.Addr, c.opts.Progress); err != nil {
		return fmt.Errorf("publishing the real node's images: %w", err)
	}
	fmt.Fprintf(c.opts.Progress, "images published to %s in %s\n", cfg.Addr, time.Since(start).Round(100*time.Millisecond))
	return nil
}
