package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
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

// buildGroup is the sources built by one go build: those sharing a build
// module and link flags, or a single asset-only source.
type buildGroup struct {
	module string // folder under hack/kube-bins; "" for asset-only
	label  string // names the group's build log: its sources' names, joined by "+"
	srcs   []Source
}

// groupSources groups srcs by build module and link flags (stamp and
// patches), in first-seen order. Sources of one module that are stamped
// differently are linked by separate go builds, whose compiles Go's build
// cache shares.
func groupSources(srcs []Source) []*buildGroup {
	var groups []*buildGroup
	byKey := map[string]*buildGroup{}
	for _, src := range srcs {
		module := src.buildModule()
		key := fmt.Sprintf("%s %q %q", module, buildFlags(src), src.Patches)
		if g := byKey[key]; g != nil && module != "" {
			g.srcs = append(g.srcs, src)
			continue
		}
		g := &buildGroup{module: module, srcs: []Source{src}}
		byKey[key] = g
		groups = append(groups, g)
	}
	for _, g := range groups {
		names := make([]string, len(g.srcs))
		for i, src := range g.srcs {
			names[i] = src.Name
		}
		g.label = strings.Join(names, "+")
	}
	return groups
}

// buildAll builds the groups concurrently: each go build already compiles in
// parallel, but its link steps are serial, and overlapping them with another
// build's compiles shortens a cold build. The first failure cancels the rest.
func (o *BuildOptions) buildAll(ctx context.Context, srcs []Source) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	groups := groupSources(srcs)
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() {
			if errs[i] = o.buildGroup(ctx, g); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 && ctx.Err() != nil {
		return errors.Join(errs...) // the caller's context ended
	}
	return errors.Join(failed...)
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

func (o *BuildOptions) sourceDir(src Source) string {
	return filepath.Join(o.CacheDir, "bin", src.Name+"-"+src.Version+"-"+o.recipe(src))
}

func (o *BuildOptions) record(bins *Binaries, src Source) {
	dir := o.sourceDir(src)
	for name := range src.Binaries {
		bins.paths[name] = filepath.Join(dir, name)
	}
	for name := range src.Assets {
		bins.paths[name] = filepath.Join(dir, name)
	}
}

// buildGroup builds a group's binaries with one go build, then fills a
// temporary folder per source with its binaries and assets and renames it
// to its cache folder.
func (o *BuildOptions) buildGroup(ctx context.Context, g *buildGroup) (err error) {
	if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
		return fmt.Errorf("creating log dir: %w", err)
	}
	logPath := filepath.Join(o.LogDir, "build-"+g.label+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating build log for %s: %w", g.label, err)
	}
	defer logFile.Close()
	defer func() {
		if err != nil {
			err = fmt.Errorf("building %s: %w (build log: %s)", g.describe(), err, logPath)
		}
	}()
	binDir, err := os.MkdirTemp(filepath.Join(o.CacheDir, "bin"), ".tmp-"+g.label+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)

	start := time.Now()
	if pkgs := g.packages(); len(pkgs) > 0 {
		fmt.Fprintf(o.Progress, "building %s; a first build takes minutes, log: %s\n", g.describe(), logPath)
		if err := o.goBuild(ctx, g.srcs[0], pkgs, binDir, logFile); err != nil {
			return err
		}
	}
	for _, src := range g.srcs {
		if err := o.install(ctx, src, binDir, logFile); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Progress, "cached %s in %s (%s)\n", g.describe(), filepath.Join(o.CacheDir, "bin"), time.Since(start).Round(time.Second))
	return nil
}

// describe names the group's sources and versions, e.g.
// "kubernetes v1.36.3, jobset v0.12.0".
func (g *buildGroup) describe() string {
	parts := make([]string, len(g.srcs))
	for i, src := range g.srcs {
		parts[i] = src.Name + " " + src.Version
	}
	return strings.Join(parts, ", ")
}

// packages lists the packages of all binaries of the group.
func (g *buildGroup) packages() []string {
	var pkgs []string
	for _, src := range g.srcs {
		for _, name := range sortedKeys(src.Binaries) {
			pkgs = append(pkgs, src.Binaries[name])
		}
	}
	return pkgs
}

// install assembles src's cache folder from the built binaries in binDir
// and its assets, then renames it into place, so that a cache folder is
// either complete or absent.
func (o *BuildOptions) install(ctx context.Context, src Source, binDir string, log io.Writer) error {
	tmp, err := os.MkdirTemp(filepath.Join(o.CacheDir, "bin"), ".tmp-"+src.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // no-op after a successful rename
	for name, pkg := range src.Binaries {
		if err := os.Rename(filepath.Join(binDir, defaultBinaryName(pkg)), filepath.Join(tmp, name)); err != nil {
			return fmt.Errorf("binary %s: %w", name, err)
		}
	}
	if len(src.Assets) > 0 {
		if err := o.copyAssets(ctx, src, tmp, log); err != nil {
			return err
		}
	}
	if err := o.writeSourceInfo(tmp, src); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return err
	}
	return replaceDir(tmp, o.sourceDir(src))
}

