// Package informers wires the shared informers Trainyard's stages read: TrainJobs and
// runtimes (generated informers), and JobSets (JobSet's client-go informers). It owns
// the cache transforms that keep memory low, the indexers the stages query, and the
// event handlers that route each change to the earliest pipeline stage it can affect.
package informers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"
	jobsetinformers "sigs.k8s.io/jobset/client-go/informers/externalversions"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	trainerinformers "github.com/trainyard/trainyard/pkg/clientset/informers/externalversions"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/informers/namespaces"
)

// Informers holds the shared informer factories and the listers the stages use.
// Create it with New, register handlers with Route, then Start and WaitForCacheSync.
//
// The namespaced informers (TrainJobs, TrainingRuntimes, JobSets) watch the namespaces
// New was given, one factory per namespace merged by namespaces.Merge; the listers read
// across them. ClusterTrainingRuntimes are cluster-scoped and watched whole.
type Informers struct {
	factories []factory

	TrainJobs               cache.SharedIndexInformer
	TrainingRuntimes        cache.SharedIndexInformer
	ClusterTrainingRuntimes cache.SharedIndexInformer
	JobSets                 cache.SharedIndexInformer

	TrainJobLister               trainerlisters.TrainJobLister
	TrainingRuntimeLister        trainerlisters.TrainingRuntimeLister
	ClusterTrainingRuntimeLister trainerlisters.ClusterTrainingRuntimeLister
	JobSetLister                 jobsetlisters.JobSetLister
}

// factory is what Informers needs of a generated SharedInformerFactory.
type factory interface {
	Start(stopCh <-chan struct{})
	Shutdown()
}

// New creates the informers with the transforms and indexers installed. They list and
// watch through trainer and jobsets; in production jobsets is NewJobSetWatchClient's,
// which decodes JobSets in the shape the cache keeps. resync is the
// periodic resync interval (0 disables it: the pipeline is level-triggered on events and
// a resync would only cost CPU). watched are the namespaces of TrainJobs, runtimes and
// JobSets to list and watch (empty: every namespace). It returns an error only if an
// indexer cannot be added.
func New(trainer trainerclient.Interface, jobsets jobsetclient.Interface, resync time.Duration, watched namespaces.Set) (*Informers, error) {
	in := &Informers{}
	var trainJobs, runtimes, jobSets []cache.SharedIndexInformer
	for _, ns := range watched.Each() {
		tf := trainerinformers.NewSharedInformerFactoryWithOptions(trainer, resync,
			trainerinformers.WithTransform(StripClientMetadata), trainerinformers.WithNamespace(ns))
		jf := jobsetinformers.NewSharedInformerFactoryWithOptions(jobsets, resync,
			jobsetinformers.WithTransform(TrimJobSet), jobsetinformers.WithNamespace(ns))
		trainJobs = append(trainJobs, tf.Trainer().V1alpha1().TrainJobs().Informer())
		runtimes = append(runtimes, tf.Trainer().V1alpha1().TrainingRuntimes().Informer())
		jobSets = append(jobSets, jf.Jobset().V1alpha2().JobSets().Informer())
		in.factories = append(in.factories, tf, jf)
	}
	// Cluster-scoped: a factory's namespace does not apply to them.
	cf := trainerinformers.NewSharedInformerFactoryWithOptions(trainer, resync,
		trainerinformers.WithTransform(StripClientMetadata))
	in.factories = append(in.factories, cf)
	in.ClusterTrainingRuntimes = cf.Trainer().V1alpha1().ClusterTrainingRuntimes().Informer()
	in.ClusterTrainingRuntimeLister = cf.Trainer().V1alpha1().ClusterTrainingRuntimes().Lister()

	in.TrainJobs = namespaces.Merge(watched.Each(), trainJobs)
	in.TrainingRuntimes = namespaces.Merge(watched.Each(), runtimes)
	in.JobSets = namespaces.Merge(watched.Each(), jobSets)
	in.TrainJobLister = trainerlisters.NewTrainJobLister(in.TrainJobs.GetIndexer())
	in.TrainingRuntimeLister = trainerlisters.NewTrainingRuntimeLister(in.TrainingRuntimes.GetIndexer())
	in.JobSetLister = jobsetlisters.NewJobSetLister(in.JobSets.GetIndexer())

	// The JobSets get no index beyond the factory's namespace index: a TrainJob's JobSet
	// is read by name (it is the TrainJob's), and an index nobody reads costs ~320 B a
	// JobSet (docs/design/memory.md, "Interning").
	if err := in.TrainJobs.AddIndexers(trainJobIndexers); err != nil {
		return nil, fmt.Errorf("adding TrainJob indexer %s: %w", IndexRuntimeRef, err)
	}
	return in, nil
}

// Start starts every informer; they stop when ctx is done.
func (in *Informers) Start(ctx context.Context) {
	for _, f := range in.factories {
		f.Start(ctx.Done())
	}
}

// WaitForCacheSync blocks until every informer has synced, and reports false if ctx
// ended first.
func (in *Informers) WaitForCacheSync(ctx context.Context) bool {
	return cache.WaitForNamedCacheSyncWithContext(ctx,
		in.TrainJobs.HasSynced, in.TrainingRuntimes.HasSynced,
		in.ClusterTrainingRuntimes.HasSynced, in.JobSets.HasSynced)
}

// Shutdown waits for the informers' goroutines to end after ctx was cancelled.
func (in *Informers) Shutdown() {
	for _, f := range in.factories {
		f.Shutdown()
	}
}

// HasSynced reports whether every informer has synced (for /readyz).
func (in *Informers) HasSynced() bool {
	return in.TrainJobs.HasSynced() && in.TrainingRuntimes.HasSynced() &&
		in.ClusterTrainingRuntimes.HasSynced() && in.JobSets.HasSynced()
}
