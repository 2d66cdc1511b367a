package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Environment variables read by ForTests.
const (
	// EnvReuse set to "1" makes ForTests use a live cluster from
	// EnvKubeconfig (default <repo>/_output/cluster/kubeconfig, as written
	// by `make cluster-up`) instead of starting one. That cluster is left
	// running.
	EnvReuse = "TRAINYARD_E2E_REUSE"
	// EnvKubeconfig names the kubeconfig EnvReuse uses.
	EnvKubeconfig = "TRAINYARD_KUBECONFIG"
	// EnvTestStateRoot is the folder under which test clusters keep their
	// state and logs, one sub-folder per cluster. Default: <repo>/_output/e2e.
	EnvTestStateRoot = "TRAINYARD_E2E_STATE_DIR"

	envReaper = "TRAINYARD_CLUSTER_REAPER" // internal: run as the reaper of that state root
)

var shared *Cluster

// ForTests runs the tests of a package against one cluster and returns the
// exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(cluster.ForTests(m)) }
//
// It starts a cluster with default options (Kubernetes $E2E_KUBE_VERSION, see
// TestOptions), its state and logs in
// <TestStateRoot>/<package> (e.g. _output/e2e/clustertest/logs) so that the
// test binaries of `go test ./...` do not collide, runs the tests, and stops
// the cluster. With EnvReuse=1 it attaches to a live cluster instead and
// leaves it running.
//
// Nothing is left behind when the tests fail, panic, time out or are
// interrupted: SIGINT and SIGTERM stop the cluster before exiting, and a
// small reaper process (this test binary re-executed) stops every cluster
// this process recorded under the state root as soon as it exits, however it
// exits.
func ForTests(m *testing.M) int { return ForTestsWith(m, nil) }

// ForTestsWith is [ForTests] with configure, when not nil, changing the
// package cluster's Options before it starts (e.g. Options.AuditLog). Such a
// package always runs a cluster of its own, EnvReuse or not: it needs its
// options, and its tests may break the cluster on purpose (stop its API
// server, restart etcd) without harming other packages.
func ForTestsWith(m *testing.M, configure func(*Options)) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	if os.Getenv(EnvReuse) == "1" && configure == nil {
		c, err := attachForReuse(ctx)
		if err == nil {
			shared = c
			fmt.Fprintf(os.Stderr, "e2e: reusing the cluster of %s\n", c.Kubeconfig())
			return m.Run()
		}
		fmt.Fprintf(os.Stderr, "e2e: %s=1 but no live cluster (%v); starting one\n", EnvReuse, err)
	}
	root, err := TestStateRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := startReaper(root); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	opts := TestOptions(testBinaryName())
	opts.Progress = prefixWriter{os.Stderr}
	if configure != nil {
		configure(&opts)
	}
	c, err := Up(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting the cluster:", err)
		return 1
	}
	shared = c
	stopSignals := downOnSignal(c)
	defer stopSignals()
	defer func() {
		if err := c.Down(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stopping the cluster:", err)
		}
	}()
	return m.Run()
}

// testBinaryName is the package name of this test binary ("clustertest"
// for clustertest.test).
func testBinaryName() string {
	return strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
}

// Shared returns the cluster of ForTests; the test fails if there is none.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if shared == nil {
		t.Fatal("no shared cluster: call os.Exit(cluster.ForTests(m)) from TestMain")
	}
	return shared
}

// TestStateRoot returns $TRAINYARD_E2E_STATE_DIR or <repo>/_output/e2e.
func TestStateRoot() (string, error) {
	if dir := os.Getenv(EnvTestStateRoot); dir != "" {
		return filepath.Abs(dir)
	}
	repo, err := FindRepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(repo, "_output", "e2e"), nil
}

// TestOptions returns default Options whose StateDir (and so logs) is
// <TestStateRoot>/<name>, for tests that run a cluster of their own beside
// the shared one, and whose KubeVersion is $E2E_KUBE_VERSION (EnvKubeVersion;
// Up refuses an unknown one). ForTests' reaper covers such clusters too.
func TestOptions(name string) Options {
	root, err := TestStateRoot()
	if err != nil {
		root = filepath.Join(os.TempDir(), "trainyard-e2e")
	}
	return Options{StateDir: filepath.Join(root, name), KubeVersion: os.Getenv(EnvKubeVersion)}
}

