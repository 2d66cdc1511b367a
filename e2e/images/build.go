package images

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// Options configures [Build]. The zero value is usable.
type Options struct {
	// CacheDir is the cache root, shared with e2e/cluster's binaries: images
	// go to <CacheDir>/images/<key>-<hash>/. Default: as cluster.BuildOptions
	// ($TRAINYARD_CACHE_DIR, else $HOME/.cache/trainyard).
	CacheDir string
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// Sources are the Debian archives; default: [DebianSources]([Suite]).
	Sources []AptSource
	// Niceness of mmdebstrap and go build. Default 10; negative keeps the
	// caller's priority.
	Niceness int
	// GoCommand builds the pause program. Default: "go".
	GoCommand string
}

func (o *Options) withDefaults() error {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Niceness == 0 {
		o.Niceness = 10
	}
	if o.GoCommand == "" {
		o.GoCommand = "go"
	}
	if o.CacheDir == "" {
		root, _ := cluster.FindRepoRoot() // only the last fallback uses it
		o.CacheDir = cluster.DefaultCacheDir(root)
	}
	return nil
}

// imagesDir is <CacheDir>/images.
func (o *Options) imagesDir() string { return filepath.Join(o.CacheDir, "images") }

// Image is a built image in the cache: an OCI image layout holding one
// linux/amd64 image, and image.json describing it.
type Image struct {
	Recipe *Recipe
	// Dir is the image's OCI layout, <cache>/images/<key>-<hash>.
	Dir string
	// Digest is the manifest's digest, the same in any registry it is
	// pushed to.
	Digest v1.Hash
	// Size is the bytes of its layers (uncompressed tars) and config, what a
	// registry stores and containerd pulls for it.
	Size int64
	// BuildTime is how long its build took, not counting a Base's.
	BuildTime time.Duration
}

// Image returns the image from its layout, for pushing or reading.
func (im *Image) Image() (v1.Image, error) {
	return layout.Path(im.Dir).Image(im.Digest)
}

// imageInfo is <image dir>/image.json, written last: an image folder without
// it was not finished (the rename makes that impossible but for a hand edit).
type imageInfo struct {
	Key          string    `json:"key"`
	Names        []string  `json:"names"`
	Recipe       string    `json:"recipe"`
	Digest       string    `json:"digest"`
	Size         int64     `json:"size"`
	BuildSeconds float64   `json:"buildSeconds"`
	BuiltAt      time.Time `json:"builtAt"`
}

const imageInfoFile = "image.json"

// Dir returns the cache folder of r's image, <cache>/images/<key>-<hash>,
// whether or not it has been built.
func (o Options) Dir(r *Recipe) string {
	_ = o.withDefaults()
	return imageDir(o.CacheDir, r)
}

func imageDir(cacheDir string, r *Recipe) string {
	return filepath.Join(cacheDir, "images", r.Key+"-"+r.Hash())
}

// Lookup returns r's image if it is in the cache, else nil.
func Lookup(opts Options, r *Recipe) (*Image, error) {
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	return lookup(opts.CacheDir, r)
}

func lookup(cacheDir string, r *Recipe) (*Image, error) {
	dir := imageDir(cacheDir, r)
	data, err := os.ReadFile(filepath.Join(dir, imageInfoFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var info imageInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, imageInfoFile), err)
	}
	digest, err := v1.NewHash(info.Digest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, imageInfoFile), err)
	}
	return &Image{Recipe: r, Dir: dir, Digest: digest, Size: info.Size,
		BuildTime: time.Duration(info.BuildSeconds * float64(time.Second))}, nil
}

