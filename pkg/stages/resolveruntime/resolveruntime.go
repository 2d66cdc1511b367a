// Package resolveruntime is pipeline stage 1: it finds the TrainingRuntime or
// ClusterTrainingRuntime a TrainJob references and starts the TrainJob's plan.
//
// Outcomes (docs/compatibility.md#one-pass):
//   - TrainJob gone, being deleted, finished, or managed by MultiKueue: nothing to do.
//   - TrainJob in a system namespace (trainjob.SystemNamespaces: kube-system,
//     kube-public, kube-node-lease): condition JobSetReady=False, reason
//     InvalidTrainJobSpec, the message naming the namespace and the fix (create it
//     elsewhere); terminal, so no JobSet or side object is ever written there.
//   - runtimeRef names an unsupported kind or group: condition Failed=True with reason
//     TrainingRuntimeNotSupported and message "unsupported runtime: <Kind>.<group>";
//     terminal. (Upstream computes the same condition but never persists it.)
//   - runtime not found: condition RuntimeResolved=False naming the runtime and the fix;
//     the TrainJob waits, and the runtime's creation event brings it back (no retry loop).
//     (Upstream only retries with backoff and emits events.)
//   - found: the plan for this TrainJob generation is stored and the key moves on.
//
// Runtime snapshots (docs/compatibility.md#runtime-snapshots, KEP-2599): once a
// TrainJob has a JobSet, its runtime comes from the JobSet's
// trainyard.dev/runtime-snapshot annotation (objectkeys.AnnotationRuntimeSnapshot), which
// records the runtime the first build used, and never from the live runtime again:
// editing or deleting a runtime changes no TrainJob that has started, not even a
// suspended one on resume (upstream's behaviour). The JobSet informer's cache drops the
// annotation (it is as large as the Job templates the cache already drops) but keeps
// its digest (objectkeys.AnnotationRuntimeSnapshotHash): a rebuild of a TrainJob that has a
// JobSet uses the live runtime when its encoding has that digest — it is the recorded
// runtime, byte for byte — and costs one GET of the JobSet only when it has not (the
// runtime was edited, deleted or re-created since, or the JobSet predates the digest).
// Through Kueue, whose runtime patch and unsuspend each rebuild a TrainJob, that is two
// GETs per TrainJob saved. Recording the snapshot costs no write: it rides on the
// JobSet apply that happens anyway. A JobSet without the annotation (built before
// snapshots existed) gets the live runtime recorded the next time it may be written
// (while suspended).
package resolveruntime

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	"github.com/trainyard/trainyard/pkg/stages/step"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Name is the stage name: its queue name and its metrics' stage label.
const Name = "resolve_runtime"

// Stage resolves runtimes. All fields are required.
type Stage struct {
	// Index is the stage's 1-based position in the pipeline (the stage table's): the
	// plan it starts records it as the last stage it reached.
	Index int

	TrainJobs               trainerlisters.TrainJobLister
	TrainingRuntimes        trainerlisters.TrainingRuntimeLister
	ClusterTrainingRuntimes trainerlisters.ClusterTrainingRuntimeLister
	// JobSets (the cache) says whether a TrainJob has a JobSet and holds its snapshot's
	// digest; JobSetAPI reads the snapshot, which the cache does not hold, when the
	// digest is not the live runtime's.
	JobSets   jobsetlisters.JobSetLister
	JobSetAPI jobsetclient.Interface
	Plans     *engine.Plans[plan.Plan]
	Status    *statuswriter.Writer
	Recorder  events.EventRecorder
}

var _ engine.Stage = (*Stage)(nil)

// Name returns Name.
func (s *Stage) Name() string { return Name }

