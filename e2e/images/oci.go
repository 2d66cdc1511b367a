package images

import (
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The OCI image of a build: its base's layers linked in, the image assembled
// from its layers and written as an OCI layout.

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
