package v1alpha1_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// TestOptimizationJobPrinterColumns (issue 42, item 5): `kubectl get optimizationjobs`
// shows STATE, REASON, TRIALS (the Created condition's tally), BEST and AGE, through the
// API server's own table convertor over the generated CRD's columns, at the steps of a
// search's life and whatever the order of the conditions.
func TestOptimizationJobPrinterColumns(t *testing.T) {
	cols := loadCRDs(t)[trainer.OptimizationJobKind].v1.Spec.Versions[0].AdditionalPrinterColumns
	var names []string
	for _, c := range cols {
		if c.Priority != 0 {
			t.Errorf("column %s has priority %d, want 0 (shown without -o wide)", c.Name, c.Priority)
		}
		names = append(names, c.Name)
	}
	if want := []string{"State", "Reason", "Trials", "Best", "Age"}; !cmp.Equal(names, want) {
		t.Fatalf("OptimizationJob printer columns %v, want %v", names, want)
	}
	convertor, err := tableconvertor.New(cols)
	if err != nil { // the API server would fall back to NAME and AGE, silently
		t.Fatalf("the API server cannot parse an OptimizationJob printer column: %v", err)
	}
	created := time.Now().Add(-90 * time.Second)
	cond := func(typ, reason, message string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(created)}
	}
	const running = "5 of 8 trials created; 3 done (2 succeeded, 1 failed), 2 running; best digits-1, loss 0.12"
	const done = "8 of 8 trials created; 8 done (6 succeeded, 2 failed), 0 running; best digits-3, loss 0.1"
	for _, tc := range []struct {
		name   string
		conds  []metav1.Condition
		result *trainer.OptimizationResult
		want   map[string]any
	}{
		{"created, nothing observed yet", nil, nil, map[string]any{}},
		{"running", []metav1.Condition{cond(trainer.OptimizationJobCreated, trainer.OptimizationJobTrialsCreatedReason, running)},
			&trainer.OptimizationResult{TrainJobName: "digits-1"}, map[string]any{"Trials": running, "Best": "digits-1"}},
		{"complete", []metav1.Condition{cond(trainer.OptimizationJobComplete, trainer.OptimizationJobMaxTrialsReachedReason, "m"),
			cond(trainer.OptimizationJobCreated, trainer.OptimizationJobTrialsCreatedReason, done)},
			&trainer.OptimizationResult{TrainJobName: "digits-3"},
			map[string]any{"State": "Complete", "Reason": trainer.OptimizationJobMaxTrialsReachedReason, "Trials": done, "Best": "digits-3"}},
		{"failed by the budget", []metav1.Condition{cond(trainer.OptimizationJobCreated, trainer.OptimizationJobTrialsCreatedReason, "4 of 20 trials created; 3 done (0 succeeded, 3 failed), 1 running"),
			cond(trainer.OptimizationJobFailed, trainer.OptimizationJobMaxFailedTrialsReachedReason, "m")}, nil,
			map[string]any{"State": "Failed", "Reason": trainer.OptimizationJobMaxFailedTrialsReachedReason, "Trials": "4 of 20 trials created; 3 done (0 succeeded, 3 failed), 1 running"}},
		{"invalid spec", []metav1.Condition{cond(trainer.OptimizationJobFailed, trainer.OptimizationJobInvalidSpecReason, "m")}, nil,
			map[string]any{"State": "Failed", "Reason": trainer.OptimizationJobInvalidSpecReason}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &trainer.OptimizationJob{ObjectMeta: metav1.ObjectMeta{Name: "digits", Namespace: "ns", CreationTimestamp: metav1.NewTime(created)},
				Status: trainer.OptimizationJobStatus{Conditions: tc.conds, Result: tc.result}}
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
			if err != nil {
				t.Fatal(err)
			}
			table, err := convertor.ConvertToTable(context.Background(), &unstructured.Unstructured{Object: content}, &metav1.TableOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]any{}
			for i, col := range table.ColumnDefinitions {
				got[col.Name] = table.Rows[0].Cells[i]
			}
			if age, _ := got["Age"].(string); !regexp.MustCompile(`^\d+s$`).MatchString(age) {
				t.Errorf("Age = %#v; want the seconds since creation", got["Age"])
			}
			want := map[string]any{"Name": "digits", "State": nil, "Reason": nil, "Trials": nil, "Best": nil}
			for k, v := range tc.want {
				want[k] = v
			}
			delete(got, "Age")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("cells (-want +got):\n%s", diff)
			}
		})
	}
}
