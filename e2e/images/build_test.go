package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// EnvTestRuntimes, set to 1, makes TestRuntimeImages build the torch-based
// images (minutes, gigabytes) and check them in a chroot.
const EnvTestRuntimes = "E2E_IMAGES_RUNTIMES"

// requireBuilder skips the test unless this machine can build images.
func requireBuilder(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skipf("building images needs mmdebstrap (apt-get install -y %s): %v", strings.Join(Packages, " "), err)
	}
}

// testContext ends shortly before the test binary's -timeout, so that a
// build (or a wait for another process's) fails the test with its error
// instead of a panic.
func testContext(t *testing.T) (context.Context, context.CancelFunc) {
	if d, ok := t.Deadline(); ok {
		return context.WithDeadline(context.Background(), d.Add(-30*time.Second))
	}
	return context.WithCancel(context.Background())
}

func testOptions(t *testing.T) Options {
	return Options{Progress: testWriter{t}}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSmallImagesThroughRegistry builds the pause and busybox images, serves
// them from the cluster's registry binary and pulls every name back by its
// mirror path, as containerd would.
func TestSmallImagesThroughRegistry(t *testing.T) {
	requireBuilder(t)
	ctx, cancel := testContext(t)
	defer cancel()
	opts := testOptions(t)
	imgs, err := Build(ctx, opts, Small...)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs {
		if again, err := Lookup(opts, im.Recipe); err != nil || again == nil || again.Digest != im.Digest {
			t.Errorf("%s: Lookup after Build = %+v, %v", im.Recipe.Key, again, err)
		}
	}

	addr := startRegistry(ctx, t)
	if err := Publish(ctx, addr, imgs, testWriter{t}); err != nil {
		t.Fatal(err)
	}
	// Twice: everything is there already, so nothing is uploaded again.
	if err := Publish(ctx, addr, imgs, nil); err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs {
		for _, n := range im.Recipe.Names {
			checkPulled(ctx, t, addr, im, n)
		}
	}
	files := layerFiles(ctx, t, addr, "docker.io/library/busybox:latest")
	if files["bin/busybox"] != "" || files["bin/sh"] != "/bin/busybox" || files["etc/passwd"] != "" {
		t.Errorf("busybox layer: busybox %q, sh -> %q, passwd %q", files["bin/busybox"], files["bin/sh"], files["etc/passwd"])
	}
	for f := range files {
		if strings.HasPrefix(f, "usr/share/") || strings.HasPrefix(f, "var/lib/") || strings.HasPrefix(f, "dev/") && f != "dev/" {
			t.Errorf("busybox layer has %s", f)
		}
	}
	if files := layerFiles(ctx, t, addr, "registry.k8s.io/pause:3.10"); len(files) != 1 || files["pause"] != "" {
		t.Errorf("pause layer: %v", files)
	}
}

// checkPulled pulls ref's mirror path from the registry and compares it with im.
func checkPulled(ctx context.Context, t *testing.T, addr string, im *Image, ref string) {
	t.Helper()
	m, err := MirrorPath(ref)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(m.Target(addr), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s: %v", ref, err)
	}
	if desc.Digest != im.Digest {
		t.Errorf("%s: digest %s, built %s", ref, desc.Digest, im.Digest)
	}
	img, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := im.Recipe.Config
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || !slices.Equal(cfg.Config.Entrypoint, want.Entrypoint) ||
		!slices.Equal(cfg.Config.Cmd, want.Cmd) || cfg.Config.User != want.User || !slices.Equal(cfg.Config.Env, want.Env) {
		t.Errorf("%s: config %s/%s %+v, want %+v", ref, cfg.OS, cfg.Architecture, cfg.Config, want)
	}
	// As containerd asks a mirror: the path, the tag and ?ns=<upstream>.
	req, _ := http.NewRequestWithContext(ctx, http.MethodHead,
		fmt.Sprintf("http://%s/v2/%s/manifests/%s?ns=%s", addr, m.Path, m.Tag, m.Upstream), nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != im.Digest.String() {
		t.Errorf("%s: HEAD %s: %s, digest %q", ref, req.URL, resp.Status, resp.Header.Get("Docker-Content-Digest"))
	}
}

// layerFiles reads the last layer of ref's image from the registry: path ->
// symlink target ("" for other members).
func layerFiles(ctx context.Context, t *testing.T, addr, ref string) map[string]string {
	t.Helper()
	m, _ := MirrorPath(ref)
	tag, _ := name.NewTag(m.Target(addr), name.Insecure)
	img, err := remote.Image(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[len(layers)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = ""
		if h.Typeflag == tar.TypeSymlink {
			files[h.Name] = h.Linkname
		}
	}
}

// startRegistry builds the cluster's registry (cached like its other
// binaries), runs it on a free port with a config from
// cluster.WriteRegistryConfig until the test ends, and returns its address.
func startRegistry(ctx context.Context, t *testing.T) string {
	t.Helper()
	bins, err := cluster.BuildSources(ctx, cluster.BuildOptions{Progress: testWriter{t}}, cluster.RegistrySource)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := cluster.RegistryConfig{Addr: addr, RootDir: filepath.Join(dir, "storage")}
	config := filepath.Join(dir, "config.yml")
	if err := cluster.WriteRegistryConfig(config, cfg); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.Path(cluster.Registry), "serve", config)
	cmd.Env = append(os.Environ(), cluster.RegistryEnv...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			data, _ := os.ReadFile(log.Name())
			t.Logf("registry log:\n%s", data)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(cfg.HealthURL())
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry at %s not ready after 30s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPause runs the pause program: it blocks, and exits 0 on SIGTERM and
// SIGINT.
func TestPause(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	build := exec.Command("go", "build", "-o", bin, "./pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "-v").Output(); err != nil || string(out) != "pause 3.10\n" {
		t.Errorf("pause -v: %q, %v", out, err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(bin)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			t.Fatalf("pause exited by itself: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		_ = cmd.Process.Signal(syscall.SIGCHLD) // no child: nothing to reap, keeps waiting
		_ = cmd.Process.Signal(sig)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("after %v: %v, want exit 0", sig, err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("pause still runs 10s after %v", sig)
		}
	}
}

// TestRuntimeImages builds the torch-based images and checks them the way
// their runtimes use them, in a chroot of each image's filesystem. Set
// E2E_IMAGES_RUNTIMES=1: a cold build takes tens of minutes and a few GB.
func TestRuntimeImages(t *testing.T) {
	if os.Getenv(EnvTestRuntimes) != "1" {
		t.Skipf("set %s=1 to build the torch-based images (tens of minutes cold)", EnvTestRuntimes)
	}
	requireBuilder(t)
	if os.Geteuid() != 0 {
		t.Skip("checking images in a chroot needs root")
	}
	ctx, cancel := testContext(t)
	defer cancel()
	imgs, err := Build(ctx, testOptions(t), Runtimes...)
	if err != nil {
		t.Fatal(err)
	}
	torchCheck := `python3 -c 'import torch, sklearn.datasets; print(torch.__version__, torch.distributed.is_gloo_available()); print(sklearn.datasets.load_digits().data.shape)'`
	checks := map[string][]string{
		"pytorch": {torchCheck, "torchrun --help >/dev/null", "test -d /workspace"},
		"deepspeed": {torchCheck, "torchrun --help >/dev/null", "mpirun --version", "id mpiuser",
			"python3 -c 'from mpi4py import MPI'", "ssh -V",
			// sshd -t needs the host key its config names, at run time the
			// Secret's; as the runtime runs it (uid 1000) and as root.
			"runuser -u mpiuser -- sh -c 'mkdir /home/mpiuser/.ssh && ssh-keygen -q -t ecdsa -b 521 -N \"\" -f /home/mpiuser/.ssh/id_rsa' && " +
				"runuser -u mpiuser -- /usr/sbin/sshd -t -f /home/mpiuser/.sshd_config && " +
				"/usr/sbin/sshd -t -f /home/mpiuser/.sshd_config && rm -r /home/mpiuser/.ssh",
			"test -d /run/sshd && test \"$(stat -c %U /home/mpiuser/.sshd_config)\" = mpiuser"},
		"xgboost": {torchCheck, "python3 -c 'import xgboost, sklearn; print(xgboost.__version__)'"},
	}
	for _, im := range imgs {
		root := unpack(t, im)
		for _, check := range checks[im.Recipe.Key] {
			out, err := inChroot(root, im.Recipe.Config.Env, check)
			t.Logf("%s: %s:\n%s", im.Recipe.Key, check, out)
			if err != nil {
				t.Errorf("%s: %s: %v", im.Recipe.Key, check, err)
			}
		}
		t.Logf("%s: %s, %.1f MiB, built in %s", im.Recipe.Key, im.Digest, float64(im.Size)/(1<<20), im.BuildTime.Round(time.Second))
	}
}

// unpack extracts im's layers in order into a temporary folder, applying
// whiteouts, and returns it.
func unpack(t *testing.T, im *Image) string {
	t.Helper()
	root := t.TempDir()
	img, err := im.Image()
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		blob := filepath.Join(im.Dir, "blobs", l.Digest.Algorithm, l.Digest.Hex)
		if out, err := exec.Command("tar", "--numeric-owner", "-xpf", blob, "-C", root).CombinedOutput(); err != nil {
			t.Fatalf("unpacking %s: %v\n%s", blob, err, out)
		}
		err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil || !strings.HasPrefix(fi.Name(), ".wh.") {
				return err
			}
			if err := os.RemoveAll(filepath.Join(filepath.Dir(p), strings.TrimPrefix(fi.Name(), ".wh."))); err != nil {
				return err
			}
			return os.Remove(p)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// inChroot runs a shell command in root with /proc and /dev mounted, as root,
// with env (the image's) and HOME=/root.
func inChroot(root string, env []string, script string) (string, error) {
	mounts := `mount -t proc proc "$R/proc" && mount --rbind /dev "$R/dev" && trap 'umount -l "$R/proc" "$R/dev"' EXIT && `
	cmd := exec.Command("sh", "-c", mounts+`chroot "$R" /usr/bin/env -i $E HOME=/root /bin/sh -c "$S"`)
	cmd.Env = append(os.Environ(), "R="+root, "S="+script, "E="+strings.Join(env, " "))
	out, err := cmd.CombinedOutput()
	return string(out), err
}
