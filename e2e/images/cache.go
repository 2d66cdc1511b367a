package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The image cache: a folder per recipe, <cache>/images/<key>-<hash>, holding
// an OCI layout and image.json.

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

// manifest reads the image's manifest from its OCI layout.
func (im *Image) manifest() (*v1.Manifest, error) {
	img, err := im.Image()
	if err != nil {
		return nil, err
	}
	return img.Manifest()
}
