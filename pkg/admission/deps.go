package admission

import (
	"fmt"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/tools/cache"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
)

// Deps are what the rules read besides the request: informer caches and settings.
// TrainingRuntimes, ClusterTrainingRuntimes and JobSets are required; the others may be
// nil, which skips what needs them (named on each field).
type Deps struct {
	// TrainingRuntimes and ClusterTrainingRuntimes resolve a TrainJob's runtimeRef.
	TrainingRuntimes        trainerlisters.TrainingRuntimeLister
	ClusterTrainingRuntimes trainerlisters.ClusterTrainingRuntimeLister
	// JobSets is the JobSet cache: the status of a TrainJob's JobSet (is a replicatedJob
	// active?) and whether a TrainJob was already built. The controller's trimmed cache
	// keeps both.
	JobSets jobsetlisters.JobSetLister
	// PriorityClasses checks that the PriorityClasses a Volcano runtime's pods name
	// exist; nil skips the check. client-go's PriorityClassLister satisfies it.
	PriorityClasses PriorityClassGetter
	// TrainJobs lists the TrainJobs that reference a runtime, for the warnings on a
	// runtime's creation and edits (IndexedTrainJobs); nil gives none.
	TrainJobs RuntimeUsers
	// Claims is the DRA stage, whose claim caches tell whether GPUs per node can be
	// derived from a TrainJob's claims; nil (or a stage without caches, before
	// resource.k8s.io/v1 is served) gives no DRA warning.
	Claims *dra.Claims
	// Plugins are the ML policies, as the ML policy stage runs them; nil means
	// mlpolicy.DefaultPlugins (validation does not depend on Secret names).
	Plugins []mlpolicy.Plugin
	// SubjectAccessReviews asks the API server whether the creator of an
	// OptimizationJob may create TrainJobs in its namespace, as the controller will
	// for it (authorizeTrials; RBAC: create subjectaccessreviews); nil skips that
	// check. client-go's AuthorizationV1().SubjectAccessReviews() satisfies it.
	SubjectAccessReviews authorizationv1client.SubjectAccessReviewInterface
	// Now is the clock of runtimePatches[].time defaulting; nil means time.Now.
	Now func() time.Time
	// Observer is told about every review and every request refused for Limits; nil
	// observes nothing.
	Observer Observer
	// Limits bound the requests NewHandler holds at once; zero fields take their
	// defaults.
	Limits Limits
}

// PriorityClassGetter reads PriorityClasses by name.
type PriorityClassGetter interface {
	Get(name string) (*schedulingv1.PriorityClass, error)
}

// RuntimeUsers lists the TrainJobs that reference the runtime of kind
// (TrainingRuntime or ClusterTrainingRuntime), namespace ("" for a
// ClusterTrainingRuntime) and name.
type RuntimeUsers interface {
	TrainJobsUsing(kind, namespace, name string) ([]*trainer.TrainJob, error)
}

// IndexedTrainJobs is RuntimeUsers over the TrainJob informer's indexer, which has the
// informers.IndexRuntimeRef index (informers.New adds it).
type IndexedTrainJobs struct{ Indexer cache.Indexer }

// TrainJobsUsing implements RuntimeUsers.
func (x IndexedTrainJobs) TrainJobsUsing(kind, namespace, name string) ([]*trainer.TrainJob, error) {
	objs, err := x.Indexer.ByIndex(informers.IndexRuntimeRef, informers.RuntimeRefKey(kind, namespace, name))
	if err != nil {
		return nil, fmt.Errorf("listing the TrainJobs of %s %q: %w", kind, name, err)
	}
	out := make([]*trainer.TrainJob, 0, len(objs))
	for _, obj := range objs {
		if tj, ok := obj.(*trainer.TrainJob); ok {
			out = append(out, tj)
		}
	}
	return out, nil
}

func (d *Deps) plugins() []mlpolicy.Plugin {
	if d.Plugins != nil {
		return d.Plugins
	}
	return mlpolicy.DefaultPlugins(mlpolicy.SecretNames{})
}

func (d *Deps) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}
