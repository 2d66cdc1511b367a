package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// progressWorkers is the progress stage's worker count: a write is one small status
// apply, and the write limits, not the workers, bound the rate.
const progressWorkers = 4

// progressServer is the training-progress server (issue 14, KEP-2779). Every replica
// runs one, leader or not, so no report is refused during a failover: it accepts
// reports over HTTPS (progress.NewHandler, the shared serving certificate), coalesces
// them per TrainJob and writes status.trainerStatus from its own single-stage pipeline
// (progress.Stage, with the engine's queue and stage metrics). Which replica writes a
// TrainJob's progress is whichever received its reports; lastUpdatedTime only moves
// forward (progress.Stage), so replicas never fight over the field. The CA ConfigMaps the
// trainer pods mount are kept by the leader only (caPublisher).
type progressServer struct {
	server    *progress.Server
	coalescer *progress.Coalescer
	stage     *progress.Stage
	pipeline  *engine.Pipeline
	// stopPipeline stops the write pipeline, which outlives the controller's context
	// until shutdown has drained it; pipelineDone is closed once it has stopped.
	stopPipeline context.CancelFunc
	pipelineDone chan struct{}
	publisher    *progress.CAPublisher
	cert         *servingCertificate
	listening    atomic.Bool
}

// newProgressServer builds the progress server of cfg, or returns nil when it is off
// (progress.Serving). kube, the progress endpoint's own client (authClient), sends every
// replica's TokenReviews; leaderKube writes the CA ConfigMaps, leader-only work
// (lease.FencedConfig). Errors: invalid write limits or options (a wiring bug).
func newProgressServer(cfg *configv1alpha1.Configuration, cert *servingCertificate, kube, leaderKube kubeclient.Interface, meta metadata.Interface,
	trainers trainerclient.Interface, inf *informers.Informers, m *metrics.Metrics, logger klog.Logger,
) (*progressServer, error) {
	if !progress.Serving(cfg) {
		return nil, nil
	}
	s := &progressServer{cert: cert}
	sc := cfg.StatusServer
	s.coalescer = progress.NewCoalescer(func(key cache.ObjectName) { s.pipeline.Enqueue(progress.Name, key) }, m,
		progress.MaxPendingBytes(ptrDeref(sc.MaxPendingReportBytes)))
	stage, err := progress.NewStage(progress.StageConfig{
		Client: trainers, TrainJobs: inf.TrainJobLister, Coalescer: s.coalescer,
		Limits: progress.WriteLimits{
			Period: sc.WritePeriod.Duration,
			QPS:    float64(ptrDeref(sc.QPS)), Burst: int(ptrDeref(sc.Burst)),
			NamespaceQPS: float64(ptrDeref(sc.NamespaceQPS)), NamespaceBurst: int(ptrDeref(sc.NamespaceBurst)),
		},
	})
	if err != nil {
		return nil, err
	}
	s.stage = stage
	if s.pipeline, err = engine.New([]engine.Stage{stage}, engine.WithMetrics(m), engine.WithLogger(logger),
		engine.WithRateLimit(retryLimits(cfg)),
		engine.WithWorkers(map[string]int{progress.Name: progressWorkers})); err != nil {
		return nil, fmt.Errorf("building the progress pipeline: %w", err)
	}
	authorizer, err := progress.NewTokenReviewAuthorizer(progress.AuthorizerConfig{
		Client: kube, Pods: meta, TrainJobs: inf.TrainJobLister, JobSets: inf.JobSetLister,
	})
	if err != nil {
		return nil, err
	}
	if s.server, err = progress.NewServer(progress.NewHandler(progress.HandlerConfig{
		Authorizer: authorizer, Coalescer: s.coalescer, Observer: m,
		MaxInFlight: int(ptrDeref(sc.MaxReportsInFlight)),
	}), progress.ServerOptions{
		Addr: sc.BindAddress, TLSConfig: cert.TLSConfig(),
		MaxConns: int(ptrDeref(sc.MaxConnections)), MaxKeepAliveConns: int(ptrDeref(sc.MaxKeepAliveConnections)),
	}); err != nil {
		return nil, err
	}
	if s.publisher, err = progress.NewCAPublisher(progress.CAPublisherOptions{
		Client: leaderKube, Bundle: cert.CABundle, TrainJobs: progress.NamespaceIndex{Indexer: inf.TrainJobs.GetIndexer()},
		Namespaces:      cfg.WatchNamespaces,
		MetricsProvider: m.WorkqueueMetricsProvider(),
	}); err != nil {
		return nil, err
	}
	// A deleted TrainJob's state goes; a finished one's last report is written at once.
	if _, err := inf.TrainJobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*trainer.TrainJob)
			n, ok2 := newObj.(*trainer.TrainJob)
			if ok1 && ok2 && trainjob.IsFinished(n) && !trainjob.IsFinished(o) {
				s.coalescer.Flush(cache.MetaObjectToName(n))
			}
		},
		DeleteFunc: func(obj any) {
			if tj, ok := obj.(*trainer.TrainJob); ok {
				s.coalescer.Forget(cache.MetaObjectToName(tj))
			} else if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				if key, err := cache.ParseObjectName(d.Key); err == nil {
					s.coalescer.Forget(key)
				}
			}
		},
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// listen binds the server's port; serve it once the caches have synced. Errors: the
// address is in use or invalid.
func (s *progressServer) listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.server.Addr)
	if err != nil {
		return nil, fmt.Errorf("progress server: %w", err)
	}
	s.listening.Store(true)
	return ln, nil
}

