// Package controller runs the Trainyard controller binary as its own process beside a
// local control plane, for end-to-end tests that kill, restart or replicate it: built
// once per test binary ([Build]), started with [Start] or [Run], stopped with SIGTERM
// or killed with SIGKILL, its writes read from its own /metrics.
package controller

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// NoAdmission is the argument that turns the controller's servers off (admission and
// the progress server), for tests of what the controller does with objects admission
// would refuse, for tests that count the pipeline's writes only, and for tests that
// kill the controller (a registered webhook with failurePolicy Fail and no process
// behind it refuses every TrainJob write).
const NoAdmission = "--webhook-bind-address=0"

// ControllerNamespace and WebhookServiceName are what the controller takes for its
// namespace and its Service when it runs outside a pod (no POD_NAMESPACE, no
// service-account namespace file: "default") and by default (webhook.serviceName):
// the progress server's URL injected into trainer pods is
// https://<WebhookServiceName>.<ControllerNamespace>.svc:<port>.
const (
	ControllerNamespace = "default"
	WebhookServiceName  = "trainyard-webhook"
	// MutatingWebhookName and ValidatingWebhookName are the controller's default
	// webhook configuration names (webhook.mutatingWebhookConfigurationName, ...).
	MutatingWebhookName   = "trainyard-defaulter"
	ValidatingWebhookName = "trainyard-validator"
)

// Build builds cmd/trainyard of this checkout into <repo>/_output/e2e/bin/trainyard and
// returns its path. Errors: the repository root is not found, or the build fails (the
// compiler's output is in the error).
func Build() (string, error) {
	root, err := cluster.FindRepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(root, "_output", "e2e", "bin", "trainyard")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/trainyard")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the controller: %v\n%s", err, output)
	}
	return out, nil
}

// Process is one running trainyard process.
type Process struct {
	// MetricsAddr and HealthAddr are the 127.0.0.1 addresses of /metrics (plain HTTP,
	// unless the arguments ask for more) and of /healthz and /readyz.
	MetricsAddr, HealthAddr string
	// WebhookURL is where the API server calls its admission webhooks ("" with
	// NoAdmission or ProvidedCertDir: not registered).
	WebhookURL string
	// WebhookAddr is the 127.0.0.1 address of the admission server ("" with
	// NoAdmission), registered or not.
	WebhookAddr string
	// ProgressAddr is the address of the progress server: on 127.0.0.1, or on the
	// host's bridge address (cluster.HostAddress) with a real node ("" with
	// NoAdmission).
	ProgressAddr string
	// LogPath is the process's log (stdout and stderr, appended).
	LogPath string

	cmd    *exec.Cmd
	exited chan error // holds the exit error once the process is reaped; put back by readers
}

// Config describes a process for [Run].
type Config struct {
	// Binary is the trainyard binary ([Build]).
	Binary string
	// Name tells this process's log apart from other processes of the same test:
	// <cluster logs>/trainyard-<test>[-<Name>].log. Processes of one test with the same
	// Name (a restart) append to one log.
	Name string
	// Kubeconfig the controller uses; default: the cluster's admin kubeconfig.
	Kubeconfig string
	// Args are added after the defaults (a later flag wins).
	Args []string
	// NoWait returns as soon as the process started, without waiting for /readyz (and
	// for the webhooks' registration), e.g. while the API server is down.
	NoWait bool
	// ProvidedCertDir, when set, runs the controller with webhook.certificates.mode
	// Provided and that certDir (tls.crt, tls.key, maybe ca.crt), as the chart does with a
	// cert-manager or user Secret. The admission server then serves unregistered: only
	// self-managed certificates can register the webhooks, in a cluster the chart does.
	ProvidedCertDir string
	// CAPublishDelay, when positive, sets webhook.certificates.caPublishDelay: how long a
	// new CA must have been in every trainer pod's CA ConfigMap before a certificate it
	// signed is served (default 5m).
	CAPublishDelay time.Duration
}

// Start runs the controller against c as `make run` does: with its admission server on
// a free 127.0.0.1 port, registered with the API server (its own webhook configurations,
// its own CA), and its progress server on another, unless args holds NoAdmission. See
// [Run].
func Start(t testing.TB, c *cluster.Cluster, binary string, args ...string) *Process {
	t.Helper()
	return Run(t, c, Config{Binary: binary, Args: args})
}

