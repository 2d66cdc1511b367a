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
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// The binary cache: a folder per source, named by its recipe, assembled aside
// and renamed into place, and the lock that serialises builds into it.

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
	runErr := canceled(ctx, cmd.Run())
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out.Bytes(), &info); err != nil || runErr != nil || info.Dir == "" {
		if runErr != nil {
			// The command's failure says why; the JSON it cut short would only add noise.
			return "", fmt.Errorf("go mod download %s@%s: %w %s", src.Module, src.Version, runErr, info.Error)
		}
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
