package cluster

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGoBuildCountsTheCompilersCPU: the CPU time goBuild reports includes what the
// go command's children ran (the compilers and linkers), not the go command's own
// few milliseconds; the fake go command here does its work in a child shell, as
// the real one does in its compile processes.
func TestGoBuildCountsTheCompilersCPU(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "hack", "kube-bins", "busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	goCmd := filepath.Join(t.TempDir(), "go")
	script := `#!/bin/sh
sh -c 'i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done'
`
	if err := os.WriteFile(goCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o := &BuildOptions{RepoRoot: root, GoCommand: goCmd}
	src := Source{Name: "busy", Binaries: map[string]string{"busy": "example.com/busy"}}
	cpu, err := o.goBuild(context.Background(), src, []string{"example.com/busy"}, t.TempDir(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// 400,000 shell iterations take well over 50 ms of CPU on any machine; the
	// go command itself (the outer shell, which only waits) takes a few.
	if cpu < 50*time.Millisecond {
		t.Errorf("goBuild reported %s of CPU, want the child's busy loop (≥ 50ms) counted", cpu)
	}
}

// writeBuildModule writes hack/kube-bins/<name>/go.mod (and an empty go.sum) under
// root with goMod as its body.
func writeBuildModule(t *testing.T, root, name, goMod string) {
	t.Helper()
	dir := filepath.Join(root, "hack", "kube-bins", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, body := range map[string]string{"go.mod": "module example.com/" + name + "\n\ngo 1.26.0\n" + goMod, "go.sum": ""} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLanesPutBuildsOfOneClientGoPinInOrder(t *testing.T) {
	root := t.TempDir()
	writeBuildModule(t, root, "servers", "require k8s.io/kubernetes v1.36.3\nreplace k8s.io/client-go => k8s.io/client-go v0.36.3\n")
	writeBuildModule(t, root, "proxy", "require k8s.io/kubernetes v1.36.3\nreplace k8s.io/client-go => k8s.io/client-go v0.36.3\n")
	writeBuildModule(t, root, "helm", "require k8s.io/client-go v0.37.0 // indirect\n")
	// Kueue's: client-go pinned as the servers', golang.org/x/net newer.
	writeBuildModule(t, root, "kueue", "require golang.org/x/net v0.56.0 // indirect\nreplace k8s.io/client-go => k8s.io/client-go v0.36.3\n")
	writeBuildModule(t, root, "runc", "require github.com/opencontainers/runc v1.3.3\n")
	writeBuildModule(t, root, "pinless", "")
	o := &BuildOptions{RepoRoot: root}
	src := func(name, module string) Source {
		return Source{Name: name, BuildModule: module, Binaries: map[string]string{name: "example.com/" + name}}
	}
	groups := groupSources([]Source{
		src("kube-apiserver", "servers"), src("helm", "helm"), src("jobset", "servers"),
		src("runc", "runc"), src("kueue", "kueue"), src("kube-proxy", "proxy"), {Name: "crds", Assets: map[string]string{"a": "a.yaml"}},
		src("other", "pinless"), src("missing", "no-such-module"),
	})
	var got []string
	for _, lane := range o.lanes(groups) {
		var labels []string
		for _, g := range lane {
			labels = append(labels, g.label)
		}
		got = append(got, strings.Join(labels, " → "))
	}
	want := []string{"kube-apiserver+jobset → kube-proxy", "helm", "runc", "kueue", "crds", "other", "missing"}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Errorf("lanes = %q, want %q", got, want)
	}
}

// TestBuildAllBuildsALaneOneAfterAnother: of two groups pinned to one client-go, the
// second go build starts only after the first ended (so it reuses the first's
// compiled packages); a group of another pin builds beside them.
func TestBuildAllBuildsALaneOneAfterAnother(t *testing.T) {
	root, cache := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	pinned := "replace k8s.io/client-go => k8s.io/client-go v0.36.3\n"
	writeBuildModule(t, root, "first", pinned)
	writeBuildModule(t, root, "second", pinned)
	writeBuildModule(t, root, "beside", "")
	events := filepath.Join(t.TempDir(), "events")
	// The fake go build records when it starts and ends, in the module folder it runs
	// in, and writes the binary the last argument names into the -o folder.
	goCmd := filepath.Join(t.TempDir(), "go")
	script := `#!/bin/sh
m=$(basename "$PWD")
echo "start $m" >> ` + events + `
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; last=$a; done
sleep 0.3
touch "$out/$(basename "$last")"
echo "end $m" >> ` + events + `
`
	if err := os.WriteFile(goCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o := &BuildOptions{RepoRoot: root, CacheDir: cache, LogDir: t.TempDir(), Progress: io.Discard, GoCommand: goCmd}
	src := func(name string) Source {
		return Source{Name: name, Version: "v1", Binaries: map[string]string{name: "example.com/" + name}}
	}
	if err := o.buildAll(context.Background(), []Source{src("first"), src("second"), src("beside")}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	log := strings.Fields(strings.ReplaceAll(string(data), "\n", ","))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	index := map[string]int{}
	for i, l := range lines {
		index[l] = i
	}
	if index["start second"] < index["end first"] {
		t.Errorf("second started before first ended: %v", log)
	}
	if index["start beside"] > index["end first"] {
		t.Errorf("beside waited for first: %v", log)
	}
}
