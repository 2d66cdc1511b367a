package bench

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// ModePeer runs the admission and lifecycle loads against Trainyard and against
// upstream Kubeflow Trainer's controller manager in turn, on one control plane,
// interleaved (issue 17): see RunPeer.
const ModePeer = "peer"

// Peer mode's defaults (issue 17).
var (
	DefaultPeerSizes = []int{2000, 10000}
	// DefaultPeerLifecycleN is the lifecycle load: TrainJobs run to Complete.
	DefaultPeerLifecycleN = 500
	// DefaultPeerRounds is how often each controller meets each load: 2 is
	// Trainyard, upstream, Trainyard, upstream.
	DefaultPeerRounds = 2
)

// peerIdleLimit bounds the wait for a controller to go idle after its burst: a
// controller that keeps requeueing would never be (the run is then marked so).
const peerIdleLimit = time.Minute

// PeerConfig is a peer-mode run. Config supplies the common settings
// (Parallelism, NumNodes, QPS and Burst for both controllers, RepoRoot, OutDir,
// Timeout per load, Progress); its Mode and N are ignored.
type PeerConfig struct {
	Config
	// Sizes are the admission loads, in order (default DefaultPeerSizes).
	Sizes []int
	// LifecycleN is the lifecycle load (default DefaultPeerLifecycleN; negative: none).
	LifecycleN int
	// Rounds is how often each controller meets each load (default DefaultPeerRounds).
	Rounds int
	// KueueN is the Kueue load (issue 27): TrainJobs through real Kueue, one
	// ClusterQueue with quota for Config.Quota of them at a time (default
	// DefaultKueueQuota), each run to Complete; 0 or negative: none. With KueueN set
	// and no Sizes, the run has no admission loads.
	KueueN int
	// Note is written at the head of the report and into result.json, e.g. that
	// a run is a smoke run on a shared machine.
	Note string
}

func (c *PeerConfig) defaults() error {
	if len(c.Sizes) == 0 && c.KueueN <= 0 {
		c.Sizes = DefaultPeerSizes
	}
	if c.KueueN > 0 {
		c.Quota = cmp.Or(c.Quota, DefaultKueueQuota)
		if c.Quota < 0 {
			return fmt.Errorf("quota %d: want a positive number of TrainJobs", c.Quota)
		}
	}
	if c.LifecycleN == 0 {
		c.LifecycleN = DefaultPeerLifecycleN
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultPeerRounds
	}
	for _, n := range c.Sizes {
		if n <= 0 {
			return fmt.Errorf("admission sizes %v: want positive sizes", c.Sizes)
		}
	}
	if c.Rounds < 0 {
		return fmt.Errorf("rounds %d: want at least 1", c.Rounds)
	}
	c.Mode, c.N = ModeAdmission, max(slices.Max(append([]int{0}, c.Sizes...)), c.LifecycleN, c.KueueN)
	return c.Config.defaults()
}