// replaceDir renames dir to dst, first moving aside and removing a stale
// dst. Running processes keep their binaries (Linux keeps deleted files
// open).
func replaceDir(dir, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		stale := dst + ".stale"
		if err := os.RemoveAll(stale); err != nil {
			return err
		}
		if err := os.Rename(dst, stale); err != nil {
			return err
		}
		defer os.RemoveAll(stale)
	}
	if err := os.Rename(dir, dst); err != nil {
		return fmt.Errorf("moving into the cache: %w", err)
	}
	return nil
}

// goBuild builds pkgs with one go build inside src's build module
// (hack/kube-bins/<module>) and with src's flags and patches, writing each
// binary into dir under its default name.
func (o *BuildOptions) goBuild(ctx context.Context, src Source, pkgs []string, dir string, log io.Writer) error {
	modDir := filepath.Join(o.RepoRoot, "hack", "kube-bins", src.buildModule())
	args := append([]string{"build"}, buildFlags(src)...)
	if len(src.Patches) > 0 {
		overlay, patched, err := o.writeOverlay(ctx, src, pkgs, dir, log)
		if err != nil {
			return err
		}
		args, pkgs = append(args, "-overlay="+overlay), patched
	}
	args = append(args, "-o", dir+string(filepath.Separator))
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, o.GoCommand, args...)
	cmd.Dir = modDir
	cmd.Env = goEnv()
	cmd.Stdout, cmd.Stderr = log, log
	fmt.Fprintf(log, "$ (cd %s && %s)\n", modDir, strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	if o.Niceness > 0 {
		// Compilers forked from now on inherit the priority.
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, o.Niceness)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	return nil
}

// copyAssets copies src.Assets out of the module's source tree, which
// `go mod download` fetches (checksum-verified) into the module cache.
func (o *BuildOptions) copyAssets(ctx context.Context, src Source, dst string, log io.Writer) error {
	modDir, err := o.moduleDir(ctx, src, log)
	if err != nil {
		return err
	}
	for _, name := range sortedKeys(src.Assets) {
		data, err := os.ReadFile(filepath.Join(modDir, src.Assets[name]))
		if err != nil {
			return fmt.Errorf("asset %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			return fmt.Errorf("asset %s: %w", name, err)
		}
	}
	return nil
}

func (o *BuildOptions) moduleDir(ctx context.Context, src Source, log io.Writer) (string, error) {
	tmp, err := os.MkdirTemp("", "trainyard-moddl-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, o.GoCommand, "mod", "download", "-json", src.Module+"@"+src.Version)
	cmd.Dir = tmp // outside any module, so no go.mod is read or changed
	cmd.Env = append(goEnv(), "GOFLAGS=-mod=mod")
	cmd.Stdout, cmd.Stderr = &out, log
	runErr := cmd.Run()
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out.Bytes(), &info); err != nil || runErr != nil || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %v %s", src.Module, src.Version, errors.Join(runErr, err), info.Error)
	}
	return info.Dir, nil
}

// sourceInfo is <cache folder>/source.json.
type sourceInfo struct {
	Module  string    `json:"module"`
	Version string    `json:"version"`
	Recipe  string    `json:"recipe"`
	BuiltAt time.Time `json:"builtAt"`
}

// buildFlags are the go build flags of src: no symbol tables (-s -w: smaller
// binaries, faster links; stack traces keep function names and lines), and
// src.Stamp. As part of the recipe, changing them builds a new cache folder.
func buildFlags(src Source) []string {
	ldflags := []string{"-s", "-w"}
	for _, name := range sortedKeys(src.Stamp) {
		ldflags = append(ldflags, "-X", name+"="+src.Stamp[name])
	}
	flags := []string{"-trimpath", "-ldflags=" + strings.Join(ldflags, " ")}
	if len(src.Tags) > 0 {
		flags = append(flags, "-tags="+strings.Join(src.Tags, ","))
	}
	return flags
}

// patchedPackageDir is where, inside a build module, writeOverlay places the
// patched copies of a binary's package: <build module>/patched/<path in the
// source module>. Go refuses overlays of files in the module cache, so a
// patched main package is built as a package of the build module instead;
// nothing is written to the repository.
const patchedPackageDir = "patched"