// Run starts the controller described by cfg against c and waits until it reports
// ready (caches synced, certificate ready) and its webhooks are registered, unless
// cfg.NoWait. It is stopped with SIGTERM when the test ends, its webhook configurations
// removed (a dead endpoint with failurePolicy Fail would refuse every TrainJob write of
// the next test), and its log kept under the cluster's log folder. The test fails if
// the process exits during start-up.
func Run(t testing.TB, c *cluster.Cluster, cfg Config) *Process {
	t.Helper()
	name := "trainyard-" + strings.ReplaceAll(t.Name(), "/", "_")
	if cfg.Name != "" {
		name += "-" + cfg.Name
	}
	if cfg.Kubeconfig == "" {
		cfg.Kubeconfig = c.Kubeconfig()
	}
	// The four ports at once, so they are distinct: ports asked for one at a time
	// may come back the same once each probe listener is closed.
	addrs, err := cluster.FreeAddrs(4)
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{
		MetricsAddr: addrs[0],
		HealthAddr:  addrs[1],
		LogPath:     filepath.Join(c.LogDir(), name+".log"),
		exited:      make(chan error, 1),
	}
	args := serverArgs(t, c, cfg, p, addrs[2], addrs[3])
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(cfg.Binary, append([]string{
		"--kubeconfig=" + cfg.Kubeconfig,
		"--metrics-bind-address=" + p.MetricsAddr,
		"--metrics-secure=false", // plain HTTP for Writes(); a later --metrics-secure in args wins
		"--health-probe-bind-address=" + p.HealthAddr,
		"--log-format=text", "--v=2"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting the controller: %v", err)
	}
	go func() {
		p.exited <- p.cmd.Wait()
		logFile.Close()
	}()
	t.Cleanup(func() {
		p.Stop(t)
		unregisterWebhooks(t, c, p.WebhookURL)
	})
	if cfg.NoWait {
		return p
	}
	cluster.Eventually(t, 60*time.Second, "controller ready (log: "+p.LogPath+")", func(ctx context.Context) (bool, string) {
		if exited, err := p.Exited(); exited {
			t.Fatalf("controller exited during start-up: %v (log: %s)", err, p.LogPath)
		}
		return p.Ready(ctx), "not ready"
	})
	if p.WebhookURL != "" {
		cluster.Eventually(t, 30*time.Second, "webhooks registered at "+p.WebhookURL, func(ctx context.Context) (bool, string) {
			url := registeredURL(ctx, c)
			return url == p.WebhookURL, "registered: " + url
		})
	}
	return p
}

// serverArgs returns cfg.Args with the controller's serving flags: the Configuration
// of cfg.ProvidedCertDir, and unless the args hold NoAdmission, its admission server
// on webhookAddr (registered at p.WebhookURL, which it sets, without provided
// certificates) and its progress server on progressAddr's port (at the real node's
// bridge address when the cluster has one, the Service exposing it created); else
// no progress server. It sets p.ProgressAddr.
func serverArgs(t testing.TB, c *cluster.Cluster, cfg Config, p *Process, webhookAddr, progressAddr string) []string {
	t.Helper()
	args := slices.Clone(cfg.Args)
	if cfg.ProvidedCertDir != "" {
		args = append(args, "--config="+providedConfig(t, cfg.ProvidedCertDir, cfg.CAPublishDelay))
	} else if cfg.CAPublishDelay > 0 {
		t.Fatal("ctrlproc.Config.CAPublishDelay is set without ProvidedCertDir: only provided certificates write a configuration file")
	}
	if !slices.Contains(args, NoAdmission) {
		addr := webhookAddr
		p.WebhookAddr = addr
		args = append(args, "--webhook-bind-address="+addr)
		if cfg.ProvidedCertDir == "" {
			p.WebhookURL = "https://" + addr
			args = append(args, "--webhook-register-url="+p.WebhookURL)
		}
		p.ProgressAddr = progressAddr
		if c.HasRealNode() {
			// Pods on the real node reach the host at its bridge address, by the
			// name the controller injects (progress.BaseURL).
			_, port, _ := net.SplitHostPort(p.ProgressAddr)
			p.ProgressAddr = net.JoinHostPort(c.HostAddress(), port)
			n, _ := strconv.Atoi(port)
			if err := c.ExposeHostService(context.Background(), ControllerNamespace, WebhookServiceName, n); err != nil {
				t.Fatal(err)
			}
		}
		args = append(args, "--status-server-bind-address="+p.ProgressAddr)
	} else {
		args = append(args, "--status-server-bind-address=0")
	}
	return args
}

// providedConfig writes a Configuration file for certificates mode Provided from
// certDir (and caPublishDelay, when positive) into the test's temporary folder and
// returns its path.
func providedConfig(t testing.TB, certDir string, caPublishDelay time.Duration) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	config := fmt.Sprintf("apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwebhook:\n  certificates:\n    mode: Provided\n    certDir: %q\n", certDir)
	if caPublishDelay > 0 {
		config += fmt.Sprintf("    caPublishDelay: %s\n", caPublishDelay)
	}
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Pid is the process id, also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited, and its exit error if so.
func (p *Process) Exited() (exited bool, err error) {
	select {
	case err := <-p.exited:
		p.exited <- err
		return true, err
	default:
		return false, nil
	}
}

// Ready reports whether /readyz answers 200.
func (p *Process) Ready(ctx context.Context) bool {
	return p.ReadyzSays(ctx, "ok")
}

// ReadyzSays reports whether /readyz?verbose answers 200 with s in its body, e.g.
// "leader-election leading".
func (p *Process) ReadyzSays(ctx context.Context, s string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HealthAddr+"/readyz?verbose", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
	return resp.StatusCode == http.StatusOK && strings.Contains(body.String(), s)
}

// ProgressPort is the port of the progress server, the port of the URL the controller
// injects into trainer containers.
func (p *Process) ProgressPort() string {
	_, port, _ := net.SplitHostPort(p.ProgressAddr)
	return port
}

// Stop sends SIGTERM and waits for a graceful exit (30s, then SIGKILL); the test fails
// if the exit is not clean. A process that has already exited (killed by the test) is
// fine.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	if exited, _ := p.Exited(); exited {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Errorf("controller did not exit cleanly on SIGTERM: %v (log: %s)", err, p.LogPath)
		}
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("controller did not stop within 30s of SIGTERM (log: %s)", p.LogPath)
	}
}

