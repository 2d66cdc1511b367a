package cluster

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeGo writes a go command that answers `go mod download -json <module>@<version>`:
// for a module named "broken" it fails at once; for any other it prints the start of
// its JSON and hangs until it is killed, as a download the first failure cancels does.
func fakeGo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "go")
	script := `#!/bin/sh
case "$*" in
*broken*) echo "go: example.com/broken@v1: 410 Gone" >&2; exit 1 ;;
esac
printf '{"Path": "example.com/slow", "Dir": '
exec sleep 60
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBuildAllReportsTheFirstFailureAndWhatItStopped(t *testing.T) {
	cache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := &BuildOptions{CacheDir: cache, LogDir: t.TempDir(), Progress: io.Discard, GoCommand: fakeGo(t)}
	srcs := []Source{
		{Name: "slow", Module: "example.com/slow", Version: "v1", Assets: map[string]string{"a": "a.yaml"}},
		{Name: "broken", Module: "example.com/broken", Version: "v1", Assets: map[string]string{"b": "b.yaml"}},
	}
	err := o.buildAll(context.Background(), srcs)
	if err == nil {
		t.Fatal("buildAll succeeded, want the broken module's failure")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "building broken v1: go mod download example.com/broken@v1: exit status 1") {
		t.Errorf("error = %q, want it to start with the broken module's failure", msg)
	}
	if !strings.HasSuffix(msg, "; stopped because of it: slow v1") {
		t.Errorf("error = %q, want it to name the build it stopped", msg)
	}
	if strings.Contains(msg, "unexpected end of JSON input") {
		t.Errorf("error = %q: the cancelled download's cut-off JSON is reported as a failure of its own", msg)
	}
}

func TestBuildAllReportsAnImageFailureFirst(t *testing.T) {
	o := &BuildOptions{GoCommand: fakeGo(t)}
	imgErr := errors.New("mmdebstrap: executable file not found in $PATH")
	started := make(chan struct{})
	var downloadErr error
	_, err := buildBeside(context.Background(),
		func(context.Context) error { <-started; return imgErr },
		func(ctx context.Context) (*Binaries, error) {
			close(started) // the images fail while the download hangs
			_, downloadErr = o.moduleDir(ctx, Source{Name: "slow", Module: "example.com/slow", Version: "v1"}, io.Discard)
			return nil, downloadErr
		})
	if !errors.Is(downloadErr, context.Canceled) {
		t.Errorf("the stopped download's error = %v, want it to wrap context.Canceled", downloadErr)
	}
	if !errors.Is(err, imgErr) {
		t.Fatalf("error = %v, want the images' error", err)
	}
	if want := "building the real node's images: mmdebstrap: executable file not found in $PATH; stopped because of it: the control plane's binaries"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestFirstFailureWithoutFailure(t *testing.T) {
	ctx, failures := newFirstFailure(context.Background())
	failures.fail("a", nil)
	if err := failures.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	if ctx.Err() == nil {
		t.Error("Err() left the context running")
	}
}
