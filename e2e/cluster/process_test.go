package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests run fake components (sh, sleep) through the same code that
// runs the real ones; they need no cluster and take a few seconds.

func notReady(context.Context) error { return errors.New("not yet") }

func alwaysReady(context.Context) error { return nil }

func TestStartProcessPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	logPath := filepath.Join(t.TempDir(), "fake-apiserver.log")

	_, err = startProcess(context.Background(), componentSpec{
		name: "fake-apiserver", binary: "/bin/sleep", args: []string{"60"},
		ports: []int{port}, ready: alwaysReady, timeout: time.Second,
	}, logPath, false, nil)

	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a *StartError", err)
	}
	if !errors.Is(err, ErrPortInUse) {
		t.Errorf("error %q does not wrap ErrPortInUse", err)
	}
	for _, want := range []string{"fake-apiserver", logPath, strconv.Itoa(port)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestStartProcessNeverReady(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "fake-scheduler.log")
	var pid int
	start := time.Now()

	_, err := startProcess(context.Background(), componentSpec{
		name: "fake-scheduler", binary: "/bin/sleep", args: []string{"60"},
		ready: notReady, timeout: time.Second,
	}, logPath, false, func(p *process) { pid = p.pid })

	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("startProcess took %s, want about the 1s timeout", elapsed)
	}
	var se *StartError
	if !errors.As(err, &se) || se.Component != "fake-scheduler" || se.LogPath != logPath {
		t.Fatalf("got %#v, want a StartError for fake-scheduler with log %s", err, logPath)
	}
	if !strings.Contains(err.Error(), "not ready after 1s") {
		t.Errorf("error %q does not say it timed out", err)
	}
	if pid == 0 || processAlive(pid) {
		t.Errorf("pid %d of the component that never got ready is still alive", pid)
	}
}

func TestStartProcessExitsEarly(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "fake-etcd.log")

	_, err := startProcess(context.Background(), componentSpec{
		name: "fake-etcd", binary: "/bin/sh", args: []string{"-c", "echo 'bind: address already in use' >&2; exit 3"},
		ready: notReady, timeout: 10 * time.Second,
	}, logPath, false, nil)

	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a *StartError", err)
	}
	if !strings.Contains(err.Error(), "exited before becoming ready: exit status 3") {
		t.Errorf("error %q does not report the early exit", err)
	}
	if !strings.Contains(se.LogTail, "address already in use") {
		t.Errorf("log tail %q misses the component's output", se.LogTail)
	}
}

func TestStopKillsTheWholeProcessGroup(t *testing.T) {
	dir := t.TempDir()
	childPidFile := filepath.Join(dir, "child.pid")
	p, err := startProcess(context.Background(), componentSpec{
		name: "fake-parent", binary: "/bin/sh",
		// The shell ignores SIGTERM, so stopping needs the SIGKILL fallback,
		// and its child must die with the group.
		args: []string{"-c", "trap '' TERM; sleep 60 & echo $! > " + childPidFile + "; wait"},
		ready: func(context.Context) error {
			if data, err := os.ReadFile(childPidFile); err != nil || !strings.HasSuffix(string(data), "\n") {
				return errors.New("no child pid yet")
			}
			return nil
		},
		timeout: 5 * time.Second,
	}, filepath.Join(dir, "fake.log"), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(childPidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}

	p.stop(500 * time.Millisecond)

	if processAlive(p.pid) {
		t.Errorf("leader %d still alive", p.pid)
	}
	// The orphaned child is reaped by init, which may take a moment.
	deadline := time.Now().Add(5 * time.Second)
	for processAlive(child) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if processAlive(child) {
		t.Errorf("child %d of the group still alive", child)
	}
}

func TestDownFromStateStopsDetachedComponents(t *testing.T) {
	stateDir := t.TempDir()
	workDir, err := os.MkdirTemp(t.TempDir(), workDirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: Options{StateDir: stateDir, LogDir: stateDir}, workDir: workDir, kubeconfig: filepath.Join(stateDir, "kubeconfig")}
	port := mustFreePort(t)
	if _, err := startProcess(context.Background(), componentSpec{
		name: "fake-kwok", binary: "/bin/sleep", args: []string{"60"}, ports: []int{port}, ready: alwaysReady, timeout: time.Second,
	}, filepath.Join(stateDir, "fake-kwok.log"), true, c.track); err != nil {
		t.Fatal(err)
	}
	pid := c.Pids()[0]

	if err := DownFromState(stateDir, os.Stderr); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(5 * time.Second)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if processAlive(pid) {
		t.Errorf("detached component %d still alive", pid)
	}
	for _, path := range []string{workDir, filepath.Join(stateDir, stateFile)} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (%v)", path, err)
		}
	}
	if err := DownFromState(stateDir, os.Stderr); err != nil {
		t.Errorf("second DownFromState: %v", err)
	}
}

