package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// State is the content of <StateDir>/state.json: enough to find and stop a
// cluster whose owner process is gone.
type State struct {
	StartedAt  time.Time `json:"startedAt"`
	OwnerPid   int       `json:"ownerPid"` // the process that ran Up
	Detached   bool      `json:"detached"`
	WorkDir    string    `json:"workDir"`
	Kubeconfig string    `json:"kubeconfig"`
	LogDir     string    `json:"logDir"`
	Server     string    `json:"server,omitempty"`
	// KubeVersion is the Kubernetes minor version, "1.37" (Options.KubeVersion).
	KubeVersion string         `json:"kubeVersion,omitempty"`
	Processes   []ProcessState `json:"processes"`
	// RealNode is what the real node changed on the host (bridge, cgroups,
	// mounts), for Down to undo; nil without one.
	RealNode *RealNodeState `json:"realNode,omitempty"`
}

// ProcessState describes one started component.
type ProcessState struct {
	Name   string `json:"name"`
	Pid    int    `json:"pid"` // also its process group id
	Binary string `json:"binary"`
	Log    string `json:"log"`
	Ports  []int  `json:"ports,omitempty"`
}

// Live returns the recorded processes that still run their binary.
func (s *State) Live() []ProcessState {
	var live []ProcessState
	for _, p := range s.Processes {
		if processRuns(p.Pid, p.Binary) {
			live = append(live, p)
		}
	}
	return live
}

const stateFile = "state.json"

// ReadState reads <stateDir>/state.json; the error wraps fs.ErrNotExist
// when there is none.
func ReadState(stateDir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, stateFile))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(stateDir, stateFile), err)
	}
	return &s, nil
}

// writeState atomically rewrites the state file from the current processes.
// It holds c.mu throughout, so concurrent starts never interleave writes.
func (c *Cluster) writeState() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := State{
		StartedAt: c.startedAt, OwnerPid: os.Getpid(), Detached: c.opts.Detach,
		WorkDir: c.workDir, Kubeconfig: c.kubeconfig, LogDir: c.opts.LogDir,
		KubeVersion: c.opts.KubeVersion, RealNode: c.realNode,
	}
	if c.ports[KubeAPIServer] != 0 {
		s.Server = c.serverURL()
	}
	for _, p := range c.procs {
		s.Processes = append(s.Processes, ProcessState{Name: p.name, Pid: p.pid, Binary: p.binary, Log: p.logPath, Ports: p.ports})
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(c.opts.StateDir, stateFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("writing state file: %w", err)
	}
	return os.Rename(tmp, path)
}

// prepareStateDir creates StateDir and LogDir, refuses to go on if a live
// cluster is recorded there, cleans up after a dead one, and truncates the
// previous run's component logs.
func prepareStateDir(opts Options) error {
	for _, dir := range []string{opts.StateDir, opts.LogDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	s, err := ReadState(opts.StateDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case len(s.Live()) > 0:
		return fmt.Errorf("a cluster recorded in %s is still running (pids %v): stop it with `localcluster down --state-dir %s` (make cluster-down) or reuse it with its kubeconfig %s",
			filepath.Join(opts.StateDir, stateFile), livePids(s), opts.StateDir, s.Kubeconfig)
	default:
		fmt.Fprintf(opts.Progress, "cleaning up after a previous cluster that did not shut down (data dir %s)\n", s.WorkDir)
		if err := DownFromState(opts.StateDir, io.Discard); err != nil {
			return err
		}
	}
	for _, name := range components {
		if err := os.Remove(filepath.Join(opts.LogDir, name+".log")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(filepath.Join(opts.StateDir, auditLogFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func livePids(s *State) []int {
	var pids []int
	for _, p := range s.Live() {
		pids = append(pids, p.Pid)
	}
	return pids
}

// DownFromState stops a cluster from its state file alone, for when the
// process that started it is gone (a detached `localcluster up`, or a test
// binary that was killed). Each recorded process still running its recorded
// binary gets SIGTERM to its process group, then SIGKILL after 10s; the data
// folder, state file and kubeconfig are removed. A missing state file is not
// an error. Progress lines go to out.
func DownFromState(stateDir string, out io.Writer) error {
	s, err := ReadState(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(out, "no cluster recorded in %s\n", stateDir)
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range slices.Backward(s.Processes) {
		if !processRuns(p.Pid, p.Binary) {
			continue
		}
		fmt.Fprintf(out, "stopping %s (pid %d)\n", p.Name, p.Pid)
		if err := stopGroup(p, stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	var ports []int
	for _, p := range s.Processes {
		ports = append(ports, p.Ports...)
	}
	if err := waitPortsFree(ports, 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	if s.RealNode != nil {
		errs = append(errs, teardownRealNode(s.RealNode))
	}
	if s.WorkDir != "" && strings.HasPrefix(filepath.Base(s.WorkDir), workDirPrefix) {
		if err := os.RemoveAll(s.WorkDir); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeStateFiles(stateDir))
	return errors.Join(errs...)
}

// stopGroup stops a process that is not our child: it cannot be waited
// for, so /proc is polled.
func stopGroup(p ProcessState, grace time.Duration) error {
	killGroup(p.Pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for processAlive(p.Pid) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	killGroup(p.Pid, syscall.SIGKILL)
	for range 50 {
		if !processAlive(p.Pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.Pid)
}

// removeStateFiles removes the state file and the admin kubeconfig, which
// would otherwise point at a dead API server.
func removeStateFiles(stateDir string) error {
	var errs []error
	for _, name := range []string{stateFile, "kubeconfig"} {
		if err := os.Remove(filepath.Join(stateDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
