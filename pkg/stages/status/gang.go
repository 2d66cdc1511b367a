package status

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// gangCondition records waiting, the explanation of a gang the scheduler cannot place
// ("" when none waits; see gang.Waiting), as GangScheduled=False, and turns an existing
// False condition True once nothing waits. A TrainJob whose gang never waited gets no
// condition, and an unchanged explanation changes nothing, so it costs no write.
func gangCondition(st *trainer.TrainJobStatus, tj *trainer.TrainJob, waiting string, now time.Time) {
	existing := meta.FindStatusCondition(st.Conditions, trainjob.ConditionGangScheduled)
	switch {
	case waiting != "":
		setCondition(st, trainjob.ConditionGangScheduled, metav1.ConditionFalse, trainjob.ReasonGangUnschedulable,
			truncateMessage(waiting), tj.Generation, now)
	case existing != nil && existing.Status == metav1.ConditionFalse:
		setCondition(st, trainjob.ConditionGangScheduled, metav1.ConditionTrue, trainjob.ReasonGangScheduled,
			"the scheduler placed every gang of the TrainJob", tj.Generation, now)
	}
}

// planConditions sets the conditions the build stages asked for with the JobSet they
// built (plan.Plan.Conditions), stamped with now.
func planConditions(st *trainer.TrainJobStatus, conditions []metav1.Condition, now time.Time) {
	for _, c := range conditions {
		c.LastTransitionTime = metav1.NewTime(now)
		meta.SetStatusCondition(&st.Conditions, c)
	}
}

// truncateMessage keeps a scheduler's long explanation within what a condition message
// should carry (the step stage cuts the same way).
func truncateMessage(s string) string {
	const max = 950
	if len(s) <= max {
		return s
	}
	return s[:max] + " ..."
}
