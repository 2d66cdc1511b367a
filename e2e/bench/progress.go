package bench

// Progress mode (issue 14): N TrainJobs' pods Running for the whole run, every pod
// POSTing its training progress to the controller's progress server once per
// interval with a token minted for it, as the kubelet mints the projected one; a
// burst of TrainJobs admitted with no reports, then the same burst during the
// reports.

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
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
// namespace a quarter of the way in, and measure the window.
func (r *runner) runProgress(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	res := newResult(cfg)
	if err := r.installRuntime(ctx); err != nil {
		return nil, err
	}
	namespaces := progressNamespaces(cfg.Namespaces)
	for _, ns := range append(slices.Clone(namespaces), quietNamespace, loadedNamespace, quietAfterNamespace) {
		if err := r.createNamespace(ctx, ns); err != nil {
			return nil, err
		}
	}
	addrs, err := cluster.FreeAddrs(1)
	if err != nil {
		return nil, err
	}
	progressAddr := addrs[0]
	ctrl, _, err := r.startController(ctx, "--status-server-bind-address="+progressAddr)
	if err != nil {
		return nil, err
	}
	defer ctrl.Stop()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	sampler := newSampler(ctrl, r.cluster.ComponentPids())
	peakHeap := sampler.watchHeap(watchCtx)

	// The reporting TrainJobs, their pods Running, the CA each namespace's pods mount.
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
	created := burst(ctx, cfg.N, cfg.Parallelism, r.createTrainJobIn(func(i int) string { return namespaces[i%len(namespaces)] }, false))
	if created.Errors == cfg.N {
		return nil, fmt.Errorf("every TrainJob create failed: %w", created.FirstError)
	}
	wantPods := (cfg.N - created.Errors) * int(cfg.NumNodes)
	if err := waitCount(ctx, cfg.Timeout, running, wantPods, func(n int) { r.say("%d/%d pods Running", n, wantPods) }); err != nil {
		return nil, err
	}
	stopPods()
	r.say("%d pods Running", wantPods)
	caPEM, err := r.waitCAConfigMaps(ctx, namespaces)
	if err != nil {
		return nil, err
	}
	reporters, err := r.listReporters(ctx, namespaces)
	if err != nil {
		return nil, err
	}
	r.say("minting %d pod-bound tokens", len(reporters))
	minted := burst(ctx, len(reporters), cfg.Parallelism, func(ctx context.Context, i int) error {
		var err error
		reporters[i].token, err = mintPodToken(ctx, r.kube.CoreV1().ServiceAccounts(reporters[i].namespace), reporters[i])
		return err
	})
	if minted.Errors > 0 {
		return nil, fmt.Errorf("%d of %d TokenRequests failed: %w", minted.Errors, len(reporters), minted.FirstError)
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

	// The reporting window.
	client, dials, err := newReportClient(caPEM, progressAddr, len(reporters))
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
	start, err := sampler.take(ctx)
	if err != nil {
		return nil, err
	}
	rssBefore := start.peakRSS
	profiled := make(chan error, 1)
	if cfg.CPUProfile > 0 {
		go func() { profiled <- ctrl.CPUProfile(ctx, cfg.CPUProfile, filepath.Join(cfg.OutDir, "cpu.pprof")) }()
	} else {
		profiled <- nil
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	r.say("%d pods report every %v for %v", len(reporters), cfg.ReportInterval, cfg.ReportDuration)
	gen := startLoad(loadCtx, client, reporters, cfg.ReportInterval, cfg.ReportDuration)
	if err := sleepCtx(ctx, cfg.ReportDuration/4); err != nil {
		return nil, err
	}
	with, err := r.admissionBurst(ctx, watchCtx, sampler, loadedNamespace, "with reports")
	if err != nil {
		return nil, err
	}
	with.StartSeconds = round3(with.start.Sub(gen.start).Seconds())
	if err := sleepCtx(ctx, time.Until(gen.start.Add(cfg.ReportDuration))); err != nil {
		return nil, err
	}
	end, err := sampler.take(ctx)
	if err != nil {
		return nil, err
	}
	stopLoad()
	logs := gen.wait()
	stopSeries()
	points := series()
	changes, last := statuses.snapshot()
	r.say("reporting window over; %s", end.describe())

	// Admission with no reports again, once the last coalesced reports are written: the
	// machine's drift and noise show as the difference between the two.
	if err := sleepCtx(ctx, defaultWriteLimits.period); err != nil {
		return nil, err
	}
	if _, _, err := sampler.untilIdle(ctx, 0); err != nil {
		return nil, err
	}
	after, err := r.admissionBurst(ctx, watchCtx, sampler, quietAfterNamespace, "without reports, after")
	if err != nil {
		return nil, err
	}
	if err := <-profiled; err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	if cfg.CPUProfile > 0 {
		if err := ctrl.HeapProfile(ctx, filepath.Join(cfg.OutDir, "heap.pprof")); err != nil {
			return nil, fmt.Errorf("heap profile: %w", err)
		}
	}

	window := end.metrics.At.Sub(gen.start)
	p := &Progress{
		Pods: len(reporters), Namespaces: len(namespaces), CreateErrors: created.Errors,
		ReportIntervalSeconds: cfg.ReportInterval.Seconds(), WritePeriodSeconds: defaultWriteLimits.period.Seconds(),
		WindowSeconds: round3(window.Seconds()), TokenSeconds: round3(minted.Seconds()),
		Client: reportClientFigures(logs, window, int(gen.skipped.Load()), gen.firstError()),
		Server: reportServerFigures(start.metrics, end.metrics),
		Writes: writeFigures(start.metrics, end.metrics, changes, last, window, defaultWriteLimits.period, end.metrics.At,
			gapTolerance+writeRoundTrip(start.metrics, end.metrics)),
		WithoutReports:      without,
		WithReports:         with,
		WithoutReportsAfter: after,
		WriteCeiling:        round3(writeCeiling(perNamespace(cfg.N-created.Errors, len(namespaces)), defaultWriteLimits.period, defaultWriteLimits.qps, defaultWriteLimits.nsQPS)),
		WriteLimitsQPS:      defaultWriteLimits.qps,
		WriteLimitsNSQPS:    defaultWriteLimits.nsQPS,
	}
	p.Client.Connections = int(dials.Load())
	p.PeakRSSBeforeBytes = rssBefore
	if base := p.baseline().Admission.TrainJobsPerSecond; base > 0 {
		p.AdmissionRatio = round3(with.Admission.TrainJobsPerSecond / base)
	}
	res.Progress = p
	res.Controller = controllerFigures(start, end, cfg.N)
	res.Controller.PeakHeapBytes = max(peakHeap(), res.Controller.HeapBytes)
	res.Stages = stageFigures(start.metrics, end.metrics)
	res.Components = end.componentCPU(start)
	res.Machine = machineFigures(start, end, res.CPUs)
	p.Cores = cores(res.Components, window)
	r.timeline = &timeline{progress: newProgressTimeline(gen.start, logs, points, p)}
	res.Targets = evaluateTargets(res)
	return res, nil
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

// trainerStatuses records, per reporting TrainJob, when the benchmark's watch saw its
// status.trainerStatus.lastUpdatedTime change, and its latest value.
type trainerStatuses struct {
	mu      sync.Mutex
	changes map[string][]time.Time
	last    map[string]time.Time // zero until written
}

// watchTrainerStatus watches the TrainJobs of namespaces until ctx ends, one watch per
// namespace so that the API server sends it nothing of the admission bursts.
func watchTrainerStatus(ctx context.Context, client cache.Getter, namespaces []string) (*trainerStatuses, error) {
	s := &trainerStatuses{changes: map[string][]time.Time{}, last: map[string]time.Time{}}
	observe := func(obj any) {
		tj, ok := obj.(*trainer.TrainJob)
		if !ok {
			return
		}
		key := tj.Namespace + "/" + tj.Name
		var at time.Time
		if ts := tj.Status.TrainerStatus; ts != nil && ts.LastUpdatedTime != nil {
			at = ts.LastUpdatedTime.Time
		}
		now := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		prev, known := s.last[key]
		if known && !at.Equal(prev) {
			s.changes[key] = append(s.changes[key], now)
		}
		s.last[key] = at
	}
	for _, ns := range namespaces {
		_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
			ListerWatcher: cache.NewListWatchFromClient(client, "trainjobs", ns, fields.Everything()),
			ObjectType:    &trainer.TrainJob{},
			Handler: cache.ResourceEventHandlerFuncs{
				AddFunc:    observe,
				UpdateFunc: func(_, obj any) { observe(obj) },
			},
		})
		go ctrl.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
			return nil, ctx.Err()
		}
	}
	return s, nil
}

