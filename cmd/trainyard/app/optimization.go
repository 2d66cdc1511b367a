package app

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	traineroptinformers "github.com/trainyard/trainyard/pkg/clientset/informers/externalversions/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/informers/namespaces"
	"github.com/trainyard/trainyard/pkg/metrics"
	optimization "github.com/trainyard/trainyard/pkg/optimization/controller"
)

// optimizationWorkers is the OptimizationJob stage's worker count: a sync reads caches
// and makes a few writes; searches are few next to TrainJobs.
const optimizationWorkers = 2

// optimizationJobs runs OptimizationJobs (issue 26, KEP-3562) in a pipeline of its own
// (the engine's queue, rate limits and stage metrics, stage "optimization"), on the
// leader only, with the leader's fenced client. Every replica keeps the OptimizationJob
// cache warm for a fast failover. It exists only when the API server serves
// optimizationjobs at start-up: a cluster whose CRD comes later needs a restart
// (logged), as the cache would otherwise never sync.
type optimizationJobs struct {
	informer cache.SharedIndexInformer
	pipeline *engine.Pipeline
	logger   klog.Logger
	// done waits for the pipeline, informerDone for the informer.
	done, informerDone sync.WaitGroup
}

// newOptimizationJobs returns the OptimizationJob controller, or nil when the API server
// does not serve optimizationjobs. watch lists and watches; leader creates trials and
// writes status; recorder records the trials' Events on their OptimizationJob. Errors:
// invalid engine options (a wiring bug).
func newOptimizationJobs(cfg *configv1alpha1.Configuration, watch, leader trainerclient.Interface, served *informers.ServedAPIs,
	inf *informers.Informers, recorder events.EventRecorder, m *metrics.Metrics, logger klog.Logger,
) (*optimizationJobs, error) {
	logger = logger.WithName("optimization")
	restart := func(context.Context) {
		logger.Info("OptimizationJobs are served now: restart the controller to run them")
	}
	if !served.Add(trainer.SchemeGroupVersion.String(), []string{"optimizationjobs"}, restart) {
		logger.Info("optimizationjobs.trainer.kubeflow.org is not served: OptimizationJobs will not run (install the chart's CRDs)")
		return nil, nil
	}
	o := &optimizationJobs{logger: logger}
	o.informer = namespaces.Set(cfg.WatchNamespaces).Informer(func(namespace string) cache.SharedIndexInformer {
		return traineroptinformers.NewFilteredOptimizationJobInformer(watch, namespace, 0, cache.Indexers{}, nil)
	})
	if err := o.informer.SetTransform(informers.StripClientMetadata); err != nil {
		return nil, fmt.Errorf("setting the OptimizationJob transform: %w", err)
	}
	stage, err := optimization.New(optimization.Config{
		Client:           leader,
		OptimizationJobs: trainerlisters.NewOptimizationJobLister(o.informer.GetIndexer()),
		TrainJobs:        inf.TrainJobLister,
		Recorder:         recorder,
	})
	if err != nil {
		return nil, err
	}
	if o.pipeline, err = engine.New([]engine.Stage{stage}, engine.WithMetrics(m), engine.WithLogger(logger),
		engine.WithRateLimit(retryLimits(cfg)), engine.WithWorkers(map[string]int{optimization.Name: optimizationWorkers})); err != nil {
		return nil, fmt.Errorf("building the OptimizationJob pipeline: %w", err)
	}
	return o, nil
}

// start runs the OptimizationJob informer until ctx ends; shutdown waits for it.
func (o *optimizationJobs) start(ctx context.Context) {
	o.informerDone.Go(func() { o.informer.RunWithContext(ctx) })
}

// hasSynced reports whether the OptimizationJob cache has synced.
func (o *optimizationJobs) hasSynced() bool { return o.informer.HasSynced() }

// shutdown waits for the informer's goroutine after its context ended.
func (o *optimizationJobs) shutdown() { o.informerDone.Wait() }

// lead routes OptimizationJob events, and those of TrainJobs an OptimizationJob
// controls (its trials), to the pipeline, and runs it until ctx, the leadership's, is
// done; wait returns once it has drained. The handlers added now replay every cached
// object, so a new leader looks at every OptimizationJob.
func (o *optimizationJobs) lead(ctx context.Context, trainJobs cache.SharedIndexInformer) error {
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingObjectToName(obj); err == nil {
			o.pipeline.Enqueue(optimization.Name, key)
		}
	}
	if _, err := o.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	owner := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		tj, ok := obj.(*trainer.TrainJob)
		if !ok {
			return
		}
		if ref := metav1.GetControllerOfNoCopy(tj); ref != nil && ref.Kind == trainer.OptimizationJobKind && ref.APIVersion == trainer.SchemeGroupVersion.String() {
			o.pipeline.Enqueue(optimization.Name, cache.ObjectName{Namespace: tj.Namespace, Name: ref.Name})
		}
	}
	if _, err := trainJobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: owner, UpdateFunc: func(_, cur any) { owner(cur) }, DeleteFunc: owner,
	}); err != nil {
		return err
	}
	o.done.Go(func() {
		if err := o.pipeline.Run(ctx); err != nil {
			o.logger.Error(err, "OptimizationJob pipeline stopped")
		}
	})
	return nil
}

// wait returns once the pipeline lead started has drained (at once if none).
func (o *optimizationJobs) wait() { o.done.Wait() }
