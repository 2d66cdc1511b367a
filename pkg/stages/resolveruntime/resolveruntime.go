// Package resolveruntime is pipeline stage 1: it finds the TrainingRuntime or
// ClusterTrainingRuntime a TrainJob references and starts the TrainJob's plan.
//
// Outcomes (trainer-compat §2.1):
//   - TrainJob gone, being deleted, finished, or managed by MultiKueue: nothing to do.
//   - runtimeRef names an unsupported kind or group: condition Failed=True with reason
//     TrainingRuntimeNotSupported and message "unsupported runtime: <Kind>.<group>";
//     terminal. (Upstream computes the same condition but never persists it.)
//   - runtime not found: condition RuntimeResolved=False naming the runtime and the fix;
//     the TrainJob waits, and the runtime's creation event brings it back (no retry loop).
//     (Upstream only retries with backoff and emits events.)
//   - found: the plan for this TrainJob generation is stored and the key moves on.
package resolveruntime

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/stages/step"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Name is the stage name: its queue name and its metrics' stage label.
const Name = "resolve_runtime"

// Stage resolves runtimes. All fields are required.
type Stage struct {
	TrainJobs               trainerlisters.TrainJobLister
	TrainingRuntimes        trainerlisters.TrainingRuntimeLister
	ClusterTrainingRuntimes trainerlisters.ClusterTrainingRuntimeLister
	Plans                   *stages.Plans[plan.Plan]
	Status                  *status.Writer
	Recorder                events.EventRecorder
}

var _ stages.Stage = (*Stage)(nil)

// Name returns Name.
func (s *Stage) Name() string { return Name }

// Sync resolves the runtime of the TrainJob at key. It returns Continue with the plan
// stored, WaitForEvent when there is nothing to do or the runtime is missing, Terminal
// for an unsupported runtime kind, and an error (retried) when a status write fails.
func (s *Stage) Sync(ctx context.Context, key cache.ObjectName) (stages.Result, error) {
	tj, res, err := step.Buildable(s.TrainJobs, s.Plans, key)
	if tj == nil {
		return res, err
	}

	rt, err := Resolve(tj, s.TrainingRuntimes, s.ClusterTrainingRuntimes)
	var unsupported *UnsupportedKindError
	switch {
	case errors.As(err, &unsupported):
		return s.failUnsupported(ctx, tj, unsupported.Error())
	case apierrors.IsNotFound(err):
		return s.waitForRuntime(ctx, tj, rt.Kind)
	case err != nil:
		return stages.Retry(), err
	}
	kind := rt.Kind
	if err := s.markResolved(ctx, tj, kind); err != nil {
		return stages.Retry(), err
	}
	s.Plans.Put(key, tj.UID, tj.Generation, &plan.Plan{Runtime: rt, Stage: 1})
	return stages.Continue(), nil
}

// UnsupportedKindError is Resolve's error for a runtimeRef naming a kind or group other
// than trainer.kubeflow.org TrainingRuntime or ClusterTrainingRuntime. Its text is the
// upstream condition message "unsupported runtime: <Kind>.<group>".
type UnsupportedKindError struct{ Message string }

func (e *UnsupportedKindError) Error() string { return e.Message }

// Resolve finds the runtime tj references (TrainingRuntimes in tj's namespace) through
// the listers, whose objects it shares: the returned Spec is read only. Errors: an
// *UnsupportedKindError for a runtimeRef of another kind or group; the listers' NotFound
// (apierrors.IsNotFound) when the runtime does not exist, with the returned Runtime's
// Kind and Name set; any other lister error as is. The controller's stage 1 and the
// offline renderer (package render) both resolve with it.
func Resolve(tj *trainer.TrainJob, trs trainerlisters.TrainingRuntimeLister, ctrs trainerlisters.ClusterTrainingRuntimeLister) (plan.Runtime, error) {
	kind, err := trainjob.RuntimeKind(tj)
	if err != nil {
		return plan.Runtime{}, &UnsupportedKindError{Message: err.Error()}
	}
	rt := plan.Runtime{Kind: kind, Name: tj.Spec.RuntimeRef.Name}
	if kind == trainer.TrainingRuntimeKind {
		obj, err := trs.TrainingRuntimes(tj.Namespace).Get(rt.Name)
		if err != nil {
			return rt, err
		}
		rt.Spec = &obj.Spec
		return rt, nil
	}
	obj, err := ctrs.Get(rt.Name)
	if err != nil {
		return rt, err
	}
	rt.Spec = &obj.Spec
	return rt, nil
}

func (s *Stage) failUnsupported(ctx context.Context, tj *trainer.TrainJob, message string) (stages.Result, error) {
	wrote, err := s.Status.Update(ctx, tj, func(st *trainer.TrainJobStatus) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:    trainer.TrainJobFailed,
			Status:  metav1.ConditionTrue,
			Reason:  trainer.TrainJobRuntimeNotSupportedReason,
			Message: message + `: spec.runtimeRef must name a TrainingRuntime or ClusterTrainingRuntime of apiGroup trainer.kubeflow.org; runtimeRef is immutable, so recreate the TrainJob`,
		})
	})
	if err != nil {
		return stages.Retry(), err
	}
	if wrote {
		s.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainer.TrainJobRuntimeNotSupportedReason, "Resolving", "%s", message)
	}
	return stages.Terminal(), nil
}

func (s *Stage) waitForRuntime(ctx context.Context, tj *trainer.TrainJob, kind string) (stages.Result, error) {
	message := notFoundMessage(kind, tj.Namespace, tj.Spec.RuntimeRef.Name)
	wrote, err := s.Status.Update(ctx, tj, func(st *trainer.TrainJobStatus) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:    trainjob.ConditionRuntimeResolved,
			Status:  metav1.ConditionFalse,
			Reason:  trainjob.ReasonRuntimeNotFound,
			Message: message,
		})
	})
	if err != nil {
		return stages.Retry(), err
	}
	if wrote {
		s.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainjob.ReasonRuntimeNotFound, "Resolving", "%s", message)
	}
	return stages.WaitForEvent(), nil
}

// markResolved flips a RuntimeResolved=False condition to True once the runtime exists;
// a TrainJob that never waited has no such condition and costs no write.
func (s *Stage) markResolved(ctx context.Context, tj *trainer.TrainJob, kind string) error {
	if meta.FindStatusCondition(tj.Status.Conditions, trainjob.ConditionRuntimeResolved) == nil {
		return nil
	}
	_, err := s.Status.Update(ctx, tj, func(st *trainer.TrainJobStatus) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:    trainjob.ConditionRuntimeResolved,
			Status:  metav1.ConditionTrue,
			Reason:  trainjob.ReasonRuntimeFound,
			Message: fmt.Sprintf("%s %q found", kind, tj.Spec.RuntimeRef.Name),
		})
	})
	return err
}

// notFoundMessage names the missing runtime and the two ways out.
func notFoundMessage(kind, namespace, name string) string {
	where := ""
	if kind == trainer.TrainingRuntimeKind {
		where = fmt.Sprintf(" in namespace %q", namespace)
	}
	return fmt.Sprintf("%s %q referenced by spec.runtimeRef not found%s: create it and the TrainJob proceeds by itself (spec.runtimeRef is immutable: to use another runtime, recreate the TrainJob)",
		kind, name, where)
}
