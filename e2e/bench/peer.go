package bench

import (
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
	// Note is written at the head of the report and into result.json, e.g. that
	// a run is a smoke run on a shared machine.
	Note string
}

func (c *PeerConfig) defaults() error {
	if len(c.Sizes) == 0 {
		c.Sizes = DefaultPeerSizes
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
	c.Mode, c.N = ModeAdmission, max(slices.Max(c.Sizes), c.LifecycleN)
	return c.Config.defaults()
}

// PeerResult is peer mode's result.json. Each figure is per controller; Ratios
// are Trainyard's over upstream's.
type PeerResult struct {
	Mode            string    `json:"mode"`
	Note            string    `json:"note,omitempty"`
	Upstream        string    `json:"upstream"`
	Rounds          int       `json:"rounds"`
	Parallelism     int       `json:"parallelism"`
	NumNodes        int32     `json:"numNodes"`
	ControllerQPS   float32   `json:"controllerQPS"`
	ControllerBurst int32     `json:"controllerBurst"`
	StartedAt       time.Time `json:"startedAt"`
	CPUs            int       `json:"cpus"`
	GoVersion       string    `json:"goVersion"`
	// Loads are the admission loads by size, then the lifecycle load.
	Loads []PeerLoad `json:"loads"`
	// Ratios are Trainyard ÷ upstream, keyed by figure and load (see peerRatios);
	// a figure that is 0 for upstream has none.
	Ratios map[string]float64 `json:"ratios"`
	// RSSSlopes is how each controller's peak RSS grows between consecutive
	// admission sizes (issue 17's item 4 asks for it from 2,000 to 10,000 to 50,000).
	RSSSlopes []RSSSlope `json:"rssSlopes,omitempty"`
	Targets   []Target   `json:"targets"`
}

// RSSSlope is the growth of peak RSS from admission size From to size To, in
// bytes per 1,000 TrainJobs (with their JobSets), for each controller.
type RSSSlope struct {
	From      int     `json:"from"`
	To        int     `json:"to"`
	Trainyard float64 `json:"trainyardBytesPer1000"`
	Upstream  float64 `json:"upstreamBytesPer1000"`
}

// rssSlopes computes the RSSSlopes between consecutive admission loads of
// increasing size.
func rssSlopes(loads []PeerLoad) []RSSSlope {
	var out []RSSSlope
	var prev *PeerLoad
	for i := range loads {
		l := &loads[i]
		if l.Mode != ModeAdmission {
			continue
		}
		if prev != nil && l.N > prev.N {
			per1000 := 1000 / float64(l.N-prev.N)
			out = append(out, RSSSlope{
				From: prev.N, To: l.N,
				Trainyard: round3(float64(l.Trainyard.PeakRSSBytes-prev.Trainyard.PeakRSSBytes) * per1000),
				Upstream:  round3(float64(l.Upstream.PeakRSSBytes-prev.Upstream.PeakRSSBytes) * per1000),
			})
		}
		prev = l
	}
	return out
}

// PeerLoad is one load met by both controllers: each run in the order run,
// and the figures of each controller over its runs.
type PeerLoad struct {
	// Name is "admission-<N>" or "lifecycle-<N>".
	Name string `json:"name"`
	Mode string `json:"mode"`
	N    int    `json:"n"`
	// Limit is the API server alone taking the same creates and applies (of the
	// JobSets of Trainyard's last run), measured right after it; admission loads only.
	Limit     *Limit      `json:"limit,omitempty"`
	Runs      []PeerRun   `json:"runs"`
	Trainyard PeerFigures `json:"trainyard"`
	Upstream  PeerFigures `json:"upstream"`
}

// PeerRun is one controller meeting one load once, in its own namespace,
// deleted (and gone) before the next run starts.
type PeerRun struct {
	Controller string `json:"controller"`
	Round      int    `json:"round"`
	Namespace  string `json:"namespace"`
	// Idle is false when the controller still worked peerIdleLimit after the
	// last TrainJob arrived; its figures then end there.
	Idle   bool    `json:"idle"`
	Result *Result `json:"result"`
}

// PeerFigures is one controller's figures for one load: means over its runs,
// except the peaks, which are the highest. Rates are per second, times
// seconds, CPU seconds per 1,000 TrainJobs of the load, sizes bytes.
type PeerFigures struct {
	Runs int `json:"runs"`
	// Throughput is TrainJobs admitted (JobSet exists) per second from the first
	// create, or with lifecycle, finished per second.
	Throughput float64 `json:"throughput"`
	// LatencyP50/P99: created → JobSet exists, or with lifecycle → Complete.
	LatencyP50 float64 `json:"latencyP50"`
	LatencyP99 float64 `json:"latencyP99"`
	// RequestsPerTrainJob are the controller's API requests by verb (HTTP method).
	RequestsPerTrainJob map[string]float64 `json:"requestsPerTrainJob"`
	WritesPerTrainJob   float64            `json:"writesPerTrainJob"`
	// FailedSyncs are failed stage syncs (Trainyard) or reconciles (upstream).
	FailedSyncs float64 `json:"failedSyncs"`
	// Errors are failed creates and Failed TrainJobs.
	Errors             float64 `json:"errors"`
	ControllerCPU      float64 `json:"controllerCPUPer1000"`
	APIServerCPU       float64 `json:"apiserverCPUPer1000"`
	EtcdCPU            float64 `json:"etcdCPUPer1000"`
	ControlPlaneCPU    float64 `json:"controlPlaneCPUPer1000"`
	PeakRSSBytes       int64   `json:"peakRSSBytes"`
	PeakHeapBytes      int64   `json:"peakHeapInuseBytes"`
	MachineBusyCPU     float64 `json:"machineBusyCPUPer1000"`
	MachineUtilisation float64 `json:"machineUtilisation"`
}

// peerFigures summarises the runs of controller name in runs.
func peerFigures(runs []PeerRun, name string) PeerFigures {
	var f PeerFigures
	f.RequestsPerTrainJob = map[string]float64{}
	for _, run := range runs {
		if run.Controller != name || run.Result == nil {
			continue
		}
		r := run.Result
		f.Runs++
		per1000 := 1000 / float64(max(r.N, 1))
		if l := r.Lifecycle; l != nil {
			if l.Seconds > 0 {
				f.Throughput += float64(l.Finished) / l.Seconds
			}
			f.LatencyP50 += l.LatencyP50
			f.LatencyP99 += l.LatencyP99
			f.Errors += float64(l.Failed)
		} else if a := r.Admission; a != nil {
			f.Throughput += a.TrainJobsPerSecond
			f.LatencyP50 += a.LatencyP50
			f.LatencyP99 += a.LatencyP99
		}
		if a := r.Admission; a != nil {
			f.Errors += float64(a.CreateErrors)
		}
		for verb, v := range r.Controller.Requests {
			f.RequestsPerTrainJob[verb] += v / float64(max(r.N, 1))
		}
		f.WritesPerTrainJob += r.Controller.WritesPerTrainJob
		f.FailedSyncs += sum(r.Controller.Errors)
		f.ControllerCPU += r.Controller.CPUSecondsPer1000
		f.APIServerCPU += r.Components[cluster.KubeAPIServer] * per1000
		f.EtcdCPU += r.Components[cluster.Etcd] * per1000
		f.MachineBusyCPU += r.Machine.BusyCPUSeconds * per1000
		f.MachineUtilisation += r.Machine.Utilisation
		f.PeakRSSBytes = max(f.PeakRSSBytes, r.Controller.PeakRSSBytes)
		f.PeakHeapBytes = max(f.PeakHeapBytes, r.Controller.PeakHeapBytes)
	}
	if f.Runs == 0 {
		return f
	}
	k := float64(f.Runs)
	for _, p := range []*float64{&f.Throughput, &f.LatencyP50, &f.LatencyP99, &f.WritesPerTrainJob, &f.FailedSyncs, &f.Errors,
		&f.ControllerCPU, &f.APIServerCPU, &f.EtcdCPU, &f.MachineBusyCPU, &f.MachineUtilisation} {
		*p = round3(*p / k)
	}
	for verb, v := range f.RequestsPerTrainJob {
		f.RequestsPerTrainJob[verb] = round3(v / k)
	}
	f.ControlPlaneCPU = round3(f.APIServerCPU + f.EtcdCPU)
	return f
}

// peerRatios computes Trainyard ÷ upstream for every load's figures, keyed
// "<figure>_<N>" for admission loads (admission_throughput_2000,
// admission_p99_2000, controller_cpu_per_1000_2000, peak_rss_10000, ...) and
// "lifecycle_<figure>" for the lifecycle load, plus controller_cpu_per_1000
// and control_plane_cpu_per_1000 over every admission run of either
// controller together (CPU seconds per 1,000 TrainJobs admitted). A figure
// that is 0 for upstream gets no ratio.
func peerRatios(loads []PeerLoad) map[string]float64 {
	out := map[string]float64{}
	put := func(key string, ty, up float64) {
		if up != 0 {
			out[key] = round3(ty / up)
		}
	}
	var cpu, plane [2]float64 // CPU seconds per TrainJob, summed over admission runs: trainyard, upstream
	var admitted [2]float64
	for _, l := range loads {
		ty, up := l.Trainyard, l.Upstream
		if l.Mode == ModeLifecycle {
			put("lifecycle_throughput", ty.Throughput, up.Throughput)
			put("lifecycle_p50", ty.LatencyP50, up.LatencyP50)
			put("lifecycle_p99", ty.LatencyP99, up.LatencyP99)
			put("lifecycle_writes_per_trainjob", ty.WritesPerTrainJob, up.WritesPerTrainJob)
			put("lifecycle_controller_cpu_per_1000", ty.ControllerCPU, up.ControllerCPU)
			put("lifecycle_control_plane_cpu_per_1000", ty.ControlPlaneCPU, up.ControlPlaneCPU)
			put("lifecycle_apiserver_cpu_per_1000", ty.APIServerCPU, up.APIServerCPU)
			put("lifecycle_etcd_cpu_per_1000", ty.EtcdCPU, up.EtcdCPU)
			put("lifecycle_peak_rss", float64(ty.PeakRSSBytes), float64(up.PeakRSSBytes))
			put("lifecycle_peak_heap", float64(ty.PeakHeapBytes), float64(up.PeakHeapBytes))
			continue
		}
		n := fmt.Sprint(l.N)
		put("admission_throughput_"+n, ty.Throughput, up.Throughput)
		put("admission_p50_"+n, ty.LatencyP50, up.LatencyP50)
		put("admission_p99_"+n, ty.LatencyP99, up.LatencyP99)
		put("writes_per_trainjob_"+n, ty.WritesPerTrainJob, up.WritesPerTrainJob)
		put("controller_cpu_per_1000_"+n, ty.ControllerCPU, up.ControllerCPU)
		put("apiserver_cpu_per_1000_"+n, ty.APIServerCPU, up.APIServerCPU)
		put("etcd_cpu_per_1000_"+n, ty.EtcdCPU, up.EtcdCPU)
		put("control_plane_cpu_per_1000_"+n, ty.ControlPlaneCPU, up.ControlPlaneCPU)
		put("peak_rss_"+n, float64(ty.PeakRSSBytes), float64(up.PeakRSSBytes))
		put("peak_heap_"+n, float64(ty.PeakHeapBytes), float64(up.PeakHeapBytes))
		for i, f := range []PeerFigures{ty, up} {
			k := float64(f.Runs * l.N)
			cpu[i] += f.ControllerCPU / 1000 * k
			plane[i] += f.ControlPlaneCPU / 1000 * k
			admitted[i] += k
		}
	}
	if admitted[0] > 0 && admitted[1] > 0 {
		put("controller_cpu_per_1000", cpu[0]/admitted[0], cpu[1]/admitted[1])
		put("control_plane_cpu_per_1000", plane[0]/admitted[0], plane[1]/admitted[1])
	}
	return out
}

// Issue 17's targets that peer mode measures.
const (
	targetPeerThroughput      = 3.5  // × upstream
	targetPeerLimitRatio      = 0.95 // × the API server's SSA limit
	targetPeerP99             = 0.25 // × upstream, at 2,000
	targetPeerControlPlane    = 0.7  // × upstream
	targetPeerCPUPer1000      = 0.8  // s
	targetPeerCPURatio        = 0.2  // × upstream
	targetPeerRSSBytes        = 110 << 20
	targetPeerRSSAtN          = 10000
	targetPeerP99AtN          = 2000
	targetPeerLifecycleWrites = 3.0
)

// evaluatePeerTargets states issue 17's targets against r's loads and ratios.
func evaluatePeerTargets(r *PeerResult) []Target {
	var ts []Target
	add := func(name, target, measured string, met bool, note string) {
		ts = append(ts, Target{Name: name, Target: target, Measured: measured, Met: met, Note: note})
	}
	for _, l := range r.Loads {
		ty, up := l.Trainyard, l.Upstream
		n := fmt.Sprint(l.N)
		if l.Mode == ModeLifecycle {
			add("lifecycle writes per TrainJob to Complete", fmt.Sprintf("≤ %.0f", targetPeerLifecycleWrites),
				fmt.Sprintf("%.2f (upstream %.2f)", ty.WritesPerTrainJob, up.WritesPerTrainJob), ty.WritesPerTrainJob <= targetPeerLifecycleWrites, "")
			continue
		}
		ratio := r.Ratios["admission_throughput_"+n]
		add("admission throughput, N = "+n, fmt.Sprintf("≥ %.1f× upstream", targetPeerThroughput),
			fmt.Sprintf("%.0f/s vs %.0f/s: %.2f×", ty.Throughput, up.Throughput, ratio), ratio >= targetPeerThroughput, "")
		if l.Limit != nil && l.Limit.TrainJobsPerSecondWithApply > 0 {
			lr := ty.Throughput / l.Limit.TrainJobsPerSecondWithApply
			add("admission throughput vs the SSA limit, N = "+n, fmt.Sprintf("≥ %.2f× limit", targetPeerLimitRatio),
				fmt.Sprintf("%.0f/s vs %.0f/s: %.2f×", ty.Throughput, l.Limit.TrainJobsPerSecondWithApply, lr), lr >= targetPeerLimitRatio,
				"limit = N / (raw TrainJob creates + raw JobSet server-side applies), measured after Trainyard's last run of the load")
		}
		if l.N == targetPeerP99AtN {
			p := r.Ratios["admission_p99_"+n]
			add("admission p99, N = "+n, fmt.Sprintf("≤ %.2f× upstream", targetPeerP99),
				fmt.Sprintf("%.2f s vs %.2f s: %.2f×", ty.LatencyP99, up.LatencyP99, p), p <= targetPeerP99, "")
		}
		cp := r.Ratios["control_plane_cpu_per_1000_"+n]
		add("control-plane CPU per 1,000, N = "+n, fmt.Sprintf("≤ %.1f× upstream", targetPeerControlPlane),
			fmt.Sprintf("%.2f s vs %.2f s: %.2f×", ty.ControlPlaneCPU, up.ControlPlaneCPU, cp), cp <= targetPeerControlPlane, "kube-apiserver + etcd")
		c := r.Ratios["controller_cpu_per_1000_"+n]
		add("controller CPU per 1,000, N = "+n, fmt.Sprintf("≤ %.1f s and ≤ %.1f× upstream", targetPeerCPUPer1000, targetPeerCPURatio),
			fmt.Sprintf("%.2f s vs %.2f s: %.2f×", ty.ControllerCPU, up.ControllerCPU, c), ty.ControllerCPU <= targetPeerCPUPer1000 && c <= targetPeerCPURatio, "")
		if l.N == targetPeerRSSAtN {
			add("peak RSS, N = "+n, fmt.Sprintf("≤ %d MiB", targetPeerRSSBytes>>20),
				fmt.Sprintf("%s (upstream %s)", mib(ty.PeakRSSBytes), mib(up.PeakRSSBytes)), ty.PeakRSSBytes <= targetPeerRSSBytes, "")
		}
	}
	return ts
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

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
	// The JobSet controller starts only for the lifecycle load, after the admission loads.
	opts := clusterOptions(cfg.RepoRoot, cfg.OutDir, cfg.Progress, ModePeer, cfg.LifecycleN*int(cfg.NumNodes))
	opts.WithoutJobSetController = true
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
	p := &peerRunner{runner: r, upstream: upstream, rounds: cfg.Rounds, timelines: map[string]*timeline{}}
	for _, n := range cfg.Sizes {
		load, err := p.load(ctx, ModeAdmission, n)
		if err != nil {
			return nil, err
		}
		res.Loads = append(res.Loads, *load)
	}
	if cfg.LifecycleN > 0 {
		say("starting the JobSet controller for the lifecycle load")
		if err := c.StartJobSetController(ctx); err != nil {
			return nil, err
		}
		load, err := p.load(ctx, ModeLifecycle, cfg.LifecycleN)
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
