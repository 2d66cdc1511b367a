package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/lease"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/stages/resolveruntime"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/version"
)

// EventReporter is the reporting controller of the events Trainyard records.
const EventReporter = "trainyard-trainjob-controller"

// Run runs the controller until ctx is done. Its steps run in the order the controller
// relies on (docs/design/architecture.md#start-up-and-shutdown): probes answer at once,
// admission and progress reports are served only once the caches have synced, and on
// shutdown the pipeline drains before the Lease is released, then the servers stop. It
// returns nil after a clean shutdown and an error naming what failed to start or to
// serve otherwise.
func Run(ctx context.Context, cfg *configv1alpha1.Configuration, opts *Options) error {
	ctx, logger, err := startLogging(ctx, opts)
	if err != nil {
		return err
	}
	c, err := build(ctx, cfg, opts, logger)
	if err != nil {
		return err
	}
	return c.run(ctx)
}

// run runs the built controller's steps, in Run's order, until ctx is done.
func (c *controller) run(ctx context.Context) error {
	stopProbes := c.serveProbesAndMetrics()
	defer stopProbes()
	stopInformers := c.startInformers(ctx)
	defer stopInformers()
	if err := c.waitForCacheSync(ctx); err != nil {
		return err
	}
	stopServing, err := c.serveAdmissionAndProgress(ctx)
	if err != nil {
		return err
	}
	defer stopServing()
	stopped := make(chan time.Time, 1)
	context.AfterFunc(ctx, func() {
		c.stopping.Store(true)
		stopped <- time.Now()
	})
	err = c.waitForStop(c.lead(ctx))
	if ctx.Err() != nil {
		c.delayShutdown(<-stopped)
	}
	return err
}

// delayShutdown returns shutdownDelay after stopped, the cancellation, keeping the
// admission and progress servers serving meanwhile while /readyz fails: a replica
// terminating in a rolling update stays reachable until the Service's clients have
// dropped it (docs/design/architecture.md#start-up-and-shutdown).
func (c *controller) delayShutdown(stopped time.Time) {
	delay := ptrDeref(c.cfg.ShutdownDelay).Duration
	wait := delay - time.Since(stopped)
	if wait <= 0 || (c.admission == nil && c.progress == nil) {
		return
	}
	c.logger.Info("Serving on for shutdownDelay before closing the servers", "shutdownDelay", delay, "remaining", wait.Round(time.Millisecond))
	time.Sleep(wait)
}

// controller is what build makes and Run's steps start, serve and stop.
type controller struct {
	cfg      *configv1alpha1.Configuration
	logger   klog.Logger
	registry *prometheus.Registry
	metrics  *metrics.Metrics
	// kube is every replica's client (discovery, the Lease, TokenReviews).
	kube kubeclient.Interface
	// fence closes the leader-only clients once the Lease may have passed to another
	// replica; nil without leader election.
	fence       *lease.Fence
	informers   *informers.Informers
	apis        *optionalAPIs
	events      events.EventBroadcaster
	recorder    events.EventRecorder
	pipeline    *engine.Pipeline
	hooks       informers.Hooks
	certificate *servingCertificate // nil when no HTTPS server runs
	admission   *admissionServer    // nil when admission is off
	progress    *progressServer     // nil when the progress server is off
	// optimization runs OptimizationJobs; nil when the API server does not serve them.
	optimization *optimizationJobs
	// probes are the health server; metricsServer, nil when off, serves /metrics.
	probes        []*httpserver.Server
	metricsServer *httpserver.Server
	// leading is true once this replica runs the pipeline (/readyz?verbose).
	leading atomic.Bool
	// stopping is true once the controller's context is done: /readyz fails.
	stopping atomic.Bool
	// serveErrs receives the error of a server that stopped serving on its own.
	serveErrs chan error
}

