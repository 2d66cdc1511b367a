package images

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Suite is the Debian release every image is built from.
const Suite = "bookworm"

// Recipe describes one image: what its filesystem is made of, its config and
// the references it is pushed as. Recipes are data; [Build] makes them.
type Recipe struct {
	// Key names the image in the cache (<cache>/images/<Key>-<hash>/) and in
	// logs, e.g. "busybox".
	Key string
	// Names are the references the image stands in for, each pushed by
	// [Publish] under its mirror path ([MirrorPath]), e.g.
	// "docker.io/library/busybox:latest". Not part of the recipe hash.
	Names []string
	// Pause makes the filesystem the /pause binary of package pause, built
	// static; Debian must then be nil.
	Pause bool
	// Debian builds the filesystem from Debian packages with mmdebstrap.
	Debian *Debian
	// Config is the image config's runtime part (OCI "config").
	Config Config
}

// Debian is a filesystem built with mmdebstrap from [Suite]'s packages.
type Debian struct {
	// Base, when set, is the recipe whose filesystem this one starts from:
	// Packages are installed on top of it (apt-get in a chroot) and the image
	// is Base's layer plus one layer of what changed, so images of a family
	// share their big layer in the cache, the registry and containerd. A Base
	// must itself have no Base.
	Base *Recipe
	// Variant is mmdebstrap's --variant when there is no Base: "minbase"
	// (Essential packages and apt) or "extract" (only Packages unpacked, no
	// maintainer scripts).
	Variant string
	// Packages are installed, with their dependencies but not their
	// recommendations.
	Packages []string
	// Hooks are shell commands run once the packages are installed, with the
	// root directory as "$1" (mmdebstrap --customize-hook; --extract-hook for
	// the extract variant). `chroot "$1" CMD` runs CMD inside it.
	Hooks []string
	// Dirs are folders (mode 0755, root's) added to the image after
	// mmdebstrap's cleanup, which empties /run and /tmp.
	Dirs []string
	// Exclude lists path patterns (path.Match, absolute) left out of the
	// image, with everything under them, on top of [defaultExclude] and
	// Base's Exclude.
	Exclude []string
}

// Config is the runtime config of an image: what `docker inspect` shows as
// Config. Empty fields are left unset.
type Config struct {
	Entrypoint []string `json:",omitempty"`
	Cmd        []string `json:",omitempty"`
	// Env is "NAME=value" entries; PATH should be set, as runtimes use the
	// image's PATH to find the command.
	Env        []string `json:",omitempty"`
	User       string   `json:",omitempty"`
	WorkingDir string   `json:",omitempty"`
	// ExposedPorts are "2222/tcp" entries.
	ExposedPorts []string `json:",omitempty"`
}

// aptOptions and dpkgOptions apply to every Debian image: no recommended
// packages, no documentation, manual pages or translations, but the
// copyright files; and no fsync per unpacked file (force-unsafe-io), which
// would make the torch image's 400 packages unpack several times slower.
var (
	aptOptions  = []string{`APT::Install-Recommends "false"`, `Acquire::Languages "none"`}
	dpkgOptions = []string{
		"force-unsafe-io",
		"path-exclude=/usr/share/doc/*",
		"path-include=/usr/share/doc/*/copyright",
		"path-exclude=/usr/share/man/*",
		"path-exclude=/usr/share/info/*",
		"path-exclude=/usr/share/locale/*",
		"path-exclude=/usr/share/lintian/*",
	}
)

// defaultExclude is left out of every image built from packages: device
// nodes and mount points' contents (the runtime provides them) and the
// build machine's name and DNS config, which mmdebstrap copies in.
var defaultExclude = []string{"/dev/*", "/proc/*", "/sys/*", "/etc/hostname", "/etc/resolv.conf"}

// assemblyVersion is part of every recipe hash: bump it when a change to this
// package changes the images it assembles from the same recipes.
const assemblyVersion = "1"

//go:embed pause/main.go
var pauseSource []byte

// Hash fingerprints everything that changes r's image: its filesystem recipe
// (packages, hooks, exclusions, variant, base's hash), config, [Suite], the
// apt and dpkg options, the pause program's source, and how this package
// assembles images. Names and Debian mirrors are not part of it. It is 16 hex
// digits and names r's cache folder.
func (r *Recipe) Hash() string {
	h := sha256.New()
	type fs struct {
		Variant, Base     string
		Packages, Hooks   []string
		Dirs, Exclude     []string
		AptOpts, DpkgOpts []string
	}
	var deb *fs
	if d := r.Debian; d != nil {
		deb = &fs{Variant: d.Variant, Packages: d.Packages, Hooks: d.Hooks, Dirs: d.Dirs, Exclude: d.Exclude,
			AptOpts: aptOptions, DpkgOpts: dpkgOptions}
		if d.Base != nil {
			deb.Base = d.Base.Hash()
		}
	}
	data, err := json.Marshal(struct {
		Assembly, Suite string
		Pause           bool
		Debian          *fs
		Config          Config
		DefaultExclude  []string
	}{assemblyVersion, Suite, r.Pause, deb, r.Config, defaultExclude})
	if err != nil {
		panic(err) // plain data always marshals
	}
	h.Write(data)
	if r.Pause {
		h.Write(pauseSource)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// validate reports a recipe that [Build] cannot make.
func (r *Recipe) validate() error {
	switch {
	case r.Key == "":
		return fmt.Errorf("recipe without a Key")
	case r.Pause == (r.Debian != nil):
		return fmt.Errorf("recipe %s: exactly one of Pause and Debian must be set", r.Key)
	case r.Debian != nil && r.Debian.Base != nil && (r.Debian.Base.Debian == nil || r.Debian.Base.Debian.Base != nil):
		return fmt.Errorf("recipe %s: a Base must be a Debian recipe without a Base of its own", r.Key)
	case r.Debian != nil && r.Debian.Base == nil && r.Debian.Variant == "":
		return fmt.Errorf("recipe %s: Debian.Variant is required without a Base", r.Key)
	}
	return nil
}