func TestBuildFailureNamesSourceAndLog(t *testing.T) {
	opts := BuildOptions{RepoRoot: fakeRepo(t), CacheDir: t.TempDir(), LogDir: t.TempDir(), GoCommand: "/bin/false"}

	_, err := Build(context.Background(), opts)

	if err == nil {
		t.Fatal("Build succeeded with a failing go command")
	}
	// Every build fails at once, and the first failure cancels the others: which ones
	// are reported depends on timing, and each reported one names its source and log.
	named := false
	for _, g := range groupSources(Sources) {
		if strings.Contains(err.Error(), "building "+g.describe()) && strings.Contains(err.Error(), filepath.Join(opts.LogDir, "build-"+g.label+".log")) {
			named = true
		}
	}
	if !named {
		t.Errorf("error %q names no source with its build log", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(opts.CacheDir, "bin", ".tmp-*")); len(leftovers) > 0 {
		t.Errorf("failed build left %v behind", leftovers)
	}
}

// fakeCache fills opts.CacheDir with a folder per source, as a build would.
func fakeCache(t *testing.T, opts *BuildOptions) {
	t.Helper()
	if err := opts.withDefaults(); err != nil {
		t.Fatal(err)
	}
	for _, src := range Sources {
		if err := os.MkdirAll(opts.sourceDir(src), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := opts.writeSourceInfo(opts.sourceDir(src), src); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBuildReusesTheCacheWithoutTheGoTool(t *testing.T) {
	opts := BuildOptions{RepoRoot: fakeRepo(t), CacheDir: t.TempDir(), LogDir: t.TempDir(), GoCommand: "/bin/false"}
	fakeCache(t, &opts)

	bins, err := Build(context.Background(), opts)

	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(opts.CacheDir, "bin", "kubernetes-v1.36.3-"+opts.recipe(Sources[1]), KubeAPIServer)
	if got := bins.Path(KubeAPIServer); got != want {
		t.Errorf("Path(%s) = %s, want %s", KubeAPIServer, got, want)
	}
}

func TestBuildRebuildsWhenTheBuildModuleChanges(t *testing.T) {
	opts := BuildOptions{RepoRoot: fakeRepo(t), CacheDir: t.TempDir(), LogDir: t.TempDir(), GoCommand: "/bin/false"}
	fakeCache(t, &opts)
	goSum := filepath.Join(opts.RepoRoot, "hack", "kube-bins", "etcd", "go.sum")
	if err := os.WriteFile(goSum, []byte("a bumped dependency\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	_, err := Build(context.Background(), opts)

	// The failing go command proves a rebuild was attempted, of etcd only.
	if err == nil || !strings.Contains(err.Error(), "building etcd v3.6.8: go build") {
		t.Fatalf("got %v, want a failed rebuild of etcd", err)
	}
	if strings.Contains(err.Error(), "kubernetes") {
		t.Errorf("unchanged build modules were rebuilt too: %v", err)
	}
	// The folder of the old recipe is another one, and stays for whoever
	// runs its binaries.
	if dirs, _ := filepath.Glob(filepath.Join(opts.CacheDir, "bin", "etcd-v3.6.8-*", "source.json")); len(dirs) != 1 {
		t.Errorf("etcd folders with a source.json: %v, want the old recipe's one, untouched", dirs)
	}
}

func TestKubernetesBinariesAreStampedAsARelease(t *testing.T) {
	for _, name := range []string{"kubernetes", "kubectl"} {
		i := slices.IndexFunc(Sources, func(s Source) bool { return s.Name == name })
		flags := strings.Join(buildFlags(Sources[i]), " ")
		for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
			for _, want := range []string{".gitVersion=v1.36.3", ".gitMajor=1", ".gitMinor=36", ".gitTreeState=clean", ".buildDate=2026-07-22T18:07:38Z"} {
				if !strings.Contains(flags, "-X "+pkg+want) {
					t.Errorf("%s: build flags %q lack -X %s%s", name, flags, pkg, want)
				}
			}
		}
	}
}

func TestStampedSourcesOfAModuleBuildApart(t *testing.T) {
	// kube-bins/kubernetes builds the stamped Kubernetes servers and the
	// unstamped JobSet and kwok: one go build would stamp all or none.
	var got []string
	for _, g := range groupSources(Sources) {
		got = append(got, g.label)
	}
	want := []string{"etcd", "kubernetes", "kubectl", "jobset+kwok", "scheduler-plugins"}
	if !slices.Equal(got, want) {
		t.Errorf("build groups %v, want %v", got, want)
	}
}

func TestNamespacePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"TestJobSet":              "e2e-testjobset-",
		"TestGang/one_node":       "e2e-testgang-one-node-",
		strings.Repeat("x", 70):   "e2e-" + strings.Repeat("x", 40) + "-",
		"Test_With__Odd--Chars__": "e2e-test-with-odd--chars-",
	} {
		if got := namespacePrefix(in); got != want {
			t.Errorf("namespacePrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

func fakeRepo(t *testing.T) string {
	root := t.TempDir()
	for _, src := range Sources {
		if err := os.MkdirAll(filepath.Join(root, "hack", "kube-bins", src.buildModule()), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func mustFreePort(t *testing.T) int {
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

func TestDefaultBinaryName(t *testing.T) {
	for pkg, want := range map[string]string{
		"go.etcd.io/etcd/server/v3":            "server",
		"k8s.io/kubernetes/cmd/kube-apiserver": "kube-apiserver",
		"sigs.k8s.io/jobset":                   "jobset",
		"example.com/tool/v":                   "v",
	} {
		if got := defaultBinaryName(pkg); got != want {
			t.Errorf("defaultBinaryName(%q) = %q, want %q", pkg, got, want)
		}
	}
}

func TestBuildSourcesBuildsOnlyTheSourcesGiven(t *testing.T) {
	opts := BuildOptions{RepoRoot: fakeRepo(t), CacheDir: t.TempDir(), LogDir: t.TempDir(), GoCommand: "/bin/false"}
	if err := os.MkdirAll(filepath.Join(opts.RepoRoot, "hack", "kube-bins", UpstreamTrainer.buildModule()), 0o755); err != nil {
		t.Fatal(err)
	}

	_, err := BuildSources(context.Background(), opts, UpstreamTrainer)

	// The failing go command proves a build was attempted, of upstream's controller only.
	if err == nil || !strings.Contains(err.Error(), "building kubeflow-trainer v2.3.0: go build") {
		t.Fatalf("got %v, want a failed build of kubeflow-trainer v2.3.0", err)
	}
	if strings.Contains(err.Error(), "kubernetes") || strings.Contains(err.Error(), "etcd") {
		t.Errorf("the cluster's sources were built too: %v", err)
	}

	// Once in the cache, under its version, it is reused without the go tool.
	if err := os.MkdirAll(opts.sourceDir(UpstreamTrainer), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := opts.writeSourceInfo(opts.sourceDir(UpstreamTrainer), UpstreamTrainer); err != nil {
		t.Fatal(err)
	}
	bins, err := BuildSources(context.Background(), opts, UpstreamTrainer)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(opts.sourceDir(UpstreamTrainer), TrainerControllerManager)
	if !strings.HasPrefix(want, filepath.Join(opts.CacheDir, "bin", "kubeflow-trainer-v2.3.0-")) {
		t.Errorf("cache folder %s, want bin/kubeflow-trainer-v2.3.0-<recipe>", want)
	}
	if got := bins.Path(TrainerControllerManager); got != want {
		t.Errorf("Path(%s) = %s, want %s", TrainerControllerManager, got, want)
	}
}

// Every build module requires each of its sources' modules at the version that
// names the source's cache folder: a bump of one without the other would cache a
// binary under a version it is not.
func TestSourceVersionsMatchTheirBuildModules(t *testing.T) {
	root, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range append(slices.Clone(Sources), UpstreamTrainer) {
		if src.buildModule() == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, "hack", "kube-bins", src.buildModule(), "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		// A requirement is "<module> <version>" on a line of its own inside a require
		// block, or after "require".
		req := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(src.Module) + `\s+(\S+)`)
		got := ""
		if m := req.FindSubmatch(data); m != nil {
			got = string(m[1])
		}
		if got != src.Version {
			t.Errorf("%s: hack/kube-bins/%s/go.mod requires %s at %q, want %s", src.Name, src.buildModule(), src.Module, got, src.Version)
		}
	}
}
