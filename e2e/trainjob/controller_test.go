package trainjob

import (
	"bufio"
	"context"
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

// controller is one running trainyard process.
type controller struct {
	cmd         *exec.Cmd
	metricsAddr string
	healthAddr  string
	// webhookURL is where the API server calls its admission webhooks ("" with
	// admission off).
	webhookURL string
	// progressAddr is the 127.0.0.1 address of the progress server ("" with the
	// servers off).
	progressAddr string
	logPath      string
	exited       chan error
}

// noAdmission is the startController argument that turns the controller's servers off
// (admission and the progress server), for tests of what the controller does with
// objects admission would refuse, and for tests that count the pipeline's writes only.
const noAdmission = "--webhook-bind-address=0"

// progressPort is the port of the progress server, the port of the URL the controller
// injects into trainer containers.
func (ctrl *controller) progressPort() string {
	_, port, _ := net.SplitHostPort(ctrl.progressAddr)
	return port
}

// startController runs the controller against the shared cluster, as `make run` does:
// with its admission server on a free 127.0.0.1 port, registered with the API server
// (its own webhook configurations, its own CA), and its progress server on another,
// unless args holds noAdmission. It waits
// until the controller reports ready (caches synced, certificate ready) and its
// webhooks are registered. It is stopped with SIGTERM when the test ends, its webhook
// configurations removed (a dead endpoint with failurePolicy Fail would refuse every
// TrainJob write of the next test), and its log kept under the cluster's log folder.
func startController(t *testing.T, c *cluster.Cluster, args ...string) *controller {
	t.Helper()
	ctrl := &controller{
		metricsAddr: cluster.FreeAddr(t),
		healthAddr:  cluster.FreeAddr(t),
		logPath:     filepath.Join(c.LogDir(), "trainyard-"+strings.ReplaceAll(t.Name(), "/", "_")+".log"),
		exited:      make(chan error, 1),
	}
	if !slices.Contains(args, noAdmission) {
		addr := cluster.FreeAddr(t)
		ctrl.webhookURL = "https://" + addr
		args = append(args, "--webhook-bind-address="+addr, "--webhook-register-url="+ctrl.webhookURL)
		ctrl.progressAddr = cluster.FreeAddr(t)
		args = append(args, "--status-server-bind-address="+ctrl.progressAddr)
	} else {
		args = append(args, "--status-server-bind-address=0")
	}
	logFile, err := os.OpenFile(ctrl.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ctrl.cmd = exec.Command(controllerBinary, append([]string{
		"--kubeconfig=" + c.Kubeconfig(),
		"--metrics-bind-address=" + ctrl.metricsAddr,
		"--metrics-secure=false", // plain HTTP for writes(); a later --metrics-secure in args wins
		"--health-probe-bind-address=" + ctrl.healthAddr,
		"--log-format=text", "--v=2"}, args...)...)
	ctrl.cmd.Stdout, ctrl.cmd.Stderr = logFile, logFile
	ctrl.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := ctrl.cmd.Start(); err != nil {
		t.Fatalf("starting the controller: %v", err)
	}
	go func() {
		ctrl.exited <- ctrl.cmd.Wait()
		logFile.Close()
	}()
	t.Cleanup(func() {
		ctrl.stop(t)
		unregisterWebhooks(t, c, ctrl.webhookURL)
	})

	cluster.Eventually(t, 60*time.Second, "controller ready (log: "+ctrl.logPath+")", func(ctx context.Context) (bool, string) {
		select {
		case err := <-ctrl.exited:
			ctrl.exited <- err
			t.Fatalf("controller exited during start-up: %v (log: %s)", err, ctrl.logPath)
		default:
		}
		resp, err := http.Get("http://" + ctrl.healthAddr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	if ctrl.webhookURL != "" {
		cluster.Eventually(t, 30*time.Second, "webhooks registered at "+ctrl.webhookURL, func(ctx context.Context) (bool, string) {
			url := registeredURL(ctx, c)
			return url == ctrl.webhookURL, "registered: " + url
		})
	}
	return ctrl
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
func unregisterWebhooks(t *testing.T, c *cluster.Cluster, url string) {
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

// stop sends SIGTERM and waits for a graceful exit; a process that has already exited
// (killed by the test) is fine.
func (ctrl *controller) stop(t *testing.T) {
	if ctrl.cmd.ProcessState != nil {
		return
	}
	_ = ctrl.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-ctrl.exited:
		ctrl.exited <- err
		if err != nil {
			t.Errorf("controller did not exit cleanly on SIGTERM: %v (log: %s)", err, ctrl.logPath)
		}
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-ctrl.cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("controller did not stop within 30s of SIGTERM (log: %s)", ctrl.logPath)
	}
}

// kill ends the controller abruptly, as a node failure or OOM kill would.
func (ctrl *controller) kill(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(-ctrl.cmd.Process.Pid, syscall.SIGKILL)
	err := <-ctrl.exited
	ctrl.exited <- err
}

// writes returns how many writes of each method (POST, PUT, PATCH, DELETE) the
// controller has made that the API server accepted (2xx), from its own
// rest_client_requests_total. A refused request wrote nothing: a status patch whose
// precondition failed (409, the TrainJob changed since the cache saw it) is retried,
// and the retry counts if it lands.
func (ctrl *controller) writes(t *testing.T) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + ctrl.metricsAddr + "/metrics")
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

func labelValue(line, label string) string {
	i := strings.Index(line, label+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(label)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// metric returns the value of series on the controller's /metrics: a metric name with
// its labels as exposed (in name order, e.g. `trainyard_progress_writes_total{result="success"}`)
// for one series, or a bare name for the sum over all its label values. It fails the
// test when the controller exposes no such series, so a renamed metric cannot pass as 0.
func (ctrl *controller) metric(t *testing.T, series string) float64 {
	t.Helper()
	body, err := httpGet("http://" + ctrl.metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("scraping controller metrics: %v", err)
	}
	var sum float64
	found := false
	for _, line := range strings.Split(body, "\n") {
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
