// Command pause is the sandbox ("pause") container of the e2e cluster's real
// node, pushed as registry.k8s.io/pause:3.10 by package e2e/images: the process
// that holds a pod's namespaces open while its containers come and go.
//
// As PID 1 of the pod's PID namespace it must not leave zombies (children
// reparented to it are reaped on SIGCHLD) and must stop when the runtime asks
// (SIGTERM or SIGINT: exit 0). Otherwise it only waits. It is built static
// (CGO_ENABLED=0), so the image needs nothing but this binary.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is what -v prints; the image tag it stands in for.
const version = "3.10"

func main() {
	if len(os.Args) > 1 {
		if os.Args[1] == "-v" {
			fmt.Println("pause", version)
			return
		}
		fmt.Fprintln(os.Stderr, "usage: pause [-v]")
		os.Exit(2)
	}
	if os.Getpid() != 1 {
		// Still useful for a test; it just is not the reaper of a PID namespace.
		fmt.Fprintln(os.Stderr, "pause: not PID 1, orphaned processes are not reaped here")
	}
	// Buffered: signals arriving while a reap runs are not lost; a dropped
	// SIGCHLD is harmless since one reap collects every exited child.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every child that has exited, without blocking on those still
// running.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil { // 0: children left, none exited; ECHILD: none at all
			return
		}
	}
}
