package v1alpha1_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// printerColumns are the TrainJob columns of `kubectl get trainjobs` (priority 0) and
// `-o wide` (priority 1), as docs/compatibility.md ("Printer columns") documents them.
var printerColumns = []struct {
	name, typ string
	priority  int32
}{
	{"State", "string", 0},
	{"Reason", "string", 0},
	{"Suspended", "boolean", 0},
	{"Progress", "integer", 0},
	{"ETA", "integer", 0},
	{"Age", "date", 0},
	{"Runtime", "string", 1},
	{"NumNodes", "integer", 1},
	{"Started", "date", 1},
	{"Completed", "date", 1},
}

// trainJobTable is the API server's table for TrainJobs: the generated CRD's columns
// through the API server's own table convertor (k8s.io/apiextensions-apiserver), which
// evaluates the JSONPaths exactly as `kubectl get` sees them.
type trainJobTable struct {
	t         *testing.T
	convertor rest.TableConvertor
}

func newTrainJobTable(t *testing.T) *trainJobTable {
	t.Helper()
	c := loadCRDs(t)[trainer.TrainJobKind]
	convertor, err := tableconvertor.New(c.v1.Spec.Versions[0].AdditionalPrinterColumns)
	if err != nil {
		// The API server would fall back to NAME and AGE, silently.
		t.Fatalf("the API server cannot parse a TrainJob printer column: %v", err)
	}
	return &trainJobTable{t: t, convertor: convertor}
}

// row returns tj's cells by column name: nil for an empty cell (kubectl prints
// nothing), else the string, bool or int64 the API server sends.
func (tt *trainJobTable) row(tj *trainer.TrainJob) map[string]any {
	tt.t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tj)
	if err != nil {
		tt.t.Fatal(err)
	}
	table, err := tt.convertor.ConvertToTable(context.Background(), &unstructured.Unstructured{Object: content}, &metav1.TableOptions{})
	if err != nil {
		tt.t.Fatal(err)
	}
	if len(table.Rows) != 1 || len(table.Rows[0].Cells) != len(table.ColumnDefinitions) {
		tt.t.Fatalf("table %+v: want one row with a cell per column", table)
	}
	cells := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		cells[col.Name] = table.Rows[0].Cells[i]
	}
	return cells
}

// TestTrainJobPrinterColumnDefinitions: the generated CRD has printerColumns, in order.
func TestTrainJobPrinterColumnDefinitions(t *testing.T) {
	c := loadCRDs(t)[trainer.TrainJobKind]
	cols := c.v1.Spec.Versions[0].AdditionalPrinterColumns
	if len(cols) != len(printerColumns) {
		t.Fatalf("TrainJob printer columns %+v; want %d: %+v", cols, len(printerColumns), printerColumns)
	}
	for i, want := range printerColumns {
		if got := cols[i]; got.Name != want.name || got.Type != want.typ || got.Priority != want.priority {
			t.Errorf("column %d = %s (%s, priority %d); want %s (%s, priority %d)", i, got.Name, got.Type, got.Priority, want.name, want.typ, want.priority)
		}
	}
}

