package cluster

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// Environment variables read by [BuildOptions.withDefaults].
const (
	// EnvCacheDir overrides the binary cache root ($HOME/.cache/trainyard).
	EnvCacheDir = "TRAINYARD_CACHE_DIR"
	// EnvRepoRoot overrides the discovery of the repository root.
	EnvRepoRoot = "TRAINYARD_REPO_ROOT"
)

// BuildOptions configures [Build]. The zero value is usable.
type BuildOptions struct {
	// RepoRoot is the Trainyard checkout holding hack/kube-bins. Default:
	// $TRAINYARD_REPO_ROOT, else the nearest parent of the working directory
	// that has hack/kube-bins.
	RepoRoot string
	// CacheDir is the cache root; binaries go to
	// <CacheDir>/bin/<source>-<version>-<recipe>/, where <recipe> fingerprints
	// how they are built (see recipe): a changed recipe builds a new folder and
	// never replaces one a running cluster may be using.
	// Default: $TRAINYARD_CACHE_DIR, else $HOME/.cache/trainyard, else
	// <RepoRoot>/_output/cache when there is no home directory.
	CacheDir string
	// LogDir receives one build-<source>.log per source built. Default:
	// <RepoRoot>/_output/cluster/logs.
	LogDir string
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// GoCommand is the go tool to build with. Default: "go".
	GoCommand string
	// Niceness of the go build processes, so that a first build leaves the
	// machine usable. Default: 10; negative keeps the caller's priority.
	Niceness int
	// Kueue adds KueueSource to the sources built, for Options.Kueue.
	Kueue bool
	// RealNode adds the real node's sources (kubelet, containerd and its runc
	// shim, the CNI plugins, CoreDNS) to the sources built, for
	// Options.RealNode.
	RealNode bool
	// Helm adds HelmSource (the helm CLI) to the sources built, for the e2e
	// Helm leg (e2e/helm).
	Helm bool
	// Prometheus adds PrometheusSource (the Prometheus server and promtool) to the
	// sources built, for the monitoring e2e tests (e2e/monitoring) and Options.Prometheus.
	Prometheus bool
	// KubeVersion is the Kubernetes minor version whose control-plane
	// binaries are built ("1.37"; see LookupKubeRelease); "" means
	// DefaultKubeVersion.
	KubeVersion string
}

// sources lists what Build makes sure is cached: Sources, with the
// "kubernetes" entry replaced by the Source of o.KubeVersion's release, and
// KueueSource when asked for.
func (o *BuildOptions) sources() ([]Source, error) {
	release, err := LookupKubeRelease(o.KubeVersion)
	if err != nil {
		return nil, err
	}
	srcs := slices.Clone(Sources)
	for i := range srcs {
		if srcs[i].Name == release.Source.Name {
			srcs[i] = release.Source
		}
	}
	if o.Kueue {
		srcs = append(srcs, KueueSource)
	}
	if o.RealNode {
		srcs = append(srcs, realNodeSources...)
	}
	if o.Helm {
		srcs = append(srcs, HelmSource)
	}
	if o.Prometheus {
		srcs = append(srcs, PrometheusSource)
	}
	return srcs, nil
}

// Binaries locates the built binaries and the manifest assets of all
// [Sources] in the cache.
type Binaries struct {
	paths map[string]string
}

// Path returns the absolute path of a binary (e.g. [KubeAPIServer]) or of an
// asset (e.g. "jobset-crd.yaml"); it panics on an unknown name, which is a
// programming error.
func (b *Binaries) Path(name string) string {
	p, ok := b.paths[name]
	if !ok {
		panic(fmt.Sprintf("cluster: no binary or asset named %q", name))
	}
	return p
}

// Build makes sure every binary and asset of [Sources] (its Kubernetes
// servers those of opts.KubeVersion's [KubeRelease]), and of [KueueSource]
// with opts.Kueue, is in the cache and returns where they are. A source
// already cached (its folder, named by its recipe, exists) is reused without
// calling the go tool. Missing ones are built with one
// `go build -trimpath` per build module under hack/kube-bins and stamp
// (GOWORK=off, -mod=readonly; in parallel), assembled in a temporary folder and
// renamed into place, so a cache folder is complete or absent. A lock file
// serialises builds between processes, e.g. the test binaries that
// `go test ./...` starts in parallel.
//
// The first build on a machine takes about 10 minutes on 2 idle cores.
// Errors name the sources and the build log.
func Build(ctx context.Context, opts BuildOptions) (*Binaries, error) {
	srcs, err := opts.sources()
	if err != nil {
		return nil, err
	}
	return BuildSources(ctx, opts, srcs...)
}

// BuildSources is [Build] for the sources given instead of [Sources], e.g.
// [UpstreamTrainer]; the returned Binaries locate only theirs.
func BuildSources(ctx context.Context, opts BuildOptions, srcs ...Source) (*Binaries, error) {
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	bins := &Binaries{paths: map[string]string{}}
	var missing []Source
	for _, src := range srcs {
		if !opts.cached(src) {
			missing = append(missing, src)
		}
		opts.record(bins, src)
	}
	if len(missing) == 0 {
		return bins, nil
	}
	binDir := filepath.Join(opts.CacheDir, "bin")
	unlock, err := lockFile(ctx, filepath.Join(binDir, ".build.lock"), opts.Progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var todo []Source
	for _, src := range missing {
		if !opts.cached(src) {
			todo = append(todo, src) // else built by another process while we waited
		}
	}
	if err := opts.buildAll(ctx, todo); err != nil {
		return nil, err
	}
	return bins, nil
}

func (o *BuildOptions) withDefaults() error {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.GoCommand == "" {
		o.GoCommand = "go"
	}
	if o.Niceness == 0 {
		o.Niceness = 10
	}
	if o.RepoRoot == "" {
		root, err := FindRepoRoot()
		if err != nil {
			return err
		}
		o.RepoRoot = root
	}
	if o.CacheDir == "" {
		o.CacheDir = defaultCacheDir(o.RepoRoot)
	}
	if o.LogDir == "" {
		o.LogDir = filepath.Join(o.RepoRoot, DefaultStateDir, "logs")
	}
	return nil
}

func defaultCacheDir(repoRoot string) string {
	if dir := os.Getenv(EnvCacheDir); dir != "" {
		return dir
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".cache", "trainyard")
	}
	return filepath.Join(repoRoot, "_output", "cache")
}

// FindRepoRoot returns $TRAINYARD_REPO_ROOT or the nearest parent of the
// working directory that contains hack/kube-bins.
func FindRepoRoot() (string, error) {
	if dir := os.Getenv(EnvRepoRoot); dir != "" {
		return filepath.Abs(dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(filepath.Join(dir, "hack", "kube-bins")); err == nil && fi.IsDir() {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no parent of %s contains hack/kube-bins; set %s to the Trainyard checkout", wd, EnvRepoRoot)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
