package status

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
)

// FieldManager is the field manager of every write Trainyard makes.
const FieldManager = "trainyard"

// Writer writes TrainJob status. Every stage that changes status goes through it, so a
// TrainJob gets at most one status write per sync and none when nothing changed.
type Writer struct {
	Client trainerclient.Interface
}

// Update applies mutate to a copy of tj.Status and, when the result differs
// semantically from tj.Status, writes status.conditions and status.jobsStatus in one
// patch of the status subresource. It returns whether it wrote, and the API error if the
// write failed.
//
// The patch leaves every other status field alone (no conflict with the trainer pods'
// status.trainerStatus reports) and only ever lands on the TrainJob tj is: a sync that
// read tj from a lagging cache after the TrainJob was deleted and re-created under the
// same name must not write the old TrainJob's conditions (a copied Complete=True would
// leave the new one unbuilt). A uid in a merge patch is no precondition on a custom
// resource's status subresource (its update strategy copies the stored metadata over the
// patched object), so the write is a JSON patch (RFC 6902) whose first operation tests
// metadata.uid: a TrainJob of another uid fails it with 422 Invalid. A TrainJob with no
// status yet may have none on the server either, where a JSON patch cannot add a field
// without replacing all of status; its first write is a merge patch carrying tj's
// resourceVersion instead, which fails with 409 Conflict on any newer object, the
// re-created one included. Either failure is retried with the cache's newer view.
func (w *Writer) Update(ctx context.Context, tj *trainer.TrainJob, mutate func(*trainer.TrainJobStatus)) (bool, error) {
	next := tj.Status.DeepCopy()
	mutate(next)
	if equality.Semantic.DeepEqual(&tj.Status, next) {
		return false, nil
	}
	pt, patch, err := statusPatchOf(tj, next)
	if err != nil {
		return false, fmt.Errorf("encoding status patch: %w", err)
	}
	_, err = w.Client.TrainerV1alpha1().TrainJobs(tj.Namespace).Patch(ctx, tj.Name, pt, patch,
		metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return false, fmt.Errorf("patching status of TrainJob %s/%s: %w", tj.Namespace, tj.Name, err)
	}
	return true, nil
}

// statusPatchOf returns the patch that sets next's conditions and jobsStatus on tj (see
// Update): a JSON patch testing tj's uid when tj has a status, else a merge patch with
// tj's resourceVersion. A nil list is written as null, which the API server prunes.
func statusPatchOf(tj *trainer.TrainJob, next *trainer.TrainJobStatus) (types.PatchType, []byte, error) {
	if equality.Semantic.DeepEqual(&tj.Status, &trainer.TrainJobStatus{}) {
		patch, err := json.Marshal(statusMergePatch{
			Metadata: resourceVersionPrecondition{ResourceVersion: tj.ResourceVersion},
			Status:   statusFields{Conditions: next.Conditions, JobsStatus: next.JobsStatus},
		})
		return types.MergePatchType, patch, err
	}
	patch, err := json.Marshal([]jsonPatchOp{
		{Op: "test", Path: "/metadata/uid", Value: tj.UID},
		{Op: "add", Path: "/status/conditions", Value: next.Conditions},
		{Op: "add", Path: "/status/jobsStatus", Value: next.JobsStatus},
	})
	return types.JSONPatchType, patch, err
}

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// statusMergePatch is a JSON merge patch of the two status fields the controller owns,
// conditional on the resourceVersion.
type statusMergePatch struct {
	Metadata resourceVersionPrecondition `json:"metadata"`
	Status   statusFields                `json:"status"`
}

type resourceVersionPrecondition struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

type statusFields struct {
	Conditions []metav1.Condition  `json:"conditions"`
	JobsStatus []trainer.JobStatus `json:"jobsStatus"`
}