// startLogging installs the logger of opts (klog's too), logs the version and sets the
// Go runtime's memory limit from the container's. It returns ctx carrying the logger.
// Errors: an unknown --log-format.
func startLogging(ctx context.Context, opts *Options) (context.Context, klog.Logger, error) {
	logger, err := newLogger(opts.LogFormat, opts.Verbosity)
	if err != nil {
		return ctx, logger, err
	}
	klog.SetLogger(logger)
	logger.Info("Starting Trainyard", "version", version.Version, "gitCommit", version.GitCommit)
	if limit, err := memoryLimit(os.Getenv, cgroupMemoryLimitFiles, debug.SetMemoryLimit); err != nil {
		logger.Error(err, "Leaving the Go runtime's memory limit unset")
	} else if limit > 0 {
		logger.Info("Set the Go runtime's soft memory limit from the container's", "bytes", limit, "ratio", MemoryLimitRatio)
	}
	return klog.NewContext(ctx, logger), logger, nil
}

// serveProbesAndMetrics serves /healthz, /readyz and /metrics at once, so that probes
// answer while the caches sync. It returns the function that stops them.
func (c *controller) serveProbesAndMetrics() (stop func()) {
	var servers []*http.Server
	for _, srv := range c.probes {
		c.serveInBackground("serving "+srv.Addr, srv.ListenAndServe) // httpserver's: within its MaxConns
		servers = append(servers, srv.Server)
	}
	if c.metricsServer != nil {
		c.serveInBackground("serving "+c.metricsServer.Addr, c.metricsServer.ListenAndServe)
		servers = append(servers, c.metricsServer.Server)
	}
	return func() { shutdownServers(c.logger, servers) }
}

// startInformers starts the event sink, the shared informers, the optional APIs'
// informers, the serving certificate's rotation and the admission server's caches. They
// outlive ctx until the function it returns stops them: the pipeline drains, and
// admission serves until it stops, on caches that still follow the API server.
func (c *controller) startInformers(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.events.StartRecordingToSink(ctx.Done())
	c.informers.Start(ctx)
	c.apis.start(ctx)
	if c.optimization != nil {
		c.optimization.start(ctx)
	}
	if c.certificate != nil {
		c.certificate.start(ctx, c.logger)
	}
	if c.admission != nil {
		c.admission.start(ctx)
	}
	return func() {
		cancel()
		c.apis.shutdown()
		c.informers.Shutdown()
		if c.optimization != nil {
			c.optimization.shutdown()
		}
		c.events.Shutdown()
	}
}

// waitForCacheSync waits until every cache the pipeline and the servers read has synced,
// then starts the re-checks of the optional APIs and the TrainJob phase gauge. Errors: ctx
// done first.
func (c *controller) waitForCacheSync(ctx context.Context) error {
	if !c.informers.WaitForCacheSync(ctx) || !cache.WaitForNamedCacheSyncWithContext(ctx, c.apis.HasSynced) ||
		(c.optimization != nil && !cache.WaitForNamedCacheSyncWithContext(ctx, c.optimization.hasSynced)) ||
		(c.admission != nil && !cache.WaitForNamedCacheSyncWithContext(ctx, c.admission.hasSynced)) {
		return errors.New("informer caches did not sync before shutdown")
	}
	go c.apis.served.Run(ctx)
	c.metrics.SetTrainJobCounts(trainJobCounter(c.informers.TrainJobLister, c.informers.TrainingRuntimeLister, c.informers.ClusterTrainingRuntimeLister))
	c.logger.Info("Caches synced")
	return nil
}

// serveAdmissionAndProgress starts the admission and progress servers, and admission's
// self-registration (registerURL) once it has a certificate. Only after the caches
// synced: a rule reading an empty cache would admit what it must refuse, and a report
// for a TrainJob the cache does not show yet would be a 404. It returns the
// function that stops them (and removes admission's self-registered webhook
// configurations). Errors: a port that cannot be listened on.
func (c *controller) serveAdmissionAndProgress(ctx context.Context) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if c.admission != nil {
		ln, err := c.admission.listen()
		if err != nil {
			return stop, err
		}
		c.serveInBackground("serving admission on "+c.admission.server.Addr, func() error { return c.admission.serve(ln) })
		// The registration ends, its last write answered or abandoned, before the
		// unregistration starts: a write still in flight could otherwise land after the
		// delete and leave a webhook configuration calling a stopped server (with
		// failurePolicy Fail, every TrainJob write in the cluster refused).
		registerCtx, stopRegistering := context.WithCancel(ctx)
		registered := make(chan struct{})
		go func() {
			defer close(registered)
			if c.admission.cfg.RegisterURL != "" {
				c.admission.register(registerCtx)
			}
		}()
		stops = append(stops, func() { shutdownServers(c.logger, []*http.Server{c.admission.server.Server}) }, func() {
			stopRegistering()
			<-registered
			c.unregisterAdmission()
		})
	}
	if c.progress != nil {
		ln, err := c.progress.listen()
		if err != nil {
			stop()
			return stop, err
		}
		c.serveInBackground("serving progress reports on "+c.progress.server.Addr, func() error { return c.progress.serve(ctx, ln, c.logger) })
		stops = append(stops, func() { c.progress.shutdown(c.logger) })
	}
	return stop, nil
}

