package bench

// Progress mode (issue 14): N TrainJobs' pods Running for the whole run, every pod
// POSTing its training progress to the controller's progress server once per
// interval with a token minted for it, as the kubelet mints the projected one; a
// burst of TrainJobs admitted with no reports, then the same burst during the
// reports.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

const (
	// progressNamespaceFmt names the namespaces of the reporting TrainJobs.
	progressNamespaceFmt = "bench-progress-%d"
	// The namespaces of the two admission bursts, without and with reports.
	quietNamespace      = "bench-admission-quiet"
	loadedNamespace     = "bench-admission-loaded"
	quietAfterNamespace = "bench-admission-quiet-after"
	// podRunTime is the reporting pods' run time (kwok's complete delay): far beyond
	// any run, so they stay Running.
	podRunTime = "24h"
	// tokenSeconds is the lifetime of the minted tokens, the projected token's.
	tokenSeconds = wire.TokenExpirationSeconds
	// gapTolerance is how much shorter than the write period the gap between two
	// trainerStatus changes of one TrainJob may look to the benchmark's watch for its
	// delivery jitter (a write's round trip is added) before it counts as two writes in
	// one period.
	gapTolerance = time.Second
)

// The controller's default trainerStatus write limits (statusServer in its
// Configuration), which the benchmark runs with.
var defaultWriteLimits = struct {
	period     time.Duration
	qps, nsQPS float64
}{configv1alpha1.DefaultStatusWritePeriod, configv1alpha1.DefaultStatusWriteQPS, configv1alpha1.DefaultStatusNamespaceQPS}

func progressNamespaces(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(progressNamespaceFmt, i)
	}
	return out
}

// runProgress is Run's progress mode: start the controller with its progress server
// on a free 127.0.0.1 port; create the N reporting TrainJobs spread over the
// namespaces and wait for every pod Running and every namespace's CA ConfigMap; mint
// a token per pod; time a burst of AdmissionN suspended TrainJobs with no reports;
// then run the reports for ReportDuration, with the same burst into another
// namespace a quarter of the way in, and measure the window; then the burst with no
// reports again.
func (r *runner) runProgress(ctx context.Context) (*Result, error) {
	res := newResult(r.cfg)
	namespaces := progressNamespaces(r.cfg.Namespaces)
	progressAddr, err := r.progressSetup(ctx, namespaces)
	if err != nil {
		return nil, err
	}
	ctrl, _, err := r.startController(ctx, "--status-server-bind-address="+progressAddr)
	if err != nil {
		return nil, err
	}
	defer ctrl.Stop()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	sampler := newSampler(ctrl, r.cluster.ComponentPids())
	peakHeap := sampler.watchHeap(watchCtx)

	pods, err := r.reportingPods(ctx, namespaces)
	if err != nil {
		return nil, err
	}
	// Admission with no reports, the controller idle before and after.
	if _, _, err := sampler.untilIdle(ctx, 0); err != nil {
		return nil, err
	}
	without, err := r.admissionBurst(ctx, watchCtx, sampler, quietNamespace, "without reports")
	if err != nil {
		return nil, err
	}
	if _, _, err := sampler.untilIdle(ctx, 0); err != nil {
		return nil, err
	}
	win, err := r.reportingWindow(ctx, watchCtx, ctrl, sampler, pods, progressAddr, namespaces)
	if err != nil {
		return nil, err
	}
	after, err := r.burstAfterWindow(ctx, watchCtx, sampler)
	if err != nil {
		return nil, err
	}
	if err := r.finishProfile(ctx, ctrl, win.profiled); err != nil {
		return nil, err
	}
	p := progressFigures(r.cfg, pods, win, without, after)
	res.Progress = p
	res.Controller = controllerFigures(win.start, win.end, r.cfg.N)
	res.Controller.PeakHeapBytes = max(peakHeap(), res.Controller.HeapBytes)
	res.Stages = stageFigures(win.start.metrics, win.end.metrics)
	res.Components = win.end.componentCPU(win.start)
	res.Machine = machineFigures(win.start, win.end, res.CPUs)
	p.Cores = cores(res.Components, win.length())
	r.timeline = &timeline{progress: newProgressTimeline(win.gen.start, win.logs, win.points, p)}
	res.Targets = evaluateTargets(res)
	return res, nil
}

