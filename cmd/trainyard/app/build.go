package app

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/informers/namespaces"
	"github.com/trainyard/trainyard/pkg/lease"
	"github.com/trainyard/trainyard/pkg/metrics"
	metricsauth "github.com/trainyard/trainyard/pkg/metrics/auth"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/gang"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/version"
)

// build makes everything the controller runs and starts none of it: metrics, clients,
// informers, the pipeline and the servers. Errors name what could not be built.
func build(ctx context.Context, cfg *configv1alpha1.Configuration, opts *Options, logger klog.Logger) (*controller, error) {
	c := &controller{cfg: cfg, logger: logger}
	c.registry, c.metrics = newRegistry()
	all, leader, err := c.buildClients()
	if err != nil {
		return nil, err
	}
	if err := c.buildCaches(all, leader); err != nil {
		return nil, err
	}
	if err := c.buildPipeline(ctx, leader); err != nil {
		return nil, err
	}
	if err := c.buildServers(all, leader, opts.Profiling); err != nil {
		return nil, err
	}
	if err := c.apis.register(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// newRegistry returns the registry /metrics serves, with the Go, process, client and
// build metrics, and Trainyard's metrics registered in it.
func newRegistry() (*prometheus.Registry, *metrics.Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics.RegisterClientMetrics(reg) // before any client exists
	m := metrics.New(reg)
	m.SetBuildInfo(version.Version, version.GitCommit)
	return reg, m
}

// buildClients returns the clients of what every replica runs — informers, admission,
// the progress server's status writes, the serving certificate, the Lease itself — and
// those of the leader-only work: the pipeline's reads and writes, its events, the CA
// ConfigMaps. With leader election the latter are fenced (lease.FencedConfig): they
// send no write unless this replica leads and its last Lease renewal is younger than
// renewDeadline. Each client has its own client-side rate limiter
// (clientConnection.qps/burst), serving waiting requests namespace by namespace
// (withFairLimiter). The progress and metrics endpoints authenticate with
// clients of their own (authClient: own rate limits, and a limiter on the TokenReviews
// of unknown tokens), so that random bearer tokens cannot starve the others.
func (c *controller) buildClients() (all, leader *clients, err error) {
	rc, err := restConfig(c.cfg.ClientConnection)
	if err != nil {
		return nil, nil, err
	}
	if all, err = newClients(rc); err != nil {
		return nil, nil, err
	}
	if all.progressAuth, err = authClient(rc, metrics.EndpointProgress, progressAuthQPS, progressAuthBurst, progress.DefaultReviewLimits, c.metrics); err != nil {
		return nil, nil, err
	}
	if all.metricsAuth, err = authClient(rc, metrics.EndpointMetrics, metricsAuthQPS, metricsAuthBurst, metricsauth.DefaultReviewLimits, c.metrics); err != nil {
		return nil, nil, err
	}
	c.kube, leader = all.kube, all
	if ptrBool(c.cfg.LeaderElection.LeaderElect) {
		c.fence = lease.NewFence(clock.RealClock{}, c.cfg.LeaderElection.RenewDeadline.Duration)
		if leader, err = newClients(lease.FencedConfig(rc, c.fence)); err != nil {
			return nil, nil, err
		}
	}
	return all, leader, nil
}

// buildCaches makes the informers, the event broadcaster, and the optional APIs' caches
// (the Workload API, the PodGroup CRDs and resource.k8s.io/v1 may be served later than
// the controller starts; discovery tells when one appears). With watchNamespaces, every
// namespaced informer watches those namespaces only, one watch each.
func (c *controller) buildCaches(all, leader *clients) error {
	watched := namespaces.Set(c.cfg.WatchNamespaces)
	if !watched.All() {
		c.logger.Info("Watching only some namespaces", "namespaces", c.cfg.WatchNamespaces)
	}
	var err error
	if c.informers, err = informers.New(all.trainers, all.jobSetWatch, 0, watched); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), trainer.AddToScheme(scheme)); err != nil {
		return err
	}
	c.events = events.NewBroadcaster(&events.EventSinkImpl{Interface: leader.kube.EventsV1()})
	c.recorder = c.events.NewRecorder(scheme, EventReporter)
	c.apis = &optionalAPIs{
		served:    &informers.ServedAPIs{Discovery: all.kube.Discovery()},
		podGroups: &informers.PodGroups{Client: all.dynamic, Logger: c.logger, Namespaces: watched},
		// The side objects' metadata (ConfigMaps; Workloads once served), only those
		// labelled as Trainyard's: the status stage checks a side object is its
		// TrainJob's before using it, and a deleted one is re-created. Secrets are
		// create-only, never watched (docs/design/side-objects.md).
		sideObjects: &informers.SideObjects{Client: all.metadata, Logger: c.logger, Namespaces: watched},
		claims:      &dra.Claims{Recorder: c.recorder},
		kube:        all.kube, trainJobs: c.informers.TrainJobLister, logger: c.logger, watched: watched,
	}
	for _, gvr := range informers.SideObjectResources {
		if err := c.apis.sideObjects.Watch(gvr); err != nil {
			return err
		}
	}
	c.optimization, err = newOptimizationJobs(c.cfg, all.trainers, leader.trainers, c.apis.served, c.informers, c.recorder, c.metrics, c.logger)
	return err
}