// NewNamespace creates a namespace named after the test and deletes it when
// the test ends. If the test failed, the namespace's pods and events are
// logged first.
func NewNamespace(t testing.TB, c *Cluster) string {
	t.Helper()
	ctx := context.Background()
	ns, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.logNamespace(t, ns.Name)
		}
		if err := c.client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting namespace %s: %v", ns.Name, err)
		}
	})
	// Pods are admitted only once the namespace's default service account
	// exists; kube-controller-manager creates it within moments.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s has no default service account: %v (log: %s)", ns.Name, err, filepath.Join(c.LogDir(), KubeControllerManager+".log"))
	}
	return ns.Name
}

var nonDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// namespacePrefix turns "TestFoo/bar_baz" into "e2e-testfoo-bar-baz-".
func namespacePrefix(testName string) string {
	s := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(testName), "-"), "-")
	if len(s) > 40 {
		s = s[:40]
	}
	return "e2e-" + strings.TrimRight(s, "-") + "-"
}

// logNamespace logs pods and events of ns, to explain a failure.
func (c *Cluster) logNamespace(t testing.TB, ns string) {
	ctx := context.Background()
	if pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			t.Logf("pod %s/%s: phase=%s node=%q conditions=%v", ns, p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Conditions)
		}
	}
	if events, err := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range events.Items {
			t.Logf("event %s %s/%s: %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	t.Logf("component logs: %s", c.LogDir())
}

func attachForReuse(ctx context.Context) (*Cluster, error) {
	kubeconfig := os.Getenv(EnvKubeconfig)
	if kubeconfig == "" {
		repo, err := FindRepoRoot()
		if err != nil {
			return nil, err
		}
		kubeconfig = filepath.Join(repo, DefaultStateDir, "kubeconfig")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return Attach(ctx, kubeconfig)
}

// downOnSignal stops c and exits with 130 on SIGINT or SIGTERM. The returned
// func stops listening.
func downOnSignal(c *Cluster) func() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "e2e: %v: stopping the cluster\n", sig)
			_ = c.Down()
			os.Exit(130)
		case <-done:
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// In the reaper process, run the reaper before anything of the test binary
// (its TestMain may do work before calling ForTests).
func init() {
	if root := os.Getenv(envReaper); root != "" {
		os.Exit(runReaper(root))
	}
}

// startReaper re-executes this binary as a reaper: it blocks reading a pipe
// that only this process holds open, and when that pipe reaches EOF (this
// process is gone, by any means) it stops the clusters this process
// recorded under root. It runs in its own process group so that a Ctrl-C
// aimed at the tests does not kill it first.
func startReaper(root string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envReaper+"="+root, fmt.Sprintf("%s_PID=%d", envReaper, os.Getpid()))
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the cluster reaper: %w", err)
	}
	r.Close()
	reaperPipe = w // kept open, deliberately, until this process exits
	go func() { _ = cmd.Wait() }()
	return nil
}

var reaperPipe *os.File

// runReaper is the reaper's main: wait for the parent, then clean up.
func runReaper(root string) int {
	_, _ = io.Copy(io.Discard, os.Stdin) // returns when the parent is gone
	var owner int
	_, _ = fmt.Sscan(os.Getenv(envReaper+"_PID"), &owner)
	states, _ := filepath.Glob(filepath.Join(root, "*", stateFile))
	var errs []error
	for _, path := range states {
		dir := filepath.Dir(path)
		if s, err := ReadState(dir); err != nil || s.OwnerPid != owner {
			continue // another test binary's cluster, or already gone
		}
		fmt.Fprintf(os.Stderr, "e2e reaper: cleaning up the cluster in %s\n", dir)
		errs = append(errs, DownFromState(dir, io.Discard))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "e2e reaper:", err)
		return 1
	}
	return 0
}

// prefixWriter prefixes progress lines with "e2e: ".
type prefixWriter struct{ w io.Writer }

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(p.w, "e2e: %s", b); err != nil {
		return 0, err
	}
	return len(b), nil
}
