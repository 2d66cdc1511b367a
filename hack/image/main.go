// Command image builds Trainyard's controller image without Docker, as an OCI image
// layout, and pushes it to a registry (issue 38; `make image`, `make image-push`).
//
//	image build --out=DIR --tag=TAG --version=V --revision=SHA --created=UNIX \
//	    --binary=linux/amd64=PATH --binary=linux/arm64=PATH [--source=URL]
//	image push --layout=DIR --image=REGISTRY/REPOSITORY:TAG
//
// build writes the image index to DIR (replacing it) under the reference name TAG, and
// its digest to DIR/digest; push sends that index, with its images and layers, to the
// image reference, authenticating as Docker's config (~/.docker/config.json) says and
// speaking plain HTTP to a registry on localhost or 127.0.0.1 only.
//
// Why not ko: ko builds on a base image pulled from a registry (cgr.dev/chainguard/static
// by default), and this project's machines reach no image registry; the base here is
// two files and the trusted roots, written by BuildIndex with go-containerregistry, the
// library ko is built on.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image build|push [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want build or push", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// binaryFlags collects --binary=OS/ARCH[/VARIANT]=PATH.
type binaryFlags []Binary

func (b *binaryFlags) String() string { return fmt.Sprint(*b) }

func (b *binaryFlags) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	if !ok || path == "" {
		return fmt.Errorf("--binary=%q: want OS/ARCH=PATH, e.g. linux/amd64=_output/image/bin/linux_amd64/trainyard", v)
	}
	p, err := v1.ParsePlatform(platform)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return fmt.Errorf("--binary=%q: %q is not OS/ARCH", v, platform)
	}
	*b = append(*b, Binary{Platform: *p, Path: path})
	return nil
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	out := fs.String("out", "", "the OCI image layout folder to write (replaced)")
	tag := fs.String("tag", "", "the reference name of the index in the layout, e.g. 0.1.0")
	var meta Metadata
	fs.StringVar(&meta.Version, "version", "", "the controller's version")
	fs.StringVar(&meta.Revision, "revision", "", "the source commit")
	fs.StringVar(&meta.Source, "source", "", "the source repository's URL (optional)")
	created := fs.String("created", "", "the source commit's time, in seconds since the epoch (git log -1 --format=%ct)")
	var binaries binaryFlags
	fs.Var(&binaries, "binary", "OS/ARCH=PATH of a binary; repeat for each platform")
	_ = fs.Parse(args)
	if *out == "" || *tag == "" || meta.Version == "" || meta.Revision == "" || *created == "" || len(binaries) == 0 {
		return errors.New("build needs --out, --tag, --version, --revision, --created and at least one --binary")
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		return fmt.Errorf("--created=%q: want seconds since the epoch: %w", *created, err)
	}
	meta.Created = time.Unix(secs, 0).UTC()
	idx, err := BuildIndex(meta, binaries)
	if err != nil {
		return err
	}
	digest, err := WriteLayout(*out, *tag, idx)
	if err != nil {
		return err
	}
	fmt.Printf("image: %s (%s) in %s\n", digest, *tag, *out)
	return nil
}

func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	dir := fs.String("layout", "", "the OCI image layout folder `image build` wrote")
	image := fs.String("image", "", "where to push, REGISTRY/REPOSITORY:TAG")
	_ = fs.Parse(args)
	if *dir == "" || *image == "" {
		return errors.New("push needs --layout and --image, e.g. --image=registry.example.com/platform/trainyard:0.1.0")
	}
	idx, err := ReadLayout(*dir)
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(*image, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("--image=%q: %w", *image, err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing to %s: %w", ref, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image: pushed %s@%s\n", ref.Context(), digest)
	return nil
}