// Sync resolves the runtime of the TrainJob at key. It returns Continue with the plan
// stored, WaitForEvent when there is nothing to do or the runtime is missing, Terminal
// for a TrainJob in a system namespace, an unsupported runtime kind, a corrupt snapshot
// or a runtime too large to record (each with a condition), and an error (retried) when an API call fails.
func (s *Stage) Sync(ctx context.Context, key cache.ObjectName) (engine.Result, error) {
	tj, res, err := step.Buildable(s.TrainJobs, s.Plans, key)
	if tj == nil {
		return res, err
	}
	if trainjob.IsSystemNamespace(tj.Namespace) {
		// Nothing is built, so nothing is written there (trainjob.SystemNamespaces).
		return s.reject(ctx, key, tj, &plan.InvalidInputError{Field: "metadata.namespace", Message: trainjob.SystemNamespaceMessage(tj.Namespace)})
	}

	kind, err := trainjob.RuntimeKind(tj)
	if err != nil {
		return s.failUnsupported(ctx, tj, err.Error())
	}
	rt, err := s.snapshot(ctx, tj, kind)
	if err == nil && rt == nil {
		var live plan.Runtime
		live, err = Resolve(tj, s.TrainingRuntimes, s.ClusterTrainingRuntimes)
		rt = &live
	}
	switch {
	case apierrors.IsNotFound(err):
		return s.waitForRuntime(ctx, tj, kind)
	case plan.IsInputError(err):
		return s.reject(ctx, key, tj, err)
	case err != nil:
		return engine.Retry(), err
	}
	if err := s.markResolved(ctx, tj, kind); err != nil {
		return engine.Retry(), err
	}
	s.Plans.Put(key, tj.UID, tj.Generation, &plan.Plan{
		Runtime: *rt,
		Stage:   s.Index,
	})
	return engine.Continue(), nil
}

// reject gives tj the condition of input, bad input (step.Reject), and drops its build.
func (s *Stage) reject(ctx context.Context, key cache.ObjectName, tj *trainer.TrainJob, input error) (engine.Result, error) {
	res, err := step.Reject(ctx, s.Status, s.Recorder, tj, input)
	if err == nil {
		step.DropBuild(s.Plans, key, tj)
	}
	return res, err
}

// snapshot returns the runtime recorded on the JobSet of tj, or nil when tj has no
// JobSet it controls (a foreign one is the status stage's to report) or the JobSet has
// no snapshot. When the cached JobSet's snapshot digest is the live runtime's, that is
// the recorded runtime and nothing is read from the API; else the JobSet is read for
// its snapshot. Errors: the API's, and *plan.InvalidInputError for a corrupt snapshot.
func (s *Stage) snapshot(ctx context.Context, tj *trainer.TrainJob, kind string) (*plan.Runtime, error) {
	cached, err := s.JobSets.JobSets(tj.Namespace).Get(tj.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil || !metav1.IsControlledBy(cached, tj) {
		return nil, err
	}
	if digest := cached.Annotations[objectkeys.AnnotationRuntimeSnapshotHash]; digest != "" {
		// Any error (the runtime deleted, grown past the snapshot limit) leaves the
		// answer to the snapshot itself.
		if live, err := Resolve(tj, s.TrainingRuntimes, s.ClusterTrainingRuntimes); err == nil && plan.SnapshotHash(live.Snapshot) == digest {
			return &live, nil
		}
	}
	js, err := s.JobSetAPI.JobsetV1alpha2().JobSets(tj.Namespace).Get(ctx, tj.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the runtime snapshot of JobSet %s/%s: %w", tj.Namespace, tj.Name, err)
	}
	value, ok := js.Annotations[objectkeys.AnnotationRuntimeSnapshot]
	if !ok || !metav1.IsControlledBy(js, tj) {
		return nil, nil
	}
	rt, err := plan.DecodeSnapshot(value, kind, tj.Spec.RuntimeRef.Name, js.Name)
	if err != nil {
		return nil, err
	}
	return &rt, nil
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
// Kind and Name set; *plan.UnsupportedError for a runtime too large to record as the
// snapshot (plan.EncodeSnapshot); any other lister error as is. The returned Runtime
// carries the snapshot to record on the JobSet. The controller's stage 1 (for a
// TrainJob without a JobSet) and the offline renderer (package render) both resolve
// with it.
func Resolve(tj *trainer.TrainJob, trs trainerlisters.TrainingRuntimeLister, ctrs trainerlisters.ClusterTrainingRuntimeLister) (plan.Runtime, error) {
	kind, err := trainjob.RuntimeKind(tj)
	if err != nil {
		return plan.Runtime{}, &UnsupportedKindError{Message: err.Error()}
	}
	rt := plan.Runtime{Kind: kind, Name: tj.Spec.RuntimeRef.Name}
	var objMeta metav1.ObjectMeta
	if kind == trainer.TrainingRuntimeKind {
		obj, err := trs.TrainingRuntimes(tj.Namespace).Get(rt.Name)
		if err != nil {
			return rt, err
		}
		rt.Spec, objMeta = &obj.Spec, obj.ObjectMeta
	} else {
		obj, err := ctrs.Get(rt.Name)
		if err != nil {
			return rt, err
		}
		rt.Spec, objMeta = &obj.Spec, obj.ObjectMeta
	}
	snapshot, err := plan.EncodeSnapshot(rt, objMeta)
	if err != nil {
		return rt, err
	}
	rt.Snapshot = snapshot
	return rt, nil
}

func (s *Stage) failUnsupported(ctx context.Context, tj *trainer.TrainJob, message string) (engine.Result, error) {
	wrote, err := s.Status.Update(ctx, tj, func(st *trainer.TrainJobStatus) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:    trainer.TrainJobFailed,
			Status:  metav1.ConditionTrue,
			Reason:  trainer.TrainJobRuntimeNotSupportedReason,
			Message: message + `: spec.runtimeRef must name a TrainingRuntime or ClusterTrainingRuntime of apiGroup trainer.kubeflow.org; runtimeRef is immutable, so recreate the TrainJob`,
		})
	})
	if err != nil {
		return engine.Retry(), err
	}
	if wrote {
		s.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainer.TrainJobRuntimeNotSupportedReason, "Resolving", "%s", message)
	}
	return engine.Terminal(), nil
}

