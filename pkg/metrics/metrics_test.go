package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/workqueue"

	"github.com/trainyard/trainyard/pkg/metrics"
)

// TestLint exercises every metric and runs promlint over the result.
func TestLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "resolve_runtime", MetricsProvider: m.WorkqueueMetricsProvider()})
	defer q.ShutDown()
	q.Add("a")
	key, _ := q.Get()
	q.Done(key)
	q.AddRateLimited("b")

	s := m.Stage("resolve_runtime")
	s.SetWorkers(2)
	s.SyncStarted()
	s.SyncFinished(metrics.ResultContinue, 3*time.Millisecond)
	s.Failed(errors.New("boom"))
	s.Retried()
	s.Panicked()
	m.ObserveJobSetCreation("uid-1", metrics.RuntimeKindClusterTrainingRuntime, 2*time.Second)
	torch := metrics.Runtime{Kind: metrics.RuntimeKindClusterTrainingRuntime, Name: "torch"}
	m.SetTrainJobCounts(func() *metrics.TrainJobCounts {
		return &metrics.TrainJobCounts{Runtimes: []metrics.Runtime{torch}, ByRuntime: map[metrics.Runtime]map[string]int{torch: {metrics.PhaseRunning: 1}}}
	})
	m.SetBuildInfo("v0.1.0", "abc123")
	m.SetCertificateExpiry(metrics.CertificateServing, time.Unix(1700000000, 0))
	m.CertificateRotated(metrics.CertificateCA)
	m.ObserveReview(metrics.WebhookValidate, metrics.AdmissionKindTrainJob, admissionv1.Create,
		&admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{"w"}}, time.Millisecond)
	m.ObserveProgressReport("", 50*time.Microsecond)
	m.ObserveProgressReport(metrics.ReasonForbidden, time.Millisecond)
	m.ObserveProgressTokenReview(metrics.TokenReviewAllowed, true)
	m.ObserveProgressCoalesced()
	m.ObserveProgressDropped(metrics.ReasonStale)
	m.ObserveProgressWrite(nil)
	m.WriteRefused(metrics.RefusedForbidden)

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	// Every name in names.go must be exported by a registry built with New.
	names := []string{
		metrics.WorkqueueDepth, metrics.WorkqueueAddsTotal, metrics.WorkqueueQueueDurationSeconds,
		metrics.WorkqueueWorkDurationSeconds, metrics.WorkqueueUnfinishedWorkSeconds,
		metrics.WorkqueueLongestRunningProcessorSeconds, metrics.WorkqueueRetriesTotal,
		metrics.StageDurationSeconds, metrics.StageSyncsTotal, metrics.StageRetriesTotal,
		metrics.StageErrorsTotal, metrics.StagePanicsTotal, metrics.StageInflight, metrics.StageWorkers,
		metrics.JobSetCreationLatencySeconds, metrics.TrainJobs, metrics.TrainJobsByRuntime, metrics.BuildInfo,
		metrics.CertificateExpiryTimestampSeconds, metrics.CertificateRotationsTotal,
		metrics.AdmissionRequestsTotal, metrics.AdmissionDurationSeconds, metrics.AdmissionWarningsTotal,
		metrics.ProgressReportsTotal, metrics.ProgressReportsRejectedTotal, metrics.ProgressReportDurationSeconds,
		metrics.ProgressTokenReviewsTotal, metrics.ProgressReportsCoalescedTotal, metrics.ProgressReportsDroppedTotal,
		metrics.ProgressWritesTotal, metrics.WritesRefusedTotal,
	}
	for _, name := range names {
		if !strings.HasPrefix(name, "trainyard_") && !strings.HasPrefix(name, "workqueue_") {
			t.Errorf("metric %q has neither the trainyard_ nor the workqueue_ prefix", name)
		}
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n == 0 {
			t.Errorf("metric %q: got %d series (err %v), want at least one", name, n, err)
		}
	}
}

func TestStagePreinitialized(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.Stage("gang")

	cases := map[string]int{
		metrics.StageDurationSeconds: 6, // one per result
		metrics.StageSyncsTotal:      6,
		metrics.StageErrorsTotal:     7, // one per reason
		metrics.StageRetriesTotal:    1,
		metrics.StagePanicsTotal:     1,
		metrics.StageInflight:        1,
		metrics.StageWorkers:         1,
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := testutil.GatherAndCount(reg, name)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("series: got %d, want %d", got, want)
			}
		})
	}
}

