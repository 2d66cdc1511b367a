package status

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// TestGangCondition: GangScheduled appears only once a gang waits, is left alone while
// the explanation stays the same (no write), and turns True when nothing waits.
func TestGangCondition(t *testing.T) {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	now := time.Unix(1000, 0)

	st := &trainer.TrainJobStatus{}
	gangCondition(st, tj, "", now)
	if len(st.Conditions) != 0 {
		t.Fatalf("never waited: conditions %+v, want none (no write on the happy path)", st.Conditions)
	}

	gangCondition(st, tj, "waiting for 3 pods to be schedulable together", now)
	c := meta.FindStatusCondition(st.Conditions, trainjob.ConditionGangScheduled)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != trainjob.ReasonGangUnschedulable || c.Message != "waiting for 3 pods to be schedulable together" || c.ObservedGeneration != 2 {
		t.Fatalf("waiting: condition %+v, want GangScheduled=False/%s with the explanation", c, trainjob.ReasonGangUnschedulable)
	}

	before := st.DeepCopy()
	gangCondition(st, tj, "waiting for 3 pods to be schedulable together", now.Add(time.Minute))
	if !equality.Semantic.DeepEqual(before, st) {
		t.Errorf("same explanation changed the status: %+v -> %+v", before, st)
	}

	gangCondition(st, tj, "", now.Add(2*time.Minute))
	c = meta.FindStatusCondition(st.Conditions, trainjob.ConditionGangScheduled)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != trainjob.ReasonGangScheduled {
		t.Errorf("scheduled: condition %+v, want GangScheduled=True/%s", c, trainjob.ReasonGangScheduled)
	}
}
