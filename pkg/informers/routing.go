package informers

import (
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Router takes the keys the event handlers route: the pipeline.
type Router interface {
	// Enqueue adds key to the queue of the named stage.
	Enqueue(stage string, key cache.ObjectName)
	// EnqueueAfter adds key to the named stage's queue once d has passed; adds of a key
	// already waiting coalesce into the earliest.
	EnqueueAfter(stage string, key cache.ObjectName, d time.Duration)
}

// StatusBatchPeriod is how long JobSet status updates are collected before the status
// stage runs: a JobSet's counts move several times a second while its pods start and
// finish, and one status write per burst is enough (the Job controller batches pod
// updates the same way). Creations and deletions are routed at once.
const StatusBatchPeriod = time.Second

// Routes names the stages events are routed to.
type Routes struct {
	// Build is the first stage (resolve runtime): TrainJob creations and spec changes,
	// and runtimes appearing or changing, rebuild the JobSet from there.
	Build string
	// Status is the status stage: JobSet changes only refresh TrainJob status, so
	// status-only traffic never rebuilds a JobSet.
	Status string
}

// Hooks lets the owners of per-TrainJob state kept outside the caches (the plans, the
// status stage's records of its own writes) follow the TrainJob cache, so that the state
// lives no longer than it is of use.
type Hooks struct {
	// Updated is called with the new TrainJob of every update the TrainJob cache
	// stored, after storing it: a reader of the cache sees that TrainJob. Nil: none.
	Updated func(tj *trainer.TrainJob)
	// Deleted is called with the key of every deleted TrainJob, after tombstones are
	// unwrapped. Nil: none.
	Deleted func(key cache.ObjectName)
	// JobSetDeleted is called with every deleted JobSet a TrainJob controls, as the
	// cache last held it (tombstones unwrapped), before the deletion is routed: the
	// stage that keeps a record of its own applies until the cache shows them learns
	// that the cache has shown this one (status.Stage.JobSetDeleted). Nil: none.
	JobSetDeleted func(js *jobsetv1alpha2.JobSet)
}

// Route registers the event handlers, and calls hooks on TrainJob updates and deletions.
func (in *Informers) Route(logger klog.Logger, r Router, routes Routes, hooks Hooks) error {
	if routes.Build == "" || routes.Status == "" {
		return fmt.Errorf("informers: routes need a build and a status stage, got %+v", routes)
	}
	h := &handlers{in: in, router: r, routes: routes, hooks: hooks, logger: logger}
	for name, reg := range map[string]struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		"TrainJob": {in.TrainJobs, cache.ResourceEventHandlerFuncs{
			AddFunc: h.addTrainJob, UpdateFunc: h.updateTrainJob, DeleteFunc: h.deleteTrainJob}},
		"TrainingRuntime": {in.TrainingRuntimes, cache.ResourceEventHandlerFuncs{
			AddFunc: h.addRuntime, UpdateFunc: h.updateRuntime}},
		"ClusterTrainingRuntime": {in.ClusterTrainingRuntimes, cache.ResourceEventHandlerFuncs{
			AddFunc: h.addRuntime, UpdateFunc: h.updateRuntime}},
		"JobSet": {in.JobSets, cache.ResourceEventHandlerFuncs{
			AddFunc: h.ownedChanged, UpdateFunc: h.ownedUpdated, DeleteFunc: h.jobSetDeleted}},
	} {
		if _, err := reg.informer.AddEventHandlerWithOptions(reg.handler, cache.HandlerOptions{Logger: &logger}); err != nil {
			return fmt.Errorf("informers: adding %s event handler: %w", name, err)
		}
	}
	return nil
}

type handlers struct {
	in     *Informers
	router Router
	routes Routes
	hooks  Hooks
	logger klog.Logger
}

func (h *handlers) addTrainJob(obj any) {
	tj, ok := obj.(*trainer.TrainJob)
	if !ok {
		return
	}
	h.routeTrainJob(tj)
}

