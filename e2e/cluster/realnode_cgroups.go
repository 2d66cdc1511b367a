package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The kubelet's cgroupRoot in the host's cgroup v1 hierarchies: created before
// the kubelet starts; at teardown its processes are killed and its cgroups
// removed.

// cgroupV1Root is where cgroup v1 hierarchies are mounted.
const cgroupV1Root = "/sys/fs/cgroup"

// cgroupHierarchies returns the mounted cgroup hierarchies (folders, not the
// cpu -> cpu,cpuacct links).
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir(cgroupV1Root)
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && e.Type()&os.ModeSymlink == 0 {
			dirs = append(dirs, filepath.Join(cgroupV1Root, e.Name()))
		}
	}
	return dirs
}

// setupCgroupRoot creates the kubelet's cgroupRoot in every hierarchy (the
// kubelet refuses a root that does not exist), its cpuset filled from the
// parent's as a new cpuset cgroup starts empty.
func setupCgroupRoot(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("initialising %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// killCgroupProcesses SIGKILLs every process in root's cgroups (the pods'
// containers), in the pids hierarchy, which every container joins.
func killCgroupProcesses(root string) {
	_ = filepath.WalkDir(filepath.Join(cgroupV1Root, "pids", root), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		for _, pid := range readPids(path) {
			_ = killPid(pid)
		}
		return nil
	})
}

// removeCgroupRoot removes root's cgroups in every hierarchy, children first.
func removeCgroupRoot(root string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		top := filepath.Join(h, root)
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
