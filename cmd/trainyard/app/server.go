package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/informers/namespaces"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/gang"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/resolveruntime"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	"github.com/trainyard/trainyard/pkg/version"
)

// EventReporter is the reporting controller of the events Trainyard records.
const EventReporter = "trainyard-trainjob-controller"

// Run runs the controller until ctx is done: it serves metrics and probes at once, syncs
// the informer caches, and runs the pipeline (after winning the Lease when leader
// election is on). It returns nil after a clean shutdown and an error naming what failed
// to start otherwise.
func Run(ctx context.Context, cfg *configv1alpha1.Configuration, opts *Options) error {
	logger, err := newLogger(opts.LogFormat, opts.Verbosity)
	if err != nil {
		return err
	}
	klog.SetLogger(logger)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting Trainyard", "version", version.Version, "gitCommit", version.GitCommit)
	if limit, err := memoryLimit(os.Getenv, cgroupMemoryLimitFiles, debug.SetMemoryLimit); err != nil {
		logger.Error(err, "Leaving the Go runtime's memory limit unset")
	} else if limit > 0 {
		logger.Info("Set the Go runtime's soft memory limit from the container's", "bytes", limit, "ratio", MemoryLimitRatio)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics.RegisterClientMetrics(reg) // before any client exists
	m := metrics.New(reg)
	m.SetBuildInfo(version.Version, version.GitCommit)

	restConfig, err := restConfig(cfg.ClientConnection)
	if err != nil {
		return err
	}
	all, err := newClients(restConfig)
	if err != nil {
		return err
	}
	// What every replica runs — informers, admission, the progress server's status
	// writes, the serving certificate, the Lease itself — uses these.
	kube, trainers, jobsets, dyn, metadataClient := all.kube, all.trainers, all.jobsets, all.dynamic, all.metadata
	// The leader-only work (the pipeline's reads and writes, its events, the CA
	// ConfigMaps) uses its own clients, fenced with leader election: they send no write
	// unless this replica leads and its last Lease renewal is younger than renewDeadline
	// (leaseFence, elector.run). Each client has its own client-side rate limiter
	// (clientConnection.qps/burst), as ever.
	var fence *leaseFence
	leader := all
	if ptrBool(cfg.LeaderElection.LeaderElect) {
		fence = newLeaseFence(clock.RealClock{}, cfg.LeaderElection.RenewDeadline.Duration)
		if leader, err = newClients(fencedConfig(restConfig, fence)); err != nil {
			return err
		}
	}

	// With watchNamespaces, every namespaced informer watches those namespaces only, one
	// watch each: the chart then grants namespaced verbs through Roles there.
	watched := namespaces.Set(cfg.WatchNamespaces)
	if !watched.All() {
		logger.Info("Watching only some namespaces", "namespaces", cfg.WatchNamespaces)
	}
	inf, err := informers.New(trainers, jobsets, 0, watched)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), trainer.AddToScheme(scheme)); err != nil {
		return err
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: leader.kube.EventsV1()})
	recorder := broadcaster.NewRecorder(scheme, EventReporter)

	// Optional APIs: the Workload API, the PodGroup CRDs and resource.k8s.io/v1 may be
	// served later than the controller starts; served is asked in the stages and tells
	// (through the hooks set below) when one appears.
	served := &informers.ServedAPIs{Discovery: kube.Discovery()}
	podGroups := &informers.PodGroups{Client: dyn, Logger: logger, Namespaces: watched}
	// The side objects' metadata (ConfigMaps; Workloads once served), only those
	// labelled as Trainyard's: the status stage checks a side object is its TrainJob's
	// before using it, and a deleted one is re-created. Secrets are create-only, never
	// watched (docs/design/side-objects.md).
	sideObjects := &informers.SideObjects{Client: metadataClient, Logger: logger, Namespaces: watched}
	for _, gvr := range informers.SideObjectResources {
		if err := sideObjects.Watch(gvr); err != nil {
			return err
		}
	}
	claims := &dra.Claims{Recorder: recorder}
	buildOpts, err := buildOptions(cfg, podNamespace())
	if err != nil {
		return err
	}
	// Every replica loads it, so a new leader names Secrets as the last one did.
	if buildOpts.SecretNames, err = loadSecretNames(ctx, kube, podNamespace(), cfg.SideObjects.SecretNameKeySecret, logger); err != nil {
		return err
	}
	deps := pipelineDeps{
		trainers: leader.trainers, jobsets: leader.jobsets, recorder: recorder, metrics: m, logger: logger,
		applyJobSet: status.RESTJobSetApply(leader.jobsets.JobsetV1alpha2().RESTClient()),
		objects: &status.DynamicApplier{Client: leader.dynamic,
			Mapper:   restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery())),
			Metadata: leader.metadata,
			Cache:    informers.SideObjectCache{Objects: sideObjects, PodGroups: podGroups}},
		claims:       claims,
		build:        buildOpts,
		gangBackends: stages.GangBackends(served.Served),
		gangWaiting: func(tj *trainer.TrainJob) string {
			return gang.Waiting(podGroups.Controlled(tj.Namespace, tj.Name, tj.UID))
		},
	}
	pipeline, hooks, err := newPipeline(cfg, inf, deps)
	if err != nil {
		return err
	}
	// One serving certificate for the HTTPS servers, when one runs. The progress
	// server's CA ConfigMaps follow its CA bundle.
	var (
		certificate *servingCertificate
		prog        *progressServer
	)
	if cfg.Webhook.BindAddress != "0" || progress.Serving(cfg) {
		onCAChange := func() {
			if prog != nil {
				prog.publisher.CAChanged()
			}
		}
		if certificate, err = newServingCertificate(cfg.Webhook, progress.Serving(cfg), podNamespace(), kube, m, onCAChange); err != nil {
			return err
		}
	}
	adm, err := newAdmissionServer(cfg.Webhook, certificate, kube, inf, claims, m, logger)
	if err != nil {
		return err
	}
	if prog, err = newProgressServer(cfg, certificate, kube, leader.kube, metadataClient, trainers, inf, m, logger); err != nil {
		return err
	}
	apis := &optionalAPIs{served: served, podGroups: podGroups, sideObjects: sideObjects, claims: claims, kube: kube,
		trainJobs: inf.TrainJobLister, router: pipeline, logger: logger, watched: watched}
	if err := apis.register(ctx); err != nil {
		return err
	}
	// Events are routed only once this process leads: a follower's queues stay empty,
	// and the handlers added on leadership replay every cached object, so the leader
	// starts with every TrainJob queued. ctx is the leadership's: what route starts stops
	// with the pipeline when the Lease is lost.
	route := func(ctx context.Context) error {
		if err := inf.Route(logger, pipeline, informers.Routes{Build: resolveruntime.Name, Status: status.Name}, hooks); err != nil {
			return err
		}
		if prog != nil {
			if err := prog.lead(ctx, inf, logger); err != nil {
				return err
			}
		}
		return apis.lead()
	}
	synced := func() bool { return inf.HasSynced() && apis.HasSynced() }
	var serverChecks []serverCheck
	if adm != nil {
		serverChecks = append(serverChecks, serverCheck{"admission", adm.ready})
	}
	if prog != nil {
		serverChecks = append(serverChecks, serverCheck{"progress", prog.ready})
	}

	var leading atomic.Bool
	servers := []*http.Server{
		healthServer(cfg.Health.HealthProbeBindAddress, synced, serverChecks, &leading, ptrBool(cfg.LeaderElection.LeaderElect)),
	}
	metricsSrv, err := newMetricsServer(cfg.Metrics, reg, opts.Profiling, certificate, kube, logger)
	if err != nil {
		return err
	}
	if metricsSrv != nil {
		servers = append(servers, metricsSrv)
	}
	serveErrs := make(chan error, len(servers))
	for _, srv := range servers {
		go func() {
			serve := srv.ListenAndServe
			if srv.TLSConfig != nil {
				serve = func() error { return srv.ListenAndServeTLS("", "") }
			}
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErrs <- fmt.Errorf("serving %s: %w", srv.Addr, err)
			}
		}()
	}
	defer shutdownServers(logger, servers)

	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	inf.Start(ctx)
	defer inf.Shutdown()
	apis.start(ctx)
	defer apis.shutdown()
	if certificate != nil {
		certificate.start(ctx, logger)
	}
	if adm != nil {
		adm.start(ctx)
	}
	if !inf.WaitForCacheSync(ctx) || !cache.WaitForNamedCacheSyncWithContext(ctx, apis.HasSynced) ||
		(adm != nil && !cache.WaitForNamedCacheSyncWithContext(ctx, adm.hasSynced)) {
		return errors.New("informer caches did not sync before shutdown")
	}
	if adm != nil {
		// Only now: a rule reading an empty cache would admit what it must refuse.
		ln, err := adm.listen()
		if err != nil {
			return err
		}
		go func() {
			if err := adm.serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErrs <- fmt.Errorf("serving admission on %s: %w", adm.server.Addr, err)
			}
		}()
		defer shutdownServers(logger, []*http.Server{adm.server})
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			adm.unregister(ctx)
		}()
	}
	if prog != nil {
		// Only now: a report for a TrainJob the cache does not show yet would be a 404.
		ln, err := prog.listen()
		if err != nil {
			return err
		}
		go func() {
			if err := prog.serve(ctx, ln, logger); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErrs <- fmt.Errorf("serving progress reports on %s: %w", prog.server.Addr, err)
			}
		}()
		defer shutdownServers(logger, []*http.Server{prog.server.Server})
	}
	go served.Run(ctx)
	m.SetTrainJobPhaseCounts(phaseCounter(inf))
	logger.Info("Caches synced")

	leaderMetric := metrics.RegisterLeaderElectionMetrics(reg, cfg.LeaderElection.ResourceName)
	runPipeline := func(ctx context.Context) {
		leading.Store(true)
		if err := route(ctx); err != nil {
			// Only a wiring bug gets here; a leader that cannot route must not hold the Lease.
			logger.Error(err, "Routing informer events to the pipeline")
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
		if period := cfg.Consistency.SweepPeriod.Duration; period > 0 {
			sweeper := &informers.Sweeper{
				TrainJobs: inf.TrainJobLister, JobSets: inf.JobSetLister, RuntimeExists: inf.RuntimeExists,
				Target: pipeline, Observe: m.ObserveSweep,
				Period: period, LagThreshold: cfg.Consistency.LagThreshold.Duration,
			}
			go sweeper.Run(ctx)
		}
		if err := pipeline.Run(ctx); err != nil {
			logger.Error(err, "Pipeline stopped")
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !ptrBool(cfg.LeaderElection.LeaderElect) {
			leaderMetric.On(cfg.LeaderElection.ResourceName) // the only replica leads
			runPipeline(ctx)
			return
		}
		runWithLeaderElection(ctx, cfg.LeaderElection, kube, fence, logger, runPipeline)
	}()

	select {
	case err := <-serveErrs:
		return err
	case <-done:
		logger.Info("Stopped")
		return nil
	}
}

// clients are the API clients built from one rest.Config.
type clients struct {
	kube     kubernetes.Interface
	trainers trainerclient.Interface // JSON only, as custom resources
	jobsets  jobsetclient.Interface  // JSON only
	dynamic  dynamic.Interface       // JSON only
	metadata metadata.Interface
}

// newClients builds the clients of c, each with its own client-side rate limiter.
// Errors: an invalid configuration.
func newClients(c *rest.Config) (*clients, error) {
	var (
		cs  clients
		err error
	)
	if cs.kube, err = kubernetes.NewForConfig(c); err != nil {
		return nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	if cs.metadata, err = metadata.NewForConfig(c); err != nil {
		return nil, fmt.Errorf("creating metadata client: %w", err)
	}
	// Custom resources speak JSON only.
	crdConfig := rest.CopyConfig(c)
	crdConfig.ContentType, crdConfig.AcceptContentTypes = "application/json", "application/json"
	if cs.trainers, err = trainerclient.NewForConfig(crdConfig); err != nil {
		return nil, fmt.Errorf("creating trainer.kubeflow.org client: %w", err)
	}
	if cs.jobsets, err = jobsetclient.NewForConfig(crdConfig); err != nil {
		return nil, fmt.Errorf("creating jobset.x-k8s.io client: %w", err)
	}
	if cs.dynamic, err = dynamic.NewForConfig(crdConfig); err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	return &cs, nil
}

// pipelineDeps are the clients and collaborators the stages need.
type pipelineDeps struct {
	trainers trainerclient.Interface
	jobsets  jobsetclient.Interface
	// applyJobSet writes JobSets (status.RESTJobSetApply in production).
	applyJobSet  status.JobSetApplyFunc
	recorder     events.EventRecorder
	metrics      *metrics.Metrics
	logger       klog.Logger
	objects      status.ObjectApplier
	gangBackends []gang.Backend
	// gangWaiting explains a TrainJob's waiting gang for the status stage.
	gangWaiting func(*trainer.TrainJob) string
	// claims is the DRA claims stage; its listers are set once resource.k8s.io/v1 is
	// served.
	claims *dra.Claims
	// build are the plan-building options from the configuration (buildOptions).
	build stages.Options
}

// buildOptions derives the plan-building options from cfg, for the controller and for
// `trainyard render` alike: the progress server's URL (progress.URLFunc) while it runs.
// controllerNamespace is the controller's namespace, part of that URL.
func buildOptions(cfg *configv1alpha1.Configuration, controllerNamespace string) (stages.Options, error) {
	url, err := progress.URLFunc(cfg, controllerNamespace)
	if err != nil {
		return stages.Options{}, err
	}
	return stages.Options{ProgressURL: url}, nil
}

// trainJobHooks keeps the pipeline's per-TrainJob memory to the TrainJobs the cache
// holds: the status Writer drops a record of its write once the cache shows the write,
// and a deleted TrainJob's plan goes, with what any stage remembers of it
// (stages.Forgetter).
func trainJobHooks(plans *engine.Plans[plan.Plan], writer *statuswriter.Writer, built []engine.Stage) informers.Hooks {
	return informers.Hooks{
		Updated: writer.Observed,
		Deleted: func(key cache.ObjectName) {
			plans.Delete(key)
			for _, s := range built {
				if f, ok := s.(stages.Forgetter); ok {
					f.Forget(key)
				}
			}
		},
	}
}

// newPipeline builds the stage table's stages (package stages) over inf and deps, with
// cfg's worker counts and retry limits. It returns the pipeline and the informer hooks
// that keep the stages' per-TrainJob memory to the TrainJobs the cache holds.
// Errors: a configuration the engine refuses (engine.New).
func newPipeline(cfg *configv1alpha1.Configuration, inf *informers.Informers, deps pipelineDeps) (*engine.Pipeline, informers.Hooks, error) {
	plans := &engine.Plans[plan.Plan]{}
	writer := &statuswriter.Writer{Client: deps.trainers}
	built := stages.Build(stages.Deps{
		StepDeps:  stages.StepDeps{Options: deps.build, GangBackends: deps.gangBackends, Claims: deps.claims},
		Config:    cfg,
		Informers: inf, JobSetAPI: deps.jobsets, ApplyJobSet: deps.applyJobSet, Objects: deps.objects,
		Plans: plans, Status: writer, Recorder: deps.recorder, Metrics: deps.metrics, GangWaiting: deps.gangWaiting,
	})
	p, err := engine.New(built,
		engine.WithWorkers(stages.Workers(&cfg.Stages)),
		engine.WithRateLimit(retryLimits(cfg)),
		engine.WithMetrics(deps.metrics),
		engine.WithLogger(deps.logger),
	)
	if err != nil {
		return nil, informers.Hooks{}, fmt.Errorf("building the pipeline: %w", err)
	}
	return p, trainJobHooks(plans, writer, built), nil
}

// retryLimits are the stage queues' retry limits of cfg.rateLimit, for the TrainJob
// pipeline and the progress pipeline alike.
func retryLimits(cfg *configv1alpha1.Configuration) engine.RateLimit {
	rl := cfg.RateLimit
	return engine.RateLimit{BaseDelay: rl.BaseDelay.Duration, MaxDelay: rl.MaxDelay.Duration, QPS: float64(*rl.QPS), Burst: int(*rl.Burst)}
}

// serverCheck is a readiness check of one of the controller's HTTPS servers (admission,
// progress): ready once it listens (so its caches have synced) with a certificate.
type serverCheck struct {
	name  string
	ready func() bool
}

// healthServer serves /healthz (the process is alive) and /readyz (caches synced and
// every server in servers ready). With leader election, followers are ready too — they
// keep warm caches for a fast failover and serve admission and progress reports — and
// /readyz?verbose reports whether this replica leads.
func healthServer(addr string, synced func() bool, servers []serverCheck, leading *atomic.Bool, leaderElect bool) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !synced() {
			http.Error(w, "[-]informers: caches not synced", http.StatusServiceUnavailable)
			return
		}
		for _, s := range servers {
			if !s.ready() {
				http.Error(w, "[-]"+s.name+": not serving yet (caches syncing or no serving certificate)", http.StatusServiceUnavailable)
				return
			}
		}
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprintln(w, "[+]informers ok")
			for _, s := range servers {
				fmt.Fprintln(w, "[+]"+s.name+" ok")
			}
			switch {
			case !leaderElect:
				fmt.Fprintln(w, "[+]leader-election disabled")
			case leading.Load():
				fmt.Fprintln(w, "[+]leader-election leading")
			default:
				fmt.Fprintln(w, "[+]leader-election following")
			}
		}
		fmt.Fprintln(w, "ok")
	})
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}