// routeTrainJob sends tj to the status stage when there is nothing to build for it: it
// has finished (never rebuilt, but its Suspended condition follows spec.suspend,
// docs/compatibility.md#suspended-condition) or its JobSet was built from its current
// spec (Built); else to the build stage.
func (h *handlers) routeTrainJob(tj *trainer.TrainJob) {
	if trainjob.IsFinished(tj) || Built(tj, h.in.JobSetLister) {
		h.router.Enqueue(h.routes.Status, cache.MetaObjectToName(tj))
		return
	}
	h.router.Enqueue(h.routes.Build, cache.MetaObjectToName(tj))
}

// Built reports whether tj's JobSet in the cache was built from tj's current spec: tj
// controls it and its objectkeys.AnnotationTrainJobGeneration is tj's generation. Such a
// TrainJob has nothing to rebuild (its runtime is the JobSet's snapshot), so the add
// events of a controller start or an informer relist route it to the status stage:
// a restart with thousands of running or suspended TrainJobs builds nothing and
// reads no snapshot.
func Built(tj *trainer.TrainJob, jobSets jobsetlisters.JobSetLister) bool {
	js, err := jobSets.JobSets(tj.Namespace).Get(tj.Name)
	return err == nil && metav1.IsControlledBy(js, tj) &&
		js.Annotations[objectkeys.AnnotationTrainJobGeneration] == strconv.FormatInt(tj.Generation, 10)
}

// updateTrainJob routes only a spec change (a new generation), as routeTrainJob does.
// Status and metadata updates — most of them the controller's own status writes —
// route nowhere.
func (h *handlers) updateTrainJob(oldObj, newObj any) {
	oldTJ, ok1 := oldObj.(*trainer.TrainJob)
	newTJ, ok2 := newObj.(*trainer.TrainJob)
	if ok2 && h.hooks.Updated != nil {
		h.hooks.Updated(newTJ)
	}
	if ok1 && ok2 && oldTJ.Generation != newTJ.Generation {
		h.routeTrainJob(newTJ)
	}
}

func (h *handlers) deleteTrainJob(obj any) {
	if m := metaOf(obj); m != nil && h.hooks.Deleted != nil {
		h.hooks.Deleted(cache.MetaObjectToName(m))
	}
}

// addRuntime sends the TrainJobs referencing a runtime that appeared to the build
// stage: TrainJobs waiting for a missing runtime proceed by themselves.
func (h *handlers) addRuntime(obj any) {
	h.enqueueReferencing(obj)
}

// updateRuntime does the same on a spec change (a new generation).
func (h *handlers) updateRuntime(oldObj, newObj any) {
	o, n := metaOf(oldObj), metaOf(newObj)
	if o != nil && n != nil && o.GetGeneration() != n.GetGeneration() {
		h.enqueueReferencing(newObj)
	}
}

// enqueueReferencing sends to the build stage the TrainJobs that reference the runtime
// (the IndexRuntimeRef index, never a list of all TrainJobs) and that a runtime change
// can still affect (RuntimeMayAffect).
func (h *handlers) enqueueReferencing(obj any) {
	var key string
	switch rt := obj.(type) {
	case *trainer.TrainingRuntime:
		key = RuntimeRefKey(trainer.TrainingRuntimeKind, rt.Namespace, rt.Name)
	case *trainer.ClusterTrainingRuntime:
		key = RuntimeRefKey(trainer.ClusterTrainingRuntimeKind, "", rt.Name)
	default:
		return
	}
	jobs, err := h.in.TrainJobs.GetIndexer().ByIndex(IndexRuntimeRef, key)
	if err != nil {
		h.logger.Error(err, "Listing TrainJobs by runtime", "runtime", key)
		return
	}
	for _, obj := range jobs {
		if tj, ok := obj.(*trainer.TrainJob); ok && RuntimeMayAffect(tj, h.in.JobSetLister) {
			h.router.Enqueue(h.routes.Build, cache.MetaObjectToName(tj))
		}
	}
}

// RuntimeMayAffect reports whether a change of tj's runtime can change what is built
// for tj: not when tj is finished (never rebuilt, docs/compatibility.md#one-pass),
// managed by another controller, being deleted, or has a JobSet (its runtime is the
// snapshot the JobSet records, docs/compatibility.md#runtime-snapshots; a JobSet of the
// same name that tj does not control blocks tj whatever its runtime says). It reads
// only the caches.
func RuntimeMayAffect(tj *trainer.TrainJob, jobSets jobsetlisters.JobSetLister) bool {
	if tj.DeletionTimestamp != nil || !trainjob.IsManaged(tj) || trainjob.IsFinished(tj) {
		return false
	}
	_, err := jobSets.JobSets(tj.Namespace).Get(tj.Name)
	return apierrors.IsNotFound(err)
}

