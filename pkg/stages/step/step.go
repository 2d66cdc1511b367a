// Package step adapts a plan step — a function that refines the plan of one TrainJob
// generation — into a pipeline stage. Stages 2–5 (merge patches, ML policy, gang
// scheduling, DRA claims) are steps; this package holds what they share: loading the
// TrainJob and its plan, copy-on-write of the plan, and turning bad input
// (plan.IsInputError) into a condition instead of a retry loop (architecture
// docs/design/architecture.md#bad-input-becomes-a-condition).
package step

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Func refines p, a private copy of the plan, for tj. It returns a
// *plan.InvalidInputError or *plan.UnsupportedError when the TrainJob or its runtime
// cannot be built as given; any other error is retried.
type Func func(ctx context.Context, tj *trainer.TrainJob, p *plan.Plan) error

// Stage runs one Func as a pipeline stage.
type Stage struct {
	// StageName is the stage's name; Index its 1-based position in the pipeline.
	StageName string
	Index     int
	Step      Func

	TrainJobs trainerlisters.TrainJobLister
	Plans     *engine.Plans[plan.Plan]
	Status    *statuswriter.Writer
	Recorder  events.EventRecorder
}

var _ engine.Stage = (*Stage)(nil)

// Name returns the stage's name.
func (s *Stage) Name() string { return s.StageName }

// Sync runs the step on the plan of the TrainJob at key. It returns Restart when the
// plan is missing or was built for another generation or has not reached the previous
// stage, Continue with the refined plan stored (or, for a finished TrainJob, without
// one), Terminal on bad input (condition written), WaitForEvent when the TrainJob is
// gone or needs nothing, and Retry with the error otherwise.
func (s *Stage) Sync(ctx context.Context, key cache.ObjectName) (engine.Result, error) {
	tj, res, err := Buildable(s.TrainJobs, s.Plans, key)
	if tj == nil {
		return res, err
	}
	current, ok := s.Plans.Get(key, tj.UID, tj.Generation)
	if !ok || current.Stage != s.Index-1 {
		// Stale or partial plan: a newer generation or a concurrent rebuild is in
		// flight. Stage 1 rebuilds it; the workqueue coalesces duplicate restarts.
		return engine.Restart(), nil
	}
	next := current.DeepCopy()
	if err := s.Step(ctx, tj, next); err != nil {
		if plan.IsInputError(err) {
			return s.reject(ctx, key, tj, err)
		}
		return engine.Retry(), err
	}
	next.Stage = s.Index
	s.Plans.Put(key, tj.UID, tj.Generation, next)
	return engine.Continue(), nil
}

// reject records bad input as JobSetReady=False and a Warning event (the event only
// when the condition changed, so a resync does not repeat it), and drops the partial
// build (DropBuild). The TrainJob waits for a change to itself or its runtime: both
// route it back to stage 1.
func (s *Stage) reject(ctx context.Context, key cache.ObjectName, tj *trainer.TrainJob, input error) (engine.Result, error) {
	res, err := Reject(ctx, s.Status, s.Recorder, tj, input)
	if err == nil {
		DropBuild(s.Plans, key, tj)
	}
	return res, err
}

// DropBuild replaces the plan of tj's generation with an empty one (Stage 0) once a
// stage has rejected that generation. Why: the partial build (the runtime, the JobSet
// being built, side objects; tens of KiB) would otherwise stay in memory until the
// TrainJob changed, which for a bad TrainJob nobody fixes is until it is deleted. The
// empty plan still says the generation was built and refused: the status stage, given
// a plan that has not reached it, writes status without sending the TrainJob back to
// stage 1 for another build that would be refused again, and a build stage given it
// restarts the TrainJob from stage 1.
func DropBuild(plans *engine.Plans[plan.Plan], key cache.ObjectName, tj *trainer.TrainJob) {
	plans.Put(key, tj.UID, tj.Generation, &plan.Plan{})
}

// Reject is what a stage does with bad input (plan.IsInputError): JobSetReady=False,
// reason InvalidSpec or NotSupported, with the error as message, and a Warning event
// when the condition changed. It returns Terminal, or Retry with the status write's
// error.
func Reject(ctx context.Context, w *statuswriter.Writer, recorder events.EventRecorder, tj *trainer.TrainJob, input error) (engine.Result, error) {
	reason := trainjob.ReasonInvalidSpec
	var unsupported *plan.UnsupportedError
	var waiting *plan.WaitingError
	switch {
	case errors.As(input, &unsupported):
		reason = trainjob.ReasonUnsupported
	case errors.As(input, &waiting):
		reason = waiting.Reason
	}
	message := truncate(input.Error())
	wrote, err := w.Update(ctx, tj, func(st *trainer.TrainJobStatus) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:               trainjob.ConditionJobSetReady,
			Status:             metav1.ConditionFalse,
			Reason:             reason,
			Message:            message,
			ObservedGeneration: tj.Generation,
		})
	})
	if err != nil {
		return engine.Retry(), err
	}
	if wrote {
		recorder.Eventf(tj, nil, corev1.EventTypeWarning, reason, "Building", "%s", message)
	}
	return engine.Terminal(), nil
}

// truncate keeps a message within what conditions (32 KiB) and events (1 KiB notes)
// accept, marking the cut like upstream does (950 characters + " ...").
func truncate(s string) string {
	const max = 950
	if len(s) <= max {
		return s
	}
	return s[:max] + " ..."
}

// Buildable returns the TrainJob at key when stages 1–5 should build for it. Otherwise
// it returns nil with the result to return: WaitForEvent when the TrainJob is gone (its
// plan is dropped), being deleted or managed by another controller; Continue when it
// has finished, so that the key reaches the status stage without a build: a finished
// TrainJob is never rebuilt, but its Suspended condition still follows spec.suspend
// (docs/compatibility.md#one-pass step 5 and
// docs/compatibility.md#suspended-condition), and a spec change routed here before the
// TrainJob's terminal condition reached the cache would otherwise be lost; Retry with
// the error when the lister fails.
func Buildable(lister trainerlisters.TrainJobLister, plans *engine.Plans[plan.Plan], key cache.ObjectName) (*trainer.TrainJob, engine.Result, error) {
	tj, err := lister.TrainJobs(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		plans.Delete(key)
		return nil, engine.WaitForEvent(), nil
	}
	if err != nil {
		return nil, engine.Retry(), err
	}
	if tj.DeletionTimestamp != nil || !trainjob.IsManaged(tj) {
		return nil, engine.WaitForEvent(), nil
	}
	if trainjob.IsFinished(tj) {
		return nil, engine.Continue(), nil
	}
	return tj, engine.Result{}, nil
}
