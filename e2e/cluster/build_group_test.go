package cluster

import (
	"context"
	"io"
	"os"
	"path/filepath"
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