// Build makes sure the images of recipes (and of their Bases) are in the
// cache and returns them in the order of recipes. A cached image (its folder,
// named by its recipe hash, exists) is reused; a missing one is built in a
// temporary folder and renamed into place, so an image folder is complete or
// absent. Missing bases are built first, then the missing images side by
// side. A lock file (<cache>/images/.build.lock) serialises builds between
// processes, e.g. the test binaries of `go test ./...`.
//
// Filesystems from Debian packages are built with mmdebstrap (Debian package
// "mmdebstrap", see [Packages]), as root or, through its unshare mode, as a
// user with subordinate ids; the pause program with the go tool. Each
// build's output goes to <cache>/images/logs/<key>.log. Cold times on 2
// cores: see the package documentation. Errors name the image and its log.
func Build(ctx context.Context, opts Options, recipes ...*Recipe) ([]*Image, error) {
	if err := opts.withDefaults(); err != nil {
		return nil, err
	}
	out, missing, err := cachedImages(opts.CacheDir, recipes)
	if err != nil {
		return nil, err
	}
	if !missing {
		return out, nil
	}
	unlock, err := cluster.LockFile(ctx, filepath.Join(opts.imagesDir(), ".build.lock"), opts.Progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	b := &builder{opts: opts}
	b.sources = sync.OnceValues(func() ([]AptSource, error) {
		if len(opts.Sources) > 0 {
			return opts.Sources, nil
		}
		return DebianSources(Suite)
	})
	// Bases first, one at a time; then the rest side by side: the images
	// derived from a base wait mostly on apt's downloads and on disk, so two
	// of them overlap well even on 2 cores.
	for i, r := range recipes {
		if out[i] == nil && r.Debian != nil && r.Debian.Base != nil {
			if _, err := b.ensure(ctx, r.Debian.Base); err != nil {
				return nil, err
			}
		}
	}
	built := map[*Recipe]*Image{}
	var todo []*Recipe
	for i, r := range recipes {
		if _, dup := built[r]; out[i] == nil && !dup {
			built[r] = nil
			todo = append(todo, r)
		}
	}
	errs := make([]error, len(todo))
	imgs := make([]*Image, len(todo))
	var wg sync.WaitGroup
	for i, r := range todo {
		wg.Go(func() { imgs[i], errs[i] = b.ensure(ctx, r) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, r := range todo {
		built[r] = imgs[i]
	}
	for i, r := range recipes {
		if out[i] == nil {
			out[i] = built[r]
		}
	}
	return out, nil
}

// cachedImages validates the recipes and returns, for each, its image in the cache
// at cacheDir (nil when not there), and whether any is missing. Errors: a recipe is
// invalid, or the cache could not be read.
func cachedImages(cacheDir string, recipes []*Recipe) ([]*Image, bool, error) {
	for _, r := range recipes {
		if err := r.validate(); err != nil {
			return nil, false, err
		}
	}
	out := make([]*Image, len(recipes))
	missing := false
	for i, r := range recipes {
		im, err := lookup(cacheDir, r)
		if err != nil {
			return nil, false, err
		}
		out[i], missing = im, missing || im == nil
	}
	return out, missing, nil
}

// builder builds images while holding the cache lock.
type builder struct {
	opts    Options
	sources func() ([]AptSource, error) // resolved once, on first use
}

// ensure returns r's image, building it (and its Base first) if it is not
// cached; another process may have built it while this one waited for the
// lock.
func (b *builder) ensure(ctx context.Context, r *Recipe) (*Image, error) {
	if im, err := lookup(b.opts.CacheDir, r); im != nil || err != nil {
		return im, err
	}
	var base *Image
	if r.Debian != nil && r.Debian.Base != nil {
		var err error
		if base, err = b.ensure(ctx, r.Debian.Base); err != nil {
			return nil, err
		}
	}
	return b.build(ctx, r, base)
}

func (b *builder) build(ctx context.Context, r *Recipe, base *Image) (im *Image, err error) {
	logDir := filepath.Join(b.opts.imagesDir(), "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, r.Key+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	defer func() {
		if err != nil {
			err = fmt.Errorf("building image %s: %w (log: %s)", r.Key, err, logPath)
		}
	}()
	tmp, err := os.MkdirTemp(b.opts.imagesDir(), ".tmp-"+r.Key+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp) // no-op after the rename
	blobDir := filepath.Join(tmp, "blobs", "sha256")

	start := time.Now()
	fmt.Fprintf(b.opts.Progress, "building image %s (%s); log: %s\n", r.Key, strings.Join(r.Names, ", "), logPath)
	layers, err := b.layers(ctx, r, base, blobDir, logFile)
	if err != nil {
		return nil, err
	}
	img, err := assemble(r.Config, layers)
	if err != nil {
		return nil, err
	}
	digest, size, err := writeLayout(tmp, img)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	info, err := json.MarshalIndent(imageInfo{
		Key: r.Key, Names: r.Names, Recipe: r.Hash(), Digest: digest.String(), Size: size,
		BuildSeconds: elapsed.Round(time.Millisecond).Seconds(), BuiltAt: time.Now().UTC(),
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, imageInfoFile), info, 0o644); err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return nil, err
	}
	dir := imageDir(b.opts.CacheDir, r)
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("moving into the cache: %w", err)
	}
	fmt.Fprintf(b.opts.Progress, "cached image %s: %s, %.1f MiB, in %s (%s)\n",
		r.Key, digest, float64(size)/(1<<20), elapsed.Round(time.Second), dir)
	return &Image{Recipe: r, Dir: dir, Digest: digest, Size: size, BuildTime: elapsed}, nil
}

// layers returns the image's layers: base's, linked into blobDir, then r's own
// (the pause binary, or the Debian packages over base) written there, its tools'
// output into log. Errors: those of linkBaseLayers, pauseLayer and debianLayer.
func (b *builder) layers(ctx context.Context, r *Recipe, base *Image, blobDir string, log io.Writer) ([]v1.Layer, error) {
	var layers []v1.Layer
	if base != nil {
		baseLayers, err := b.linkBaseLayers(base, blobDir)
		if err != nil {
			return nil, err
		}
		layers = append(layers, baseLayers...)
	}
	var layer *fileLayer
	var err error
	switch {
	case r.Pause:
		layer, err = b.pauseLayer(ctx, blobDir, log)
	default:
		layer, err = b.debianLayer(ctx, r, base, blobDir, log)
	}
	if err != nil {
		return nil, err
	}
	layers = append(layers, layer)
	return layers, nil
}

// manifest reads the image's manifest from its OCI layout.
func (im *Image) manifest() (*v1.Manifest, error) {
	img, err := im.Image()
	if err != nil {
		return nil, err
	}
	return img.Manifest()
}

// linkBaseLayers hard-links base's layer blobs into blobDir (copying where
// links fail), so that the images of a family share them on disk, and
// returns them as layers.
func (b *builder) linkBaseLayers(base *Image, blobDir string) ([]v1.Layer, error) {
	if err := os.MkdirAll(blobDir, 0o755); err != nil {
		return nil, err
	}
	m, err := base.manifest()
	if err != nil {
		return nil, err
	}
	var layers []v1.Layer
	for _, d := range m.Layers {
		src := filepath.Join(base.Dir, "blobs", d.Digest.Algorithm, d.Digest.Hex)
		dst := filepath.Join(blobDir, d.Digest.Hex)
		if err := os.Link(src, dst); err != nil {
			if err := copyFile(src, dst); err != nil {
				return nil, err
			}
		}
		layers = append(layers, &fileLayer{path: dst, digest: d.Digest, size: d.Size})
	}
	return layers, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// assemble makes a linux/amd64 OCI image of layers with cfg. Its created
// time is fixed (the Unix epoch), so that equal layers give equal digests.
func assemble(cfg Config, layers []v1.Layer) (v1.Image, error) {
	ports := map[string]struct{}{}
	for _, p := range cfg.ExposedPorts {
		ports[p] = struct{}{}
	}
	if len(ports) == 0 {
		ports = nil
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: time.Unix(0, 0).UTC()},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Env: cfg.Env, User: cfg.User,
			WorkingDir: cfg.WorkingDir, ExposedPorts: ports,
		},
	})
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		if img, err = mutate.Append(img, mutate.Addendum{
			Layer: l, MediaType: types.OCIUncompressedLayer,
			History: v1.History{Created: v1.Time{Time: time.Unix(0, 0).UTC()}, CreatedBy: "trainyard e2e/images"},
		}); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// writeLayout writes img as the only image of an OCI layout in dir (whose
// blobs/sha256 already holds its layers) and returns its digest and size.
func writeLayout(dir string, img v1.Image) (v1.Hash, int64, error) {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	if err := p.AppendImage(img); err != nil {
		return v1.Hash{}, 0, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, 0, err
	}
	m, err := img.Manifest()
	if err != nil {
		return v1.Hash{}, 0, err
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return digest, size, nil
}

// debianLayer builds r's filesystem with mmdebstrap and writes it as a layer:
// the whole tree, or with base what changed from base's only layer.
func (b *builder) debianLayer(ctx context.Context, r *Recipe, base *Image, blobDir string, log io.Writer) (*fileLayer, error) {
	srcs, err := b.sources()
	if err != nil {
		return nil, err
	}
	var baseLayer string
	var baseIndex map[string]entryMeta
	if base != nil {
		m, err := base.manifest()
		if err != nil {
			return nil, err
		}
		if len(m.Layers) != 1 {
			return nil, fmt.Errorf("base image %s has %d layers, want 1", base.Recipe.Key, len(m.Layers))
		}
		baseLayer = filepath.Join(base.Dir, "blobs", "sha256", m.Layers[0].Digest.Hex)
		if baseIndex, err = indexLayer(baseLayer); err != nil {
			return nil, err
		}
	}
	args := mmdebstrapArgs(r.Debian, baseLayer, srcs)
	fmt.Fprintf(log, "$ mmdebstrap %s\n", strings.Join(quoteAll(args), " "))
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Stderr = log
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	rootfs, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("mmdebstrap (apt-get install -y %s): %w", strings.Join(Packages, " "), err)
	}
	b.renice(cmd.Process.Pid)
	exclude := append(append([]string{}, defaultExclude...), r.Debian.Exclude...)
	if base != nil { // what the base left out stays out when a package brings it again
		exclude = append(exclude, base.Recipe.Debian.Exclude...)
	}
	var members int
	layer, copyErr := writeLayer(blobDir, func(tw *tar.Writer) error {
		var err error
		if members, err = copyRootfs(tw, rootfs, exclude, baseIndex); err != nil {
			return err
		}
		for _, dir := range r.Debian.Dirs {
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: layerName(cleanName(dir), true), Mode: 0o755,
				ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			members++
		}
		return nil
	})
	_, _ = io.Copy(io.Discard, rootfs) // the tar's padding, or all of it after an error
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("mmdebstrap: %w", err)
	}
	// CPU time tells a build's cost apart from a busy machine's wait.
	fmt.Fprintf(log, "mmdebstrap: %s CPU (user %s, system %s)\n",
		(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Round(time.Second),
		cmd.ProcessState.UserTime().Round(time.Second), cmd.ProcessState.SystemTime().Round(time.Second))
	if copyErr != nil {
		return nil, copyErr
	}
	fmt.Fprintf(log, "layer %s: %d members, %d bytes\n", layer.digest, members, layer.size)
	return layer, nil
}

// mmdebstrapArgs is the mmdebstrap command line for d, writing a tar to
// stdout. With baseLayer (a tar), the chroot starts as its contents and d's
// packages are installed with apt-get inside it.
func mmdebstrapArgs(d *Debian, baseLayer string, srcs []AptSource) []string {
	args := []string{"--format=tar"}
	for _, o := range aptOptions {
		args = append(args, "--aptopt="+o)
	}
	for _, o := range dpkgOptions {
		args = append(args, "--dpkgopt="+o)
	}
	hookFlag := "--customize-hook="
	switch {
	case baseLayer != "":
		args = append(args, "--variant=custom",
			"--setup-hook=tar-in "+shellQuote(baseLayer)+" /",
			hookFlag+`chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends `+
				strings.Join(d.Packages, " "))
	default:
		args = append(args, "--variant="+d.Variant, "--include="+strings.Join(d.Packages, ","))
		if d.Variant == "extract" {
			hookFlag = "--extract-hook="
		}
	}
	for _, h := range d.Hooks {
		args = append(args, hookFlag+h)
	}
	args = append(args, Suite, "-")
	for _, s := range srcs {
		args = append(args, s.Line())
	}
	return args
}

// pauseLayer builds the pause program (static, for linux/amd64) from its
// embedded source in a module of its own and writes it as a layer holding
// /pause.
func (b *builder) pauseLayer(ctx context.Context, blobDir string, log io.Writer) (*fileLayer, error) {
	work, err := os.MkdirTemp("", "trainyard-pause-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	for name, data := range map[string][]byte{
		"go.mod":  []byte("module pause\n\ngo 1.22\n"),
		"main.go": pauseSource,
	} {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(work, "pause")
	cmd := exec.CommandContext(ctx, b.opts.GoCommand, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local")
	cmd.Stdout, cmd.Stderr = log, log
	fmt.Fprintf(log, "$ (cd %s && %s)\n", work, strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.renice(cmd.Process.Pid)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("go build pause: %w", err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return writeLayer(blobDir, func(tw *tar.Writer) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "pause", Mode: 0o755, Size: int64(len(data)),
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	})
}

// renice lowers the priority of a started process; its children inherit it.
func (b *builder) renice(pid int) {
	if b.opts.Niceness > 0 {
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, pid, b.opts.Niceness)
	}
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return out
}
