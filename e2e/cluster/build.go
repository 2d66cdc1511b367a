package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
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
	// CacheDir is the cache root; binaries go to <CacheDir>/bin/<source>-<version>/.
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

// Build makes sure every binary and asset of [Sources] is in the cache and
// returns where they are. A source already cached (its folder exists) is
// reused without calling the go tool; a missing one is built with
// `go build -trimpath` inside hack/kube-bins/<source> (GOWORK=off,
// -mod=readonly), written to a temporary folder and renamed into place, so a
// cache folder is complete or absent. A lock file serialises builds between
// processes, e.g. several test binaries started by `go test ./...`.
//
// The first build on a machine takes several minutes (about 10 on 2 cores).
// Errors name the source and its build log.
func Build(ctx context.Context, opts BuildOptions) (*Binaries, error) {
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	bins := &Binaries{paths: map[string]string{}}
	var missing []Source
	for _, src := range Sources {
		if _, err := os.Stat(opts.sourceDir(src)); err != nil {
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
	for _, src := range missing {
		if _, err := os.Stat(opts.sourceDir(src)); err == nil {
			continue // built by another process while we waited for the lock
		}
		if err := opts.buildSource(ctx, src); err != nil {
			return nil, err
		}
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

func (o *BuildOptions) sourceDir(src Source) string {
	return filepath.Join(o.CacheDir, "bin", src.Name+"-"+src.Version)
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

// buildSource builds and copies everything of one source into a temporary
// folder next to its cache folder, then renames it into place.
func (o *BuildOptions) buildSource(ctx context.Context, src Source) (err error) {
	if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
		return fmt.Errorf("creating log dir: %w", err)
	}
	logPath := filepath.Join(o.LogDir, "build-"+src.Name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating build log for %s: %w", src.Name, err)
	}
	defer logFile.Close()
	defer func() {
		if err != nil {
			err = fmt.Errorf("building %s %s %s: %w (build log: %s)", src.Name, src.Module, src.Version, err, logPath)
		}
	}()

	tmp, err := os.MkdirTemp(filepath.Join(o.CacheDir, "bin"), ".tmp-"+src.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // no-op after a successful rename

	start := time.Now()
	if len(src.Binaries) > 0 {
		fmt.Fprintf(o.Progress, "building %s %s (%s); a first build takes minutes, log: %s\n",
			src.Name, src.Version, strings.Join(sortedKeys(src.Binaries), ", "), logPath)
	}
	for _, name := range sortedKeys(src.Binaries) {
		if err := o.goBuild(ctx, src, name, filepath.Join(tmp, name), logFile); err != nil {
			return err
		}
	}
	if len(src.Assets) > 0 {
		if err := o.copyAssets(ctx, src, tmp, logFile); err != nil {
			return err
		}
	}
	if err := writeSourceInfo(tmp, src); err != nil {
		return err
	}
	if err := os.Rename(tmp, o.sourceDir(src)); err != nil {
		return fmt.Errorf("moving build into the cache: %w", err)
	}
	fmt.Fprintf(o.Progress, "cached %s %s in %s (%s)\n", src.Name, src.Version, o.sourceDir(src), time.Since(start).Round(time.Second))
	return nil
}

func (o *BuildOptions) goBuild(ctx context.Context, src Source, name, out string, log io.Writer) error {
	modDir := filepath.Join(o.RepoRoot, "hack", "kube-bins", src.Name)
	cmd := exec.CommandContext(ctx, o.GoCommand, "build", "-trimpath", "-o", out, src.Binaries[name])
	cmd.Dir = modDir
	cmd.Env = goEnv()
	cmd.Stdout, cmd.Stderr = log, log
	fmt.Fprintf(log, "$ (cd %s && %s)\n", modDir, strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("go build %s: %w", name, err)
	}
	if o.Niceness > 0 {
		// Compilers forked from now on inherit the priority.
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, o.Niceness)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("go build %s: %w", name, err)
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

func writeSourceInfo(dir string, src Source) error {
	data, err := json.MarshalIndent(map[string]any{
		"module": src.Module, "version": src.Version, "builtAt": time.Now().UTC(),
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "source.json"), data, 0o644)
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

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