// progressSetup installs the runtime (its pods kept Running), creates the reporting
// namespaces and those of the three admission bursts, and returns a free 127.0.0.1
// address for the controller's progress server.
func (r *runner) progressSetup(ctx context.Context, namespaces []string) (string, error) {
	if err := r.installRuntime(ctx); err != nil {
		return "", err
	}
	for _, ns := range append(slices.Clone(namespaces), quietNamespace, loadedNamespace, quietAfterNamespace) {
		if err := r.createNamespace(ctx, ns); err != nil {
			return "", err
		}
	}
	addrs, err := cluster.FreeAddrs(1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// reportingPods is the reporting TrainJobs' pods, ready to report.
type reportingPods struct {
	// created is the creates of the N TrainJobs, minted the TokenRequests (one per pod).
	created, minted burstResult
	reporters       []reporter
	// caPEM is the progress server's CA bundle, as the pods mount it.
	caPEM []byte
}

// reportingPods creates the N reporting TrainJobs spread round-robin over namespaces,
// waits until every pod is Running and every namespace has the progress server's CA
// ConfigMap, and mints each pod its token. Errors: every create failed, a wait timed
// out, or a TokenRequest failed.
func (r *runner) reportingPods(ctx context.Context, namespaces []string) (*reportingPods, error) {
	cfg := r.cfg
	podsCtx, stopPods := context.WithCancel(ctx)
	defer stopPods()
	running, err := watchArrivals(podsCtx, r.kube.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, &corev1.Pod{},
		func(obj any) (string, bool) {
			p := obj.(*corev1.Pod)
			return p.Namespace + "/" + p.Name, p.Status.Phase == corev1.PodRunning && slices.Contains(namespaces, p.Namespace)
		})
	if err != nil {
		return nil, err
	}
	r.say("creating %d TrainJobs (numNodes %d) over %d namespaces", cfg.N, cfg.NumNodes, len(namespaces))
	pods := &reportingPods{}
	pods.created = burst(ctx, cfg.N, cfg.Parallelism, r.createTrainJobIn(func(i int) string { return namespaces[i%len(namespaces)] }, false))
	if pods.created.Errors == cfg.N {
		return nil, fmt.Errorf("every TrainJob create failed: %w", pods.created.FirstError)
	}
	wantPods := (cfg.N - pods.created.Errors) * int(cfg.NumNodes)
	if err := waitCount(ctx, cfg.Timeout, running, wantPods, func(n int) { r.say("%d/%d pods Running", n, wantPods) }); err != nil {
		return nil, err
	}
	stopPods()
	r.say("%d pods Running", wantPods)
	if pods.caPEM, err = r.waitCAConfigMaps(ctx, namespaces); err != nil {
		return nil, err
	}
	if pods.reporters, err = r.listReporters(ctx, namespaces); err != nil {
		return nil, err
	}
	reporters := pods.reporters
	r.say("minting %d pod-bound tokens", len(reporters))
	pods.minted = burst(ctx, len(reporters), cfg.Parallelism, func(ctx context.Context, i int) error {
		var err error
		reporters[i].token, err = mintPodToken(ctx, r.kube.CoreV1().ServiceAccounts(reporters[i].namespace), reporters[i])
		return err
	})
	if pods.minted.Errors > 0 {
		return nil, fmt.Errorf("%d of %d TokenRequests failed: %w", pods.minted.Errors, len(reporters), pods.minted.FirstError)
	}
	return pods, nil
}

// window is what the reporting window measured.
type window struct {
	gen *loadGen
	// logs are each pod's reports; points the progress counters scraped every second.
	logs   [][]reportLog
	points []seriesPoint
	// changes and last are what the watch of the reporting TrainJobs saw
	// (trainerStatuses.snapshot).
	changes map[string][]time.Time
	last    map[string]time.Time
	// start and end are the samples at the window's start and end.
	start, end *sample
	// with is the admission burst during the window.
	with *Burst
	// dials counts the connections the pods' transport dialled.
	dials *atomic.Int64
	// profiled receives the CPU profile's outcome (Config.CPUProfile), begun with the
	// window.
	profiled <-chan error
}

// length is the window's length, from the first report to the last sample.
func (w *window) length() time.Duration { return w.end.metrics.At.Sub(w.gen.start) }

// reportingWindow has every pod report every ReportInterval for ReportDuration, runs
// the admission burst with reports a quarter of the way in, and returns what the
// window measured; the CPU profile, with Config.CPUProfile, starts with the window.
// Errors: a scrape, a watch or the burst failed, or ctx ended.
func (r *runner) reportingWindow(ctx, watchCtx context.Context, ctrl *controllerProcess, sampler *sampler, pods *reportingPods, progressAddr string, namespaces []string) (*window, error) {
	cfg := r.cfg
	client, dials, err := newReportClient(pods.caPEM, progressAddr, len(pods.reporters))
	if err != nil {
		return nil, err
	}
	statuses, err := watchTrainerStatus(watchCtx, r.trainers.TrainerV1alpha1().RESTClient(), namespaces)
	if err != nil {
		return nil, err
	}
	seriesCtx, stopSeries := context.WithCancel(ctx)
	defer stopSeries()
	series := sampler.record(seriesCtx, time.Second)
	w := &window{dials: dials}
	if w.start, err = sampler.take(ctx); err != nil {
		return nil, err
	}
	w.profiled = r.startProfile(ctx, ctrl)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	r.say("%d pods report every %v for %v", len(pods.reporters), cfg.ReportInterval, cfg.ReportDuration)
	w.gen = startLoad(loadCtx, client, pods.reporters, cfg.ReportInterval, cfg.ReportDuration)
	if err := sleepCtx(ctx, cfg.ReportDuration/4); err != nil {
		return nil, err
	}
	if w.with, err = r.admissionBurst(ctx, watchCtx, sampler, loadedNamespace, "with reports"); err != nil {
		return nil, err
	}
	w.with.StartSeconds = round3(w.with.start.Sub(w.gen.start).Seconds())
	if err := sleepCtx(ctx, time.Until(w.gen.start.Add(cfg.ReportDuration))); err != nil {
		return nil, err
	}
	if w.end, err = sampler.take(ctx); err != nil {
		return nil, err
	}
	stopLoad()
	w.logs = w.gen.wait()
	stopSeries()
	w.points = series()
	w.changes, w.last = statuses.snapshot()
	r.say("reporting window over; %s", w.end.describe())
	return w, nil
}

// burstAfterWindow is the admission burst with no reports again, once the last
// coalesced reports are written and the controller is idle: the machine's drift and
// noise show as the difference between it and the burst before the window.
func (r *runner) burstAfterWindow(ctx, watchCtx context.Context, sampler *sampler) (*Burst, error) {
	if err := sleepCtx(ctx, defaultWriteLimits.period); err != nil {
		return nil, err
	}
	if _, _, err := sampler.untilIdle(ctx, 0); err != nil {
		return nil, err
	}
	return r.admissionBurst(ctx, watchCtx, sampler, quietAfterNamespace, "without reports, after")
}

// progressFigures is progress mode's figures (Progress, its Cores left to the
// caller) from the reporting pods, the window and the bursts without reports before
// and after it.
func progressFigures(cfg Config, pods *reportingPods, win *window, without, after *Burst) *Progress {
	length, created, start, end := win.length(), pods.created, win.start, win.end
	p := &Progress{
		Pods: len(pods.reporters), Namespaces: cfg.Namespaces, CreateErrors: created.Errors,
		ReportIntervalSeconds: cfg.ReportInterval.Seconds(), WritePeriodSeconds: defaultWriteLimits.period.Seconds(),
		WindowSeconds: round3(length.Seconds()), TokenSeconds: round3(pods.minted.Seconds()),
		Client: reportClientFigures(win.logs, length, int(win.gen.skipped.Load()), win.gen.firstError()),
		Server: reportServerFigures(start.metrics, end.metrics),
		Writes: writeFigures(start.metrics, end.metrics, win.changes, win.last, length, defaultWriteLimits.period, end.metrics.At,
			gapTolerance+writeRoundTrip(start.metrics, end.metrics)),
		WithoutReports:      without,
		WithReports:         win.with,
		WithoutReportsAfter: after,
		WriteCeiling:        round3(writeCeiling(perNamespace(cfg.N-created.Errors, cfg.Namespaces), defaultWriteLimits.period, defaultWriteLimits.qps, defaultWriteLimits.nsQPS)),
		WriteLimitsQPS:      defaultWriteLimits.qps,
		WriteLimitsNSQPS:    defaultWriteLimits.nsQPS,
	}
	p.Client.Connections = int(win.dials.Load())
	p.PeakRSSBeforeBytes = start.peakRSS
	if base := p.baseline().Admission.TrainJobsPerSecond; base > 0 {
		p.AdmissionRatio = round3(win.with.Admission.TrainJobsPerSecond / base)
	}
	return p
}

// perNamespace spreads n TrainJobs round-robin over k namespaces, as the run creates them.
func perNamespace(n, k int) []int {
	out := make([]int, k)
	for i := range n {
		out[i%k]++
	}
	return out
}

// writeCeiling is the trainerStatus writes per second that the controller's write
// limits allow when perNamespace[i] TrainJobs report continuously in namespace i: a
// TrainJob at most once a period, a namespace at most nsQPS, the replica at most qps.
func writeCeiling(perNamespace []int, period time.Duration, qps, nsQPS float64) float64 {
	var sum float64
	for _, n := range perNamespace {
		sum += min(float64(n)/period.Seconds(), nsQPS)
	}
	return min(sum, qps)
}

// cores divides CPU seconds by the wall time.
func cores(cpu map[string]float64, wall time.Duration) map[string]float64 {
	out := make(map[string]float64, len(cpu))
	for name, s := range cpu {
		out[name] = round3(s / wall.Seconds())
	}
	return out
}

// waitCAConfigMaps waits until every namespace has the progress server's CA ConfigMap
// and returns its bundle (the same in every namespace).
func (r *runner) waitCAConfigMaps(ctx context.Context, namespaces []string) ([]byte, error) {
	var pem []byte
	missing := slices.Clone(namespaces)
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for len(missing) > 0 {
			cm, err := r.kube.CoreV1().ConfigMaps(missing[0]).Get(ctx, wire.CAConfigMapName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && cm.Data[wire.CAConfigMapKey] == "") {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			pem = []byte(cm.Data[wire.CAConfigMapKey])
			missing = missing[1:]
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for ConfigMap %s in %v: %w", wire.CAConfigMapName, missing, err)
	}
	return pem, nil
}

// admissionBurst creates AdmissionN suspended TrainJobs in ns (suspended, so the
// JobSet controller makes no pods and both bursts cost the cluster the same) and waits
// until each one's JobSet exists.
func (r *runner) admissionBurst(ctx, watchCtx context.Context, s *sampler, ns, what string) (*Burst, error) {
	seen, err := watchArrivals(watchCtx, r.jobsets.JobsetV1alpha2().RESTClient(), "jobsets", ns, &jobsetv1alpha2.JobSet{},
		func(obj any) (string, bool) { return obj.(*jobsetv1alpha2.JobSet).Name, true })
	if err != nil {
		return nil, err
	}
	before, err := s.take(ctx)
	if err != nil {
		return nil, err
	}
	n := r.cfg.AdmissionN
	r.say("admission %s: %d suspended TrainJobs into %s", what, n, ns)
	created := burst(ctx, n, r.cfg.Parallelism, r.createTrainJobIn(func(int) string { return ns }, true))
	if created.Errors == n {
		return nil, fmt.Errorf("every TrainJob create of the burst %s failed: %w", what, created.FirstError)
	}
	if err := waitCount(ctx, r.cfg.Timeout, seen, n-created.Errors, func(k int) { r.say("%d/%d JobSets", k, n-created.Errors) }); err != nil {
		return nil, err
	}
	after, err := s.take(ctx)
	if err != nil {
		return nil, err
	}
	b := &Burst{Namespace: ns, Admission: *admissionFigures(created, seen, n), Components: after.componentCPU(before),
		Machine: machineFigures(before, after, runtime.NumCPU()), start: created.Start}
	b.latencies = admissionLatencies(created, seen)
	r.say("admission %s: %.0f TrainJobs/s, p99 %.2f s", what, b.Admission.TrainJobsPerSecond, b.Admission.LatencyP99)
	return b, nil
}

// admissionLatencies are the burst's create → JobSet latencies, sorted.
func admissionLatencies(created burstResult, seen *arrivals) []float64 {
	var out []float64
	for i, done := range created.Done {
		if at, ok := seen.At(fmt.Sprintf(trainJobNameFmt, i)); ok && !done.IsZero() {
			out = append(out, at.Sub(done).Seconds())
		}
	}
	sort.Float64s(out)
	return out
}