// RunPeer runs peer mode (issue 17) on one cluster of its own: for each
// admission size, then the lifecycle load, each controller meets the load
// Rounds times, alternating (Trainyard, upstream, Trainyard, upstream), each
// run a fresh controller process on a fresh namespace that is deleted, and
// gone, before the next run starts. Admission runs have the JobSet controller
// off; it is started before the lifecycle runs. It writes result.json,
// report.md and plot.svg/png into cfg.OutDir. Errors are for runs that could
// not measure.
func RunPeer(ctx context.Context, cfg PeerConfig) (*PeerResult, error) {
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
	say("building %s %s (cached in the binary cache after the first build)", cluster.UpstreamTrainer.Module, cluster.UpstreamTrainer.Version)
	upstream, err := buildUpstream(ctx, cfg.RepoRoot, cfg.Progress)
	if err != nil {
		return nil, err
	}
	// The JobSet controller starts only for the lifecycle and Kueue loads, after the
	// admission loads. The Kueue load runs at most Quota TrainJobs at a time.
	pods := cfg.LifecycleN
	if cfg.KueueN > 0 {
		pods = max(pods, cfg.Quota)
	}
	opts := clusterOptions(cfg.RepoRoot, cfg.OutDir, cfg.Progress, ModePeer, pods*int(cfg.NumNodes))
	opts.WithoutJobSetController = true
	// The Kueue load: Kueue, and the audit log that says who wrote what (kueueWrites).
	opts.Kueue, opts.AuditLog = cfg.KueueN > 0, cfg.KueueN > 0
	c, err := cluster.Up(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := c.Down(); err != nil {
			say("stopping the cluster: %v", err)
		}
	}()
	r := &runner{cfg: cfg.Config, say: say, cluster: c, binary: binary}
	if err := r.connect(); err != nil {
		return nil, err
	}
	if err := r.installRuntime(ctx); err != nil {
		return nil, err
	}
	res := &PeerResult{
		Mode: ModePeer, Note: cfg.Note, Upstream: cluster.UpstreamTrainer.Module + " " + cluster.UpstreamTrainer.Version,
		Rounds: cfg.Rounds, Parallelism: cfg.Parallelism, NumNodes: cfg.NumNodes,
		ControllerQPS: cfg.QPS, ControllerBurst: cfg.Burst,
		StartedAt: time.Now().UTC(), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
	}
	p := &peerRunner{runner: r, upstream: upstream, rounds: cfg.Rounds, timelines: map[string]*timeline{}, quota: cfg.Quota}
	for _, n := range cfg.Sizes {
		load, err := p.load(ctx, ModeAdmission, n)
		if err != nil {
			return nil, err
		}
		res.Loads = append(res.Loads, *load)
	}
	if cfg.LifecycleN > 0 || cfg.KueueN > 0 {
		say("starting the JobSet controller for the lifecycle and Kueue loads")
		if err := c.StartJobSetController(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.LifecycleN > 0 {
		load, err := p.load(ctx, ModeLifecycle, cfg.LifecycleN)
		if err != nil {
			return nil, err
		}
		res.Loads = append(res.Loads, *load)
	}
	if cfg.KueueN > 0 {
		load, err := p.load(ctx, ModeKueue, cfg.KueueN)
		if err != nil {
			return nil, err
		}
		res.Loads = append(res.Loads, *load)
	}
	res.Ratios = peerRatios(res.Loads)
	res.RSSSlopes = rssSlopes(res.Loads)
	res.Targets = evaluatePeerTargets(res)
	if err := writePeerOutputs(cfg.OutDir, res, p.timelines); err != nil {
		return res, err
	}
	return res, nil
}

// peerRunner runs the loads of RunPeer.
type peerRunner struct {
	*runner
	upstream string
	rounds   int
	// timelines are the first round's timelines, keyed "<load>/<controller>", for the plot.
	timelines map[string]*timeline
	// quota is the Kueue load's ClusterQueue quota, in TrainJobs.
	quota int
}

// load runs one load Rounds times against each controller, alternating.
func (p *peerRunner) load(ctx context.Context, mode string, n int) (*PeerLoad, error) {
	l := &PeerLoad{Name: fmt.Sprintf("%s-%d", mode, n), Mode: mode, N: n}
	for round := 1; round <= p.rounds; round++ {
		for _, name := range []string{controllerTrainyard, controllerUpstream} {
			ns := fmt.Sprintf("peer-%s-%d-%s", l.Name, round, name)
			p.say("%s, round %d of %d: %s", l.Name, round, p.rounds, name)
			run, tl, err := p.run(ctx, name, ns, mode, n)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d, %s: %w", l.Name, round, name, err)
			}
			run.Round = round
			l.Runs = append(l.Runs, *run)
			if round == 1 {
				p.timelines[l.Name+"/"+name] = tl
			}
			last := round == p.rounds && name == controllerTrainyard
			if last && mode == ModeAdmission {
				if l.Limit, err = p.peerLimit(ctx, ns, n); err != nil {
					return nil, err
				}
			}
			if err := p.deleteNamespaces(ctx, ns); err != nil {
				return nil, err
			}
		}
	}
	l.Trainyard = peerFigures(l.Runs, controllerTrainyard)
	l.Upstream = peerFigures(l.Runs, controllerUpstream)
	return l, nil
}

// run starts controller name, times one burst of n TrainJobs into the new
// namespace ns against it, and stops it.
func (p *peerRunner) run(ctx context.Context, name, ns, mode string, n int) (*PeerRun, *timeline, error) {
	if err := p.createNamespace(ctx, ns); err != nil {
		return nil, nil, err
	}
	logPath := filepath.Join(p.cfg.OutDir, "logs", ns+".log")
	var ctrl *controllerProcess
	var err error
	if name == controllerTrainyard {
		ctrl, err = startControllerProcess(ctx, p.binary, p.cluster.Kubeconfig(), logPath, p.cfg.QPS, p.cfg.Burst, false, p.cfg.ControllerEnv,
			append(slices.Clone(p.cfg.ControllerArgs), "--webhook-bind-address=0")...)
	} else {
		ctrl, err = startUpstreamController(ctx, p.upstream, p.cluster, filepath.Join(p.cfg.OutDir, "logs", "upstream"), logPath, p.cfg.QPS, p.cfg.Burst)
	}
	if err != nil {
		return nil, nil, err
	}
	defer ctrl.Stop()
	if mode == ModeKueue {
		return p.runKueue(ctx, name, ns, ctrl, n)
	}
	m, err := p.measure(ctx, ctrl, ns, n, mode == ModeLifecycle, peerIdleLimit)
	if err != nil {
		return nil, nil, err
	}
	res := &Result{
		Mode: mode, N: n, Parallelism: p.cfg.Parallelism, NumNodes: p.cfg.NumNodes,
		ControllerQPS: p.cfg.QPS, ControllerBurst: p.cfg.Burst, StartedAt: time.Now().UTC(),
		CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
	}
	m.fill(res)
	return &PeerRun{Controller: name, Namespace: ns, Idle: m.idle, Result: res}, m.timeline, nil
}

// runKueue is the Kueue load's run of controller name (running as ctrl): a
// ClusterQueue of its own with quota for p.quota TrainJobs, admitting from namespace
// ns only, a LocalQueue in ns, then n TrainJobs submitted to it and run to Complete
// while kueueRecorder watches what Kueue and the controller do; who wrote what comes
// from the audit log, cut to ns.
func (p *peerRunner) runKueue(ctx context.Context, name, ns string, ctrl *controllerProcess, n int) (*PeerRun, *timeline, error) {
	if err := p.createKueueQueue(ctx, ns, ns, p.quota*int(p.cfg.NumNodes)); err != nil {
		return nil, nil, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rec, err := p.watchKueue(watchCtx, ns)
	if err != nil {
		return nil, nil, err
	}
	p.queueName = kueueQueue
	defer func() { p.queueName = "" }()
	m, err := p.measure(ctx, ctrl, ns, n, true, peerIdleLimit)
	if err != nil {
		return nil, nil, err
	}
	stopWatch()
	res := &Result{
		Mode: ModeKueue, N: n, Parallelism: p.cfg.Parallelism, NumNodes: p.cfg.NumNodes,
		ControllerQPS: p.cfg.QPS, ControllerBurst: p.cfg.Burst, StartedAt: time.Now().UTC(),
		CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
	}
	m.fill(res)
	res.Kueue = kueueFigures(m.created, rec.record(), p.quota, p.cfg.NumNodes)
	events, err := cluster.ReadAuditLog(p.cluster.AuditLogPath())
	if err != nil {
		return nil, nil, fmt.Errorf("reading the audit log: %w", err)
	}
	res.Kueue.WritesPerTrainJob = kueueWrites(events, ns, n)
	p.say("%s through Kueue: %d finished in %.1f s; %.2f writes per TrainJob; unsuspend → JobSet unsuspended %s",
		name, res.Kueue.Finished, res.Kueue.Seconds, res.Controller.WritesPerTrainJob, res.Kueue.UnsuspendToJobSetUnsuspended)
	return &PeerRun{Controller: name, Namespace: ns, Idle: m.idle, Result: res}, m.timeline, nil
}

// peerLimit measures the API server's limit for n TrainJobs and the JobSets in
// namespace from, with no controller running, into three namespaces it
// deletes afterwards.
func (p *peerRunner) peerLimit(ctx context.Context, from string, n int) (*Limit, error) {
	ns := limitNamespaces{from + "-raw-trainjobs", from + "-raw-jobsets", from + "-raw-applies"}
	for _, name := range []string{ns.trainJobs, ns.jobSets, ns.applies} {
		if err := p.createNamespace(ctx, name); err != nil {
			return nil, err
		}
	}
	l, err := p.limit(ctx, from, n, ns)
	if err != nil {
		return nil, err
	}
	return l, p.deleteNamespaces(ctx, ns.trainJobs, ns.jobSets, ns.applies)
}

// deleteNamespaces deletes the namespaces and waits until they are gone, with
// every object in them, so the next run's controller lists none of them and
// the API server and etcd are done deleting.
func (p *peerRunner) deleteNamespaces(ctx context.Context, names ...string) error {
	start := time.Now()
	for _, name := range names {
		err := p.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, p.cfg.Timeout, true, func(ctx context.Context) (bool, error) {
			_, err := p.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		if err != nil {
			return fmt.Errorf("waiting for namespace %s to be deleted: %w", name, err)
		}
	}
	p.say("deleted %s in %.1fs", strings.Join(names, ", "), time.Since(start).Seconds())
	return nil
}