func TestStageRecording(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	s := m.Stage("status")
	s.SetWorkers(4)

	s.SyncStarted()
	s.SyncStarted()
	s.SyncFinished(metrics.ResultContinue, 10*time.Millisecond)
	s.SyncStarted()
	s.SyncFinished(metrics.ResultRetry, 2*time.Second)
	s.Failed(apierrors.NewConflict(schema.GroupResource{Resource: "trainjobs"}, "tj", errors.New("stale")))
	s.Failed(nil)
	s.Retried()

	want := `
# HELP trainyard_stage_inflight Workers of a stage currently inside Sync.
# TYPE trainyard_stage_inflight gauge
trainyard_stage_inflight{stage="status"} 1
# HELP trainyard_stage_retries_total Keys a stage requeued with rate-limited backoff after a failed, panicked or retry-requesting Sync.
# TYPE trainyard_stage_retries_total counter
trainyard_stage_retries_total{stage="status"} 1
# HELP trainyard_stage_syncs_total Stage Sync calls by result (continue, requeue_after, wait_for_event, retry, terminal, restart).
# TYPE trainyard_stage_syncs_total counter
trainyard_stage_syncs_total{result="continue",stage="status"} 1
trainyard_stage_syncs_total{result="requeue_after",stage="status"} 0
trainyard_stage_syncs_total{result="restart",stage="status"} 0
trainyard_stage_syncs_total{result="retry",stage="status"} 1
trainyard_stage_syncs_total{result="terminal",stage="status"} 0
trainyard_stage_syncs_total{result="wait_for_event",stage="status"} 0
# HELP trainyard_stage_workers Configured worker pool size of a stage.
# TYPE trainyard_stage_workers gauge
trainyard_stage_workers{stage="status"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		metrics.StageInflight, metrics.StageRetriesTotal, metrics.StageSyncsTotal, metrics.StageWorkers); err != nil {
		t.Error(err)
	}

	gotErrors := counterValues(t, reg, metrics.StageErrorsTotal, metrics.LabelReason)
	wantErrors := map[string]float64{
		metrics.ReasonConflict: 1, metrics.ReasonNotFound: 0, metrics.ReasonInvalid: 0, metrics.ReasonForbidden: 0,
		metrics.ReasonThrottled: 0, metrics.ReasonTimeout: 0, metrics.ReasonInternal: 0,
	}
	if diff := cmp.Diff(wantErrors, gotErrors); diff != "" {
		t.Errorf("%s by reason (-want,+got):\n%s", metrics.StageErrorsTotal, diff)
	}

	gotDurations := histogramCounts(t, reg, metrics.StageDurationSeconds, metrics.LabelResult)
	wantDurations := map[string]uint64{
		metrics.ResultContinue: 1, metrics.ResultRetry: 1, metrics.ResultRequeueAfter: 0,
		metrics.ResultWaitForEvent: 0, metrics.ResultTerminal: 0, metrics.ResultRestart: 0,
	}
	if diff := cmp.Diff(wantDurations, gotDurations); diff != "" {
		t.Errorf("%s count by result (-want,+got):\n%s", metrics.StageDurationSeconds, diff)
	}
}

func TestErrorReason(t *testing.T) {
	gr := schema.GroupResource{Group: "jobset.x-k8s.io", Resource: "jobsets"}
	cases := map[string]struct {
		err  error
		want string
	}{
		"nil":                {err: nil, want: ""},
		"conflict":           {err: apierrors.NewConflict(gr, "tj", errors.New("modified")), want: metrics.ReasonConflict},
		"already exists":     {err: apierrors.NewAlreadyExists(gr, "tj"), want: metrics.ReasonConflict},
		"wrapped conflict":   {err: fmt.Errorf("apply: %w", apierrors.NewConflict(gr, "tj", errors.New("x"))), want: metrics.ReasonConflict},
		"not found":          {err: apierrors.NewNotFound(gr, "tj"), want: metrics.ReasonNotFound},
		"invalid":            {err: apierrors.NewInvalid(schema.GroupKind{Kind: "JobSet"}, "tj", field.ErrorList{field.Required(field.NewPath("spec"), "")}), want: metrics.ReasonInvalid},
		"bad request":        {err: apierrors.NewBadRequest("nope"), want: metrics.ReasonInvalid},
		"forbidden":          {err: apierrors.NewForbidden(gr, "tj", errors.New("rbac")), want: metrics.ReasonForbidden},
		"unauthorized":       {err: apierrors.NewUnauthorized("who"), want: metrics.ReasonForbidden},
		"too many requests":  {err: apierrors.NewTooManyRequests("slow down", 1), want: metrics.ReasonThrottled},
		"gateway timeout":    {err: apierrors.NewTimeoutError("slow", 1), want: metrics.ReasonTimeout},
		"server timeout":     {err: apierrors.NewServerTimeout(gr, "create", 1), want: metrics.ReasonTimeout},
		"deadline exceeded":  {err: fmt.Errorf("get: %w", context.DeadlineExceeded), want: metrics.ReasonTimeout},
		"net timeout":        {err: fmt.Errorf("dial: %w", timeoutError{}), want: metrics.ReasonTimeout},
		"internal api error": {err: apierrors.NewInternalError(errors.New("etcd")), want: metrics.ReasonInternal},
		"canceled":           {err: context.Canceled, want: metrics.ReasonInternal},
		"plain error":        {err: errors.New("boom"), want: metrics.ReasonInternal},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := metrics.ErrorReason(tc.err); got != tc.want {
				t.Errorf("ErrorReason(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

// timeoutError is a net.Error reporting a timeout.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestObserveJobSetCreation(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	type observation struct {
		uid     types.UID
		kind    string
		latency time.Duration
		want    bool
	}
	for _, o := range []observation{
		{uid: "a", kind: metrics.RuntimeKindClusterTrainingRuntime, latency: 2 * time.Second, want: true},
		{uid: "a", kind: metrics.RuntimeKindClusterTrainingRuntime, latency: 90 * time.Second, want: false}, // re-creation
		{uid: "b", kind: metrics.RuntimeKindTrainingRuntime, latency: -time.Second, want: true},             // clock skew
		{uid: "c", kind: "SomethingElse", latency: time.Hour, want: true},
	} {
		if got := m.ObserveJobSetCreation(o.uid, o.kind, o.latency); got != o.want {
			t.Errorf("ObserveJobSetCreation(%q, %q, %v) = %v, want %v", o.uid, o.kind, o.latency, got, o.want)
		}
	}

	got := histograms(t, reg, metrics.JobSetCreationLatencySeconds, metrics.LabelRuntimeKind)
	want := map[string]histogram{
		metrics.RuntimeKindClusterTrainingRuntime: {Count: 1, Sum: 2},
		metrics.RuntimeKindTrainingRuntime:        {Count: 1, Sum: 0},
		metrics.RuntimeKindOther:                  {Count: 1, Sum: 3600},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want,+got):\n%s", metrics.JobSetCreationLatencySeconds, diff)
	}
}

// TestWritesRefused: every refusal reason has a series from the start; a refusal is
// counted under its reason, an unknown reason under internal.
func TestWritesRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.WriteRefused(metrics.RefusedForbidden)
	m.WriteRefused(metrics.RefusedForbidden)
	m.WriteRefused(metrics.RefusedInvalid)
	m.WriteRefused("SomethingElse")
	want := map[string]float64{
		metrics.RefusedForbidden: 2, metrics.RefusedInvalid: 1, metrics.RefusedBadRequest: 0,
		metrics.RefusedRequestEntityTooLarge: 0, metrics.RefusedMethodNotAllowed: 0, metrics.ReasonInternal: 1,
	}
	if diff := cmp.Diff(want, counterValues(t, reg, metrics.WritesRefusedTotal, metrics.LabelReason)); diff != "" {
		t.Errorf("%s (-want,+got):\n%s", metrics.WritesRefusedTotal, diff)
	}
}

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.SetBuildInfo("v0.0.1", "old")
	m.SetBuildInfo("v0.1.0", "abc123")

	want := fmt.Sprintf(`
# HELP trainyard_build_info Always 1; the labels describe the running binary.
# TYPE trainyard_build_info gauge
trainyard_build_info{git_commit="abc123",go_version=%q,version="v0.1.0"} 1
`, runtime.Version())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.BuildInfo); err != nil {
		t.Error(err)
	}
}

func TestCertificates(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	if n, err := testutil.GatherAndCount(reg, metrics.CertificateExpiryTimestampSeconds); err != nil || n != 0 {
		t.Fatalf("before any certificate is served: got %d expiry series (err %v), want 0", n, err)
	}

	m.SetCertificateExpiry(metrics.CertificateServing, time.Unix(1700000000, 0))
	m.SetCertificateExpiry(metrics.CertificateCA, time.Unix(1800000000, 0))
	m.SetCertificateExpiry("other", time.Unix(1, 0))
	m.CertificateRotated(metrics.CertificateServing)
	m.CertificateRotated("other")
	want := `
# HELP trainyard_certificate_expiry_timestamp_seconds NotAfter, in Unix seconds, of the self-managed serving certificate this process serves and of the active CA, by certificate (serving, ca).
# TYPE trainyard_certificate_expiry_timestamp_seconds gauge
trainyard_certificate_expiry_timestamp_seconds{certificate="ca"} 1.8e+09
trainyard_certificate_expiry_timestamp_seconds{certificate="serving"} 1.7e+09
# HELP trainyard_certificate_rotations_total Certificates this process renewed and stored in the certificate Secret, by certificate (serving, ca).
# TYPE trainyard_certificate_rotations_total counter
trainyard_certificate_rotations_total{certificate="ca"} 0
trainyard_certificate_rotations_total{certificate="serving"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		metrics.CertificateExpiryTimestampSeconds, metrics.CertificateRotationsTotal); err != nil {
		t.Error(err)
	}
}

