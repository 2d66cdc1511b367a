package plan_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// A side object carries the TrainJob's name as a label (what the side-object informers
// select on) and the TrainJob as its controller; a name that is no label value leaves
// it unlabelled rather than unwritable.
func TestOwnedObjectLabelAndController(t *testing.T) {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "team-a", UID: "uid-1"}}
	obj := plan.OwnedObject(tj, "v1", "ConfigMap", "llm-mpi-hostfile")
	if got := obj.GetLabels(); len(got) != 1 || got[objectkeys.LabelTrainJobName] != "llm" {
		t.Errorf("labels = %v, want %s=llm", got, objectkeys.LabelTrainJobName)
	}
	if !metav1.IsControlledBy(obj, tj) || trainjob.ControllerName(obj) != "llm" {
		t.Errorf("controller = %+v, want TrainJob llm", metav1.GetControllerOf(obj))
	}

	long := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 64), Namespace: "team-a", UID: "uid-2"}}
	if got := plan.OwnedObject(long, "v1", "Secret", "s").GetLabels(); got != nil {
		t.Errorf("labels for a 64-character name = %v, want none", got)
	}
}
