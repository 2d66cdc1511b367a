package images

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fileLayer is an uncompressed tar layer in a file: its digest is its diff
// ID. Containerd takes such layers as they are, which spares gzip's CPU on
// both ends of a push to a registry on the same machine.
type fileLayer struct {
	path   string
	digest v1.Hash
	size   int64
}

var _ v1.Layer = (*fileLayer)(nil)

func (l *fileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(l.path) }

// writeLayer writes the tar that fill produces into blobDir (an OCI layout's
// blobs/sha256), named by its digest.
func writeLayer(blobDir string, fill func(*tar.Writer) error) (*fileLayer, error) {
	if err := os.MkdirAll(blobDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(blobDir, ".layer-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	defer f.Close()
	h := sha256.New()
	counter := &countWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(counter)
	if err := fill(tw); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil { // CreateTemp made it 0600
		return nil, err
	}
	hexDigest := hex.EncodeToString(h.Sum(nil))
	dst := filepath.Join(blobDir, hexDigest)
	if err := os.Rename(f.Name(), dst); err != nil {
		return nil, err
	}
	return &fileLayer{path: dst, digest: v1.Hash{Algorithm: "sha256", Hex: hexDigest}, size: counter.n}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// entryMeta is what decides whether a file changed between a base layer and
// a derived filesystem: everything a tar header records but the name, with
// mtimes in whole seconds (what survives any tar format).
type entryMeta struct {
	Type               byte
	Mode               int64
	UID, GID           int
	Size, MTime        int64
	Linkname           string
	DevMajor, DevMinor int64
	Xattrs             string
}

func metaOf(hdr *tar.Header) entryMeta {
	var xattrs []string
	for _, k := range slices.Sorted(maps.Keys(hdr.PAXRecords)) {
		if strings.HasPrefix(k, "SCHILY.xattr.") {
			xattrs = append(xattrs, k+"="+hdr.PAXRecords[k])
		}
	}
	return entryMeta{
		Type: hdr.Typeflag, Mode: hdr.Mode, UID: hdr.Uid, GID: hdr.Gid, Size: hdr.Size,
		MTime: hdr.ModTime.Unix(), Linkname: hdr.Linkname, DevMajor: hdr.Devmajor, DevMinor: hdr.Devminor,
		Xattrs: strings.Join(xattrs, "\x00"),
	}
}

// cleanName turns a tar member name ("./usr/bin/", "usr/bin") into an
// absolute clean path ("/usr/bin"); the root is "/".
func cleanName(name string) string { return path.Clean("/" + name) }

// layerName is how a layer names p: relative, directories with a trailing
// slash, as Docker and containerd write layers.
func layerName(p string, dir bool) string {
	name := strings.TrimPrefix(p, "/")
	if dir {
		name += "/"
	}
	return name
}

// excluded reports whether p or one of its parents matches a pattern.
func excluded(p string, patterns []string) bool {
	for q := p; q != "/"; q = path.Dir(q) {
		for _, pat := range patterns {
			if ok, _ := path.Match(pat, q); ok {
				return true
			}
		}
	}
	return false
}

// indexLayer reads a layer written by this package (names from layerName, no
// whiteouts) and returns every member's metadata by clean path.
func indexLayer(file string) (map[string]entryMeta, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	index := map[string]entryMeta{}
	tr := tar.NewReader(f) // seeks over file contents
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return index, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading base layer %s: %w", file, err)
		}
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = cleanName(hdr.Linkname) // as copyRootfs compares it
		}
		index[cleanName(hdr.Name)] = metaOf(hdr)
	}
}

// copyRootfs copies the root filesystem tar in to tw as a layer: members
// matching exclude are left out, names become layerName's, the root itself is
// dropped. With base (a lower layer's index) it writes only what differs from
// base, then a whiteout (".wh.<name>") for each path of base that in lacks,
// once per removed tree; a hard link is kept whenever its target is written.
// It returns the number of members written.
func copyRootfs(tw *tar.Writer, in io.Reader, exclude []string, base map[string]entryMeta) (int, error) {
	tr := tar.NewReader(in)
	seen := map[string]bool{}
	written := map[string]bool{}
	n := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("reading the root filesystem: %w", err)
		}
		p := cleanName(hdr.Name)
		if p == "/" || excluded(p, exclude) {
			continue
		}
		seen[p] = true
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = cleanName(hdr.Linkname)
		}
		if base != nil {
			old, ok := base[p]
			unchanged := ok && old == metaOf(hdr)
			if unchanged && !(hdr.Typeflag == tar.TypeLink && written[hdr.Linkname]) {
				continue
			}
		}
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = layerName(hdr.Linkname, false)
		}
		hdr.Name = layerName(p, hdr.Typeflag == tar.TypeDir)
		if err := tw.WriteHeader(hdr); err != nil {
			return n, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return n, fmt.Errorf("copying %s: %w", p, err)
		}
		written[p] = true
		n++
	}
	for _, p := range slices.Sorted(maps.Keys(base)) {
		if seen[p] || !seen[path.Dir(p)] && path.Dir(p) != "/" {
			continue // present, or under a removed folder whose whiteout hides it
		}
		wh := &tar.Header{Typeflag: tar.TypeReg, Name: layerName(path.Join(path.Dir(p), ".wh."+path.Base(p)), false), Mode: 0o644}
		if err := tw.WriteHeader(wh); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
