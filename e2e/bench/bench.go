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
// unsuspend (kueue.go).
//
// Each run writes result.json, report.md and plot.svg to its output folder.
// `make bench` runs it; see e2e/cmd/bench for the flags.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/stages/status"
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
	// Mode is ModeAdmission, ModeLifecycle, ModeProgress or ModeKueue.
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
}

func (c *Config) defaults() error {
	switch c.Mode {
	case ModeAdmission, ModeLifecycle:
	case ModeKueue:
		c.Quota = cmp.Or(c.Quota, DefaultKueueQuota)
		if c.Quota < 0 {
			return fmt.Errorf("quota %d: want a positive number of TrainJobs", c.Quota)
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
		return fmt.Errorf("mode %q: want %q, %q, %q or %q", c.Mode, ModeAdmission, ModeLifecycle, ModeProgress, ModeKueue)
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

// clusterOptions returns the options of the local control plane a benchmark
// mode runs on: its own state folder (_output/bench/cluster-<mode> under
// repoRoot), logs in outDir/logs, and, for pods > 0, the JobSet controller
// with kwok nodes of 500 pods each, room for every pod at once (kwok nodes are
// free, and a run measures the controller, not a scheduling backlog); for
// pods == 0 neither nodes nor the JobSet controller.
func clusterOptions(repoRoot, outDir string, progress io.Writer, mode string, pods int) cluster.Options {
	opts := cluster.Options{
		StateDir: filepath.Join(repoRoot, "_output", "bench", "cluster-"+mode),
		LogDir:   filepath.Join(outDir, "logs"),
		Progress: progress,
		Nodes:    -1,
	}
	opts.Build.RepoRoot = repoRoot
	if pods == 0 {
		opts.WithoutJobSetController = true
		return opts
	}
	opts.NodeShape = cluster.NodeShape{Pods: 500, CPU: resource.MustParse("1000"), Memory: resource.MustParse("4Ti")}
	opts.Nodes = (pods + 499) / 500
	return opts
}

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
	if cfg.Mode != ModeAdmission {
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

// startController starts the controller binary with Config's flags (serverArgs)
// and extraArgs, logging to <OutDir>/logs/trainyard.log, and with Config.Webhooks
// waits until the API server calls its webhooks. It returns the process and the
// flags beyond the common ones (for a restart with the same). The caller stops it.
func (r *runner) startController(ctx context.Context, extraArgs ...string) (*controllerProcess, []string, error) {
	args, webhookURL, err := r.serverArgs()
	if err != nil {
		return nil, nil, err
	}
	args = append(args, extraArgs...)
	ctrl, err := startControllerProcess(ctx, r.binary, r.cluster.Kubeconfig(), filepath.Join(r.cfg.OutDir, "logs", "trainyard.log"), r.cfg.QPS, r.cfg.Burst, r.cfg.CPUProfile > 0, r.cfg.ControllerEnv, args...)
	if err != nil {
		return nil, nil, err
	}
	if webhookURL != "" {
		if err := r.waitWebhooks(ctx, webhookURL); err != nil {
			ctrl.Stop()
			return nil, nil, err
		}
	}
	return ctrl, args, nil
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	res := newResult(r.cfg)
	if err := r.installRuntime(ctx); err != nil {
		return nil, err
	}
	for _, ns := range []string{benchNamespace, rawTrainJobsNS, rawJobSetsNS, rawAppliesNS} {
		if err := r.createNamespace(ctx, ns); err != nil {
			return nil, err
		}
	}
	ctrl, args, err := r.startController(ctx)
	if err != nil {
		return nil, err
	}
	defer ctrl.Stop()

	m, err := r.measure(ctx, ctrl, benchNamespace, r.cfg.N, r.cfg.Mode == ModeLifecycle, 0)
	if err != nil {
		return nil, err
	}
	m.fill(res)
	if r.cfg.Webhooks {
		res.Admission.Reviews = reviewFigures(m.before.metrics, m.after.metrics)
	}
	r.timeline = m.timeline

	if r.cfg.Mode == ModeAdmission {
		ctrl.Stop()
		if r.cfg.Restart {
			if res.Restart, err = r.measureRestart(ctx, res.Admission.Admitted, args); err != nil {
				return nil, err
			}
		}
		if res.Limit, err = r.measureLimit(ctx); err != nil {
			return nil, err
		}
	}
	res.Targets = evaluateTargets(res)
	return res, nil
}

// measured is one burst against a running controller: what measure saw.
type measured struct {
	created               burstResult
	jobSetsSeen, finished *arrivals
	allArrived            time.Time
	before, after         *sample
	peakHeap              int64
	failed                int
	timeline              *timeline
	n                     int
	lifecycle, idle       bool
}

// measure creates n TrainJobs in namespace ns (which must exist) as one burst
// against the running controller ctrl, waits until each has its JobSet (or,
// with lifecycle, is Complete or Failed), then until the controller is idle
// (for at most idleLimit; 0: no limit), and returns what it saw. With
// Config.CPUProfile it also takes the controller's CPU and heap profiles.
// Errors: every create failed, the wait timed out, a scrape failed.
func (r *runner) measure(ctx context.Context, ctrl *controllerProcess, ns string, n int, lifecycle bool, idleLimit time.Duration) (*measured, error) {
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	jobSetsSeen, err := watchArrivals(watchCtx, r.jobsets.JobsetV1alpha2().RESTClient(), "jobsets", ns, &jobsetv1alpha2.JobSet{},
		func(obj any) (string, bool) { return obj.(*jobsetv1alpha2.JobSet).Name, true })
	if err != nil {
		return nil, err
	}
	finished, err := watchArrivals(watchCtx, r.trainers.TrainerV1alpha1().RESTClient(), "trainjobs", ns, &trainer.TrainJob{},
		func(obj any) (string, bool) {
			tj := obj.(*trainer.TrainJob)
			return tj.Name, meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) ||
				meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed)
		})
	if err != nil {
		return nil, err
	}

	sampler := newSampler(ctrl, r.cluster.ComponentPids())
	before, err := sampler.take(ctx)
	if err != nil {
		return nil, err
	}
	peakHeap := sampler.watchHeap(watchCtx)
	profiled := make(chan error, 1)
	if r.cfg.CPUProfile > 0 {
		go func() { profiled <- ctrl.CPUProfile(ctx, r.cfg.CPUProfile, filepath.Join(r.cfg.OutDir, "cpu.pprof")) }()
	} else {
		profiled <- nil
	}
	mode := ModeAdmission
	if lifecycle {
		mode = ModeLifecycle
	}
	r.say("%s: creating %d TrainJobs with %d in flight (%s)", ctrl.Name, n, r.cfg.Parallelism, mode)
	created := burst(ctx, n, r.cfg.Parallelism, r.createTrainJob(ns))
	if created.Errors == n {
		return nil, fmt.Errorf("every TrainJob create failed: %w", created.FirstError)
	}
	r.say("created in %.1fs (%d errors)", created.Seconds(), created.Errors)

	target, waitFor := jobSetsSeen, "JobSets"
	if lifecycle {
		target, waitFor = finished, "finished TrainJobs"
	}
	want := n - created.Errors
	if err := waitCount(ctx, r.cfg.Timeout, target, want, func(got int) { r.say("%d/%d %s", got, want, waitFor) }); err != nil {
		return nil, err
	}
	m := &measured{created: created, jobSetsSeen: jobSetsSeen, finished: finished, allArrived: time.Now(), before: before, n: n, lifecycle: lifecycle}
	if m.after, m.idle, err = sampler.untilIdle(ctx, idleLimit); err != nil {
		return nil, err
	}
	if m.idle {
		r.say("%s idle; %s", ctrl.Name, m.after.describe())
	} else {
		r.say("%s not idle after %s; %s", ctrl.Name, idleLimit, m.after.describe())
	}
	if err := <-profiled; err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if r.cfg.CPUProfile > 0 {
		if err := ctrl.HeapProfile(ctx, filepath.Join(r.cfg.OutDir, "heap.pprof")); err != nil {
			return nil, fmt.Errorf("heap profile: %w", err)
		}
	}
	m.peakHeap = peakHeap()
	if lifecycle {
		if m.failed, err = r.countFailed(ctx, ns); err != nil {
			return nil, err
		}
	}
	m.timeline = newTimeline(created, jobSetsSeen, finished, mode)
	return m, nil
}

// fill sets res's Admission, Lifecycle, Controller, Stages, Components and
// Machine from m.
func (m *measured) fill(res *Result) {
	res.Admission = admissionFigures(m.created, m.jobSetsSeen, m.n)
	if m.lifecycle {
		res.Lifecycle = lifecycleFigures(m.created, m.finished, m.allArrived)
		res.Lifecycle.Failed = m.failed
	}
	res.Controller = controllerFigures(m.before, m.after, m.n)
	res.Controller.PeakHeapBytes = max(m.peakHeap, res.Controller.HeapBytes)
	res.Stages = stageFigures(m.before.metrics, m.after.metrics)
	res.Components = m.after.componentCPU(m.before)
	res.Machine = machineFigures(m.before, m.after, res.CPUs)
}

// measureLimit times, with no controller running, the same N TrainJob
// creates and N creates of the JobSets the controller produced (listed from
// the API, owner references dropped so the garbage collector leaves them
// alone), each at the benchmark's parallelism, each into a fresh namespace.
func (r *runner) measureLimit(ctx context.Context) (*Limit, error) {
	return r.limit(ctx, benchNamespace, r.cfg.N, limitNamespaces{rawTrainJobsNS, rawJobSetsNS, rawAppliesNS})
}

// limitNamespaces are the three namespaces, existing and empty, that a limit
// measurement creates into: the TrainJobs, the JobSets created, the JobSets applied.
type limitNamespaces struct{ trainJobs, jobSets, applies string }

// limit is measureLimit for the JobSets in namespace from and n TrainJob creates,
// into ns.
func (r *runner) limit(ctx context.Context, from string, n int, ns limitNamespaces) (*Limit, error) {
	list, err := r.jobsets.JobsetV1alpha2().JobSets(from).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	produced := make([]*jobsetv1alpha2.JobSet, 0, len(list.Items))
	for i := range list.Items {
		js := &list.Items[i]
		produced = append(produced, &jobsetv1alpha2.JobSet{
			ObjectMeta: metav1.ObjectMeta{Name: js.Name, Namespace: ns.jobSets, Labels: js.Labels, Annotations: js.Annotations},
			Spec:       js.Spec,
		})
	}
	r.say("raw limit: %d TrainJob creates with no controller", n)
	tjs := burst(ctx, n, r.cfg.Parallelism, r.createTrainJob(ns.trainJobs))
	r.say("raw limit: %d JobSet creates", len(produced))
	jss := burst(ctx, len(produced), r.cfg.Parallelism, func(ctx context.Context, i int) error {
		_, err := r.jobsets.JobsetV1alpha2().JobSets(ns.jobSets).Create(ctx, produced[i], metav1.CreateOptions{})
		return err
	})
	// The controller creates JobSets with server-side apply (as upstream does), which
	// costs the API server more than a create: time the same JobSets applied so, too.
	r.say("raw limit: %d JobSet server-side applies", len(produced))
	apply := status.RESTJobSetApply(r.jobsets.JobsetV1alpha2().RESTClient())
	jsa := burst(ctx, len(produced), r.cfg.Parallelism, func(ctx context.Context, i int) error {
		js := produced[i].DeepCopy()
		js.Namespace = ns.applies
		js.APIVersion, js.Kind = jobsetv1alpha2.SchemeGroupVersion.String(), "JobSet"
		body, err := (&status.Desired{JobSet: js}).JobSetApplyBody()
		if err != nil {
			return err
		}
		return apply(ctx, js.Namespace, js.Name, body)
	})
	l := &Limit{
		TrainJobCreateSeconds: round3(tjs.Seconds()), TrainJobCreateErrors: tjs.Errors,
		JobSetCreateSeconds: round3(jss.Seconds()), JobSetCreateErrors: jss.Errors,
		JobSetApplySeconds: round3(jsa.Seconds()), JobSetApplyErrors: jsa.Errors,
	}
	l.TrainJobCreatesPerSecond = round3(float64(n-tjs.Errors) / tjs.Seconds())
	l.JobSetCreatesPerSecond = round3(float64(len(produced)-jss.Errors) / jss.Seconds())
	l.JobSetAppliesPerSecond = round3(float64(len(produced)-jsa.Errors) / jsa.Seconds())
	l.TrainJobsPerSecond = round3(float64(n) / (tjs.Seconds() + jss.Seconds()))
	l.TrainJobsPerSecondWithApply = round3(float64(n) / (tjs.Seconds() + jsa.Seconds()))
	return l, nil
}

func (r *runner) installRuntime(ctx context.Context) error {
	path := filepath.Join(r.cfg.RepoRoot, "..", "shared", "upstream", "runtimes", "torch_distributed.yaml")
	if _, err := os.Stat(path); err != nil {
		path = filepath.Join(r.cfg.RepoRoot, "examples", "torch-distributed-runtime.yaml")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rt := &trainer.ClusterTrainingRuntime{}
	if err := yaml.UnmarshalStrict(data, rt); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	if rt.Name != runtimeName {
		return fmt.Errorf("%s: runtime %q, want %q", path, rt.Name, runtimeName)
	}
	if r.cfg.Mode == ModeProgress {
		// The reporting pods stay Running for the whole run.
		for i := range rt.Spec.Template.Spec.ReplicatedJobs {
			pod := &rt.Spec.Template.Spec.ReplicatedJobs[i].Template.Spec.Template
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[cluster.AnnotationCompleteDelay] = podRunTime
		}
	}
	_, err = r.trainers.TrainerV1alpha1().ClusterTrainingRuntimes().Create(ctx, rt, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	r.say("runtime %s installed from %s", runtimeName, path)
	return nil
}

func (r *runner) createNamespace(ctx context.Context, name string) error {
	_, err := r.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// createTrainJob returns a create function for burst: TrainJob i, the
// minimal spec a user writes for torch-distributed (runtimeRef, numNodes,
// command), so the figures are about the controller, not a big template.
func (r *runner) createTrainJob(namespace string) func(ctx context.Context, i int) error {
	return r.createTrainJobIn(func(int) string { return namespace }, false)
}

// createTrainJobIn is createTrainJob with TrainJob i in namespace(i), suspended or not.
func (r *runner) createTrainJobIn(namespace func(i int) string, suspend bool) func(ctx context.Context, i int) error {
	return func(ctx context.Context, i int) error {
		ns := namespace(i)
		tj := &trainer.TrainJob{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf(trainJobNameFmt, i), Namespace: ns},
			Spec: trainer.TrainJobSpec{
				RuntimeRef: trainer.RuntimeRef{Name: runtimeName},
				Trainer: &trainer.Trainer{
					NumNodes: ptr.To(r.cfg.NumNodes),
					Command:  []string{"torchrun", "train.py"},
				},
			},
		}
		if suspend {
			tj.Spec.Suspend = ptr.To(true)
		}
		if r.queueName != "" {
			tj.Labels = map[string]string{cluster.KueueQueueNameLabel: r.queueName}
		}
		_, err := r.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, tj, metav1.CreateOptions{})
		return err
	}
}

func (r *runner) countFailed(ctx context.Context, ns string) (int, error) {
	list, err := r.trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	failed := 0
	for i := range list.Items {
		if meta.IsStatusConditionTrue(list.Items[i].Status.Conditions, trainer.TrainJobFailed) {
			failed++
		}
	}
	return failed, nil
}

// waitCount polls until a holds want names, reporting progress every 10s.
func waitCount(ctx context.Context, timeout time.Duration, a *arrivals, want int, progress func(int)) error {
	last := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if time.Since(last) > 10*time.Second {
			progress(a.Len())
			last = time.Now()
		}
		return a.Len() >= want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d arrivals (have %d): %w", want, a.Len(), err)
	}
	return nil
}

// sample is the controller's metrics and the processes' CPU at one moment.
type sample struct {
	// controller names the controller's process in procCPU.
	controller string
	metrics    *Snapshot
	procCPU    map[string]float64
	machineCPU float64
	peakRSS    int64
	// quietSince is, in a sample untilIdle returns idle, when the quiet spell began:
	// the first sample that saw no request since the one before and no busy worker.
	// The controller went idle at most a scrape period before.
	quietSince time.Time
}

func (s *sample) describe() string {
	return fmt.Sprintf("controller CPU %.2fs, peak RSS %.1f MiB", s.procCPU[s.controller], float64(s.peakRSS)/(1<<20))
}

func (s *sample) componentCPU(before *sample) map[string]float64 {
	out := map[string]float64{}
	for name, v := range s.procCPU {
		out[name] = round3(v - before.procCPU[name])
	}
	return out
}

type sampler struct {
	ctrl *controllerProcess
	pids map[string]int
}

func newSampler(ctrl *controllerProcess, components map[string]int) *sampler {
	// The benchmark's own watches decode every JobSet and TrainJob on the same cores:
	// its CPU is part of what the controller competes with, and not in the limit.
	pids := map[string]int{ctrl.Name: ctrl.Pid(), "bench (this process)": os.Getpid()}
	for name, pid := range components {
		pids[name] = pid
	}
	return &sampler{ctrl: ctrl, pids: pids}
}

func (s *sampler) take(ctx context.Context) (*sample, error) {
	m, err := s.ctrl.Scrape(ctx)
	if err != nil {
		return nil, err
	}
	out := &sample{controller: s.ctrl.Name, metrics: m, procCPU: map[string]float64{}}
	for name, pid := range s.pids {
		if cpu, err := ProcCPUSeconds(pid); err == nil {
			out.procCPU[name] = cpu
		}
	}
	if out.machineCPU, err = MachineCPUSeconds(); err != nil {
		return nil, err
	}
	if out.peakRSS, err = ProcPeakRSSBytes(s.ctrl.Pid()); err != nil {
		return nil, err
	}
	return out, nil
}

// watchHeap scrapes the controller's heap in use every second until ctx ends; the
// returned func gives the highest value seen so far (bytes). The heap peaks during
// the burst, while plans wait and watch events are decoded, not at the end.
func (s *sampler) watchHeap(ctx context.Context) func() int64 {
	var peak atomic.Int64
	go func() {
		for {
			if m, err := s.ctrl.Scrape(ctx); err == nil {
				v := int64(m.Value("go_memstats_heap_inuse_bytes", nil))
				for cur := peak.Load(); v > cur && !peak.CompareAndSwap(cur, v); cur = peak.Load() {
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return peak.Load
}

// untilIdle samples every second until the controller has made no API
// request, has no key queued and no worker busy for three samples in a row
// (status updates are batched for a second, so a shorter quiet spell could
// cut off its last writes), and returns the last sample, its quietSince set,
// and true. Busy
// workers are Trainyard's trainyard_stage_inflight or controller-runtime's
// controller_runtime_active_workers (upstream's). With limit > 0 it stops
// after that long and returns the last sample and false: a controller that
// keeps requeueing is never idle.
func (s *sampler) untilIdle(ctx context.Context, limit time.Duration) (*sample, bool, error) {
	var prev float64 = -1
	var quietSince time.Time
	quiet := 0
	start := time.Now()
	for {
		cur, err := s.take(ctx)
		if err != nil {
			return nil, false, err
		}
		requests := cur.metrics.Value(metrics.RESTClientRequestsTotal, nil)
		busy := cur.metrics.Value(metrics.WorkqueueDepth, nil) + cur.metrics.Value(metrics.StageInflight, nil) +
			cur.metrics.Value(controllerRuntimeActiveWorkers, nil)
		if requests == prev && busy == 0 {
			if quiet == 0 {
				quietSince = cur.metrics.At
			}
			quiet++
		} else {
			quiet = 0
		}
		if quiet >= 3 {
			cur.quietSince = quietSince
			return cur, true, nil
		}
		if limit > 0 && time.Since(start) >= limit {
			return cur, false, nil
		}
		prev = requests
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(idleScrapePeriod):
		}
	}
}

// percentile returns the p-th percentile (0–100) of sorted xs by the
// nearest-rank method; NaN for none.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func admissionFigures(created burstResult, seen *arrivals, n int) *Admission {
	a := &Admission{CreateSeconds: round3(created.Seconds()), CreateErrors: created.Errors}
	if created.FirstError != nil {
		a.FirstCreateError = created.FirstError.Error()
	}
	a.TrainJobCreatesPerSecond = round3(float64(n-created.Errors) / created.Seconds())
	var latencies []float64
	var last time.Time
	for i, done := range created.Done {
		at, ok := seen.At(fmt.Sprintf(trainJobNameFmt, i))
		if done.IsZero() || !ok {
			continue
		}
		latencies = append(latencies, at.Sub(done).Seconds())
		if at.After(last) {
			last = at
		}
	}
	sort.Float64s(latencies)
	a.Admitted = len(latencies)
	if a.Admitted == 0 {
		return a
	}
	a.Seconds = round3(last.Sub(created.Start).Seconds())
	a.TrainJobsPerSecond = round3(float64(a.Admitted) / a.Seconds)
	a.LatencyP50 = round3(percentile(latencies, 50))
	a.LatencyP99 = round3(percentile(latencies, 99))
	a.LatencyMax = round3(latencies[len(latencies)-1])
	return a
}

// reviewFigures returns the controller's TrainJob admission reviews between two
// scrapes: count and p50/p99 latency, from trainyard_admission_duration_seconds (time
// in the webhook handler; the API server's round trip adds TLS and the network).
func reviewFigures(before, after *Snapshot) *Reviews {
	sel := Labels{metrics.LabelKind: metrics.AdmissionKindTrainJob}
	h := after.Histogram(metrics.AdmissionDurationSeconds, sel).Sub(before.Histogram(metrics.AdmissionDurationSeconds, sel))
	return &Reviews{Count: int(h.Count), P50Seconds: round3(h.Quantile(0.5)), P99Seconds: round3(h.Quantile(0.99))}
}

// waitWebhooks waits until the API server's TrainJob validator calls url.
func (r *runner) waitWebhooks(ctx context.Context, url string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cfg, err := r.cluster.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "trainyard-validator", metav1.GetOptions{})
		if err != nil || len(cfg.Webhooks) == 0 || cfg.Webhooks[0].ClientConfig.URL == nil {
			return false, nil
		}
		return strings.HasPrefix(*cfg.Webhooks[0].ClientConfig.URL, url+"/"), nil
	})
}

func lifecycleFigures(created burstResult, finished *arrivals, allDone time.Time) *Lifecycle {
	l := &Lifecycle{Seconds: round3(allDone.Sub(created.Start).Seconds())}
	var latencies []float64
	for i, done := range created.Done {
		if at, ok := finished.At(fmt.Sprintf(trainJobNameFmt, i)); ok && !done.IsZero() {
			latencies = append(latencies, at.Sub(done).Seconds())
		}
	}
	sort.Float64s(latencies)
	l.Finished = len(latencies)
	l.LatencyP50 = round3(percentile(latencies, 50))
	l.LatencyP99 = round3(percentile(latencies, 99))
	return l
}

func controllerFigures(before, after *sample, n int) Controller {
	c := Controller{
		CPUSeconds:   round3(after.procCPU[after.controller] - before.procCPU[after.controller]),
		PeakRSSBytes: after.peakRSS,
		HeapBytes:    int64(after.metrics.Value("go_memstats_heap_inuse_bytes", nil)),
		Requests:     map[string]float64{},
		Errors:       map[string]float64{},
		Retries:      map[string]float64{},
	}
	c.CPUSecondsPer1000 = round3(c.CPUSeconds * 1000 / float64(n))
	reqBefore := before.metrics.ByLabel(metrics.RESTClientRequestsTotal, "method", nil)
	for method, v := range after.metrics.ByLabel(metrics.RESTClientRequestsTotal, "method", nil) {
		if d := v - reqBefore[method]; d > 0 {
			c.Requests[method] = d
			if isWrite(method) {
				c.Writes += d
			}
		}
	}
	c.WritesPerTrainJob = round3(c.Writes / float64(n))
	for _, stage := range after.metrics.LabelValues(metrics.StageErrorsTotal, metrics.LabelStage) {
		for _, reason := range after.metrics.LabelValues(metrics.StageErrorsTotal, metrics.LabelReason) {
			sel := Labels{metrics.LabelStage: stage, metrics.LabelReason: reason}
			if d := after.metrics.Value(metrics.StageErrorsTotal, sel) - before.metrics.Value(metrics.StageErrorsTotal, sel); d > 0 {
				c.Errors[stage+"/"+reason] = d
			}
		}
		sel := Labels{metrics.LabelStage: stage}
		if d := after.metrics.Value(metrics.StageRetriesTotal, sel) - before.metrics.Value(metrics.StageRetriesTotal, sel); d > 0 {
			c.Retries[stage] = d
		}
	}
	// controller-runtime's (upstream's) failed reconciles, by controller.
	reconcileErrs := before.metrics.ByLabel(controllerRuntimeReconcileErrors, controllerRuntimeLabelController, nil)
	for name, v := range after.metrics.ByLabel(controllerRuntimeReconcileErrors, controllerRuntimeLabelController, nil) {
		if d := v - reconcileErrs[name]; d > 0 {
			c.Errors[name+"/reconcile_error"] = d
		}
	}
	// A controller that reads its own writes from a lagging cache sees
	// "not found" for what it just created, or conflicts on stale versions.
	for key, v := range c.Errors {
		if strings.HasSuffix(key, "/"+metrics.ReasonNotFound) || strings.HasSuffix(key, "/"+metrics.ReasonConflict) {
			c.CacheLagErrors += v
		}
	}
	return c
}

func stageFigures(before, after *Snapshot) []Stage {
	var out []Stage
	for _, name := range after.LabelValues(metrics.WorkqueueQueueDurationSeconds, metrics.LabelName) {
		q := after.Histogram(metrics.WorkqueueQueueDurationSeconds, Labels{metrics.LabelName: name}).
			Sub(before.Histogram(metrics.WorkqueueQueueDurationSeconds, Labels{metrics.LabelName: name}))
		s := after.Histogram(metrics.StageDurationSeconds, Labels{metrics.LabelStage: name}).
			Sub(before.Histogram(metrics.StageDurationSeconds, Labels{metrics.LabelStage: name}))
		if s.Count == 0 { // a controller-runtime controller's queue: its reconciles
			sel := Labels{controllerRuntimeLabelController: name}
			s = after.Histogram(controllerRuntimeReconcileTime, sel).Sub(before.Histogram(controllerRuntimeReconcileTime, sel))
		}
		out = append(out, Stage{
			Name: name, Syncs: s.Count,
			QueueP50: round4(q.Quantile(0.5)), QueueP99: round4(q.Quantile(0.99)),
			SyncP50: round4(s.Quantile(0.5)), SyncP99: round4(s.Quantile(0.99)),
		})
	}
	order := []string{"resolve_runtime", "merge_patches", "ml_policy", "gang_scheduling", "dra_claims", "status", "progress", "progress_ca"}
	sort.SliceStable(out, func(i, j int) bool {
		return slices.Index(order, out[i].Name) < slices.Index(order, out[j].Name)
	})
	return out
}

func machineFigures(before, after *sample, cpus int) Machine {
	wall := after.metrics.At.Sub(before.metrics.At).Seconds()
	busy := after.machineCPU - before.machineCPU
	return Machine{WallSeconds: round3(wall), BusyCPUSeconds: round3(busy), Utilisation: round3(busy / (wall * float64(cpus)))}
}

func round3(x float64) float64 { return roundTo(x, 1e3) }
func round4(x float64) float64 { return roundTo(x, 1e4) }

func roundTo(x, scale float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*scale) / scale
}
