package status

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// BenchmarkComputeStatus measures the status computation of one sync of a running
// TrainJob whose JobSet reports one replicatedJob, and of one that just completed.
func BenchmarkComputeStatus(b *testing.B) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "default", Generation: 1,
		CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))}}
	tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](3600)
	running := &jobsetv1alpha2.JobSet{Status: jobsetv1alpha2.JobSetStatus{
		ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Ready: 2, Active: 2}},
	}}
	completed := running.DeepCopy()
	completed.Status.Conditions = []metav1.Condition{{Type: string(jobsetv1alpha2.JobSetCompleted), Status: metav1.ConditionTrue,
		Reason: "AllJobsCompleted", Message: "jobset completed successfully", LastTransitionTime: metav1.NewTime(now)}}
	for name, js := range map[string]*jobsetv1alpha2.JobSet{"Running": running, "Completed": completed} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				// As Writer.Update does: mutate a copy of the cached status.
				st := tj.Status.DeepCopy()
				_, expired := activeDeadline(tj, js, tj.Spec.ActiveDeadlineSeconds, now)
				computeStatus(st, tj, js, false, expired, now)
			}
		})
	}
}
