package images

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The layer of a Debian recipe: its filesystem built by mmdebstrap.

// debianLayer builds r's filesystem with mmdebstrap and writes it as a layer:
// the whole tree, or with base what changed from base's only layer.
func (b *builder) debianLayer(ctx context.Context, r *Recipe, base *Image, blobDir string, log io.Writer) (*fileLayer, error) {
	srcs, err := b.sources()
	if err != nil {
		return nil, err
	}
	var baseLayer string
	var baseIndex map[string]entryMeta
	if base != nil {
		m, err := base.manifest()
		if err != nil {
			return nil, err
		}
		if len(m.Layers) != 1 {
			return nil, fmt.Errorf("base image %s has %d layers, want 1", base.Recipe.Key, len(m.Layers))
		}
		baseLayer = filepath.Join(base.Dir, "blobs", "sha256", m.Layers[0].Digest.Hex)
		if baseIndex, err = indexLayer(baseLayer); err != nil {
			return nil, err
		}
	}
	args := mmdebstrapArgs(r.Debian, baseLayer, srcs)
	fmt.Fprintf(log, "$ mmdebstrap %s\n", strings.Join(quoteAll(args), " "))
	cmd := groupCommand(ctx, "mmdebstrap", args...)
	cmd.Stderr = log
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	rootfs, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("mmdebstrap (apt-get install -y %s): %w", strings.Join(Packages, " "), err)
	}
	b.renice(cmd.Process.Pid)
	exclude := append(append([]string{}, defaultExclude...), r.Debian.Exclude...)
	if base != nil { // what the base left out stays out when a package brings it again
		exclude = append(exclude, base.Recipe.Debian.Exclude...)
	}
	var members int
	layer, copyErr := writeLayer(blobDir, func(tw *tar.Writer) error {
		var err error
		if members, err = copyRootfs(tw, rootfs, exclude, baseIndex); err != nil {
			return err
		}
		for _, dir := range r.Debian.Dirs {
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: layerName(cleanName(dir), true), Mode: 0o755,
				ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			members++
		}
		return nil
	})
	_, _ = io.Copy(io.Discard, rootfs) // the tar's padding, or all of it after an error
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("mmdebstrap: %w", err)
	}
	// CPU time tells a build's cost apart from a busy machine's wait.
	fmt.Fprintf(log, "mmdebstrap: %s CPU (user %s, system %s)\n",
		(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Round(time.Second),
		cmd.ProcessState.UserTime().Round(time.Second), cmd.ProcessState.SystemTime().Round(time.Second))
	if copyErr != nil {
		return nil, copyErr
	}
	fmt.Fprintf(log, "layer %s: %d members, %d bytes\n", layer.digest, members, layer.size)
	return layer, nil
}

// mmdebstrapArgs is the mmdebstrap command line for d, writing a tar to
// stdout. With baseLayer (a tar), the chroot starts as its contents and d's
// packages are installed with apt-get inside it.
func mmdebstrapArgs(d *Debian, baseLayer string, srcs []AptSource) []string {
	args := []string{"--format=tar"}
	for _, o := range aptOptions {
		args = append(args, "--aptopt="+o)
	}
	for _, o := range dpkgOptions {
		args = append(args, "--dpkgopt="+o)
	}
	hookFlag := "--customize-hook="
	switch {
	case baseLayer != "":
		args = append(args, "--variant=custom",
			"--setup-hook=tar-in "+shellQuote(baseLayer)+" /",
			hookFlag+`chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends `+
				strings.Join(d.Packages, " "))
	default:
		args = append(args, "--variant="+d.Variant, "--include="+strings.Join(d.Packages, ","))
		if d.Variant == "extract" {
			hookFlag = "--extract-hook="
		}
	}
	for _, h := range d.Hooks {
		args = append(args, hookFlag+h)
	}
	args = append(args, Suite, "-")
	for _, s := range srcs {
		args = append(args, s.Line())
	}
	return args
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return out
}

// groupCancelGrace is how long a cancelled groupCommand's processes have to clean up
// after SIGTERM before the leader is killed.
const groupCancelGrace = 10 * time.Second

// groupCommand is exec.CommandContext in a process group of its own, whose
// cancellation sends SIGTERM to the whole group: mmdebstrap runs apt-get and dpkg as
// processes of its own, which killing mmdebstrap alone leaves running (seen: a
// cancelled build's apt-get and dpkg went on unpacking for minutes, reparented to
// init). Past groupCancelGrace the leader is killed and Wait returns.
func groupCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = groupCancelGrace
	return cmd
}