// unregisterAdmission removes the webhook configurations admission registered itself
// (--webhook-register-url), within 5 s.
func (c *controller) unregisterAdmission() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.admission.unregister(ctx)
}

// lead runs the pipeline in the background: at once without leader election, else while
// this replica holds the Lease (lease.Run). The channel it returns closes once the
// pipeline has drained and the Lease, if any, has been released.
func (c *controller) lead(ctx context.Context) <-chan struct{} {
	le := c.cfg.LeaderElection
	leaderMetric := metrics.RegisterLeaderElectionMetrics(c.registry, le.ResourceName)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !ptrBool(le.LeaderElect) {
			leaderMetric.On(le.ResourceName) // the only replica leads
			c.runPipeline(ctx)
			return
		}
		lease.Run(ctx, le, podNamespace(), c.kube, c.fence, c.logger, c.runPipeline)
	}()
	return done
}

// runPipeline is the leader's work until ctx, the leadership's, is done: it routes
// informer events to the pipeline, starts the consistency sweep and runs the pipeline
// until it has drained.
func (c *controller) runPipeline(ctx context.Context) {
	c.leading.Store(true)
	if err := c.route(ctx); err != nil {
		// Only a wiring bug gets here; a leader that cannot route must not hold the Lease.
		c.logger.Error(err, "Routing informer events to the pipeline")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	if period := c.cfg.Consistency.SweepPeriod.Duration; period > 0 {
		sweeper := &informers.Sweeper{
			TrainJobs: c.informers.TrainJobLister, JobSets: c.informers.JobSetLister, RuntimeExists: c.informers.RuntimeExists,
			Target: c.pipeline, Observe: c.metrics.ObserveSweep,
			Period: period, LagThreshold: c.cfg.Consistency.LagThreshold.Duration,
		}
		go sweeper.Run(ctx)
	}
	if err := c.pipeline.Run(ctx); err != nil {
		c.logger.Error(err, "Pipeline stopped")
	}
	if c.optimization != nil {
		c.optimization.wait()
	}
}

// route sends informer events to the pipeline, the progress server's and the optional
// APIs' included. Only once this process leads: a follower's queues stay empty, and the
// handlers added now replay every cached object, so the leader starts with every
// TrainJob queued. What it starts stops with ctx, the leadership's.
func (c *controller) route(ctx context.Context) error {
	if err := c.informers.Route(c.logger, c.pipeline, informers.Routes{Build: resolveruntime.Name, Status: status.Name}, c.hooks); err != nil {
		return err
	}
	if c.progress != nil {
		if err := c.progress.lead(ctx, c.informers, c.logger); err != nil {
			return err
		}
	}
	if c.optimization != nil {
		if err := c.optimization.lead(ctx, c.informers.TrainJobs); err != nil {
			return err
		}
	}
	return c.apis.lead()
}

// waitForStop returns the error of the first server that stopped serving, or nil once
// done closes.
func (c *controller) waitForStop(done <-chan struct{}) error {
	select {
	case err := <-c.serveErrs:
		return err
	case <-done:
		c.logger.Info("Stopped")
		return nil
	}
}

// serveInBackground runs serve in a goroutine and reports its error, but for a
// shutdown's, on serveErrs as "<what>: <error>".
func (c *controller) serveInBackground(what string, serve func() error) {
	go func() {
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.serveErrs <- fmt.Errorf("%s: %w", what, err)
		}
	}()
}