// buildPipeline makes the pipeline of the stage table over the caches, writing with the
// leader's clients.
func (c *controller) buildPipeline(ctx context.Context, leader *clients) error {
	buildOpts, err := buildOptions(c.cfg, podNamespace())
	if err != nil {
		return err
	}
	// Every replica loads it, so a new leader names Secrets as the last one did.
	if buildOpts.SecretNames, err = loadSecretNames(ctx, c.kube, podNamespace(), c.cfg.SideObjects.SecretNameKeySecret, c.logger); err != nil {
		return err
	}
	apis := c.apis
	deps := pipelineDeps{
		trainers: leader.trainers, jobsets: leader.jobsets, recorder: c.recorder, metrics: c.metrics, logger: c.logger,
		applyJobSet: status.RESTJobSetApply(leader.jobsets.JobsetV1alpha2().RESTClient()),
		objects: &status.DynamicApplier{Client: leader.dynamic,
			Mapper:   restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.kube.Discovery())),
			Metadata: leader.metadata,
			Cache:    informers.SideObjectCache{Objects: apis.sideObjects, PodGroups: apis.podGroups}},
		claims:       apis.claims,
		build:        buildOpts,
		gangBackends: stages.GangBackends(apis.served.Served),
		gangWaiting: func(tj *trainer.TrainJob) string {
			return gang.Waiting(apis.podGroups.Controlled(tj.Namespace, tj.Name, tj.UID))
		},
	}
	if c.pipeline, c.hooks, err = newPipeline(c.cfg, c.informers, deps); err != nil {
		return err
	}
	apis.router = c.pipeline
	return nil
}

// buildServers makes the serving certificate, the admission and progress servers (each
// nil when off), and the probe and metrics servers.
func (c *controller) buildServers(all, leader *clients, profiling bool) error {
	var err error
	// One serving certificate for the HTTPS servers, when one runs. The progress
	// server's CA ConfigMaps follow its CA bundle.
	if c.cfg.Webhook.BindAddress != "0" || progress.Serving(c.cfg) {
		copies := caCopies{
			changed: func() {
				if c.progress != nil {
					c.progress.publisher.CAChanged()
				}
			},
		}
		if progress.Serving(c.cfg) {
			copies.published = func(bundle []byte) (time.Time, bool) { return c.progress.publisher.Published(bundle) }
		}
		if c.certificate, err = newServingCertificate(c.cfg.Webhook, progress.Serving(c.cfg), podNamespace(), all.kube, c.metrics, copies); err != nil {
			return err
		}
	}
	if c.admission, err = newAdmissionServer(c.cfg.Webhook, c.certificate, all.kube, c.informers, c.apis.claims, c.metrics, c.logger); err != nil {
		return err
	}
	if c.progress, err = newProgressServer(c.cfg, c.certificate, all.progressAuth, leader.kube, all.metadata, all.trainers, c.informers, c.metrics, c.logger); err != nil {
		return err
	}
	return c.buildProbes(all, profiling)
}

// buildProbes makes the health server, ready once the caches have synced and every
// HTTPS server listens, and the metrics server when it is on.
func (c *controller) buildProbes(all *clients, profiling bool) error {
	synced := func() bool { return c.informers.HasSynced() && c.apis.HasSynced() }
	var checks []serverCheck
	if c.admission != nil {
		checks = append(checks, serverCheck{"admission", c.admission.ready})
	}
	if c.progress != nil {
		checks = append(checks, serverCheck{"progress", c.progress.ready})
	}
	health, err := healthServer(c.cfg.Health.HealthProbeBindAddress, synced, checks, &c.leading, &c.stopping, ptrBool(c.cfg.LeaderElection.LeaderElect))
	if err != nil {
		return err
	}
	c.probes = []*httpserver.Server{health}
	metricsSrv, err := newMetricsServer(c.cfg.Metrics, c.registry, profiling, c.certificate, all.metricsAuth, c.logger)
	if err != nil {
		return err
	}
	c.metricsServer = metricsSrv
	c.serveErrs = make(chan error, len(c.probes)+3) // the probes, metrics, admission, progress
	return nil
}
