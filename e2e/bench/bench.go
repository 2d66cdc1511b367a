// Package bench is Trainyard's scale benchmark (issue 9): on the local
// control plane it creates N TrainJobs on the upstream torch-distributed
// runtime as one burst and measures, from the outside and from the
// controller's /metrics, how fast and how cheaply the controller turns them
// into JobSets (admission) and, in a second mode, drives them to Complete
// (lifecycle). In admission mode it also measures the physical limit: the
// time the API server alone needs for the same N TrainJob creates and N
// creates of the JobSets the controller produced, at the same parallelism,
// with no controller running. A third mode (progress, issue 14) keeps N
// TrainJobs' pods Running and has every pod report its training progress to
// the controller's progress server, measuring the reports, the trainerStatus
// writes they cost and admission throughput with and without them
// (progress.go). A fourth (kueue, issue 16) runs N TrainJobs through real
// Kueue with quota for some of them at a time, each to Complete, and measures
// the quota held, Trainyard's writes, and how soon Trainyard acts on Kueue's
// unsuspend (kueue.go). A fifth (ttl, issue 40) gives N finished TrainJobs a
// ttlSecondsAfterFinished and measures the controller with and without the TTLs
// pending, and how late each deletion comes (ttl.go).
//
// Each run writes result.json, report.md and plot.svg to its output folder.
// `make bench` runs it; see e2e/cmd/bench for the flags.
//
// Files: bench.go is Run and its Config; setup.go the cluster, runtime,
// namespaces and controller a mode starts with; measure.go, figures.go,
// load.go, scrape.go and proc.go the measurement; controller.go and
// upstream.go the controller processes; result.go, targets.go, report.go and
// plot.go the outputs. Each mode has files named after it, with its run and
// the figures, targets, report sections and plot that are its alone:
// admission.go (and restart.go), lifecycle.go, progress*.go, kueue*.go,
// writes*.go, peer*.go and ttl.go.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"k8s.io/client-go/kubernetes"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
)

// Modes.
const (
	// ModeAdmission times TrainJob → JobSet alone: the JobSet controller and
	// its webhooks are not running, so nothing else acts on the JobSets.
	ModeAdmission = "admission"
	// ModeLifecycle runs everything (JobSet, Job controller, scheduler, kwok
	// completing pods) and counts the controller's API writes per TrainJob
	// until every TrainJob is Complete.
	ModeLifecycle = "lifecycle"
	// ModeProgress runs everything with N TrainJobs' pods Running for the whole run,
	// every pod POSTing its progress to the controller's progress server (issue 14),
	// and times a burst of TrainJobs with and without the reports (progress.go).
	ModeProgress = "progress"
)

// Config is one benchmark run.
type Config struct {
	// Mode is ModeAdmission, ModeLifecycle, ModeProgress, ModeKueue or ModeTTL.
	Mode string
	// N is the number of TrainJobs in the burst.
	N int
	// Parallelism is the number of creates the benchmark keeps in flight,
	// for the burst and for the raw-create limit alike.
	Parallelism int
	// NumNodes is spec.trainer.numNodes of every TrainJob (pods per TrainJob).
	NumNodes int32
	// QPS and Burst are the controller's client limits.
	QPS   float32
	Burst int32
	// RepoRoot is the Trainyard checkout; the controller is built from it.
	RepoRoot string
	// OutDir receives result.json, report.md, plot.svg and the logs.
	OutDir string
	// Timeout bounds the wait for admissions or completions.
	Timeout time.Duration
	// ControllerArgs are extra flags for the controller, e.g. "--stage-workers=status=32".
	ControllerArgs []string
	// ControllerEnv is extra environment of the controller process only (NAME=value),
	// e.g. "GOMEMLIMIT=64MiB"; the benchmark's own environment is every process's.
	ControllerEnv []string
	// Webhooks runs the controller with its admission server registered with the API
	// server over 127.0.0.1 (as `make run`), so every TrainJob create of the burst is
	// reviewed and defaulted; without it the controller serves no admission at all.
	Webhooks bool
	// CPUProfile, when non-zero, runs the controller with --profiling, takes
	// a CPU profile of that long from the start of the burst into
	// <OutDir>/cpu.pprof, and a heap profile once it is idle into
	// <OutDir>/heap.pprof.
	CPUProfile time.Duration
	// Restart (admission mode) stops the controller once it is idle and starts it
	// again with every TrainJob and JobSet present, measuring the restart (Restart).
	Restart bool
	// Progress receives one line per step.
	Progress io.Writer

	// Progress mode only (zero values take the defaults below).
	//
	// ReportInterval is how often every pod reports (default 1s); ReportDuration how
	// long the reporting window lasts (default 60s; longer when the burst of
	// AdmissionN TrainJobs made during it has not been admitted by then).
	ReportInterval, ReportDuration time.Duration
	// AdmissionN is the size of the two admission bursts, without and with reports
	// (default 500).
	AdmissionN int
	// Namespaces spreads the N reporting TrainJobs round-robin over this many
	// namespaces (default 10): the controller's write limits are per namespace and
	// per replica.
	Namespaces int

	// Quota (Kueue mode only) is how many TrainJobs the ClusterQueue admits at a
	// time (default DefaultKueueQuota).
	Quota int

	// IdleWindow (TTL mode only) is how long the idle controller is sampled, without
	// and with the TTLs pending (default DefaultTTLIdleWindow).
	IdleWindow time.Duration
}

