// Package statuswriter writes TrainJob status for every stage: one patch per change, none
// when nothing changed, and never onto a TrainJob re-created under the same name. It sits
// below the stages so that stages 1–5 write conditions without importing the status stage.
package statuswriter

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Writer writes TrainJob status. Every stage that changes status goes through it, so a
// TrainJob gets at most one status write per sync and none when nothing changed.
//
// It remembers, per TrainJob, the last status it wrote and the resourceVersion the API
// server returned for it, for as long as the informer cache has not shown that write.
// A sync that reads the TrainJob from the lagging cache then builds on what was written,
// not on the cache's older status: it neither sends the same status again (two syncs of
// one key in quick succession, e.g. for the TrainJob's and its JobSet's add events after
// a restart) nor sends an older condition list over a newer one (stage 1 writes
// RuntimeResolved=True, and stage 6 of the same pass, reading the TrainJob before that
// write reached the cache, would write RuntimeResolved=False back with its own
// condition). A record is the written conditions, jobsStatus, startTime and
// completionTime and a resourceVersion;
// it is dropped when the cache catches up (Observed, or the next Update) and by Forget,
// so records exist only for writes still on their way to the cache.
type Writer struct {
	Client trainerclient.Interface

	mu      sync.Mutex
	written map[cache.ObjectName]writtenStatus
}

// writtenStatus is the last status write of this process for a TrainJob.
type writtenStatus struct {
	uid             types.UID
	resourceVersion string              // the TrainJob's resourceVersion after the write
	conditions      []metav1.Condition  // as written; never modified
	jobsStatus      []trainer.JobStatus // as written; never modified
	startTime       *metav1.Time        // as written; never modified
	completionTime  *metav1.Time        // as written; never modified
	finished        bool                // the write made the TrainJob Complete or Failed
}

// Update applies mutate to a copy of tj's status and, when the result differs
// semantically, writes status.conditions, jobsStatus, startTime and completionTime in
// one patch of the
// status subresource: Write(ctx, Prepare(tj, mutate)). The status mutated is tj.Status,
// or, when tj (read from the cache) is older than this process's last status write for
// it, tj.Status with the conditions and jobsStatus of that write; then a result that
// differs from that write only in lastTransitionTime is not written either (a sync
// recomputing a condition from the stale cache stamps it with its own clock). It
// returns whether it wrote, and the API error if the write failed.
//
// The patch leaves every other status field alone and only ever lands on the TrainJob,
// and the version of it, that the status was computed from. A sync that read tj from a
// lagging cache after the TrainJob was deleted and re-created under the same name must
// not write the old TrainJob's conditions (a copied Complete=True would leave the new
// one unbuilt); and a sync whose cache lags another writer's status write — a new
// leader's, whose cache has not shown the old leader's last writes — must not replace
// the conditions list with one computed from the older status (issue 41: Complete=True
// written over a Failed=True the new leader had not seen). A uid or resourceVersion in a
// merge patch is no precondition on a custom resource's status subresource (its update
// strategy copies the stored metadata over the patched object), so the write is a JSON
// patch (RFC 6902) whose first operations test metadata.uid and metadata.resourceVersion
// (the base's: tj's, or this process's last write's when the status builds on it): any
// other version fails it with 422 Invalid. This is the optimistic concurrency the
// Kubernetes Job controller and upstream Trainer get from a status update carrying the
// resourceVersion. A TrainJob with no status yet may have none on the server either,
// where a JSON patch cannot add a field without replacing all of status; its first
// write is a merge patch carrying tj's resourceVersion instead, which fails with 409
// Conflict on any newer object. Either failure is retried with the cache's newer view,
// which the informer delivers: a trainer's progress report (status.trainerStatus) that
// lands between the read and the write costs one retry.
func (w *Writer) Update(ctx context.Context, tj *trainer.TrainJob, mutate func(*trainer.TrainJobStatus)) (bool, error) {
	return w.Write(ctx, w.Prepare(tj, mutate))
}

// Change is a status write Prepare computed and Write makes: Base, the status it builds
// on, and Next, Base with the mutation applied. Both are the caller's to read, not to
// modify.
type Change struct {
	tj         *trainer.TrainJob
	Base, Next *trainer.TrainJobStatus
	pending    bool // Base carries this process's write the cache has not shown
	// resourceVersion is the TrainJob's version Base was read at: tj's, or the
	// resourceVersion the API server gave this process's pending write.
	resourceVersion string
}