// serve runs the write pipeline and serves HTTPS on ln until shutdown; it returns
// http.ErrServerClosed then. The pipeline does not stop with ctx: shutdown stops it
// once it has written what the server accepted.
func (s *progressServer) serve(ctx context.Context, ln net.Listener, logger klog.Logger) error {
	pipelineCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopPipeline, s.pipelineDone = stop, make(chan struct{})
	go func() {
		defer close(s.pipelineDone)
		if err := s.pipeline.Run(pipelineCtx); err != nil {
			logger.Error(err, "Progress pipeline stopped")
		}
	}()
	return s.server.Serve(ln)
}

// progressDrainTimeout bounds how long a stopping replica spends writing the reports
// it accepted (progress.Stage.Drain): at the drain's pace (the write QPS ×
// progress.DrainSpeedup, 200 writes/s at the defaults, in any namespaces) the pending
// reports of ~2,200 TrainJobs (TestDrainWritesManyReportsOfOneNamespace drains 1,000 of
// one namespace in ~4 s). With the Helm chart's shutdownDelay (5 s) and the
// server's shutdown (at most 5 s) it fits the default terminationGracePeriodSeconds
// (30 s) with room for the pipeline's drain.
const progressDrainTimeout = 10 * time.Second

// shutdown stops the progress server so that no report answered 200 is lost: it closes
// the listener and the idle connections and waits up to 5 s for the reports being
// answered (http.Server.Shutdown: a trainer whose connection closes sends its next
// report elsewhere, a refused one is not answered 200); then it writes every pending
// report, the ones the period still defers included, within progressDrainTimeout
// (progress.Stage.Drain), and stops the write pipeline. Reports still pending then are
// logged as lost. Call it once, after serve started.
func (s *progressServer) shutdown(logger klog.Logger) {
	shutdownServers(logger, []*http.Server{s.server.Server.Server})
	ctx, cancel := context.WithTimeout(context.Background(), progressDrainTimeout)
	defer cancel()
	start := time.Now()
	if lost := s.stage.Drain(ctx); lost > 0 {
		logger.Error(nil, "Stopping with progress reports not written: their writes did not succeed within the drain period",
			"lost", lost, "drainPeriod", progressDrainTimeout)
	} else {
		logger.Info("Wrote every accepted progress report", "duration", time.Since(start).Round(time.Millisecond))
	}
	s.stopPipeline()
	<-s.pipelineDone
}

// ready reports whether the server listens and has a certificate to serve.
func (s *progressServer) ready() bool { return s.listening.Load() && s.cert.Ready() }

// lead keeps the CA ConfigMaps while this replica leads: every namespace with a
// TrainJob now, and each namespace a TrainJob is added to.
func (s *progressServer) lead(ctx context.Context, inf *informers.Informers, logger klog.Logger) error {
	if _, err := inf.TrainJobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if tj, ok := obj.(*trainer.TrainJob); ok {
				s.publisher.EnqueueNamespace(tj.Namespace)
			}
		},
	}); err != nil {
		return err
	}
	go func() {
		if err := s.publisher.Run(ctx); err != nil {
			logger.Error(err, "CA ConfigMap publisher stopped")
		}
	}()
	return nil
}

func ptrDeref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
