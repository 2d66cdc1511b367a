package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

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

// renice lowers the priority of a started process; its children inherit it.
func (b *builder) renice(pid int) {
	if b.opts.Niceness > 0 {
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, pid, b.opts.Niceness)
	}
}
