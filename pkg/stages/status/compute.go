package status

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// computeStatus derives st from the TrainJob and its JobSet (nil when absent), in
// upstream's order: Suspended (docs/compatibility.md#suspended-condition), then the
// JobSet's terminal conditions and jobs status
// (docs/compatibility.md#status-from-the-jobset), then the active deadline
// (docs/compatibility.md#active-deadline). applied says the JobSet was just applied
// from a plan; expired that the active deadline passed.
func computeStatus(st *trainer.TrainJobStatus, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, applied, expired bool, now time.Time) {
	gen := tj.Generation
	switch suspended := meta.FindStatusCondition(st.Conditions, trainer.TrainJobSuspended); {
	case trainjob.IsSuspended(tj):
		setCondition(st, trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, trainer.TrainJobSuspendedMessage, gen, now)
	case suspended != nil && (suspended.Status == metav1.ConditionTrue || !trainjob.IsFinished(tj)):
		// A resume removes the condition instead of upstream's Suspended=False/Resumed:
		// the Python SDK reports Running only for a TrainJob without conditions, so the
		// False condition kept every resumed TrainJob — every one Kueue admits — Created
		// for its whole run (kubeflow/sdk #803; docs/compatibility.md#suspended-condition).
		// An unfinished TrainJob's Suspended=False (left by upstream's controller before a
		// swap) goes too; a finished one's stays, so a swap writes no finished TrainJob.
		meta.RemoveStatusCondition(&st.Conditions, trainer.TrainJobSuspended)
	}

	// A TrainJob rejected earlier for bad input is healed once a JobSet is applied.
	if applied {
		if c := meta.FindStatusCondition(st.Conditions, trainjob.ConditionJobSetReady); c != nil && c.Status == metav1.ConditionFalse {
			setCondition(st, trainjob.ConditionJobSetReady, metav1.ConditionTrue, trainjob.ReasonJobSetBuilt, "JobSet built from the TrainJob and its runtime", gen, now)
		}
	}

	// A finished TrainJob keeps its status when the JobSet is gone (TTL or deadline).
	if js != nil {
		mirrorTerminal(st, js, trainer.TrainJobComplete, string(jobsetv1alpha2.JobSetCompleted), gen)
		mirrorTerminal(st, js, trainer.TrainJobFailed, string(jobsetv1alpha2.JobSetFailed), gen)
		st.JobsStatus = jobsStatus(js)
	}

	if expired {
		setCondition(st, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobDeadlineExceededReason, trainer.TrainJobDeadlineExceededMessage, gen, now)
	}
}

// mirrorTerminal copies the JobSet condition jobSetType, when True, as the TrainJob
// condition tjType with the JobSet's reason, message and transition time (upstream
// copies them; Kueue and the SDK read the reason). A terminal condition, once set, is
// never cleared, and a DeadlineExceeded failure is never overwritten.
func mirrorTerminal(st *trainer.TrainJobStatus, js *jobsetv1alpha2.JobSet, tjType, jobSetType string, gen int64) {
	c := meta.FindStatusCondition(js.Status.Conditions, jobSetType)
	if c == nil || c.Status != metav1.ConditionTrue {
		return
	}
	if existing := meta.FindStatusCondition(st.Conditions, tjType); existing != nil && existing.Status == metav1.ConditionTrue {
		return
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: tjType, Status: metav1.ConditionTrue, Reason: c.Reason, Message: c.Message,
		LastTransitionTime: c.LastTransitionTime, ObservedGeneration: gen,
	})
}

// jobsStatus maps the JobSet's replicatedJobsStatus 1:1, keeping zero counts (every
// field of JobStatus is required). While every count is zero (the JobSet controller
// has created the Jobs but no pod exists yet) it returns nil: such a list says
// nothing a missing one does not, and writing it would cost a status patch per
// TrainJob (issue 9: at most 3 writes per lifecycle). Upstream writes the zeros.
func jobsStatus(js *jobsetv1alpha2.JobSet) []trainer.JobStatus {
	if !slices.ContainsFunc(js.Status.ReplicatedJobsStatus, func(r jobsetv1alpha2.ReplicatedJobStatus) bool {
		return r.Ready != 0 || r.Succeeded != 0 || r.Failed != 0 || r.Active != 0 || r.Suspended != 0
	}) {
		return nil
	}
	out := make([]trainer.JobStatus, 0, len(js.Status.ReplicatedJobsStatus))
	for _, r := range js.Status.ReplicatedJobsStatus {
		out = append(out, trainer.JobStatus{
			Name:      r.Name,
			Ready:     ptr.To(r.Ready),
			Succeeded: ptr.To(r.Succeeded),
			Failed:    ptr.To(r.Failed),
			Active:    ptr.To(r.Active),
			Suspended: ptr.To(r.Suspended),
		})
	}
	return out
}

func setCondition(st *trainer.TrainJobStatus, condType string, status metav1.ConditionStatus, reason, message string, gen int64, now time.Time) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: message,
		ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now),
	})
}
