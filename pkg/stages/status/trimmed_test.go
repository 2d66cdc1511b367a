package status

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/pkg/informers"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// TestComputeStatusOnTrimmedJobSet: the stage reads the JobSet from a cache that holds
// it through informers.TrimJobSet. Everything the stage derives from a JobSet — the
// TrainJob's status, the active deadline, the apply gate, the hash check — is the same
// on the trimmed JobSet as on the JobSet the API server holds; a read of a field the
// transform drops fails here.
func TestComputeStatusOnTrimmedJobSet(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	tj := utiltesting.MakeTrainJob("team-a", "llm").UID("uid-1").Generation(2).Created(now.Add(-time.Hour)).
		ActiveDeadlineSeconds(7200).Obj()
	template := batchv1.JobTemplateSpec{}
	template.Spec.Parallelism = ptr.To[int32](2)
	template.Spec.Template.Spec.Containers = []corev1.Container{{Name: "node", Image: "pytorch", Command: []string{"torchrun"}}}
	base := utiltesting.MakeJobSet("team-a", "llm").ControlledBy(tj).Suspend(false).
		Annotation(AnnotationJobSetHash, "abc").
		ReplicatedJob(jobsetv1alpha2.ReplicatedJob{Name: "node", Replicas: 2, Template: template})
	base.Spec.Network = &jobsetv1alpha2.Network{EnableDNSHostnames: ptr.To(true)}
	base.Spec.SuccessPolicy = &jobsetv1alpha2.SuccessPolicy{Operator: jobsetv1alpha2.OperatorAll}

	finished := func(condType, reason, message string) metav1.Condition {
		c := utiltesting.Condition(condType, metav1.ConditionTrue, reason, message)
		c.LastTransitionTime = metav1.NewTime(now.Add(-time.Minute))
		return c
	}
	jobSets := map[string]*jobsetv1alpha2.JobSet{
		"created":   base.Clone().Obj(),
		"running":   base.Clone().ReplicatedJobStatus("node", 2, 0, 0, 2, 0).Obj(),
		"suspended": base.Clone().Suspend(true).ReplicatedJobStatus("node", 0, 0, 0, 0, 2).Obj(),
		"completed": base.Clone().ReplicatedJobStatus("node", 0, 2, 0, 0, 0).
			Condition(finished(string(jobsetv1alpha2.JobSetCompleted), "AllJobsCompleted", "jobset completed successfully")).Obj(),
		"failed": base.Clone().ReplicatedJobStatus("node", 0, 0, 2, 0, 0).
			Condition(finished(string(jobsetv1alpha2.JobSetFailed), "FailedJobs", "jobset failed")).Obj(),
	}
	for name, js := range jobSets {
		t.Run(name, func(t *testing.T) {
			trimmed, err := informers.TrimJobSet(js.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			derived := func(js *jobsetv1alpha2.JobSet) []any {
				st := tj.Status.DeepCopy()
				computeStatus(st, tj, js, false, false, now)
				deadline, expired := activeDeadline(tj, js, tj.Spec.ActiveDeadlineSeconds, now)
				return []any{st, deadline, expired, mayApply(tj, js, appliedJobSet{}),
					mayApply(tj, js, appliedJobSet{hash: "abc"}), jobSetFinished(js), js.Annotations[AnnotationJobSetHash]}
			}
			if diff := cmp.Diff(derived(js), derived(trimmed.(*jobsetv1alpha2.JobSet))); diff != "" {
				t.Errorf("the status stage derives something else from the trimmed JobSet (-full +trimmed):\n%s", diff)
			}
		})
	}
}
