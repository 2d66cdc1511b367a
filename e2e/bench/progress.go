package bench

// Progress mode (issue 14): N TrainJobs' pods Running for the whole run, every pod
// POSTing its training progress to the controller's progress server once per
// interval with a token minted for it, as the kubelet mints the projected one; a
// burst of TrainJobs admitted with no reports, then the same burst during the
// reports.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
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

// serverArgs are the controller's admission flags of the run: its admission server
// registered over 127.0.0.1 with --webhooks, else none; and the webhook URL ("" when off).
func (r *runner) serverArgs() ([]string, string, error) {
	args := slices.Clone(r.cfg.ControllerArgs)
	if !r.cfg.Webhooks {
		return append(args, "--webhook-bind-address=0"), "", nil
	}
	addrs, err := cluster.FreeAddrs(1)
	if err != nil {
		return nil, "", err
	}
	url := "https://" + addrs[0]
	return append(args, "--webhook-bind-address="+addrs[0], "--webhook-register-url="+url), url, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
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

// reporter is one pod reporting its TrainJob's progress.
type reporter struct {
	namespace, pod, trainJob string
	podUID                   string
	serviceAccount           string
	url                      string
	token                    string
}

// listReporters lists the Running pods of the reporting TrainJobs with the URL the
// controller injected into their trainer container, ordered so that the pods of one
// TrainJob are spread over the interval: every TrainJob's first pod, then every
// second pod, and so on.
func (r *runner) listReporters(ctx context.Context, namespaces []string) ([]reporter, error) {
	type ranked struct {
		reporter
		rank int
	}
	var all []ranked
	for _, ns := range namespaces {
		list, err := r.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			pod := &list.Items[i]
			if pod.Status.Phase != corev1.PodRunning {
				continue
			}
			url := injectedURL(pod)
			if url == "" {
				return nil, fmt.Errorf("pod %s/%s: no %s in container %q: the controller injected no progress URL", ns, pod.Name, wire.EnvServerURL, trainer.ContainerNode)
			}
			rank, _ := strconv.Atoi(pod.Labels[jobsetv1alpha2.JobIndexKey]) // the pod's Job within the JobSet...
			if idx, err := strconv.Atoi(pod.Annotations["batch.kubernetes.io/job-completion-index"]); err == nil {
				rank = rank*1000 + idx // ... and within the Job
			}
			all = append(all, ranked{reporter: reporter{
				namespace: ns, pod: pod.Name, podUID: string(pod.UID), serviceAccount: pod.Spec.ServiceAccountName,
				trainJob: pod.Labels[jobsetv1alpha2.JobSetNameKey], url: url,
			}, rank: rank})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.namespace != b.namespace {
			return a.namespace < b.namespace
		}
		if a.trainJob != b.trainJob {
			return a.trainJob < b.trainJob
		}
		return a.pod < b.pod
	})
	out := make([]reporter, len(all))
	for i := range all {
		out[i] = all[i].reporter
	}
	return out, nil
}

// injectedURL is KUBEFLOW_TRAINER_SERVER_URL of the pod's trainer container.
func injectedURL(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name != trainer.ContainerNode {
			continue
		}
		for _, e := range c.Env {
			if e.Name == wire.EnvServerURL {
				return e.Value
			}
		}
	}
	return ""
}

// tokenRequester is the part of the ServiceAccounts client that mints tokens.
type tokenRequester interface {
	CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// mintPodToken mints the token the kubelet would project into the pod: bound to the
// pod, for its TrainJob's audience.
func mintPodToken(ctx context.Context, sa tokenRequester, rep reporter) (string, error) {
	name := rep.serviceAccount
	if name == "" {
		name = "default"
	}
	tr, err := sa.CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{wire.Audience(rep.namespace, rep.trainJob)},
		ExpirationSeconds: ptr.To[int64](tokenSeconds),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: rep.pod, UID: types.UID(rep.podUID)},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for pod %s/%s: %w", rep.namespace, rep.pod, err)
	}
	return tr.Status.Token, nil
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

// newReportClient is the trainers' HTTPS client: it trusts only caPEM and sends every
// request to addr, the controller's 127.0.0.1 address, whatever the URL's host (the
// in-cluster Service name, kept as the TLS server name). One transport for every pod,
// keeping up to conns idle connections so that a connection is reused from one
// report to the next. The counter counts the connections dialled.
func newReportClient(caPEM []byte, addr string, conns int) (*http.Client, *atomic.Int64, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("the CA ConfigMap holds no PEM certificate: %q", caPEM)
	}
	dials := &atomic.Int64{}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout: 10 * time.Second,
		// Twice the pods: a connection dialled while another came free is kept too.
		MaxIdleConns: 2 * conns, MaxIdleConnsPerHost: 2 * conns,
		IdleConnTimeout: time.Minute,
	}}, dials, nil
}

// reportLog is one report sent.
type reportLog struct {
	// At is when it was sent, in seconds from the window's start.
	At float64
	// Latency is the time to the response's end, in seconds.
	Latency float64
	// Code is the HTTP status, 0 for a transport error.
	Code int
	// First is the pod's first report: its token is reviewed, not found in the cache.
	First bool
}

