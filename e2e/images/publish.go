package images

import (
	"context"
	"fmt"
	"github.com/trainyard/trainyard/e2e/cluster"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// MirrorRef is where an image reference lives on a registry mirror.
type MirrorRef struct {
	// Upstream is the registry the reference names, as containerd's hosts.toml
	// folders name it: "docker.io", "ghcr.io", "registry.k8s.io".
	Upstream string
	// Path is the repository containerd asks a mirror of Upstream for:
	// "library/busybox", "pytorch/pytorch", "kubeflow/trainer/deepspeed-runtime",
	// "pause".
	Path string
	// Tag is the reference's tag, "latest" when it has none.
	Tag string
}

// MirrorPath maps an image reference as a pod names it ("busybox",
// "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
// "ghcr.io/kubeflow/trainer/deepspeed-runtime") to its place on a mirror:
// containerd, told by a hosts.toml that http://127.0.0.1:<port> mirrors a
// registry, asks it for /v2/<Path>/manifests/<Tag>?ns=<Upstream>, and
// registries ignore ns. Docker Hub names are normalised as Docker does (no
// registry: docker.io; one path element: library/). It fails on a reference
// that does not parse or that names a digest.
func MirrorPath(ref string) (MirrorRef, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return MirrorRef{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	upstream := tag.RegistryStr()
	if upstream == name.DefaultRegistry { // ggcr's "index.docker.io"
		upstream = "docker.io"
	}
	return MirrorRef{Upstream: upstream, Path: tag.RepositoryStr(), Tag: tag.TagStr()}, nil
}

// Target is the reference an image named ref is pushed as to the mirror
// registry at registryHostPort: <registryHostPort>/<Path>:<Tag>.
func (m MirrorRef) Target(registryHostPort string) string {
	return registryHostPort + "/" + m.Path + ":" + m.Tag
}

// checkCollisions fails when two upstream registries would share a mirror
// repository (one mirror serves them all and ignores ?ns=), or when one name
// is given to two different images.
func checkCollisions(imgs []*Image) (map[string]*Image, error) {
	byTarget := map[string]*Image{}
	upstreamOf := map[string]string{} // path -> upstream
	for _, im := range imgs {
		for _, ref := range im.Recipe.Names {
			m, err := MirrorPath(ref)
			if err != nil {
				return nil, err
			}
			if u, ok := upstreamOf[m.Path]; ok && u != m.Upstream {
				return nil, fmt.Errorf("images %s/%s and %s/%s would share the mirror repository %s",
					u, m.Path, m.Upstream, m.Path, m.Path)
			}
			upstreamOf[m.Path] = m.Upstream
			key := m.Path + ":" + m.Tag
			if other, ok := byTarget[key]; ok && other.Digest != im.Digest {
				return nil, fmt.Errorf("%s names two images: %s and %s", ref, other.Recipe.Key, im.Recipe.Key)
			}
			byTarget[key] = im
		}
	}
	return byTarget, nil
}

// Publish pushes every image of imgs under each of its names' mirror paths
// ([MirrorPath]) to the registry at registryHostPort ("127.0.0.1:5000"), over
// plain HTTP without authentication, so that containerd, with the registry as
// mirror of the names' registries, pulls them by their upstream names. Blobs
// the registry already has (layers shared by images, or pushed before) are
// not sent again. progress (nil discards) gets one line per name. It fails on
// a name two upstream registries share, or on the first push error.
func Publish(ctx context.Context, registryHostPort string, imgs []*Image, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	byTarget, err := checkCollisions(imgs)
	if err != nil {
		return err
	}
	todo := map[name.Reference]remote.Taggable{}
	var names []string
	for key, im := range byTarget {
		ref, err := name.NewTag(registryHostPort+"/"+key, name.Insecure)
		if err != nil {
			return fmt.Errorf("mirror reference for %s: %w", im.Recipe.Key, err)
		}
		img, err := im.Image()
		if err != nil {
			return fmt.Errorf("image %s in %s: %w", im.Recipe.Key, im.Dir, err)
		}
		todo[ref] = img
		names = append(names, ref.String())
	}
	if err := remote.MultiWrite(todo, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("pushing to %s: %w", registryHostPort, err)
	}
	fmt.Fprintf(progress, "published %s\n", strings.Join(names, ", "))
	return nil
}

// Publisher returns the cluster.ImageSource of a real node (cluster.Options.Images):
// it builds the recipes not yet cached (All when none are given) with opts, its
// progress going to the caller's unless opts sets one, and publishes them all.
func Publisher(opts Options, recipes ...*Recipe) cluster.ImageSource {
	if len(recipes) == 0 {
		recipes = All
	}
	return &publisher{opts: opts, recipes: recipes}
}

type publisher struct {
	opts    Options
	recipes []*Recipe
}

// build builds the images not cached and returns them all.
func (p *publisher) build(ctx context.Context, progress io.Writer) ([]*Image, error) {
	o := p.opts
	if o.Progress == nil {
		o.Progress = progress
	}
	return Build(ctx, o, p.recipes...)
}

func (p *publisher) Prepare(ctx context.Context, progress io.Writer) error {
	_, err := p.build(ctx, progress)
	return err
}

func (p *publisher) Publish(ctx context.Context, registryHostPort string, progress io.Writer) error {
	imgs, err := p.build(ctx, progress)
	if err != nil {
		return err
	}
	return Publish(ctx, registryHostPort, imgs, progress)
}