// writeOverlay applies src.Patches for a build of pkgs: every Go file of the
// package directory of a patched file is copied, patched, into dir, and a go
// build -overlay file maps <build module>/patched/<package dir>/<file> to
// each copy. It returns the overlay file's path and pkgs with each patched
// package replaced by its copy. A patch may only change a package that is
// one of the binaries (a main package), so no other import path changes.
func (o *BuildOptions) writeOverlay(ctx context.Context, src Source, pkgs []string, dir string, log io.Writer) (string, []string, error) {
	modDir, err := o.moduleDir(ctx, src, log)
	if err != nil {
		return "", nil, err
	}
	buildModDir := filepath.Join(o.RepoRoot, "hack", "kube-bins", src.buildModule())
	patchDir, err := os.MkdirTemp(dir, ".patched-")
	if err != nil {
		return "", nil, err
	}
	patches := map[string][]SourcePatch{} // by package dir in the module
	for _, p := range src.Patches {
		pkgDir := path.Dir(p.File)
		if !slices.Contains(pkgs, src.Module+"/"+pkgDir) {
			return "", nil, fmt.Errorf("patch %s: only the package of a binary may be patched", p.File)
		}
		patches[pkgDir] = append(patches[pkgDir], p)
	}
	overlay := struct{ Replace map[string]string }{Replace: map[string]string{}}
	pkgs = slices.Clone(pkgs)
	for _, pkgDir := range sortedKeys(patches) {
		files, err := filepath.Glob(filepath.Join(modDir, filepath.FromSlash(pkgDir), "*.go"))
		if err != nil {
			return "", nil, err
		}
		contents := map[string]string{}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				return "", nil, err
			}
			contents[path.Join(pkgDir, filepath.Base(file))] = string(data)
		}
		for _, p := range patches[pkgDir] {
			if n := strings.Count(contents[p.File], p.Old); n != 1 {
				return "", nil, fmt.Errorf("patch %s: %q occurs %d times, want once (%s)", p.File, p.Old, n, p.Why)
			}
			contents[p.File] = strings.Replace(contents[p.File], p.Old, p.New, 1)
			fmt.Fprintf(log, "patching %s: %s\n", p.File, p.Why)
		}
		for i, name := range sortedKeys(contents) {
			copied := filepath.Join(patchDir, fmt.Sprintf("%d-%s", i, path.Base(name)))
			if err := os.WriteFile(copied, []byte(contents[name]), 0o644); err != nil {
				return "", nil, err
			}
			overlay.Replace[filepath.Join(buildModDir, patchedPackageDir, filepath.FromSlash(name))] = copied
		}
		pkgs[slices.Index(pkgs, src.Module+"/"+pkgDir)] = "./" + path.Join(patchedPackageDir, pkgDir)
	}
	data, err := json.Marshal(overlay)
	if err != nil {
		return "", nil, err
	}
	overlayFile := filepath.Join(patchDir, "overlay.json")
	return overlayFile, pkgs, os.WriteFile(overlayFile, data, 0o644)
}

// recipe fingerprints how src is built: its build flags (stamp included),
// patches and build module's go.mod and go.sum. It names the cache folder, so
// that editing any of them (a dependency bump, a new stamp) builds a folder of
// its own instead of replacing one in use.
func (o *BuildOptions) recipe(src Source) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s@%s %q %q\n", src.Module, src.Version, buildFlags(src), src.Patches)
	if module := src.buildModule(); module != "" {
		for _, name := range []string{"go.mod", "go.sum"} {
			data, _ := os.ReadFile(filepath.Join(o.RepoRoot, "hack", "kube-bins", module, name))
			h.Write(data)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// cached reports whether src's cache folder is complete and built by the
// current recipe.
func (o *BuildOptions) cached(src Source) bool {
	data, err := os.ReadFile(filepath.Join(o.sourceDir(src), "source.json"))
	if err != nil {
		return false
	}
	var info sourceInfo
	return json.Unmarshal(data, &info) == nil && info.Recipe == o.recipe(src)
}

func (o *BuildOptions) writeSourceInfo(dir string, src Source) error {
	data, err := json.MarshalIndent(sourceInfo{
		Module: src.Module, Version: src.Version, Recipe: o.recipe(src), BuiltAt: time.Now().UTC(),
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "source.json"), data, 0o644)
}

// defaultBinaryName is the file name go build gives the binary of pkg: its
// last path element, or the one before a major-version suffix ("v3").
func defaultBinaryName(pkg string) string {
	base := path.Base(pkg)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		return path.Base(path.Dir(pkg))
	}
	return base
}

// goEnv is the environment for go commands: builds happen in their own
// modules, never in a workspace, with the versions locked by go.sum.
func goEnv() []string {
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	return append(env, "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
}

// lockFile takes an exclusive flock on path, polling until ctx ends. The
// returned func releases it.
func lockFile(ctx context.Context, path string, progress io.Writer) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating cache dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening build lock: %w", err)
	}
	for waited := false; ; waited = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !waited {
			fmt.Fprintf(progress, "waiting for another process building into %s\n", filepath.Dir(path))
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for build lock %s: %w", path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