// ownedChanged routes the creation or deletion of an object a TrainJob controls (its
// JobSet) to the status stage of that TrainJob at once.
func (h *handlers) ownedChanged(obj any) {
	if key, ok := ownerKey(obj); ok {
		h.router.Enqueue(h.routes.Status, key)
	}
}

// jobSetDeleted calls Hooks.JobSetDeleted with a deleted JobSet that a TrainJob
// controls, then routes the deletion as ownedChanged does.
func (h *handlers) jobSetDeleted(obj any) {
	js, _ := metaOf(obj).(*jobsetv1alpha2.JobSet)
	if js != nil && h.hooks.JobSetDeleted != nil && ControllerTrainJob(js) != "" {
		h.hooks.JobSetDeleted(js)
	}
	h.ownedChanged(obj)
}

// ownedUpdated routes an update of an owned object to the status stage after
// StatusBatchPeriod, so a burst of updates costs one status sync; a JobSet that has
// just finished (Completed or Failed) is routed at once, so the TrainJob's terminal
// condition is not delayed and the pending batched sync finds nothing left to write.
//
// A JobSet restart (status.restarts up) of a TrainJob whose pods mount its create-only
// Secrets (MountsSideObjectSecret) is also routed to the build stage: the new pods
// mount them, and the controller cannot see a deleted one (it has no read access to
// Secrets), so the rebuilt plan creates them again (AlreadyExists when they are there).
func (h *handlers) ownedUpdated(oldObj, newObj any) {
	key, ok := ownerKey(newObj)
	if !ok {
		return
	}
	if oldJS, newJS := asJobSet(oldObj), asJobSet(newObj); oldJS != nil && newJS != nil &&
		newJS.Status.Restarts > oldJS.Status.Restarts && MountsSideObjectSecret(newJS) {
		h.router.Enqueue(h.routes.Build, key)
	}
	if jobSetFinished(newObj) && !jobSetFinished(oldObj) {
		h.router.Enqueue(h.routes.Status, key)
		return
	}
	h.router.EnqueueAfter(h.routes.Status, key, StatusBatchPeriod)
}

// asJobSet returns obj as a JobSet, nil when it is none.
func asJobSet(obj any) *jobsetv1alpha2.JobSet {
	js, _ := obj.(*jobsetv1alpha2.JobSet)
	return js
}

// MountsSideObjectSecret reports whether a pod template of js mounts a Secret named
// after js, as the TrainJob's create-only side objects are (sideObjectSecretVolumes;
// TrimJobSet keeps those volumes in the cache).
func MountsSideObjectSecret(js *jobsetv1alpha2.JobSet) bool {
	for i := range js.Spec.ReplicatedJobs {
		if len(sideObjectSecretVolumes(js.Name, js.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec.Volumes)) > 0 {
			return true
		}
	}
	return false
}

// jobSetFinished reports whether obj is a JobSet with a true Completed or Failed
// condition.
func jobSetFinished(obj any) bool {
	js, ok := obj.(*jobsetv1alpha2.JobSet)
	return ok && (meta.IsStatusConditionTrue(js.Status.Conditions, string(jobsetv1alpha2.JobSetCompleted)) ||
		meta.IsStatusConditionTrue(js.Status.Conditions, string(jobsetv1alpha2.JobSetFailed)))
}

// ownerKey returns the key of the TrainJob controlling obj.
func ownerKey(obj any) (cache.ObjectName, bool) {
	m := metaOf(obj)
	if m == nil {
		return cache.ObjectName{}, false
	}
	owner := ControllerTrainJob(m)
	return cache.ObjectName{Namespace: m.GetNamespace(), Name: owner}, owner != ""
}

// metaOf returns the object's metadata, unwrapping the tombstone a delete event carries
// when the watch missed the deletion; nil for anything else.
func metaOf(obj any) metav1.Object {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	m, _ := obj.(metav1.Object)
	return m
}