// Prepare computes the status write Update would make for tj with mutate, without
// making it, so that a stage can decide on it (wait for it to settle, leave it to the
// next write) with the status computed once.
func (w *Writer) Prepare(tj *trainer.TrainJob, mutate func(*trainer.TrainJobStatus)) Change {
	base, rv, pending := w.newest(cache.MetaObjectToName(tj), tj)
	next := base.DeepCopy()
	mutate(next)
	return Change{tj: tj, Base: base, Next: next, pending: pending, resourceVersion: rv}
}

// Empty reports whether c writes nothing: Next equals Base, or, on a base this process
// wrote and the cache has not shown yet, differs from it only in lastTransitionTime.
func (c Change) Empty() bool {
	return equality.Semantic.DeepEqual(c.Base, c.Next) || (c.pending && statusDigest(c.Base) == statusDigest(c.Next))
}

// Write makes the status write c unless it is Empty, as Update describes. It returns
// whether it wrote, and the API error if the write failed.
func (w *Writer) Write(ctx context.Context, c Change) (bool, error) {
	if c.Empty() {
		return false, nil
	}
	tj, next := c.tj, c.Next
	key := cache.MetaObjectToName(tj)
	pt, patch, err := statusPatchOf(tj, c.resourceVersion, c.Base, next)
	if err != nil {
		return false, fmt.Errorf("encoding status patch: %w", err)
	}
	updated, err := w.Client.TrainerV1alpha1().TrainJobs(tj.Namespace).Patch(ctx, tj.Name, pt, patch,
		metav1.PatchOptions{FieldManager: trainjob.FieldManager}, "status")
	if err != nil {
		return false, fmt.Errorf("patching status of TrainJob %s/%s: %w", tj.Namespace, tj.Name, err)
	}
	w.mu.Lock()
	if w.written == nil {
		w.written = map[cache.ObjectName]writtenStatus{}
	}
	w.written[key] = writtenStatus{uid: tj.UID, resourceVersion: updated.ResourceVersion,
		conditions: next.Conditions, jobsStatus: next.JobsStatus, startTime: next.StartTime, completionTime: next.CompletionTime,
		finished: meta.IsStatusConditionTrue(next.Conditions, trainer.TrainJobComplete) || meta.IsStatusConditionTrue(next.Conditions, trainer.TrainJobFailed)}
	w.mu.Unlock()
	return true, nil
}

// newest returns the status Update builds on for tj and the resourceVersion it was read
// at: &tj.Status and tj's, or, when tj is older than this process's last status write
// for it (same uid, a lower resourceVersion), a copy of tj.Status with that write's
// conditions and jobsStatus, the write's resourceVersion, and pending true. A
// cache that has caught up (or moved past the write, e.g. after another client's status
// write) drops the record and is taken as it is. Comparing resourceVersions as integers
// is the API server's contract since Kubernetes 1.35 (KEP-5504); a resourceVersion that
// is not one (a fake client's) drops the record too.
func (w *Writer) newest(key cache.ObjectName, tj *trainer.TrainJob) (st *trainer.TrainJobStatus, resourceVersion string, pending bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.written[key]
	if !ok {
		return &tj.Status, tj.ResourceVersion, false
	}
	if last.uid == tj.UID {
		if order, err := resourceversion.CompareResourceVersion(tj.ResourceVersion, last.resourceVersion); err == nil && order < 0 {
			st := tj.Status.DeepCopy()
			st.Conditions, st.JobsStatus = last.conditions, last.jobsStatus
			st.StartTime, st.CompletionTime = last.startTime, last.completionTime
			return st, last.resourceVersion, true
		}
	}
	delete(w.written, key)
	return &tj.Status, tj.ResourceVersion, false
}

// WroteFinished reports whether this process's last status write for tj made it
// Complete or Failed while tj, read from the cache, is older than that write. Those
// conditions are terminal, so a sync reading such a tj must take it as finished: the
// JobSet deleted at an active deadline, say, sends its delete event before the
// TrainJob's Failed arrives, and a sync of the stale TrainJob would create a new
// JobSet whose pods run on after the TrainJob failed. A resourceVersion that is no
// integer (a fake client's) reports false, as newest keeps no record for it.
func (w *Writer) WroteFinished(tj *trainer.TrainJob) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.written[cache.MetaObjectToName(tj)]
	if !ok || !last.finished || last.uid != tj.UID {
		return false
	}
	order, err := resourceversion.CompareResourceVersion(tj.ResourceVersion, last.resourceVersion)
	return err == nil && order < 0
}