func shutdownServers(logger klog.Logger, servers []*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			logger.Error(err, "Shutting down HTTP server", "address", srv.Addr)
		}
	}
}

// phaseCounter counts cached TrainJobs by phase for trainyard_trainjobs.
func phaseCounter(inf *informers.Informers) func() map[string]int {
	return func() map[string]int {
		jobs, err := inf.TrainJobLister.List(labels.Everything())
		if err != nil {
			return nil
		}
		counts := make(map[string]int, 6)
		for _, tj := range jobs {
			counts[phaseOf(tj)]++
		}
		return counts
	}
}

func phaseOf(tj *trainer.TrainJob) string {
	conds := tj.Status.Conditions
	switch {
	case meta.IsStatusConditionTrue(conds, trainer.TrainJobComplete):
		return metrics.PhaseComplete
	case meta.IsStatusConditionTrue(conds, trainer.TrainJobFailed):
		return metrics.PhaseFailed
	case meta.IsStatusConditionTrue(conds, trainer.TrainJobSuspended):
		return metrics.PhaseSuspended
	case len(tj.Status.JobsStatus) > 0:
		return metrics.PhaseRunning
	}
	return metrics.PhasePending
}

// restConfig builds the client configuration: --kubeconfig (or $KUBECONFIG, or
// in-cluster) with the configured QPS, burst and content types.
func restConfig(cc componentbaseconfigv1alpha1.ClientConnectionConfiguration) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = cc.Kubeconfig
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading Kubernetes client configuration: %w", err)
	}
	c.QPS, c.Burst = cc.QPS, int(cc.Burst)
	c.ContentType, c.AcceptContentTypes = cc.ContentType, cc.AcceptContentTypes
	c.UserAgent = "trainyard/" + version.Version
	return c, nil
}

