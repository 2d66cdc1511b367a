package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// controllerProcess is a controller binary (Trainyard's, or in peer mode
// upstream's) run as its own process, as in production, so its CPU, RSS and
// /metrics are its own.
type controllerProcess struct {
	// Name names the controller in the figures: "trainyard" or "upstream".
	Name       string
	cmd        *exec.Cmd
	metricsURL string
	healthURL  string
	LogPath    string
	exited     chan error
}

// buildController builds cmd/trainyard of the checkout at root into
// <root>/_output/bench/bin/trainyard and returns its path.
func buildController(ctx context.Context, root string) (string, error) {
	out := filepath.Join(root, "_output", "bench", "bin", "trainyard")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/trainyard")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the controller: %v\n%s", err, output)
	}
	if err := evictFromPageCache(out); err != nil {
		return "", err
	}
	return out, nil
}

// evictFromPageCache writes the file at path back and drops its pages from the page
// cache, so that the controller started from it maps its executable as any binary
// read from disk is mapped. The linker leaves a fresh binary's pages cached in a way
// that a process mapping them counts up to 13 MiB more RSS (file-backed; measured:
// `trainyard --help` peaks at 50 MiB from a freshly linked binary, 37 MiB from a copy
// or after the cache is dropped), which made peak RSS differ between two builds of
// nearly the same code (docs/design/memory.md, "Decoding watch events").
func evictFromPageCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing %s back: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("dropping %s from the page cache: %w", path, err)
	}
	return nil
}

// startControllerProcess starts binary against kubeconfig with the client
// QPS and burst given (issue 9 measures with 2000/4000 so that the
// controller, not its throttle, is measured), env added to the benchmark's
// environment, and waits until /readyz answers 200 (caches synced). Its log goes to logPath. Its progress server
// listens on a free 127.0.0.1 port unless extraArgs set --status-server-bind-address:
// the default, :10443, may be held by another controller on the machine, and the
// controller is not ready until its progress server serves.
func startControllerProcess(ctx context.Context, binary, kubeconfig, logPath string, qps float32, burst int32, profiling bool, env []string, extraArgs ...string) (*controllerProcess, error) {
	addrs, err := cluster.FreeAddrs(3)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(extraArgs, func(a string) bool { return strings.HasPrefix(a, "--status-server-bind-address=") }) {
		extraArgs = append([]string{"--status-server-bind-address=" + addrs[2]}, extraArgs...)
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--metrics-bind-address=" + addrs[0],
		"--metrics-secure=false", // plain HTTP, scraped without a token from this host
		"--health-probe-bind-address=" + addrs[1],
		fmt.Sprintf("--kube-api-qps=%g", qps),
		fmt.Sprintf("--kube-api-burst=%d", burst),
		"--log-format=json", "--v=0", fmt.Sprintf("--profiling=%t", profiling),
	}, extraArgs...)
	return startProcess(ctx, processSpec{
		name: controllerTrainyard, binary: binary, args: args, logPath: logPath,
		metricsAddr: addrs[0], healthAddr: addrs[1], env: env,
	})
}

// processSpec is how to start a controller process: its binary, flags and
// extra environment, and the 127.0.0.1 addresses of its plain-HTTP /metrics and
// /readyz.
type processSpec struct {
	// name names the process in the figures ("trainyard", "upstream").
	name                    string
	binary                  string
	args, env               []string
	logPath                 string
	metricsAddr, healthAddr string
}

// startProcess starts spec's binary in a process group of its own (killed if
// the benchmark dies) and waits up to 2 minutes until its /readyz answers 200.
// Errors: it could not start, exited during start-up, or never became ready.
func startProcess(ctx context.Context, spec processSpec) (*controllerProcess, error) {
	if err := os.MkdirAll(filepath.Dir(spec.logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.Create(spec.logPath)
	if err != nil {
		return nil, err
	}
	p := &controllerProcess{
		Name:       spec.name,
		metricsURL: "http://" + spec.metricsAddr + "/metrics",
		healthURL:  "http://" + spec.healthAddr + "/readyz",
		LogPath:    spec.logPath,
		exited:     make(chan error, 1),
	}
	logPath := spec.logPath
	p.cmd = exec.Command(spec.binary, spec.args...)
	p.cmd.Env = append(os.Environ(), spec.env...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", spec.name, err)
	}
	go func() {
		p.exited <- p.cmd.Wait()
		logFile.Close()
	}()

	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case err := <-p.exited:
			p.exited <- err
			return nil, fmt.Errorf("%s exited during start-up: %v (log: %s)", spec.name, err, logPath)
		case <-ctx.Done():
			p.Stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if resp, err := http.Get(p.healthURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("%s not ready after 2m (log: %s)", spec.name, logPath)
		}
	}
}

// CPUProfile takes a CPU profile of d (whole seconds) from the controller's
// /debug/pprof (it must run with --profiling) and writes it to path, for
// `go tool pprof`.
func (p *controllerProcess) CPUProfile(ctx context.Context, d time.Duration, path string) error {
	return p.profile(ctx, fmt.Sprintf("profile?seconds=%d", int(d.Seconds())), path)
}

// HeapProfile writes the controller's heap profile (live objects after a GC) to path.
func (p *controllerProcess) HeapProfile(ctx context.Context, path string) error {
	return p.profile(ctx, "heap?gc=1", path)
}

func (p *controllerProcess) profile(ctx context.Context, query, path string) error {
	url := strings.TrimSuffix(p.metricsURL, "/metrics") + "/debug/pprof/" + query
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Pid is the controller's process id.
func (p *controllerProcess) Pid() int { return p.cmd.Process.Pid }

// Scrape reads the controller's /metrics.
func (p *controllerProcess) Scrape(ctx context.Context) (*Snapshot, error) {
	return Scrape(ctx, p.metricsURL)
}

// Stop sends SIGTERM and waits up to 30s for a graceful exit, then kills.
func (p *controllerProcess) Stop() {
	if p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
	}
}
