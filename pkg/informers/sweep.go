package informers

import (
	"context"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// JobSetLags reports whether tj's JobSet, as the caches hold it, should reflect tj's
// current generation and does not: the JobSet records an older generation
// (objectkeys.AnnotationTrainJobGeneration) while it may still change — tj or the JobSet is
// suspended (a running JobSet is never modified,
// docs/compatibility.md#suspend-and-resume) — or tj has no JobSet, or one it does not
// control, while nothing recorded says why. Recorded reasons: JobSetReady=False
// observed at tj's generation (bad input, a foreign JobSet, an API the cluster does not
// serve, too few devices) and RuntimeResolved=False while the runtime is still missing
// from the cache. Finished, deleted and foreign-managed TrainJobs never lag. It reads
// only the caches.
func JobSetLags(tj *trainer.TrainJob, jobSets jobsetlisters.JobSetLister, runtimeExists func(*trainer.TrainJob) bool) bool {
	if tj.DeletionTimestamp != nil || !trainjob.IsManaged(tj) || trainjob.IsFinished(tj) {
		return false
	}
	conds := tj.Status.Conditions
	if c := meta.FindStatusCondition(conds, trainjob.ConditionJobSetReady); c != nil &&
		c.Status == metav1.ConditionFalse && c.ObservedGeneration == tj.Generation {
		return false
	}
	js, err := jobSets.JobSets(tj.Namespace).Get(tj.Name)
	switch {
	case apierrors.IsNotFound(err):
		return !meta.IsStatusConditionFalse(conds, trainjob.ConditionRuntimeResolved) || runtimeExists(tj)
	case err != nil:
		return false
	case !metav1.IsControlledBy(js, tj):
		return true // the status stage records JobSetConflict at this generation
	case js.Annotations[objectkeys.AnnotationTrainJobGeneration] == strconv.FormatInt(tj.Generation, 10):
		return false
	}
	return trainjob.IsSuspended(tj) || ptr.Deref(js.Spec.Suspend, false)
}

// SweepTarget is what the sweep sends TrainJobs to: the pipeline.
type SweepTarget interface {
	// Has reports whether the pipeline is working on key.
	Has(key cache.ObjectName) bool
	// EnqueueFirst sends key to the first stage.
	EnqueueFirst(key cache.ObjectName)
}

// Sweeper is the consistency backstop of issue 18: every Period it lists the TrainJobs
// in the cache (no API reads) and finds those whose JobSet lags their spec
// (JobSetLags). One found lagging at the same generation on two sweeps in a row, and
// that the pipeline is not working on either time, is a lost update: it is logged and
// sent back to the first stage. The two sweeps keep a TrainJob whose event is being
// delivered at the moment of a sweep from counting as lost. The pipeline never loses an
// update by design (package engine), so the sweep should find nothing; what it finds is
// counted (metrics.ConsistencySweepRequeuesTotal) for an alert. TrainJobs that have
// lagged for longer than LagThreshold, lost or still being worked on, are counted in
// metrics.TrainJobsJobSetLagging.
//
// Sweep is not safe for concurrent use; Run calls it from one goroutine.
type Sweeper struct {
	TrainJobs     trainerlisters.TrainJobLister
	JobSets       jobsetlisters.JobSetLister
	RuntimeExists func(*trainer.TrainJob) bool
	Target        SweepTarget
	// Observe records each sweep's lagging count and re-queues (metrics.ObserveSweep).
	Observe      func(lagging, requeued int)
	Period       time.Duration
	LagThreshold time.Duration
	// Clock is for tests; nil means the real clock.
	Clock clock.PassiveClock

	// lagging holds the TrainJobs found lagging by the last sweep.
	lagging map[cache.ObjectName]lag
}

// lag is what a sweep saw of a lagging TrainJob.
type lag struct {
	uid        types.UID
	generation int64
	since      time.Time // the first sweep that found it lagging at this generation
	busy       bool      // the pipeline was working on it
}

// Run sweeps every Period until ctx is done.
func (s *Sweeper) Run(ctx context.Context) {
	ticker := time.NewTicker(s.Period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			s.Sweep(ctx)
		}
	}
}

// Sweep runs one sweep and returns how many TrainJobs it sent back to the first stage.
func (s *Sweeper) Sweep(ctx context.Context) int {
	logger := klog.FromContext(ctx)
	now := time.Now()
	if s.Clock != nil {
		now = s.Clock.Now()
	}
	tjs, err := s.TrainJobs.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Consistency sweep: listing cached TrainJobs")
		return 0
	}
	found := make(map[cache.ObjectName]lag)
	requeued, overdue := 0, 0
	for _, tj := range tjs {
		if !JobSetLags(tj, s.JobSets, s.RuntimeExists) {
			continue
		}
		key := cache.MetaObjectToName(tj)
		l := lag{uid: tj.UID, generation: tj.Generation, since: now, busy: s.Target.Has(key)}
		prev, seen := s.lagging[key]
		if seen && prev.uid == l.uid && prev.generation == l.generation {
			l.since = prev.since
			if !prev.busy && !l.busy {
				logger.Error(nil, "Consistency sweep found a TrainJob whose JobSet lags its spec and that the pipeline is not working on: a lost update, re-queued (please report it)",
					"trainJob", klog.KObj(tj), "generation", tj.Generation, "lagging", now.Sub(l.since).String())
				s.Target.EnqueueFirst(key)
				requeued++
			}
		}
		if now.Sub(l.since) > s.LagThreshold {
			overdue++
		}
		found[key] = l
	}
	s.lagging = found
	if s.Observe != nil {
		s.Observe(overdue, requeued)
	}
	return requeued
}

// RuntimeExists reports whether the runtime tj references is in the cache; false for an
// unsupported runtimeRef.
func (in *Informers) RuntimeExists(tj *trainer.TrainJob) bool {
	kind, err := trainjob.RuntimeKind(tj)
	if err != nil {
		return false
	}
	if kind == trainer.TrainingRuntimeKind {
		_, err = in.TrainingRuntimeLister.TrainingRuntimes(tj.Namespace).Get(tj.Spec.RuntimeRef.Name)
	} else {
		_, err = in.ClusterTrainingRuntimeLister.Get(tj.Spec.RuntimeRef.Name)
	}
	return err == nil
}
