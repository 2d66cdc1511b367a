package clustertest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// TestDownLeavesNothingBehind starts a second, one-node cluster and checks
// that Down stops every process, frees every port and removes the data.
func TestDownLeavesNothingBehind(t *testing.T) {
	opts := cluster.TestOptions("down-test")
	opts.Nodes = 1
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	pids, ports, workDir := c.Pids(), c.Ports(), c.WorkDir()
	if len(pids) != 6 {
		t.Errorf("got %d component pids, want 6", len(pids))
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Errorf("component pid %d not running before Down", pid)
		}
	}

	if err := c.Down(); err != nil {
		t.Fatalf("Down: %v", err)
	}

	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d still alive after Down", pid)
		}
	}
	for _, port := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Errorf("port %d still in use after Down: %v", port, err)
			continue
		}
		l.Close()
	}
	for _, path := range []string{workDir, filepath.Join(opts.StateDir, "state.json"), c.Kubeconfig()} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Down (%v)", path, err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.LogDir(), cluster.KubeAPIServer+".log")); err != nil {
		t.Errorf("logs should outlive the cluster: %v", err)
	}
}

// TestUpReportsTakenPortWithComponentAndLog pins kube-apiserver to a port
// already in use: Up must fail fast naming kube-apiserver and its log, and
// leave nothing running (etcd was already started).
func TestUpReportsTakenPortWithComponentAndLog(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	opts := cluster.TestOptions("port-taken-test")
	opts.APIServerPort = l.Addr().(*net.TCPAddr).Port
	opts.TempDir = t.TempDir()
	start := time.Now()

	_, err = cluster.Up(context.Background(), opts)

	if took := time.Since(start); took > time.Minute {
		t.Errorf("Up took %s to fail", took)
	}
	var se *cluster.StartError
	if !errors.As(err, &se) || se.Component != cluster.KubeAPIServer || !errors.Is(err, cluster.ErrPortInUse) {
		t.Fatalf("got %v, want a StartError for %s wrapping ErrPortInUse", err, cluster.KubeAPIServer)
	}
	wantLog := filepath.Join(opts.StateDir, "logs", cluster.KubeAPIServer+".log")
	if !strings.Contains(err.Error(), wantLog) {
		t.Errorf("error %q does not name the log %s", err, wantLog)
	}
	if left, _ := os.ReadDir(opts.TempDir); len(left) > 0 {
		t.Errorf("failed Up left %d entries in the temp dir, e.g. %s", len(left), left[0].Name())
	}
	if _, err := cluster.ReadState(opts.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed Up left a state file (%v)", err)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	return i >= 0 && i+2 < len(data) && data[i+2] != 'Z'
}