func TestWorkqueueProvider(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "mlpolicy", MetricsProvider: m.WorkqueueMetricsProvider()})
	defer q.ShutDown()

	q.Add("a")
	q.Add("b")
	q.Add("a") // coalesced: neither an add nor depth
	key, _ := q.Get()
	q.Done(key)
	q.AddRateLimited(key)

	want := `
# HELP workqueue_adds_total Keys added to a stage workqueue.
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="mlpolicy"} 2
# HELP workqueue_depth Keys waiting in a stage workqueue.
# TYPE workqueue_depth gauge
workqueue_depth{name="mlpolicy"} 1
# HELP workqueue_retries_total Delayed adds (AddAfter) handled by a stage workqueue.
# TYPE workqueue_retries_total counter
workqueue_retries_total{name="mlpolicy"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		metrics.WorkqueueAddsTotal, metrics.WorkqueueDepth, metrics.WorkqueueRetriesTotal); err != nil {
		t.Error(err)
	}
	got := histograms(t, reg, metrics.WorkqueueQueueDurationSeconds, metrics.LabelName)["mlpolicy"].Count
	if got != 1 {
		t.Errorf("%s count: got %d, want 1", metrics.WorkqueueQueueDurationSeconds, got)
	}
}

func TestNewTwiceOnOneRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	defer func() {
		if recover() == nil {
			t.Error("second New on the same registry did not panic")
		}
	}()
	metrics.New(reg)
}

type histogram struct {
	Count uint64
	Sum   float64
}

// family gathers reg and returns the metrics of family name.
func family(t *testing.T, reg prometheus.Gatherer, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	t.Fatalf("metric %q not gathered", name)
	return nil
}

func labelValue(m *dto.Metric, label string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == label {
			return lp.GetValue()
		}
	}
	return ""
}

func counterValues(t *testing.T, reg prometheus.Gatherer, name, by string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range family(t, reg, name) {
		out[labelValue(m, by)] = m.GetCounter().GetValue()
	}
	return out
}

func histograms(t *testing.T, reg prometheus.Gatherer, name, by string) map[string]histogram {
	t.Helper()
	out := map[string]histogram{}
	for _, m := range family(t, reg, name) {
		out[labelValue(m, by)] = histogram{Count: m.GetHistogram().GetSampleCount(), Sum: m.GetHistogram().GetSampleSum()}
	}
	return out
}

func histogramCounts(t *testing.T, reg prometheus.Gatherer, name, by string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for k, h := range histograms(t, reg, name, by) {
		out[k] = h.Count
	}
	return out
}
