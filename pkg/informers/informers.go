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
)

// Informers holds the shared informer factories and the listers the stages use.
// Create it with New, register handlers with Route, then Start and WaitForCacheSync.
type Informers struct {
	trainerFactory trainerinformers.SharedInformerFactory
	jobSetFactory  jobsetinformers.SharedInformerFactory

	TrainJobs               cache.SharedIndexInformer
	TrainingRuntimes        cache.SharedIndexInformer
	ClusterTrainingRuntimes cache.SharedIndexInformer
	JobSets                 cache.SharedIndexInformer

	TrainJobLister               trainerlisters.TrainJobLister
	TrainingRuntimeLister        trainerlisters.TrainingRuntimeLister
	ClusterTrainingRuntimeLister trainerlisters.ClusterTrainingRuntimeLister
	JobSetLister                 jobsetlisters.JobSetLister
}

// New creates the informers with the transforms and indexers installed. resync is the
// periodic resync interval (0 disables it: the pipeline is level-triggered on events and
// a resync would only cost CPU). It returns an error only if an indexer cannot be added.
func New(trainer trainerclient.Interface, jobsets jobsetclient.Interface, resync time.Duration) (*Informers, error) {
	tf := trainerinformers.NewSharedInformerFactoryWithOptions(trainer, resync,
		trainerinformers.WithTransform(StripManagedFields))
	jf := jobsetinformers.NewSharedInformerFactoryWithOptions(jobsets, resync,
		jobsetinformers.WithTransform(TrimJobSet))

	in := &Informers{
		trainerFactory:          tf,
		jobSetFactory:           jf,
		TrainJobs:               tf.Trainer().V1alpha1().TrainJobs().Informer(),
		TrainingRuntimes:        tf.Trainer().V1alpha1().TrainingRuntimes().Informer(),
		ClusterTrainingRuntimes: tf.Trainer().V1alpha1().ClusterTrainingRuntimes().Informer(),
		JobSets:                 jf.Jobset().V1alpha2().JobSets().Informer(),
	}
	in.TrainJobLister = tf.Trainer().V1alpha1().TrainJobs().Lister()
	in.TrainingRuntimeLister = tf.Trainer().V1alpha1().TrainingRuntimes().Lister()
	in.ClusterTrainingRuntimeLister = tf.Trainer().V1alpha1().ClusterTrainingRuntimes().Lister()
	in.JobSetLister = jf.Jobset().V1alpha2().JobSets().Lister()

	if err := in.TrainJobs.AddIndexers(cache.Indexers{IndexRuntimeRef: indexByRuntimeRef}); err != nil {
		return nil, fmt.Errorf("adding TrainJob indexer %s: %w", IndexRuntimeRef, err)
	}
	if err := in.JobSets.AddIndexers(cache.Indexers{IndexOwnerTrainJob: indexByOwnerTrainJob}); err != nil {
		return nil, fmt.Errorf("adding JobSet indexer %s: %w", IndexOwnerTrainJob, err)
	}
	return in, nil
}

// Start starts every informer; they stop when ctx is done.
func (in *Informers) Start(ctx context.Context) {
	in.trainerFactory.Start(ctx.Done())
	in.jobSetFactory.Start(ctx.Done())
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
	in.trainerFactory.Shutdown()
	in.jobSetFactory.Shutdown()
}

// HasSynced reports whether every informer has synced (for /readyz).
func (in *Informers) HasSynced() bool {
	return in.TrainJobs.HasSynced() && in.TrainingRuntimes.HasSynced() &&
		in.ClusterTrainingRuntimes.HasSynced() && in.JobSets.HasSynced()
}