// newLogger returns a zap logger behind logr; verbosity v maps to zap level -v.
func newLogger(format string, v int) (logr.Logger, error) {
	var zc zap.Config
	switch format {
	case "json":
		zc = zap.NewProductionConfig()
	case "text":
		zc = zap.NewDevelopmentConfig()
		zc.Development = false
	default:
		return logr.Logger{}, fmt.Errorf(`--log-format %q: want "json" or "text"`, format)
	}
	zc.Level = zap.NewAtomicLevelAt(zapcore.Level(-v))
	zc.Sampling = nil
	zc.EncoderConfig.TimeKey, zc.EncoderConfig.EncodeTime = "ts", zapcore.ISO8601TimeEncoder
	// logr verbosity v is zap level -v: print it as "info" and carry v in its own field.
	zc.EncoderConfig.EncodeLevel = func(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
		if l < zapcore.InfoLevel {
			l = zapcore.InfoLevel
		}
		zapcore.LowercaseLevelEncoder(l, enc)
	}
	z, err := zc.Build()
	if err != nil {
		return logr.Logger{}, fmt.Errorf("building logger: %w", err)
	}
	return zapr.NewLoggerWithOptions(z, zapr.LogInfoLevel("v")), nil
}

// podNamespace is the namespace this pod runs in, "default" outside a cluster.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		return strings.TrimSpace(string(data))
	}
	return "default"
}

// registerProfiling serves net/http/pprof's handlers under /debug/pprof/ on mux
// (not on http.DefaultServeMux, which nothing here serves).
func registerProfiling(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

func ptrBool(b *bool) bool { return b != nil && *b }