// loadGen is the reporting pods: one goroutine per pod.
type loadGen struct {
	start    time.Time
	duration time.Duration
	wg       sync.WaitGroup
	logs     [][]reportLog
	skipped  atomic.Int64
	mu       sync.Mutex
	firstErr string
}

// startLoad starts every reporter: pod i reports at start + i/len(reps) × interval +
// k × interval for k = 0, 1, ... until ctx ends, so the pods' reports are spread evenly
// over the interval. A pod that falls a whole interval behind skips the ticks it
// missed, as a trainer's timer would.
func startLoad(ctx context.Context, client *http.Client, reps []reporter, interval, duration time.Duration) *loadGen {
	g := &loadGen{start: time.Now(), duration: duration, logs: make([][]reportLog, len(reps))}
	for i := range reps {
		phase := interval * time.Duration(i) / time.Duration(len(reps))
		g.wg.Go(func() { g.logs[i] = g.report(ctx, client, reps[i], phase, interval) })
	}
	return g
}

func (g *loadGen) report(ctx context.Context, client *http.Client, rep reporter, phase, interval time.Duration) []reportLog {
	logs := make([]reportLog, 0, int(g.duration/interval)+2)
	for k := 0; ; k++ {
		at := g.start.Add(phase + time.Duration(k)*interval)
		if d := time.Until(at); d > 0 {
			if sleepCtx(ctx, d) != nil {
				return logs
			}
		} else if -d >= interval {
			g.skipped.Add(1)
			continue
		}
		sent := time.Now()
		code, err := postReport(ctx, client, rep, reportBody(sent.Sub(g.start), g.duration, sent))
		if ctx.Err() != nil {
			return logs // cut off by the window's end: not a failure
		}
		if err != nil {
			g.noteError(err.Error())
		}
		logs = append(logs, reportLog{At: sent.Sub(g.start).Seconds(), Latency: time.Since(sent).Seconds(), Code: code, First: len(logs) == 0})
	}
}

func (g *loadGen) noteError(msg string) {
	g.mu.Lock()
	if g.firstErr == "" {
		g.firstErr = msg
	}
	g.mu.Unlock()
}

func (g *loadGen) firstError() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.firstErr
}

// wait waits for every reporter to stop (after ctx ended) and returns the logs.
func (g *loadGen) wait() [][]reportLog {
	g.wg.Wait()
	return g.logs
}

// reportBody is a trainer's report elapsed into a run of duration: progress rising
// from 0 to 100, the remaining time falling, a loss decaying, lastUpdatedTime now at
// the second precision the API server stores.
func reportBody(elapsed, duration time.Duration, now time.Time) []byte {
	frac := min(max(elapsed.Seconds()/duration.Seconds(), 0), 1)
	return fmt.Appendf(nil, `{"trainerStatus":{"progressPercentage":%d,"estimatedRemainingSeconds":%d,`+
		`"metrics":[{"name":"loss","value":"%.4f"}],"lastUpdatedTime":%q}}`,
		int(100*frac), int(math.Ceil((1-frac)*duration.Seconds())), 2*math.Exp(-3*frac), now.UTC().Truncate(time.Second).Format(time.RFC3339))
}

// postReport POSTs body to the reporter's URL with its token and returns the status
// code; an error with a code is the start of the body of a refusal.
func postReport(ctx context.Context, client *http.Client, rep reporter, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rep.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+rep.token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode, fmt.Errorf("%s/%s: %s: %s", rep.namespace, rep.pod, resp.Status, msg)
	}
	_, err = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused
	return resp.StatusCode, err
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

// reportClientFigures sums up the reports sent during a window of the given length.
func reportClientFigures(logs [][]reportLog, window time.Duration, skipped int, firstError string) ReportClient {
	c := ReportClient{Refused: map[string]int{}, Skipped: skipped, FirstError: firstError}
	var all, first, later []float64
	for _, pod := range logs {
		for _, l := range pod {
			c.Sent++
			switch l.Code {
			case 0:
				c.TransportErrors++
				continue
			case http.StatusOK:
				c.Accepted++
			default:
				c.Refused[strconv.Itoa(l.Code)]++
			}
			all = append(all, l.Latency)
			if l.First {
				first = append(first, l.Latency)
			} else {
				later = append(later, l.Latency)
			}
		}
	}
	for _, s := range [][]float64{all, first, later} {
		sort.Float64s(s)
	}
	c.SentPerSecond = round3(float64(c.Sent) / window.Seconds())
	c.AcceptedPerSecond = round3(float64(c.Accepted) / window.Seconds())
	c.LatencyP50, c.LatencyP99 = round4(percentile(all, 50)), round4(percentile(all, 99))
	if len(all) > 0 {
		c.LatencyMax = round4(all[len(all)-1])
	}
	c.FirstLatencyP99, c.LaterLatencyP99 = round4(percentile(first, 99)), round4(percentile(later, 99))
	return c
}