// Kill ends the controller abruptly (SIGKILL to its process group), as a node failure
// or an OOM kill would, and waits until it is reaped.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	err := <-p.exited
	p.exited <- err
}

// Writes returns how many writes of each method (POST, PUT, PATCH, DELETE) the
// controller has made that the API server accepted (2xx), from its own
// rest_client_requests_total. A refused request wrote nothing: a status patch whose
// precondition failed (409, the TrainJob changed since the cache saw it) is retried,
// and the retry counts if it lands.
func (p *Process) Writes(t testing.TB) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + p.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("scraping controller metrics: %v", err)
	}
	defer resp.Body.Close()
	counts := map[string]int{}
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		method := labelValue(line, "method")
		if method == "GET" || method == "" || !strings.HasPrefix(labelValue(line, "code"), "2") {
			continue
		}
		value, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			t.Fatalf("parsing metric line %q: %v", line, err)
		}
		counts[method] += int(value)
	}
	return counts
}

// Metric returns the value of series on the controller's /metrics: a metric name with
// its labels as exposed (in name order, e.g. `trainyard_progress_writes_total{result="success"}`)
// for one series, or a bare name for the sum over all its label values. It fails the
// test when the controller exposes no such series, so a renamed metric cannot pass as 0.
func (p *Process) Metric(t testing.TB, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("scraping controller metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scraping controller metrics: %v", err)
	}
	var sum float64
	found := false
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, series)
		if !ok || rest == "" || (rest[0] != ' ' && (rest[0] != '{' || strings.Contains(series, "{"))) {
			continue
		}
		value, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			t.Fatalf("parsing metric line %q: %v", line, err)
		}
		sum += value
		found = true
	}
	if !found {
		t.Fatalf("the controller exposes no series %s", series)
	}
	return sum
}

func labelValue(line, label string) string {
	i := strings.Index(line, label+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(label)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// registeredURL is the base URL the TrainJob validating webhook calls, "" if none.
func registeredURL(ctx context.Context, c *cluster.Cluster) string {
	cfg, err := c.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "trainyard-validator", metav1.GetOptions{})
	if err != nil || len(cfg.Webhooks) == 0 || cfg.Webhooks[0].ClientConfig.URL == nil {
		return ""
	}
	u := *cfg.Webhooks[0].ClientConfig.URL
	return u[:strings.LastIndex(u, "/")]
}

// unregisterWebhooks deletes the webhook configurations if they still call url (a
// controller started after this one may have registered its own).
func unregisterWebhooks(t testing.TB, c *cluster.Cluster, url string) {
	ctx := context.Background()
	if url == "" || registeredURL(ctx, c) != url {
		return
	}
	admission := c.Client().AdmissionregistrationV1()
	if err := admission.ValidatingWebhookConfigurations().Delete(ctx, "trainyard-validator", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("removing the validating webhooks: %v", err)
	}
	if err := admission.MutatingWebhookConfigurations().Delete(ctx, "trainyard-defaulter", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("removing the mutating webhook: %v", err)
	}
}
