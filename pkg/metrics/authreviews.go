package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/trainyard/trainyard/pkg/util/authlimit"
)

// Values of the "endpoint" label of trainyard_auth_token_reviews_total: the
// authenticated endpoints, each with its own API client and limiter.
const (
	EndpointProgress = "progress"
	EndpointMetrics  = "metrics"
)

// Values of the "result" label of trainyard_auth_token_reviews_total, the limiter's
// (package authlimit).
const (
	AuthReviewSent               = authlimit.ResultSent
	AuthReviewSourceLimited      = authlimit.ResultSourceLimited
	AuthReviewConcurrencyLimited = authlimit.ResultConcurrencyLimited
)

var (
	authEndpoints     = []string{EndpointProgress, EndpointMetrics}
	authReviewResults = []string{AuthReviewSent, AuthReviewSourceLimited, AuthReviewConcurrencyLimited}
)

// newAuthReviewMetrics returns trainyard_auth_token_reviews_total with every child at
// zero, so that a rate of refusals has a series before the first flood.
func newAuthReviewMetrics() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: AuthTokenReviewsTotal,
		Help: "TokenReviews the authenticated endpoints wanted to send for uncached tokens, by endpoint (progress, metrics) and result (sent, source_limited, concurrency_limited: refused by the limiter and answered 429).",
	}, []string{LabelEndpoint, LabelResult})
	for _, e := range authEndpoints {
		for _, r := range authReviewResults {
			v.WithLabelValues(e, r)
		}
	}
	return v
}

// ObserveTokenReviewAdmission counts one TokenReview endpoint wanted to send, result
// one of the AuthReview* values. Other endpoints or results are ignored, so the series
// stay bounded. It implements authlimit.Observer.
func (m *Metrics) ObserveTokenReviewAdmission(endpoint, result string) {
	if slices.Contains(authEndpoints, endpoint) && slices.Contains(authReviewResults, result) {
		m.authReviews.WithLabelValues(endpoint, result).Inc()
	}
}

var _ authlimit.Observer = (*Metrics)(nil)