// TestTrainJobPrinterColumns: each column's cell for TrainJobs at the steps of their
// lives, including those upstream's column got wrong (a resumed TrainJob, Trainyard's
// conditions True), and whatever the order of the conditions in the list.
func TestTrainJobPrinterColumns(t *testing.T) {
	table := newTrainJobTable(t)
	created := time.Now().Add(-90 * time.Second)
	base := func() *utiltesting.TrainJobWrapper {
		return utiltesting.MakeTrainJob("ns", "mnist").Created(created).Suspend(false)
	}
	cond := func(condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: condType, Status: status, Reason: reason, Message: "m", LastTransitionTime: metav1.NewTime(created)}
	}
	var (
		suspended   = cond(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason)
		resumed     = cond(trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason)
		complete    = cond(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted")
		failed      = cond(trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs")
		progress    = &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](42), EstimatedRemainingSeconds: ptr.To[int32](120), LastUpdatedTime: ptr.To(metav1.NewTime(created))}
		healedAll   = []metav1.Condition{cond(trainjob.ConditionRuntimeResolved, metav1.ConditionTrue, trainjob.ReasonRuntimeFound), cond(trainjob.ConditionJobSetReady, metav1.ConditionTrue, trainjob.ReasonJobSetBuilt), cond(trainjob.ConditionGangScheduled, metav1.ConditionTrue, trainjob.ReasonGangScheduled), cond(trainjob.ConditionProcsPerNodeDerived, metav1.ConditionTrue, "ProcsPerNodeFromClaims"), cond(trainjob.ConditionPodGroupResourceClaims, metav1.ConditionTrue, trainjob.ReasonPodGroupClaims)}
		warningsAll = []metav1.Condition{cond(trainjob.ConditionProcsPerNodeDerived, metav1.ConditionFalse, trainjob.ReasonDeviceCountUnknown), cond(trainjob.ConditionPodGroupResourceClaims, metav1.ConditionFalse, trainjob.ReasonPodGroupClaimsUnsupported)}
	)
	withConditions := func(w *utiltesting.TrainJobWrapper, conds ...metav1.Condition) *utiltesting.TrainJobWrapper {
		for _, c := range conds {
			w.Condition(c)
		}
		return w
	}
	// The cells every case shares unless it says otherwise.
	want := func(cells map[string]any) map[string]any {
		out := map[string]any{"Name": "mnist", "State": nil, "Reason": nil, "Suspended": false, "Progress": nil, "ETA": nil,
			"Runtime": "torch-distributed", "NumNodes": nil, "Started": nil, "Completed": nil}
		for k, v := range cells {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name string
		tj   *utiltesting.TrainJobWrapper
		want map[string]any
	}{
		{"created, nothing observed yet", base(), want(nil)},
		{"suspended (queued by Kueue)", withConditions(base().Suspend(true), suspended),
			want(map[string]any{"State": "Suspended", "Suspended": true})},
		// Upstream's column, .status.conditions[-1:].type, read Suspended here (kubeflow/trainer#3666).
		{"resumed, running and reporting progress", withConditions(base(), resumed).TrainerStatus(progress),
			want(map[string]any{"Progress": int64(42), "ETA": int64(120)})},
		{"complete after a resume", withConditions(base(), resumed, complete).TrainerStatus(progress),
			want(map[string]any{"State": "Complete", "Progress": int64(42), "ETA": int64(120)})},
		{"failed", withConditions(base(), failed), want(map[string]any{"State": "Failed", "Reason": "FailedJobs"})},
		{"complete, then suspended", withConditions(base().Suspend(true), complete, suspended),
			want(map[string]any{"State": "Complete", "Suspended": true})},
		{"suspended, then complete (the list's order does not matter)", withConditions(base().Suspend(true), suspended, complete),
			want(map[string]any{"State": "Complete", "Suspended": true})},
		{"complete and failed", withConditions(base(), complete, failed), want(map[string]any{"State": "Failed", "Reason": "FailedJobs"})},
		// Upstream's column read RuntimeResolved, PodGroupResourceClaims, … here.
		{"running with every Trainyard condition True", withConditions(base(), healedAll...), want(nil)},
		{"running with the warnings False", withConditions(base(), warningsAll...), want(nil)},
		{"waiting for its runtime", withConditions(base(), cond(trainjob.ConditionRuntimeResolved, metav1.ConditionFalse, trainjob.ReasonRuntimeNotFound)),
			want(map[string]any{"Reason": trainjob.ReasonRuntimeNotFound})},
		{"suspended with a JobSet that cannot be built", withConditions(base().Suspend(true), suspended, cond(trainjob.ConditionJobSetReady, metav1.ConditionFalse, trainjob.ReasonInvalidSpec)),
			want(map[string]any{"State": "Suspended", "Reason": trainjob.ReasonInvalidSpec, "Suspended": true})},
		{"failed past its deadline while the gang waited", withConditions(base(), cond(trainjob.ConditionGangScheduled, metav1.ConditionFalse, trainjob.ReasonGangUnschedulable),
			cond(trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobDeadlineExceededReason)),
			want(map[string]any{"State": "Failed", "Reason": trainjob.ReasonGangUnschedulable})},
		{"numNodes and a runtime of its own", base().RuntimeRef(trainer.TrainingRuntimeKind, "reporting").Trainer(&trainer.Trainer{NumNodes: ptr.To[int32](4)}),
			want(map[string]any{"Runtime": "reporting", "NumNodes": int64(4)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := table.row(tc.tj.Obj())
			age, _ := got["Age"].(string)
			if !regexp.MustCompile(`^\d+s$`).MatchString(age) {
				t.Errorf("Age = %#v; want the seconds since creation (about 90s)", got["Age"])
			}
			delete(got, "Age")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("cells (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTrainJobReasonColumn: the Reason column shows each of trainjob.WaitingReasons,
// the first of them in that order when several conditions carry one, and the reason
// of Failed only when none does; no other reason.
func TestTrainJobReasonColumn(t *testing.T) {
	table := newTrainJobTable(t)
	// A status with a condition for each reason from the i-th on, listed last first, and
	// Failed first of all: the column shows the i-th. The types are made up (the column
	// reads reasons, not types), so any number of reasons fit in one list.
	for i, reason := range trainjob.WaitingReasons {
		tj := utiltesting.MakeTrainJob("ns", "mnist").Condition(metav1.Condition{
			Type: trainer.TrainJobFailed, Status: metav1.ConditionTrue, Reason: trainer.TrainJobDeadlineExceededReason})
		for j := len(trainjob.WaitingReasons) - 1; j >= i; j-- {
			tj.Condition(metav1.Condition{Type: fmt.Sprintf("Waiting%d", j), Status: metav1.ConditionFalse, Reason: trainjob.WaitingReasons[j]})
		}
		if got := table.row(tj.Obj())["Reason"]; got != reason {
			t.Errorf("Reason = %#v with %v; want %q", got, trainjob.WaitingReasons[i:], reason)
		}
	}
	for _, reason := range []string{trainer.TrainJobSuspendedReason, trainer.TrainJobResumedReason, "AllJobsCompleted",
		trainjob.ReasonRuntimeFound, trainjob.ReasonJobSetBuilt, trainjob.ReasonGangScheduled, trainjob.ReasonDeviceCountUnknown,
		trainjob.ReasonPodGroupClaims, trainjob.ReasonPodGroupClaimsUnsupported} {
		tj := utiltesting.MakeTrainJob("ns", "mnist").Condition(metav1.Condition{Type: "Other", Status: metav1.ConditionFalse, Reason: reason})
		if got := table.row(tj.Obj())["Reason"]; got != nil {
			t.Errorf("Reason = %#v for a condition of reason %s; want empty", got, reason)
		}
	}
}
