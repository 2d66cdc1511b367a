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
// semantically from tj.Status, writes status.conditions and status.jobsStatus with one
// JSON merge patch on the status subresource (as upstream does: no resourceVersion, so
// no conflicts with the trainer pods' own status.trainerStatus writes, which the patch
// leaves untouched). It returns whether it wrote, and the API error if the write failed.
func (w *Writer) Update(ctx context.Context, tj *trainer.TrainJob, mutate func(*trainer.TrainJobStatus)) (bool, error) {
	next := tj.Status.DeepCopy()
	mutate(next)
	if equality.Semantic.DeepEqual(&tj.Status, next) {
		return false, nil
	}
	patch, err := json.Marshal(statusPatch{Status: statusFields{Conditions: next.Conditions, JobsStatus: next.JobsStatus}})
	if err != nil {
		return false, fmt.Errorf("encoding status patch: %w", err)
	}
	_, err = w.Client.TrainerV1alpha1().TrainJobs(tj.Namespace).Patch(ctx, tj.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return false, fmt.Errorf("patching status of TrainJob %s/%s: %w", tj.Namespace, tj.Name, err)
	}
	return true, nil
}

// statusPatch is a JSON merge patch of the two status fields the controller owns. A nil
// list encodes as null, which deletes the field.
type statusPatch struct {
	Status statusFields `json:"status"`
}

type statusFields struct {
	Conditions []metav1.Condition  `json:"conditions"`
	JobsStatus []trainer.JobStatus `json:"jobsStatus"`
}
