package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The user the controller runs as: the chart's podSecurityContext (runAsUser and
// runAsGroup 65532, the conventional non-root user of distroless images).
const (
	nonRootUID = 65532
	nonRootGID = 65532
)

// entrypoint is where the binary lives in the image; the chart passes only args.
const entrypoint = "/trainyard"

// caBundlePath is where Go's crypto/x509 (and most TLS stacks) read a Linux system's
// trusted roots.
const caBundlePath = "etc/ssl/certs/ca-certificates.crt"

// Metadata describes the build: it goes into the OCI annotations and labels.
type Metadata struct {
	Version  string    // the controller's version, e.g. "v0.1.0" or `git describe` output
	Revision string    // the source commit
	Source   string    // the source repository's URL
	Created  time.Time // the source commit's time, never the build's: same commit, same digest
}

// Binary is the controller binary built for one platform.
type Binary struct {
	Platform v1.Platform
	Path     string
}

// annotations returns the OCI annotations of the image and the index
// (opencontainers/image-spec annotations.md), which are its labels too.
func (m Metadata) annotations() map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":       "trainyard",
		"org.opencontainers.image.description": "Trainyard: a TrainJob controller for Kubeflow Trainer's v2 API",
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.created":     m.Created.UTC().Format(time.RFC3339),
	}
	if m.Source != "" {
		a["org.opencontainers.image.source"] = m.Source
	}
	return a
}

// BuildIndex returns the controller image as an OCI image index with one image per
// binary. Each image has two layers: the base (the passwd and group files naming the
// non-root user, the trusted roots, /tmp), which is the same for every platform, and
// the binary at /trainyard. There is no shell and no package manager. Every time in it
// is meta.Created and every file is written in a fixed order, so the same binaries and
// metadata give the same digest. It returns an error when a binary cannot be read or
// two binaries are for one platform.
func BuildIndex(meta Metadata, binaries []Binary) (v1.ImageIndex, error) {
	base, err := layer(baseFiles(meta.Created))
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	var adds []mutate.IndexAddendum
	seen := map[string]bool{}
	for _, b := range binaries {
		platform := b.Platform.String()
		if seen[platform] {
			return nil, fmt.Errorf("two binaries for %s", platform)
		}
		seen[platform] = true
		img, err := buildImage(meta, base, b)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", platform, err)
		}
		p := b.Platform
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, meta.annotations()).(v1.ImageIndex), nil
}

func buildImage(meta Metadata, base v1.Layer, b Binary) (v1.Image, error) {
	bin, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, err
	}
	top, err := layer([]file{{name: entrypoint[1:], mode: 0o555, data: bin, modTime: meta.Created}})
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: b.Platform.Architecture,
		OS:           b.Platform.OS,
		Variant:      b.Platform.Variant,
		Config: v1.Config{
			User:       fmt.Sprintf("%d:%d", nonRootUID, nonRootGID),
			Entrypoint: []string{entrypoint},
			WorkingDir: "/",
			Env:        []string{"PATH=/"},
			Labels:     meta.annotations(),
		},
	})
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: meta.Created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "trainyard base: passwd, group, CA certificates, /tmp", Comment: "hack/image"}},
		mutate.Addendum{Layer: top, History: v1.History{Created: created, CreatedBy: "trainyard " + meta.Version, Comment: "hack/image"}},
	)
	if err != nil {
		return nil, err
	}
	if img, err = mutate.CreatedAt(img, created); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, meta.annotations()).(v1.Image), nil
}

// file is one entry of a layer: a regular file, or a directory when dir is set.
type file struct {
	name     string // without a leading slash
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
	modTime  time.Time
}

// baseFiles are the base layer's entries: what a Go binary that runs as a non-root
// user and speaks TLS expects of a Linux root filesystem.
func baseFiles(t time.Time) []file {
	uid, gid := strconv.Itoa(nonRootUID), strconv.Itoa(nonRootGID)
	return []file{
		{name: "etc", mode: 0o755, dir: true, modTime: t},
		{name: "etc/group", mode: 0o644, modTime: t, data: []byte("root:x:0:\nnonroot:x:" + gid + ":\n")},
		{name: "etc/nsswitch.conf", mode: 0o644, modTime: t, data: []byte("hosts: files dns\n")},
		{name: "etc/passwd", mode: 0o644, modTime: t, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + uid + ":" + gid + ":nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/ssl", mode: 0o755, dir: true, modTime: t},
		{name: "etc/ssl/certs", mode: 0o755, dir: true, modTime: t},
		{name: caBundlePath, mode: 0o644, modTime: t, data: caBundle()},
		{name: "home", mode: 0o755, dir: true, modTime: t},
		{name: "home/nonroot", mode: 0o700, dir: true, uid: nonRootUID, gid: nonRootGID, modTime: t},
		{name: "tmp", mode: 0o1777, dir: true, modTime: t},
	}
}

// caBundle returns the trusted roots as PEM: Mozilla's root program as Go's
// golang.org/x/crypto/x509roots/fallback ships it, pinned by go.sum, so the bundle
// changes only with that module's version (not with the build machine's packages).
// Roots that the program trusts only with constraints (a distrust date) are left out:
// a PEM file cannot carry the constraint.
func caBundle() []byte {
	var buf bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
	}
	return buf.Bytes()
}

// layer returns a gzip-compressed OCI layer of files, written in name order. Best
// compression: the image is built once and pulled by every node (18.6 MB at
// go-containerregistry's default, best speed; 15.6 MB so, for linux/amd64).
func layer(files []file) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: f.modTime,
			Format:  tar.FormatPAX,
		}
		if f.dir {
			hdr.Typeflag, hdr.Name = tar.TypeDir, f.name+"/"
		} else {
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
}