func (s *Stage) waitForRuntime(ctx context.Context, tj *trainer.TrainJob, kind string) (engine.Result, error) {
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
		return engine.Retry(), err
	}
	if wrote {
		s.Recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainjob.ReasonRuntimeNotFound, "Resolving", "%s", message)
	}
	return engine.WaitForEvent(), nil
}

// markResolved flips a RuntimeResolved=False condition to True once the runtime exists;
// a TrainJob that never waited has no such condition and costs no write. Whether there
// is one is judged on the status the Writer builds on, not on tj: the cache may not
// show the False this stage wrote a moment ago (the runtime's creation event can come
// first), and a False left there would stay, every later write building on it.
func (s *Stage) markResolved(ctx context.Context, tj *trainer.TrainJob, kind string) error {
	_, err := s.Status.Update(ctx, tj, func(st *trainer.TrainJobStatus) {
		if meta.FindStatusCondition(st.Conditions, trainjob.ConditionRuntimeResolved) == nil {
			return
		}
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

// RunPolicyLookup returns a function that reads the spec.runPolicy of the runtime a
// TrainJob references through the listers (no API call, no snapshot encoding), nil
// when the runtime has none, no longer exists or is of another kind. The status stage
// resolves a TrainJob's deadline and TTL with it at every sync, as KEP-2899 resolves
// them per reconcile (docs/compatibility.md#ttl-and-run-policy).
func RunPolicyLookup(trs trainerlisters.TrainingRuntimeLister, ctrs trainerlisters.ClusterTrainingRuntimeLister) func(*trainer.TrainJob) *trainer.RunPolicy {
	return func(tj *trainer.TrainJob) *trainer.RunPolicy {
		kind, err := trainjob.RuntimeKind(tj)
		if err != nil {
			return nil
		}
		if kind == trainer.TrainingRuntimeKind {
			if rt, err := trs.TrainingRuntimes(tj.Namespace).Get(tj.Spec.RuntimeRef.Name); err == nil {
				return rt.Spec.RunPolicy
			}
			return nil
		}
		if rt, err := ctrs.Get(tj.Spec.RuntimeRef.Name); err == nil {
			return rt.Spec.RunPolicy
		}
		return nil
	}
}
