package status

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
)

// newest returns the cache's TrainJob of tj's key when it is tj itself (same uid) and
// not being deleted, else tj. A pass that applied the JobSet computes the status from
// it: the apply took a round trip to the API server, in which the TrainJob may have
// changed, and a status computed from the copy read before would be outdated before it
// is written. Through Kueue it is: Kueue writes its runtime patch (generation 2) and
// unsuspends (generation 3) in two requests milliseconds apart, and the status of
// generation 2 — Suspended=True with observedGeneration 2 — was a patch of its own,
// followed by generation 3's resume (the condition removed); from the newest TrainJob
// the pass that applied generation 2 writes the resume at once, and generation 3's
// pass, which resumes the
// JobSet, finds nothing left to write (docs/design/status-writes.md). The status
// follows spec.suspend as upstream's does (docs/compatibility.md#suspended-condition);
// the newer generation is queued for its own build (the informers route it), which
// resumes the JobSet.
func (s *Stage) newest(tj *trainer.TrainJob) *trainer.TrainJob {
	cached, err := s.TrainJobs.TrainJobs(tj.Namespace).Get(tj.Name)
	if err != nil || cached.UID != tj.UID || cached.DeletionTimestamp != nil {
		return tj
	}
	return cached
}

// settles reports whether the status write change of a pass that applied the JobSet,
// one that writes something, may wait for Settle: a later sync, which has neither the
// plan nor the apply, computes the same (later applied to change's base gives change's
// result).
func settles(change statuswriter.Change, later func(*trainer.TrainJobStatus)) bool {
	settled := change.Base.DeepCopy()
	later(settled)
	return equality.Semantic.DeepEqual(change.Next, settled)
}

// onlySuspendedCounts reports whether change, a status write that writes something,
// changes nothing but jobsStatus[].suspended: then the stage does not write it on its
// own, and the next write carries it. No reader acts on that count — Kueue reads
// active, ready and succeeded and the conditions; users read the Suspended condition,
// written at once — and through Kueue it cost every queued TrainJob a status patch of
// its own, seconds after its Suspended=True, when the JobSet controller created its Job
// suspended (docs/design/status-writes.md). A list whose other counts are all zero
// counts as no list, as jobsStatus writes it.
func onlySuspendedCounts(change statuswriter.Change) bool {
	cur, next := *change.Base, *change.Next
	cur.JobsStatus, next.JobsStatus = withoutSuspendedCounts(cur.JobsStatus), withoutSuspendedCounts(next.JobsStatus)
	return equality.Semantic.DeepEqual(&cur, &next)
}

// withoutSuspendedCounts returns jobs with every suspended count cleared, or nil when
// every other count is zero.
func withoutSuspendedCounts(jobs []trainer.JobStatus) []trainer.JobStatus {
	var any bool
	out := make([]trainer.JobStatus, len(jobs))
	for i, j := range jobs {
		j.Suspended = nil
		out[i] = j
		any = any || ptr.Deref(j.Ready, 0) != 0 || ptr.Deref(j.Succeeded, 0) != 0 || ptr.Deref(j.Failed, 0) != 0 || ptr.Deref(j.Active, 0) != 0
	}
	if !any {
		return nil
	}
	return out
}
