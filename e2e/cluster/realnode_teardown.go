package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Teardown: what the real node did to the host, undone.

// teardownRealNode undoes everything the real node did to the host, in an
// order that lets each step succeed: the pods' processes, the shims,
// containerd's mounts and network namespaces, the bridge and its guard, the
// cgroups. Processes recorded in the state file are already stopped. Every
// step runs even when an earlier one fails.
func teardownRealNode(rn *RealNodeState) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	killCgroupProcesses(rn.CgroupRoot)
	killShims(rn.Dir)
	errs = append(errs, unmountUnder(rn.Dir))
	if err := run(ctx, "ip", "link", "del", rn.Bridge); err != nil && linkExists(rn.Bridge) {
		errs = append(errs, err)
	}
	for forwardGuard(ctx, "-D", rn.Bridge) == nil { // every copy, should one be left from a crash
	}
	if rn.RoutedServices {
		teardownRoutedServices(ctx)
	}
	errs = append(errs, removeCgroupRootWhenEmpty(rn.CgroupRoot, 10*time.Second))
	return errors.Join(errs...)
}

// removeCgroupRootWhenEmpty retries removeCgroupRoot for up to timeout: a cgroup
// stays busy until the processes just killed in it have exited, which SIGKILL does
// not wait for.
func removeCgroupRootWhenEmpty(root string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := removeCgroupRoot(root)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// killShims SIGKILLs the containerd shims of this node: they outlive
// containerd by design, and each names containerd's socket in its arguments.
func killShims(nodeDir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range procs {
		cmdline, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(cmdline), ContainerdShim) || !strings.Contains(string(cmdline), nodeDir) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(path, "/proc/%d/cmdline", &pid); err == nil {
			_ = killPid(pid)
		}
	}
}

// unmountUnder detaches every mount point below dir, deepest first: the
// pods' volumes and rootfs, network namespaces, overlay snapshots.
func unmountUnder(dir string) error {
	mounts, err := mountPointsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := unmountDetach(mounts[i]); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mounts[i], err))
		}
	}
	return errors.Join(errs...)
}
