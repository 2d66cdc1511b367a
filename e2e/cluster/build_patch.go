package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Source patches (Source.Patches): a patched main package, built from copies
// through go build -overlay.

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