// reportServerFigures are the progress server's counters between two scrapes.
func reportServerFigures(before, after *Snapshot) ReportServer {
	d := func(name string, sel Labels) float64 { return after.Value(name, sel) - before.Value(name, sel) }
	s := ReportServer{
		Reports:      d(metrics.ProgressReportsTotal, nil),
		Rejected:     deltaByLabel(before, after, metrics.ProgressReportsRejectedTotal, metrics.LabelReason, nil),
		TokenReviews: deltaByLabel(before, after, metrics.ProgressTokenReviewsTotal, metrics.LabelResult, Labels{metrics.LabelCached: "false"}),
		CachedTokens: d(metrics.ProgressTokenReviewsTotal, Labels{metrics.LabelCached: "true"}),
		Coalesced:    d(metrics.ProgressReportsCoalescedTotal, nil),
		Dropped:      deltaByLabel(before, after, metrics.ProgressReportsDroppedTotal, metrics.LabelReason, nil),
	}
	s.Accepted = s.Reports - sum(s.Rejected)
	if decisions := s.CachedTokens + sum(s.TokenReviews); decisions > 0 {
		s.CacheHitRatio = round4(s.CachedTokens / decisions)
	}
	h := after.Histogram(metrics.ProgressReportDurationSeconds, nil).Sub(before.Histogram(metrics.ProgressReportDurationSeconds, nil))
	s.DurationP50, s.DurationP99 = round4(h.Quantile(0.5)), round4(h.Quantile(0.99))
	return s
}

// deltaByLabel is after − before of name by label, the non-zero differences only.
func deltaByLabel(before, after *Snapshot, name, label string, sel Labels) map[string]float64 {
	b := before.ByLabel(name, label, sel)
	out := map[string]float64{}
	for k, v := range after.ByLabel(name, label, sel) {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// writeRoundTrip is the progress stage's sync time p99 between two scrapes: how much
// later than its start a trainerStatus write may land.
func writeRoundTrip(before, after *Snapshot) time.Duration {
	sel := Labels{metrics.LabelStage: progress.Name}
	q := after.Histogram(metrics.StageDurationSeconds, sel).Sub(before.Histogram(metrics.StageDurationSeconds, sel)).Quantile(0.99)
	if math.IsNaN(q) {
		return 0
	}
	return time.Duration(q * float64(time.Second))
}

// writeFigures are the trainerStatus writes of a window of the given length ending at
// end: the controller's counters between two scrapes, and what the benchmark's watch
// saw per TrainJob (changes: when lastUpdatedTime changed; last: its value at the end,
// zero for a TrainJob never written). The controller starts a TrainJob's writes at
// least a period apart; a gap the watch sees shorter than period − tolerance (the
// watch's delivery jitter and a write's round trip) counts as a short gap.
func writeFigures(before, after *Snapshot, changes map[string][]time.Time, last map[string]time.Time, window, period time.Duration, end time.Time, tolerance time.Duration) StatusWrites {
	w := StatusWrites{
		Succeeded: after.Value(metrics.ProgressWritesTotal, Labels{metrics.LabelResult: metrics.ProgressWriteSuccess}) -
			before.Value(metrics.ProgressWritesTotal, Labels{metrics.LabelResult: metrics.ProgressWriteSuccess}),
		Failed: after.Value(metrics.ProgressWritesTotal, Labels{metrics.LabelResult: metrics.ProgressWriteError}) -
			before.Value(metrics.ProgressWritesTotal, Labels{metrics.LabelResult: metrics.ProgressWriteError}),
		TrainJobs:           len(last),
		GapToleranceSeconds: round3(tolerance.Seconds()),
	}
	periods := window.Seconds() / period.Seconds()
	w.PerSecond = round3(w.Succeeded / window.Seconds())
	minGap := math.Inf(1)
	for _, times := range changes {
		if len(times) == 0 {
			continue
		}
		w.Written++
		w.Observed += len(times)
		for i := 1; i < len(times); i++ {
			gap := times[i].Sub(times[i-1])
			minGap = min(minGap, gap.Seconds())
			if gap < period-tolerance {
				w.ShortGaps++
			}
		}
	}
	if !math.IsInf(minGap, 1) {
		w.MinGapSeconds = round3(minGap)
	}
	if n := float64(max(len(last), 1)); w.TrainJobs > 0 {
		w.PerTrainJobPerPeriod = round3(w.Succeeded / n / periods)
		// Each TrainJob's first write comes at once; every later one at least a period
		// after the one before, so at most window/period of them fit in the window.
		w.LaterPerSecond = round3(max(w.Succeeded-float64(w.Written), 0) / window.Seconds())
		w.LaterPerTrainJobPerPeriod = round3(max(w.Succeeded-float64(w.Written), 0) / n / periods)
	}
	var ages []float64
	for _, at := range last {
		if at.IsZero() {
			w.NeverWritten++
			continue
		}
		ages = append(ages, end.Sub(at).Seconds())
	}
	sort.Float64s(ages)
	w.AgeP50, w.AgeP99 = round3(percentile(ages, 50)), round3(percentile(ages, 99))
	if len(ages) > 0 {
		w.AgeMax = round3(ages[len(ages)-1])
	}
	return w
}
