package main

import (
	"archive/tar"
	"crypto/x509"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
)

func testMetadata() Metadata {
	return Metadata{Version: "v0.1.0-3-gabc1234", Revision: "abc1234def", Source: "https://example.com/trainyard", Created: time.Unix(1790000000, 0).UTC()}
}

// fakeBinaries writes one small file per platform into a new folder, with the given
// modification time, and returns them as binaries.
func fakeBinaries(t *testing.T, mtime time.Time, content string) []Binary {
	t.Helper()
	dir := t.TempDir()
	var bins []Binary
	for _, p := range []v1.Platform{amd64, arm64} {
		path := filepath.Join(dir, p.OS+"_"+p.Architecture)
		if err := os.WriteFile(path, []byte(content+" for "+p.Architecture), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, Binary{Platform: p, Path: path})
	}
	return bins
}

func digestOf(t *testing.T, meta Metadata, bins []Binary) v1.Hash {
	t.Helper()
	idx, err := BuildIndex(meta, bins)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestBuildIndexIsReproducible(t *testing.T) {
	meta := testMetadata()
	first := digestOf(t, meta, fakeBinaries(t, time.Now(), "controller"))
	// The same binaries elsewhere, written at another time: the same image.
	again := digestOf(t, meta, fakeBinaries(t, time.Now().Add(-time.Hour), "controller"))
	if first != again {
		t.Errorf("the same binaries and metadata gave %s and %s", first, again)
	}
	// What the image holds changes its digest.
	if d := digestOf(t, meta, fakeBinaries(t, time.Now(), "another controller")); d == first {
		t.Errorf("another binary gave the same digest %s", d)
	}
	other := meta
	other.Revision = "fedcba9876"
	if d := digestOf(t, other, fakeBinaries(t, time.Now(), "controller")); d == first {
		t.Errorf("another revision gave the same digest %s", d)
	}

	// Written to two layouts, the index keeps its digest.
	for _, dir := range []string{t.TempDir(), t.TempDir()} {
		idx, err := BuildIndex(meta, fakeBinaries(t, time.Now(), "controller"))
		if err != nil {
			t.Fatal(err)
		}
		written, err := WriteLayout(filepath.Join(dir, "image"), "0.1.0", idx)
		if err != nil {
			t.Fatal(err)
		}
		read, err := ReadLayout(filepath.Join(dir, "image"))
		if err != nil {
			t.Fatal(err)
		}
		readDigest, _ := read.Digest()
		recorded, _ := os.ReadFile(filepath.Join(dir, "image", "digest"))
		if written != first || readDigest != first || strings.TrimSpace(string(recorded)) != first.String() {
			t.Errorf("layout in %s: written %s, read %s, recorded %q; want %s", dir, written, readDigest, recorded, first)
		}
	}
}

// files returns the regular files and directories of img's flattened layers by path.
func files(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	contents := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := "/" + strings.TrimSuffix(hdr.Name, "/")
			out[p] = hdr
			contents[p], _ = io.ReadAll(tr)
		}
		rc.Close()
	}
	for p, h := range out {
		h.PAXRecords = map[string]string{"content": string(contents[p])}
	}
	return out
}