// snapshot copies what was seen: change times and latest lastUpdatedTime per TrainJob.
func (s *trainerStatuses) snapshot() (map[string][]time.Time, map[string]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changes := make(map[string][]time.Time, len(s.changes))
	for k, v := range s.changes {
		changes[k] = slices.Clone(v)
	}
	last := make(map[string]time.Time, len(s.last))
	for k, v := range s.last {
		last[k] = v
	}
	return changes, last
}

// seriesPoint is one scrape of the progress counters during the window.
type seriesPoint struct {
	At               time.Time
	Reports, Writes  float64
	Coalesced        float64
	TokenReviewsMiss float64
}

// record scrapes the controller every period until ctx ends; the returned func, to be
// called after ctx ended, gives the points.
func (s *sampler) record(ctx context.Context, every time.Duration) func() []seriesPoint {
	var points []seriesPoint
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if m, err := s.ctrl.Scrape(ctx); err == nil {
				points = append(points, seriesPoint{
					At:               m.At,
					Reports:          m.Value(metrics.ProgressReportsTotal, nil),
					Writes:           m.Value(metrics.ProgressWritesTotal, nil),
					Coalesced:        m.Value(metrics.ProgressReportsCoalescedTotal, nil),
					TokenReviewsMiss: m.Value(metrics.ProgressTokenReviewsTotal, Labels{metrics.LabelCached: "false"}),
				})
			}
			if sleepCtx(ctx, every) != nil {
				return
			}
		}
	}()
	return func() []seriesPoint {
		<-done
		return points
	}
}
