package trainjob

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// controller is one running trainyard process.
type controller struct {
	cmd         *exec.Cmd
	metricsAddr string
	healthAddr  string
	logPath     string
	exited      chan error
}

// startController runs the controller against the shared cluster and waits until it
// reports ready (caches synced). It is stopped with SIGTERM when the test ends, and its
// log is kept under the cluster's log folder.
func startController(t *testing.T, c *cluster.Cluster) *controller {
	t.Helper()
	ctrl := &controller{
		metricsAddr: cluster.FreeAddr(t),
		healthAddr:  cluster.FreeAddr(t),
		logPath:     filepath.Join(c.LogDir(), "trainyard-"+strings.ReplaceAll(t.Name(), "/", "_")+".log"),
		exited:      make(chan error, 1),
	}
	logFile, err := os.OpenFile(ctrl.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ctrl.cmd = exec.Command(controllerBinary,
		"--kubeconfig="+c.Kubeconfig(),
		"--metrics-bind-address="+ctrl.metricsAddr,
		"--health-probe-bind-address="+ctrl.healthAddr,
		"--log-format=text", "--v=2")
	ctrl.cmd.Stdout, ctrl.cmd.Stderr = logFile, logFile
	ctrl.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := ctrl.cmd.Start(); err != nil {
		t.Fatalf("starting the controller: %v", err)
	}
	go func() {
		ctrl.exited <- ctrl.cmd.Wait()
		logFile.Close()
	}()
	t.Cleanup(func() { ctrl.stop(t) })

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
	return ctrl
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

// writes returns how many API requests of each write method (POST, PUT, PATCH, DELETE)
// the controller has made, from its own rest_client_requests_total.
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
		if method == "GET" || method == "" {
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
