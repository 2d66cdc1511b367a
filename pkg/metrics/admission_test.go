package metrics_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/pkg/metrics"
)

func refused(code int32) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{Status: metav1.StatusFailure, Code: code}}
}

func TestAdmissionResult(t *testing.T) {
	cases := map[string]struct {
		resp *admissionv1.AdmissionResponse
		want string
	}{
		"allowed":               {resp: &admissionv1.AdmissionResponse{Allowed: true}, want: metrics.AdmissionAllowed},
		"allowed with warnings": {resp: &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{"a"}}, want: metrics.AdmissionAllowed},
		"denied by a rule":      {resp: refused(http.StatusForbidden), want: metrics.AdmissionDenied},
		"denied without status": {resp: &admissionv1.AdmissionResponse{}, want: metrics.AdmissionDenied},
		"not reviewable":        {resp: refused(http.StatusBadRequest), want: metrics.AdmissionError},
		"cache read failed":     {resp: refused(http.StatusInternalServerError), want: metrics.AdmissionError},
		"no response":           {resp: nil, want: metrics.AdmissionError},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := metrics.AdmissionResult(tc.resp); got != tc.want {
				t.Errorf("AdmissionResult = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAdmissionPreinitialized(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	// Five webhook × kind pairs, CREATE and UPDATE.
	for name, want := range map[string]int{
		metrics.AdmissionRequestsTotal:   5 * 2 * 3, // × result
		metrics.AdmissionDurationSeconds: 5 * 2,
		metrics.AdmissionWarningsTotal:   5 * 2,
	} {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || got != want {
			t.Errorf("%s: got %d series (err %v), want %d", name, got, err, want)
		}
	}
}

func TestObserveReview(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	tj, ctr := metrics.AdmissionKindTrainJob, metrics.AdmissionKindClusterTrainingRuntime
	validate, mutate := metrics.WebhookValidate, metrics.WebhookMutate
	for _, r := range []struct {
		webhook, kind string
		op            admissionv1.Operation
		resp          *admissionv1.AdmissionResponse
		elapsed       time.Duration
	}{
		{validate, tj, admissionv1.Create, &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{"a", "b"}}, 2 * time.Millisecond},
		{validate, tj, admissionv1.Create, refused(http.StatusForbidden), 3 * time.Millisecond},
		{validate, tj, admissionv1.Update, refused(http.StatusBadRequest), time.Millisecond},
		{mutate, tj, admissionv1.Create, &admissionv1.AdmissionResponse{Allowed: true}, time.Millisecond},
		{validate, ctr, admissionv1.Delete, &admissionv1.AdmissionResponse{Allowed: true}, 0},
		{validate, ctr, admissionv1.Update, refused(http.StatusInternalServerError), 20 * time.Second},
		// Values outside the enums do not add series.
		{"patch", "Pod", "BOGUS", &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{"c"}}, time.Second},
	} {
		m.ObserveReview(r.webhook, r.kind, r.op, r.resp, r.elapsed)
	}

	want := `
# HELP trainyard_admission_warnings_total Warning messages the admission webhooks returned, by webhook, kind and operation.
# TYPE trainyard_admission_warnings_total counter
trainyard_admission_warnings_total{kind="ClusterTrainingRuntime",operation="CREATE",webhook="validate"} 0
trainyard_admission_warnings_total{kind="ClusterTrainingRuntime",operation="UPDATE",webhook="validate"} 0
trainyard_admission_warnings_total{kind="OptimizationJob",operation="CREATE",webhook="validate"} 0
trainyard_admission_warnings_total{kind="OptimizationJob",operation="UPDATE",webhook="validate"} 0
trainyard_admission_warnings_total{kind="TrainJob",operation="CREATE",webhook="mutate"} 0
trainyard_admission_warnings_total{kind="TrainJob",operation="CREATE",webhook="validate"} 2
trainyard_admission_warnings_total{kind="TrainJob",operation="UPDATE",webhook="mutate"} 0
trainyard_admission_warnings_total{kind="TrainJob",operation="UPDATE",webhook="validate"} 0
trainyard_admission_warnings_total{kind="TrainingRuntime",operation="CREATE",webhook="validate"} 0
trainyard_admission_warnings_total{kind="TrainingRuntime",operation="UPDATE",webhook="validate"} 0
trainyard_admission_warnings_total{kind="other",operation="other",webhook="other"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.AdmissionWarningsTotal); err != nil {
		t.Error(err)
	}

	// Non-zero request counts by webhook/kind/operation/result.
	got := map[string]float64{}
	for _, s := range family(t, reg, metrics.AdmissionRequestsTotal) {
		if v := s.GetCounter().GetValue(); v != 0 {
			got[strings.Join([]string{labelValue(s, metrics.LabelWebhook), labelValue(s, metrics.LabelKind),
				labelValue(s, metrics.LabelOperation), labelValue(s, metrics.LabelResult)}, " ")] = v
		}
	}
	wantRequests := map[string]float64{
		"validate TrainJob CREATE allowed":               1,
		"validate TrainJob CREATE denied":                1,
		"validate TrainJob UPDATE error":                 1,
		"mutate TrainJob CREATE allowed":                 1,
		"validate ClusterTrainingRuntime DELETE allowed": 1,
		"validate ClusterTrainingRuntime UPDATE error":   1,
		"other other other allowed":                      1,
	}
	if diff := cmp.Diff(wantRequests, got); diff != "" {
		t.Errorf("%s (-want,+got):\n%s", metrics.AdmissionRequestsTotal, diff)
	}

	// Latency: count and sum by webhook/kind/operation.
	durations := map[string]histogram{}
	for _, s := range family(t, reg, metrics.AdmissionDurationSeconds) {
		h := s.GetHistogram()
		if h.GetSampleCount() > 0 {
			durations[strings.Join([]string{labelValue(s, metrics.LabelWebhook), labelValue(s, metrics.LabelKind),
				labelValue(s, metrics.LabelOperation)}, " ")] = histogram{Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
		}
	}
	wantDurations := map[string]histogram{
		"validate TrainJob CREATE":               {Count: 2, Sum: 0.005},
		"validate TrainJob UPDATE":               {Count: 1, Sum: 0.001},
		"mutate TrainJob CREATE":                 {Count: 1, Sum: 0.001},
		"validate ClusterTrainingRuntime DELETE": {Count: 1, Sum: 0},
		"validate ClusterTrainingRuntime UPDATE": {Count: 1, Sum: 20},
		"other other other":                      {Count: 1, Sum: 1},
	}
	if diff := cmp.Diff(wantDurations, durations, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); diff != "" {
		t.Errorf("%s (-want,+got):\n%s", metrics.AdmissionDurationSeconds, diff)
	}
}