// Observed drops the record of the last status write for tj's key once tj, a TrainJob
// the cache has just stored, shows that write (its resourceVersion is the write's or
// later) or is another TrainJob (another uid): from then on the cache itself keeps a
// sync from repeating the write, and a record kept would stay for as long as the
// TrainJob lives, one per TrainJob whose status this process ever wrote. A
// resourceVersion that is no integer (a fake client's) drops the record, as
// newest does. Call it from the TrainJob informer's update handler
// (informers.Hooks.Updated). A record whose watch event came before the write's
// response stays until the TrainJob's next update or its deletion (Forget).
func (w *Writer) Observed(tj *trainer.TrainJob) {
	key := cache.MetaObjectToName(tj)
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.written[key]
	if !ok {
		return
	}
	if last.uid == tj.UID {
		if order, err := resourceversion.CompareResourceVersion(tj.ResourceVersion, last.resourceVersion); err == nil && order < 0 {
			return // the cache is still behind the write
		}
	}
	delete(w.written, key)
}

// records returns how many write records w holds, for tests.
func (w *Writer) records() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.written)
}

// Forget drops the record of the last status write for the TrainJob at key; call it
// when the TrainJob is deleted.
func (w *Writer) Forget(key cache.ObjectName) {
	w.mu.Lock()
	delete(w.written, key)
	w.mu.Unlock()
}

// statusDigest hashes the fields Update writes, without the conditions'
// lastTransitionTime: a sync that recomputes a write from the stale cache stamps a
// condition with its own clock, a second later perhaps, and it is still the same status.
func statusDigest(st *trainer.TrainJobStatus) uint64 {
	fields := statusFields{Conditions: make([]metav1.Condition, len(st.Conditions)), JobsStatus: st.JobsStatus,
		StartTime: st.StartTime, CompletionTime: st.CompletionTime}
	for i, c := range st.Conditions {
		c.LastTransitionTime = metav1.Time{}
		fields.Conditions[i] = c
	}
	h := fnv.New64a()
	// Encoding a struct of plain fields cannot fail.
	_ = json.NewEncoder(h).Encode(fields)
	return h.Sum64()
}

// statusPatchOf returns the patch that sets next's conditions, jobsStatus, startTime and
// completionTime on tj (see Update), base being the status next was built on, read at
// resourceVersion: a JSON patch testing tj's uid and resourceVersion when base has a
// status, else a merge patch with tj's resourceVersion. An empty resourceVersion (a
// fake client's object has none) is not tested. A nil list is written as null, which
// the API server prunes.
func statusPatchOf(tj *trainer.TrainJob, resourceVersion string, base, next *trainer.TrainJobStatus) (types.PatchType, []byte, error) {
	if equality.Semantic.DeepEqual(base, &trainer.TrainJobStatus{}) {
		patch, err := json.Marshal(statusMergePatch{
			Metadata: resourceVersionPrecondition{ResourceVersion: tj.ResourceVersion},
			Status:   statusFields{Conditions: next.Conditions, JobsStatus: next.JobsStatus, StartTime: next.StartTime, CompletionTime: next.CompletionTime},
		})
		return types.MergePatchType, patch, err
	}
	ops := []jsonPatchOp{{Op: "test", Path: "/metadata/uid", Value: tj.UID}}
	if resourceVersion != "" {
		ops = append(ops, jsonPatchOp{Op: "test", Path: "/metadata/resourceVersion", Value: resourceVersion})
	}
	ops = append(ops,
		jsonPatchOp{Op: "add", Path: "/status/conditions", Value: next.Conditions},
		jsonPatchOp{Op: "add", Path: "/status/jobsStatus", Value: next.JobsStatus})
	// The times only when either side has one: most writes touch neither.
	if base.StartTime != nil || next.StartTime != nil {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/status/startTime", Value: next.StartTime})
	}
	if base.CompletionTime != nil || next.CompletionTime != nil {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/status/completionTime", Value: next.CompletionTime})
	}
	patch, err := json.Marshal(ops)
	return types.JSONPatchType, patch, err
}

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// statusMergePatch is a JSON merge patch of the status fields the controller owns,
// conditional on the resourceVersion.
type statusMergePatch struct {
	Metadata resourceVersionPrecondition `json:"metadata"`
	Status   statusFields                `json:"status"`
}

type resourceVersionPrecondition struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

type statusFields struct {
	Conditions     []metav1.Condition  `json:"conditions"`
	JobsStatus     []trainer.JobStatus `json:"jobsStatus"`
	StartTime      *metav1.Time        `json:"startTime,omitempty"`
	CompletionTime *metav1.Time        `json:"completionTime,omitempty"`
}
