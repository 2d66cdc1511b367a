package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestMirrorPath(t *testing.T) {
	for _, tc := range []struct {
		ref  string
		want MirrorRef
	}{
		{"busybox", MirrorRef{"docker.io", "library/busybox", "latest"}},
		{"docker.io/library/busybox:1.36", MirrorRef{"docker.io", "library/busybox", "1.36"}},
		{"index.docker.io/library/busybox:1.36", MirrorRef{"docker.io", "library/busybox", "1.36"}},
		{"pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", MirrorRef{"docker.io", "pytorch/pytorch", "2.13.0-cuda13.0-cudnn9-runtime"}},
		{"docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", MirrorRef{"docker.io", "pytorch/pytorch", "2.13.0-cuda13.0-cudnn9-runtime"}},
		{"ghcr.io/kubeflow/trainer/deepspeed-runtime", MirrorRef{"ghcr.io", "kubeflow/trainer/deepspeed-runtime", "latest"}},
		{"ghcr.io/kubeflow/trainer/xgboost-runtime:latest", MirrorRef{"ghcr.io", "kubeflow/trainer/xgboost-runtime", "latest"}},
		{"registry.k8s.io/pause:3.10", MirrorRef{"registry.k8s.io", "pause", "3.10"}},
		{"nvcr.io/nvidia/jax:25.10-py3", MirrorRef{"nvcr.io", "nvidia/jax", "25.10-py3"}},
		{"127.0.0.1:5000/a/b:c", MirrorRef{"127.0.0.1:5000", "a/b", "c"}},
	} {
		got, err := MirrorPath(tc.ref)
		if err != nil || got != tc.want {
			t.Errorf("MirrorPath(%q) = %+v, %v; want %+v", tc.ref, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "Busybox", "busybox@sha256:" + strings.Repeat("0", 64), "a b"} {
		if got, err := MirrorPath(bad); err == nil {
			t.Errorf("MirrorPath(%q) = %+v, want an error", bad, got)
		}
	}
	if got := (MirrorRef{"docker.io", "library/busybox", "latest"}).Target("127.0.0.1:5000"); got != "127.0.0.1:5000/library/busybox:latest" {
		t.Errorf("Target = %q", got)
	}
}

func TestCheckCollisions(t *testing.T) {
	image := func(key, digest string, names ...string) *Image {
		return &Image{Recipe: &Recipe{Key: key, Names: names}, Digest: v1.Hash{Algorithm: "sha256", Hex: digest}}
	}
	if _, err := checkCollisions(slices.Concat([]*Image{}, builtStandIns())); err != nil {
		t.Errorf("the recipes' names collide: %v", err)
	}
	for name, imgs := range map[string][]*Image{
		"two registries, one path": {image("a", "1", "ghcr.io/x/y:1"), image("b", "2", "docker.io/x/y:2")},
		"one name, two images":     {image("a", "1", "busybox"), image("b", "2", "docker.io/library/busybox:latest")},
	} {
		if _, err := checkCollisions(imgs); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	same := []*Image{image("a", "1", "busybox"), image("a", "1", "docker.io/library/busybox:latest")}
	if _, err := checkCollisions(same); err != nil {
		t.Errorf("one image under two spellings of a name: %v", err)
	}
}

// builtStandIns is every recipe as a built image, each of its own digest.
func builtStandIns() []*Image {
	var imgs []*Image
	for i, r := range All {
		imgs = append(imgs, &Image{Recipe: r, Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(string(rune('a'+i)), 64)}})
	}
	return imgs
}

func TestParseDeb822(t *testing.T) {
	text := `Types: deb deb-src
# a comment
URIs: http://mirror.example/debian
  http://other.example/debian/
Suites: bookworm bookworm-updates
 bookworm-backports
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://vendor.example/apt
Suites: bookworm
Components: stable
`
	got := sourcesFor(parseDeb822(text), "bookworm")
	want := []AptSource{
		{"http://mirror.example/debian", "bookworm"},
		{"http://mirror.example/debian", "bookworm-updates"},
		{"http://other.example/debian", "bookworm"},
		{"http://other.example/debian", "bookworm-updates"},
		{"http://mirror.example/debian-security", "bookworm-security"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	// A machine of another release: its pockets map onto the suite built.
	got = sourcesFor(parseDeb822(text), "trixie")
	if got[0] != (AptSource{"http://mirror.example/debian", "trixie"}) || got[4] != (AptSource{"http://mirror.example/debian-security", "trixie-security"}) {
		t.Errorf("onto trixie: %v", got)
	}
}

func TestParseOneLine(t *testing.T) {
	text := `# comment
deb http://mirror.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm-updates main contrib # trailing
deb [trusted=yes] http://mirror.example/debian-security/ bookworm-security main
deb-src http://mirror.example/debian bookworm main
deb http://mirror.example/debian bookworm-proposed-updates main
deb http://vendor.example/apt ./
deb http://vendor.example/apt bookworm stable
`
	got := sourcesFor(parseOneLine(text), "bookworm")
	want := []AptSource{
		{"http://mirror.example/debian", "bookworm"},
		{"http://mirror.example/debian", "bookworm-updates"},
		{"http://mirror.example/debian-security", "bookworm-security"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if line := want[2].Line(); line != "deb http://mirror.example/debian-security bookworm-security main" {
		t.Errorf("Line() = %q", line)
	}
}

func TestDebianSourcesOverride(t *testing.T) {
	t.Setenv(EnvDebianMirror, "http://a.example/debian/ ; http://a.example/debian-security bookworm-security\nhttp://b.example/d bookworm bookworm-updates")
	got, err := DebianSources("bookworm")
	want := []AptSource{
		{"http://a.example/debian", "bookworm"},
		{"http://a.example/debian-security", "bookworm-security"},
		{"http://b.example/d", "bookworm"},
		{"http://b.example/d", "bookworm-updates"},
	}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v, %v\nwant %v", got, err, want)
	}
}

func TestRecipeHash(t *testing.T) {
	seen := map[string]string{}
	for _, r := range All {
		if err := r.validate(); err != nil {
			t.Error(err)
		}
		h := r.Hash()
		if len(h) != 16 || h != r.Hash() {
			t.Errorf("%s: hash %q is not 16 stable hex digits", r.Key, h)
		}
		if other, dup := seen[h]; dup {
			t.Errorf("%s and %s have the same hash", r.Key, other)
		}
		seen[h] = r.Key
	}

	clone := func(r *Recipe) *Recipe {
		c := *r
		d := *r.Debian
		d.Packages = slices.Clone(d.Packages)
		c.Debian = &d
		return &c
	}
	base := clone(PyTorch)
	derived := clone(XGBoost)
	derived.Debian.Base = base
	h, dh := base.Hash(), derived.Hash()
	if h != PyTorch.Hash() || dh != XGBoost.Hash() {
		t.Fatal("a copy of a recipe hashes differently")
	}
	renamed := clone(base)
	renamed.Names = []string{"example.test/other:1"}
	if renamed.Hash() != h {
		t.Error("the names changed the hash")
	}
	base.Debian.Packages = append(base.Debian.Packages, "python3-pandas")
	if base.Hash() == h {
		t.Error("a package more did not change the hash")
	}
	if derived.Hash() == dh {
		t.Error("a change of the base did not change the derived image's hash")
	}
	cfg := clone(Busybox)
	cfg.Config.User = "nobody"
	if cfg.Hash() == Busybox.Hash() {
		t.Error("a config change did not change the hash")
	}
}

func TestMmdebstrapArgs(t *testing.T) {
	srcs := []AptSource{{"http://mirror.example/debian", "bookworm"}}
	args := mmdebstrapArgs(Busybox.Debian, "", srcs)
	for _, want := range []string{"--variant=extract", "--include=busybox-static", "--extract-hook=" + Busybox.Debian.Hooks[0], "bookworm", "-", "deb http://mirror.example/debian bookworm main"} {
		if !slices.Contains(args, want) {
			t.Errorf("busybox: no %q in %q", want, args)
		}
	}
	args = mmdebstrapArgs(DeepSpeed.Debian, "/cache/base layer", srcs)
	joined := strings.Join(args, "\n")
	for _, want := range []string{"--variant=custom", "--setup-hook=tar-in '/cache/base layer' /", "apt-get install --yes --no-install-recommends openmpi-bin openssh-server", "--customize-hook=" + DeepSpeed.Debian.Hooks[0]} {
		if !strings.Contains(joined, want) {
			t.Errorf("deepspeed: no %q in %q", want, args)
		}
	}
	if strings.Contains(joined, "--include") {
		t.Errorf("deepspeed: --include with a base: %q", args)
	}
}

// tarOf makes a tar of hdrs, with content "x"*Size for regular files.
func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = 1
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// members lists the names in a tar.
func members(t *testing.T, data []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}

func TestCopyRootfs(t *testing.T) {
	t0, t1 := time.Unix(1000, 0), time.Unix(2000, 0)
	dir := func(name string, mt time.Time) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: mt}
	}
	reg := func(name string, size int64, mt time.Time) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: mt}
	}
	link := func(name, target string) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, ModTime: t0}
	}
	tmp := t.TempDir()
	exclude := []string{"/dev/*", "/etc/hostname"}
	// The base: a full root filesystem as mmdebstrap writes it.
	baseLayer, err := writeLayer(tmp, func(tw *tar.Writer) error {
		_, err := copyRootfs(tw, bytes.NewReader(tarOf(t,
			dir("./", t0), dir("./dev/", t0), &tar.Header{Typeflag: tar.TypeChar, Name: "./dev/null", Devmajor: 1, Devminor: 3, ModTime: t0},
			dir("./etc/", t0), reg("./etc/hostname", 3, t0), reg("./etc/passwd", 10, t0),
			dir("./usr/", t0), dir("./usr/lib/", t0), reg("./usr/lib/a", 5, t0), link("./usr/lib/a2", "./usr/lib/a"),
			reg("./usr/lib/b", 5, t0), link("./usr/lib/b2", "./usr/lib/b"),
			dir("./opt/", t0), dir("./opt/gone/", t0), reg("./opt/gone/f", 1, t0), reg("./opt/gone2", 1, t0),
		)), exclude, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(baseLayer.path)
	if got, want := members(t, data), []string{"dev/", "etc/", "etc/passwd", "usr/", "usr/lib/", "usr/lib/a", "usr/lib/a2", "usr/lib/b", "usr/lib/b2", "opt/", "opt/gone/", "opt/gone/f", "opt/gone2"}; !slices.Equal(got, want) {
		t.Errorf("base layer: %q, want %q", got, want)
	}
	index, err := indexLayer(baseLayer.path)
	if err != nil {
		t.Fatal(err)
	}
	if m := index["/usr/lib/a2"]; m.Type != tar.TypeLink || m.Linkname != "/usr/lib/a" {
		t.Errorf("index of a hard link: %+v", m)
	}
	// The derived filesystem: /etc/passwd rewritten, /usr/lib/b replaced (its
	// link must follow), /usr/lib/new added, /opt/gone and /opt/gone2 removed.
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	n, err := copyRootfs(tw, bytes.NewReader(tarOf(t,
		dir("./", t1), dir("./dev/", t0), &tar.Header{Typeflag: tar.TypeChar, Name: "./dev/null", Devmajor: 1, Devminor: 3, ModTime: t1},
		dir("./etc/", t0), reg("./etc/hostname", 4, t1), reg("./etc/passwd", 12, t1),
		dir("./usr/", t0), dir("./usr/lib/", t1), reg("./usr/lib/a", 5, t0), link("./usr/lib/a2", "./usr/lib/a"),
		reg("./usr/lib/b", 5, t1), link("./usr/lib/b2", "./usr/lib/b"), reg("./usr/lib/new", 2, t1),
		dir("./opt/", t1),
	)), exclude, index)
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	want := []string{"etc/passwd", "usr/lib/", "usr/lib/b", "usr/lib/b2", "usr/lib/new", "opt/", "opt/.wh.gone", "opt/.wh.gone2"}
	if got := members(t, out.Bytes()); !slices.Equal(got, want) || n != len(want) {
		t.Errorf("derived layer: %q (%d), want %q", got, n, want)
	}
}

func TestExcluded(t *testing.T) {
	pats := []string{"/dev/*", "/usr/share", "/etc/hostname"}
	for p, want := range map[string]bool{
		"/dev": false, "/dev/null": true, "/dev/pts/0": true, "/usr/share": true, "/usr/share/doc/x": true,
		"/usr/shared": false, "/etc/hostname": true, "/etc/hosts": false, "/": false,
	} {
		if got := excluded(p, pats); got != want {
			t.Errorf("excluded(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	if got := shellQuote(`it's "x" $1`); got != `'it'\''s "x" $1'` {
		t.Errorf("shellQuote = %s", got)
	}
	hook := writeFileHook("/a b", "x'y\n", 0o755)
	if hook != `printf '%s' 'x'\''y`+"\n"+`' > "$1/a b" && chmod 755 "$1/a b"` {
		t.Errorf("writeFileHook = %s", hook)
	}
}

func TestDir(t *testing.T) {
	if got, want := (Options{CacheDir: "/c"}).Dir(Busybox), filepath.Join("/c", "images", "busybox-"+Busybox.Hash()); got != want {
		t.Errorf("Dir = %q, want %q", got, want)
	}
}