func TestBuildIndexImages(t *testing.T) {
	meta := testMetadata()
	idx, err := BuildIndex(meta, fakeBinaries(t, time.Now(), "controller"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if got := im.Annotations["org.opencontainers.image.revision"]; got != meta.Revision {
		t.Errorf("index revision annotation = %q, want %q", got, meta.Revision)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(im.Manifests))
	}
	var baseDigests []v1.Hash
	for _, desc := range im.Manifests {
		arch := desc.Platform.Architecture
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != arch || cfg.OS != "linux" {
			t.Errorf("%s: config platform %s/%s", arch, cfg.OS, cfg.Architecture)
		}
		if cfg.Config.User != "65532:65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/trainyard" {
			t.Errorf("%s: user %q, entrypoint %q; want 65532:65532 and [/trainyard]", arch, cfg.Config.User, cfg.Config.Entrypoint)
		}
		if !cfg.Created.Time.Equal(meta.Created) || cfg.Config.Labels["org.opencontainers.image.version"] != meta.Version {
			t.Errorf("%s: created %s, labels %v", arch, cfg.Created, cfg.Config.Labels)
		}
		m, _ := img.Manifest()
		if m.Annotations["org.opencontainers.image.source"] != meta.Source {
			t.Errorf("%s: manifest annotations %v", arch, m.Annotations)
		}
		layers, _ := img.Layers()
		d, _ := layers[0].Digest()
		baseDigests = append(baseDigests, d)

		fs := files(t, img)
		bin := fs["/trainyard"]
		if bin == nil || bin.Mode != 0o555 || bin.PAXRecords["content"] != "controller for "+arch {
			t.Errorf("%s: /trainyard = %+v, want the platform's binary, mode 0555", arch, bin)
		}
		for _, shell := range []string{"/bin/sh", "/bin/bash", "/bin", "/usr/bin/apt-get", "/sbin/apk"} {
			if fs[shell] != nil {
				t.Errorf("%s: the image has %s", arch, shell)
			}
		}
		if passwd := fs["/etc/passwd"]; passwd == nil || !strings.Contains(passwd.PAXRecords["content"], "nonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd does not name user 65532", arch)
		}
		if tmp := fs["/tmp"]; tmp == nil || tmp.Typeflag != tar.TypeDir || tmp.Mode != 0o1777 {
			t.Errorf("%s: /tmp = %+v, want a sticky world-writable directory", arch, tmp)
		}
		pool := x509.NewCertPool()
		if ca := fs["/etc/ssl/certs/ca-certificates.crt"]; ca == nil || !pool.AppendCertsFromPEM([]byte(ca.PAXRecords["content"])) {
			t.Errorf("%s: no trusted roots at /etc/ssl/certs/ca-certificates.crt", arch)
		} else if n := strings.Count(ca.PAXRecords["content"], "BEGIN CERTIFICATE"); n < 100 {
			t.Errorf("%s: %d trusted roots, want Mozilla's (over 100)", arch, n)
		}
	}
	if baseDigests[0] != baseDigests[1] {
		t.Errorf("the base layer differs between platforms (%s, %s): registries would store it twice", baseDigests[0], baseDigests[1])
	}
}

func TestBuildIndexRefusesTwoBinariesOfOnePlatform(t *testing.T) {
	bins := fakeBinaries(t, time.Now(), "controller")
	if _, err := BuildIndex(testMetadata(), append(bins, bins[0])); err == nil {
		t.Error("BuildIndex accepted two linux/amd64 binaries")
	}
}

// TestUserMatchesTheChart keeps the image's user the one the chart's
// podSecurityContext runs as: a mismatch starts the controller as a user with no
// passwd entry and no home.
func TestUserMatchesTheChart(t *testing.T) {
	values, err := os.ReadFile("../../charts/trainyard/values.yaml")
	if err != nil {
		t.Skipf("chart not found: %v", err)
	}
	for _, field := range []string{"runAsUser", "runAsGroup"} {
		m := regexp.MustCompile(`(?m)^\s+` + field + `: (\d+)$`).FindSubmatch(values)
		if m == nil {
			t.Fatalf("values.yaml sets no podSecurityContext.%s", field)
		}
		if string(m[1]) != "65532" || nonRootUID != 65532 || nonRootGID != 65532 {
			t.Errorf("chart %s %s, image user %d:%d", field, m[1], nonRootUID, nonRootGID)
		}
	}
}

func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	meta := testMetadata()
	idx, err := BuildIndex(meta, fakeBinaries(t, time.Now(), "controller"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	want, err := WriteLayout(dir, "0.1.0", idx)
	if err != nil {
		t.Fatal(err)
	}
	image := strings.TrimPrefix(srv.URL, "http://") + "/platform/trainyard:0.1.0"
	if err := push([]string{"--layout=" + dir, "--image=" + image}); err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(image)
	got, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := got.Digest(); d != want {
		t.Errorf("the registry serves %s, want %s", d, want)
	}
	arm, err := remote.Image(ref, remote.WithPlatform(arm64))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := arm.ConfigFile(); cfg.Architecture != "arm64" {
		t.Errorf("pulled for arm64: %s", cfg.Architecture)
	}
}
