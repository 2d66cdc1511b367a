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
	"time"
)

// pauseLayer builds the pause program (static, for linux/amd64) from its
// embedded source in a module of its own and writes it as a layer holding
// /pause.
func (b *builder) pauseLayer(ctx context.Context, blobDir string, log io.Writer) (*fileLayer, error) {
	work, err := os.MkdirTemp("", "trainyard-pause-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	for name, data := range map[string][]byte{
		"go.mod":  []byte("module pause\n\ngo 1.22\n"),
		"main.go": pauseSource,
	} {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(work, "pause")
	cmd := exec.CommandContext(ctx, b.opts.GoCommand, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local")
	cmd.Stdout, cmd.Stderr = log, log
	fmt.Fprintf(log, "$ (cd %s && %s)\n", work, strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.renice(cmd.Process.Pid)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("go build pause: %w", err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return writeLayer(blobDir, func(tw *tar.Writer) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "pause", Mode: 0o755, Size: int64(len(data)),
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	})
}