func (c *Config) defaults() error {
	switch c.Mode {
	case ModeAdmission, ModeLifecycle:
	case ModeKueue:
		c.Quota = cmp.Or(c.Quota, DefaultKueueQuota)
		if c.Quota < 0 {
			return fmt.Errorf("quota %d: want a positive number of TrainJobs", c.Quota)
		}
	case ModeTTL:
		c.IdleWindow = cmp.Or(c.IdleWindow, DefaultTTLIdleWindow)
		if c.IdleWindow < ttlMinWindow {
			return fmt.Errorf("idle window %v: want at least %v", c.IdleWindow, ttlMinWindow)
		}
	case ModeProgress:
		c.ReportInterval = cmp.Or(c.ReportInterval, time.Second)
		c.ReportDuration = cmp.Or(c.ReportDuration, time.Minute)
		c.AdmissionN = cmp.Or(c.AdmissionN, 500)
		c.Namespaces = cmp.Or(c.Namespaces, 10)
		if c.ReportInterval < 0 || c.ReportDuration < c.ReportInterval || c.AdmissionN < 0 || c.Namespaces < 0 {
			return fmt.Errorf("report interval %v, duration %v, admission burst %d, namespaces %d: want a positive interval no longer than the duration, and no negative count",
				c.ReportInterval, c.ReportDuration, c.AdmissionN, c.Namespaces)
		}
	default:
		return fmt.Errorf("mode %q: want %q, %q, %q, %q or %q", c.Mode, ModeAdmission, ModeLifecycle, ModeProgress, ModeKueue, ModeTTL)
	}
	if c.N <= 0 || c.Parallelism <= 0 || c.NumNodes <= 0 {
		return fmt.Errorf("n, parallelism and numNodes must be positive (got %d, %d, %d)", c.N, c.Parallelism, c.NumNodes)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Timeout == 0 {
		c.Timeout = 20 * time.Minute
	}
	return os.MkdirAll(c.OutDir, 0o755)
}

const (
	benchNamespace   = "bench"
	rawTrainJobsNS   = "bench-raw-trainjobs"
	rawJobSetsNS     = "bench-raw-jobsets"
	rawAppliesNS     = "bench-raw-applies"
	runtimeName      = "torch-distributed"
	trainJobNameFmt  = "tj-%05d"
	idleScrapePeriod = time.Second
)

// Run runs one benchmark on a cluster of its own (started here and stopped
// at the end) and writes its results into cfg.OutDir. It returns the
// result even when a target is missed; errors are for runs that could not
// measure (the cluster did not start, creates failed wholesale, the wait
// timed out).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(cfg.Progress, "bench: "+format+"\n", args...)
	}
	binary, err := buildController(ctx, cfg.RepoRoot)
	if err != nil {
		return nil, err
	}
	pods := 0
	if cfg.Mode != ModeAdmission && cfg.Mode != ModeTTL {
		pods = cfg.N * int(cfg.NumNodes)
	}
	opts := clusterOptions(cfg.RepoRoot, cfg.OutDir, cfg.Progress, cfg.Mode, pods)
	// Kueue mode: Kueue, and the audit log that says who wrote what (kueueWrites).
	opts.Kueue, opts.AuditLog = cfg.Mode == ModeKueue, cfg.Mode == ModeKueue
	c, err := cluster.Up(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := c.Down(); err != nil {
			say("stopping the cluster: %v", err)
		}
	}()
	r := &runner{cfg: cfg, say: say, cluster: c, binary: binary}
	if err := r.connect(); err != nil {
		return nil, err
	}
	run := r.run
	switch cfg.Mode {
	case ModeProgress:
		run = r.runProgress
	case ModeKueue:
		run = r.runKueue
	case ModeTTL:
		run = r.runTTL
	}
	res, err := run(ctx)
	if err != nil {
		return nil, err
	}
	if err := writeOutputs(cfg.OutDir, res, r.timeline); err != nil {
		return res, err
	}
	return res, nil
}

type runner struct {
	cfg      Config
	say      func(string, ...any)
	cluster  *cluster.Cluster
	binary   string
	kube     kubernetes.Interface
	trainers trainerclient.Interface
	jobsets  jobsetclient.Interface
	timeline *timeline
	// queueName, when set, is the Kueue LocalQueue every TrainJob created is
	// submitted to (label cluster.KueueQueueNameLabel).
	queueName string
}

func (r *runner) connect() error {
	cfg := r.cluster.RESTConfig()
	// The benchmark's own client must never be the throttle.
	cfg.QPS, cfg.Burst = 5000, 10000
	var err error
	if r.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if r.trainers, err = trainerclient.NewForConfig(cfg); err != nil {
		return err
	}
	r.jobsets, err = jobsetclient.NewForConfig(cfg)
	return err
}

// newResult returns a Result with cfg's settings and the machine's, started now.
func newResult(cfg Config) *Result {
	return &Result{
		Mode: cfg.Mode, N: cfg.N, Parallelism: cfg.Parallelism, NumNodes: cfg.NumNodes,
		ControllerQPS: cfg.QPS, ControllerBurst: cfg.Burst, ControllerArgs: cfg.ControllerArgs,
		ControllerEnv: cfg.ControllerEnv, StartedAt: time.Now().UTC(), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
	}
}
