package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StartError reports a component that could not be started or never became
// ready. It always names the component and its log file.
type StartError struct {
	Component string
	LogPath   string
	Err       error
	// LogTail holds the last lines of the log, if any, to save a trip to
	// the file in CI output.
	LogTail string
}

func (e *StartError) Error() string {
	msg := fmt.Sprintf("%s: %v (log: %s)", e.Component, e.Err, e.LogPath)
	if e.LogTail != "" {
		msg += "\n--- last lines of " + e.LogPath + " ---\n" + e.LogTail
	}
	return msg
}

func (e *StartError) Unwrap() error { return e.Err }

// ErrPortInUse is wrapped by a [StartError] when a port a component must
// listen on is taken.
var ErrPortInUse = errors.New("port already in use")

// probe reports nil once a component serves; any error means "not yet".
type probe func(ctx context.Context) error

// componentSpec is everything needed to run one component.
type componentSpec struct {
	name    string
	binary  string
	args    []string
	env     []string // added to the parent's environment
	ports   []int    // 127.0.0.1 ports it binds; checked free before start
	ready   probe
	timeout time.Duration // to become ready, from the start of the process
}

// process is a started component. Its pid is also its process group id.
type process struct {
	spec    componentSpec // how it was started, to start it again in place
	name    string
	binary  string
	logPath string
	ports   []int
	pid     int
	exited  chan struct{} // closed when the process has been reaped
	waitErr error         // valid after exited is closed
	stopped sync.Once
}

// startProcess starts spec in its own process group (with detach, its own
// session, whose id is the same number) with stdout and stderr
// appended to logPath, then waits until spec.ready succeeds. If the process
// exits first, or is not ready within spec.timeout, it is stopped and a
// *StartError is returned. With detach false the process also gets SIGKILL
// when this process dies (PR_SET_PDEATHSIG), so even a killed test binary
// leaves no component behind.
//
// onStart, if not nil, is called right after the process started, before the
// readiness wait, so that callers can record the pid.
func startProcess(ctx context.Context, spec componentSpec, logPath string, detach bool, onStart func(*process)) (*process, error) {
	fail := func(err error) error {
		return &StartError{Component: spec.name, LogPath: logPath, Err: err, LogTail: tailFile(logPath, 15)}
	}
	for _, port := range spec.ports {
		if err := checkPortFree(port); err != nil {
			return nil, fail(err)
		}
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fail(fmt.Errorf("opening log: %w", err))
	}
	defer logFile.Close() // the child keeps its own descriptor
	fmt.Fprintf(logFile, "=== %s: %s %s\n", time.Now().Format(time.RFC3339), spec.binary, strings.Join(spec.args, " "))

	cmd := exec.Command(spec.binary, spec.args...)
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if detach {
		// A session of its own: no terminal hang-up or job control reaches it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fail(fmt.Errorf("starting %s: %w", spec.binary, err))
	}
	p := &process{spec: spec, name: spec.name, binary: spec.binary, logPath: logPath, ports: spec.ports, pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if onStart != nil {
		onStart(p)
	}
	if err := p.waitReady(ctx, spec.ready, spec.timeout); err != nil {
		p.stop(stopGrace)
		return nil, fail(err)
	}
	return p, nil
}

// waitReady polls ready every 200ms until it succeeds, the process exits,
// timeout passes or ctx ends.
func (p *process) waitReady(ctx context.Context, ready probe, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		probeCtx, cancelProbe := context.WithTimeout(ctx, 2*time.Second)
		last = ready(probeCtx)
		cancelProbe()
		if last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited before becoming ready: %v", p.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s (last check: %v): %w", timeout, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// stopGrace is how long a component gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// stop signals the process group with SIGTERM, then SIGKILL after grace, and
// waits until the leader is reaped. A final SIGKILL to the group takes any
// stray child with it. Only the first call acts, so that a recycled process
// group id is never signalled.
func (p *process) stop(grace time.Duration) {
	p.stopped.Do(func() {
		killGroup(p.pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
			killGroup(p.pid, syscall.SIGKILL)
			<-p.exited
		}
		killGroup(p.pid, syscall.SIGKILL)
	})
}

// killGroup signals every process of group pgid; a vanished group is fine.
func killGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

// checkPortFree returns an error wrapping ErrPortInUse when 127.0.0.1:port
// cannot be bound.
func checkPortFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("127.0.0.1:%d: %w (%v)", port, ErrPortInUse, err)
	}
	return l.Close()
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago. Holding all listeners until the end keeps them distinct.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tailFile returns up to n last lines of path, or "" if it cannot be read.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Format: pid (comm) state ...; comm may contain spaces or parens.
	i := bytes.LastIndexByte(data, ')')
	return i >= 0 && i+2 < len(data) && data[i+2] != 'Z'
}

// processRuns reports whether pid is alive and still runs binary, which
// guards against signalling a recycled pid.
func processRuns(pid int, binary string) bool {
	if !processAlive(pid) {
		return false
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	if resolved, err := filepath.EvalSymlinks(binary); err == nil {
		binary = resolved
	}
	return exe == binary
}
