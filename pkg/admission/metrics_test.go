package admission

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
)

// The controller passes its *metrics.Metrics as Deps.Observer.
var _ Observer = (*metrics.Metrics)(nil)

// TestMetricsObserveReviews runs reviews through the handler with the controller's
// metrics as observer and checks what they record.
func TestMetricsObserveReviews(t *testing.T) {
	reg := prometheus.NewRegistry()
	deps := fixture{runtimes: []runtime.Object{ctr("test-runtime", skeleton(torchPolicy), nil)}}.deps(t)
	deps.Observer = metrics.New(reg)
	srv := httptest.NewServer(NewHandler(deps))
	defer srv.Close()

	post(t, srv, PathValidateTrainJob, review(t, "TrainJob", admissionv1.Create, trainJob("nowhere", nil), nil)) // a warning
	post(t, srv, PathValidateTrainJob, review(t, "TrainJob", admissionv1.Create,
		trainJob("test-runtime", &trainer.Trainer{Env: envs("PET_NNODES")}), nil)) // denied
	post(t, srv, PathMutateTrainJob, review(t, "TrainJob", admissionv1.Update, trainJob("test-runtime", nil), trainJob("test-runtime", nil)))
	post(t, srv, PathValidateTrainingRuntime, review(t, "ClusterTrainingRuntime", admissionv1.Create, skeleton(nil), nil)) // another kind
	post(t, srv, PathValidateOptimizationJob, review(t, "OptimizationJob", admissionv1.Create, optJob(), nil))

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "trainyard_admission_") {
			continue
		}
		for _, s := range mf.GetMetric() {
			v := s.GetCounter().GetValue() + float64(s.GetHistogram().GetSampleCount())
			if v == 0 {
				continue
			}
			key := mf.GetName()
			for _, lp := range s.GetLabel() {
				key += " " + lp.GetValue()
			}
			got[key] = v
		}
	}
	want := map[string]float64{
		"trainyard_admission_requests_total TrainJob CREATE allowed validate":        1,
		"trainyard_admission_requests_total TrainJob CREATE denied validate":         1,
		"trainyard_admission_requests_total TrainJob UPDATE allowed mutate":          1,
		"trainyard_admission_requests_total TrainingRuntime CREATE error validate":   1,
		"trainyard_admission_duration_seconds TrainJob CREATE validate":              2,
		"trainyard_admission_duration_seconds TrainJob UPDATE mutate":                1,
		"trainyard_admission_duration_seconds TrainingRuntime CREATE validate":       1,
		"trainyard_admission_warnings_total TrainJob CREATE validate":                1,
		"trainyard_admission_requests_total OptimizationJob CREATE allowed validate": 1,
		"trainyard_admission_duration_seconds OptimizationJob CREATE validate":       1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("admission metrics (-want +got):\n%s", diff)
	}
}
