package metrics

import (
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
)

// admissionEndpoints are the webhook × kind pairs the admission server serves
// (package admission), whose CREATE and UPDATE children are created at zero.
var admissionEndpoints = [][2]string{
	{WebhookMutate, AdmissionKindTrainJob},
	{WebhookValidate, AdmissionKindTrainJob},
	{WebhookValidate, AdmissionKindTrainingRuntime},
	{WebhookValidate, AdmissionKindClusterTrainingRuntime},
	{WebhookValidate, AdmissionKindOptimizationJob},
}

type admissionMetrics struct {
	rejected *prometheus.CounterVec
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	warnings *prometheus.CounterVec
}

func newAdmissionMetrics() admissionMetrics {
	labels := []string{LabelWebhook, LabelKind, LabelOperation}
	a := admissionMetrics{
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: AdmissionRequestsRejectedTotal,
			Help: "Requests the admission server refused before reviewing them, for its bounds, by reason (too_many_requests, too_large).",
		}, []string{LabelReason}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: AdmissionRequestsTotal,
			Help: "AdmissionReviews the admission webhooks answered, by webhook (validate, mutate), kind, operation and result (allowed, denied, error).",
		}, []string{LabelWebhook, LabelKind, LabelOperation, LabelResult}),
		duration: prometheus.NewHistogramVec(histogramOpts(AdmissionDurationSeconds,
			"Time from receiving an AdmissionReview to writing the answer, in seconds, by webhook, kind and operation.",
			admissionBuckets), labels),
		warnings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: AdmissionWarningsTotal,
			Help: "Warning messages the admission webhooks returned, by webhook, kind and operation.",
		}, labels),
	}
	// Create the children of the reviews the API server sends at zero, so that
	// ratios and alerts have series before the first review.
	for _, r := range admissionRejectReasons {
		a.rejected.WithLabelValues(r)
	}
	for _, e := range admissionEndpoints {
		for _, op := range []string{OperationCreate, OperationUpdate} {
			for _, r := range admissionResults {
				a.requests.WithLabelValues(e[0], e[1], op, r)
			}
			a.duration.WithLabelValues(e[0], e[1], op)
			a.warnings.WithLabelValues(e[0], e[1], op)
		}
	}
	return a
}

// catalogue creates a child for every operation of every webhook the
// admission server serves, for Catalogue: the series a replica can export.
func (a admissionMetrics) catalogue() {
	for _, e := range admissionEndpoints {
		for _, op := range admissionOperations {
			for _, r := range admissionResults {
				a.requests.WithLabelValues(e[0], e[1], op, r)
			}
			a.duration.WithLabelValues(e[0], e[1], op)
			a.warnings.WithLabelValues(e[0], e[1], op)
		}
	}
}

func (a admissionMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{a.rejected, a.requests, a.duration, a.warnings}
}

// admissionRejectReasons are the reason label values of AdmissionRequestsRejectedTotal.
var admissionRejectReasons = []string{ReasonTooManyRequests, ReasonTooLarge}

// ObserveAdmissionRejected records one request the admission server refused for its
// bounds (package admission's Observer); a reason outside admissionRejectReasons is
// recorded as ReasonTooManyRequests.
func (m *Metrics) ObserveAdmissionRejected(reason string) {
	if !slices.Contains(admissionRejectReasons, reason) {
		reason = ReasonTooManyRequests
	}
	m.admission.rejected.WithLabelValues(reason).Inc()
}

// ObserveReview records one AdmissionReview a webhook answered with resp after
// elapsed. It implements the Observer interface of package admission, so the
// controller passes its *Metrics as admission.Deps.Observer. webhook, kind and
// operation outside their Webhook*, AdmissionKind* and Operation* values are
// recorded as "other".
func (m *Metrics) ObserveReview(webhook, kind string, operation admissionv1.Operation, resp *admissionv1.AdmissionResponse, elapsed time.Duration) {
	webhook = oneOf(webhook, webhooks)
	kind = oneOf(kind, admissionKinds)
	op := oneOf(string(operation), admissionOperations)
	m.admission.requests.WithLabelValues(webhook, kind, op, AdmissionResult(resp)).Inc()
	m.admission.duration.WithLabelValues(webhook, kind, op).Observe(elapsed.Seconds())
	if resp != nil && len(resp.Warnings) > 0 {
		m.admission.warnings.WithLabelValues(webhook, kind, op).Add(float64(len(resp.Warnings)))
	}
}

// AdmissionResult classifies an admission response: AdmissionAllowed when it
// admits the object; AdmissionError when it refuses it because the webhook
// could not review it (status code 400, or 500 and above), or says nothing;
// else AdmissionDenied (a rule refused the object: code 403).
func AdmissionResult(resp *admissionv1.AdmissionResponse) string {
	switch {
	case resp == nil:
		return AdmissionError
	case resp.Allowed:
		return AdmissionAllowed
	case resp.Result != nil && (resp.Result.Code == http.StatusBadRequest || resp.Result.Code >= http.StatusInternalServerError):
		return AdmissionError
	default:
		return AdmissionDenied
	}
}

// oneOf returns v if values holds it, else the last of values ("other").
func oneOf(v string, values []string) string {
	if slices.Contains(values, v) {
		return v
	}
	return values[len(values)-1]
}
