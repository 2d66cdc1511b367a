package app

import (
	"fmt"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/gang"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
)

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
// (stages.Forgetter); a deleted JobSet reaches the stages that record their applies
// (stages.JobSetDeleteObserver).
func trainJobHooks(plans *engine.Plans[plan.Plan], writer *statuswriter.Writer, built []engine.Stage) informers.Hooks {
	var observers []stages.JobSetDeleteObserver
	for _, s := range built {
		if o, ok := s.(stages.JobSetDeleteObserver); ok {
			observers = append(observers, o)
		}
	}
	return informers.Hooks{
		JobSetDeleted: func(js *jobsetv1alpha2.JobSet) {
			for _, o := range observers {
				o.JobSetDeleted(js)
			}
		},
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
