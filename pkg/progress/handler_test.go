package progress_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

const fullReport = `{"trainerStatus":{"progressPercentage":42,"estimatedRemainingSeconds":600,` +
	`"metrics":[{"name":"loss","value":"0.12"},{"name":"loss","value":"0.11"}],"lastUpdatedTime":"2026-03-04T09:59:58Z"}}`

func TestHandler(t *testing.T) {
	allow := progress.Decision{Verdict: progress.Allowed, TrainJobUID: allowedUID}
	endpoint := wire.Path("team-a", "llm")
	for name, tc := range map[string]struct {
		method        string // default POST
		path          string // default endpoint
		auth          string // Authorization header; default "Bearer good-token"
		body          string
		contentLength int64 // overrides the body's when non-zero; -1 sends it chunked
		authorizer    *fakeAuthorizer

		wantCode       int
		wantBody       string // exact body of a 200
		wantReason     metav1.StatusReason
		wantMessage    string // substring of the Status message
		wantCauses     []metav1.StatusCause
		wantAuthorized int    // Authorizer calls; -1 means don't check
		wantRecorded   *int32 // progressPercentage of the recorded report; nil for none
		wantObserved   string // the rejected reason observed
		wantReview     string // the token review observed, "" for none
	}{
		"accepted: echoed and recorded": {
			body: fullReport, wantCode: http.StatusOK, wantBody: fullReport + "\n",
			wantRecorded: ptr.To[int32](42), wantAuthorized: 1, wantReview: "allowed cached=false",
		},
		"no trainerStatus: 200, nothing recorded": {
			body: `{}`, wantCode: http.StatusOK, wantBody: "{}\n", wantAuthorized: 1, wantReview: "allowed cached=false",
		},
		"null trainerStatus: 200, nothing recorded": {
			body: `{"trainerStatus":null}`, wantCode: http.StatusOK, wantBody: "{}\n", wantAuthorized: 1, wantReview: "allowed cached=false",
		},
		"unknown fields ignored, fractional seconds kept in memory": {
			body:     `{"extra":1,"trainerStatus":{"progressPercentage":7,"lastUpdatedTime":"2026-03-04T09:59:58.5Z","future":"x"}}`,
			wantCode: http.StatusOK, wantBody: `{"trainerStatus":{"progressPercentage":7,"lastUpdatedTime":"2026-03-04T09:59:58Z"}}` + "\n",
			wantRecorded: ptr.To[int32](7), wantAuthorized: 1, wantReview: "allowed cached=false",
		},
		"scheme is case-insensitive": {
			auth: "bearer good-token", body: fullReport, wantCode: http.StatusOK, wantBody: fullReport + "\n",
			wantRecorded: ptr.To[int32](42), wantAuthorized: 1, wantReview: "allowed cached=false",
		},
		"cached allow": {
			authorizer: &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Allowed, TrainJobUID: allowedUID, Cached: true}},
			body:       fullReport, wantCode: http.StatusOK, wantBody: fullReport + "\n",
			wantRecorded: ptr.To[int32](42), wantAuthorized: 1, wantReview: "allowed cached=true",
		},

		"Content-Length over 64 KiB: 413 before the token is looked at": {
			body: fullReport, contentLength: wire.MaxBodyBytes + 1,
			wantCode: http.StatusRequestEntityTooLarge, wantReason: metav1.StatusReasonRequestEntityTooLarge,
			wantMessage: "the request body of 65537 bytes is larger than the 65536 bytes allowed", wantObserved: metrics.ReasonTooLarge,
		},
		"chunked body over 64 KiB: 413 when read": {
			body: `{"trainerStatus":{"metrics":[` + strings.Repeat(`{"name":"a","value":"1"},`, 3000) + `]}}`, contentLength: -1,
			wantCode: http.StatusRequestEntityTooLarge, wantReason: metav1.StatusReasonRequestEntityTooLarge,
			wantMessage: "larger than the 65536 bytes allowed", wantAuthorized: 1, wantObserved: metrics.ReasonTooLarge, wantReview: "allowed cached=false",
		},
		"body of exactly 64 KiB is read": {
			body:     `{"trainerStatus":null}` + strings.Repeat(" ", wire.MaxBodyBytes-len(`{"trainerStatus":null}`)),
			wantCode: http.StatusOK, wantBody: "{}\n", wantAuthorized: 1, wantReview: "allowed cached=false",
		},

		"no Authorization header: 403 without a review": {
			auth: "-", body: fullReport, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden,
			wantMessage: "no bearer token: send the projected service account token", wantObserved: metrics.ReasonUnauthenticated,
		},
		"Basic credentials: 403": {
			auth: "Basic dXNlcjpwYXNz", body: fullReport, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden,
			wantMessage: "no bearer token", wantObserved: metrics.ReasonUnauthenticated,
		},
		"Bearer without a token: 403": {
			auth: "Bearer ", body: fullReport, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden,
			wantMessage: "no bearer token", wantObserved: metrics.ReasonUnauthenticated,
		},
		"token not authenticated: 403": {
			authorizer: &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Unauthenticated, Reason: "the token is expired"}},
			body:       fullReport, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden,
			wantMessage: "forbidden: the token is expired", wantAuthorized: 1, wantObserved: metrics.ReasonUnauthenticated,
			wantReview: "unauthenticated cached=false",
		},
		"token of another TrainJob's pod: 403": {
			authorizer: &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Forbidden, Reason: `pod "x" is not a pod of TrainJob team-a/llm`, Cached: true}},
			body:       fullReport, wantCode: http.StatusForbidden, wantReason: metav1.StatusReasonForbidden,
			wantMessage: `forbidden: pod "x" is not a pod of TrainJob team-a/llm`, wantAuthorized: 1, wantObserved: metrics.ReasonForbidden,
			wantReview: "forbidden cached=true",
		},
		"authorizer error: 500": {
			authorizer: &fakeAuthorizer{err: errors.New("tokenreviews is forbidden")},
			body:       fullReport, wantCode: http.StatusInternalServerError, wantReason: metav1.StatusReasonInternalError,
			wantMessage: "the token could not be reviewed, retry later: tokenreviews is forbidden", wantAuthorized: 1,
			wantObserved: metrics.ReasonInternal, wantReview: "error cached=false",
		},
		"panic: 500": {
			authorizer: &fakeAuthorizer{panics: true},
			body:       fullReport, wantCode: http.StatusInternalServerError, wantReason: metav1.StatusReasonInternalError,
			wantMessage: "internal error, retry later", wantAuthorized: 1, wantObserved: metrics.ReasonInternal,
		},

		"authenticated, TrainJob gone: 404 from the authorizer": {
			authorizer: &fakeAuthorizer{decision: progress.Decision{Verdict: progress.NoTrainJob, Reason: "TrainJob team-a/llm not found: it was deleted"}},
			body:       fullReport, wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound,
			wantMessage: "TrainJob team-a/llm not found: it was deleted", wantAuthorized: 1, wantObserved: metrics.ReasonNotFound,
			wantReview: "not_found cached=false",
		},
		"allowed without the TrainJob's uid (a broken Authorizer): 500, nothing recorded": {
			authorizer: &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Allowed}},
			body:       fullReport, wantCode: http.StatusInternalServerError, wantReason: metav1.StatusReasonInternalError,
			wantMessage: "could not be credited", wantAuthorized: 1, wantObserved: metrics.ReasonInternal,
			wantReview: "allowed cached=false",
		},
		"name that is not a DNS label: 404 without a review": {
			path: wire.Path("team-a", "LLM"), body: fullReport, wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound,
			wantMessage: "TrainJob team-a/LLM not found", wantObserved: metrics.ReasonNotFound,
		},

		"body not JSON: 422": {
			body: `progress=42`, wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid,
			wantMessage: `the body is not a JSON {"trainerStatus": {...}}: invalid character 'p'`, wantAuthorized: 1,
			wantObserved: metrics.ReasonInvalid, wantReview: "allowed cached=false",
		},
		"empty body: 422": {
			body: ``, wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid,
			wantMessage: `the body is not a JSON {"trainerStatus": {...}}: EOF`, wantAuthorized: 1,
			wantObserved: metrics.ReasonInvalid, wantReview: "allowed cached=false",
		},
		"wrong type: 422": {
			body:     `{"trainerStatus":{"progressPercentage":"42","lastUpdatedTime":"2026-03-04T09:59:58Z"}}`,
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid,
			wantMessage: "progressPercentage of type int32", wantAuthorized: 1, wantObserved: metrics.ReasonInvalid, wantReview: "allowed cached=false",
		},
		"out of range: 422 naming the fields": {
			body:     `{"trainerStatus":{"progressPercentage":120,"estimatedRemainingSeconds":-5,"metrics":[{"name":"","value":"1"}],"lastUpdatedTime":"2026-03-04T09:59:58Z"}}`,
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid,
			wantMessage: `TrainJob.trainer.kubeflow.org "llm" is invalid: [trainerStatus.progressPercentage: Invalid value: 120: must be between 0 and 100, ` +
				`trainerStatus.estimatedRemainingSeconds: Invalid value: -5: must be greater than or equal to 0 (seconds until training completes), ` +
				`trainerStatus.metrics[0].name: Required value: a metric name of 1 to 64 characters, e.g. "loss"]`,
			wantCauses: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueInvalid, Message: "Invalid value: 120: must be between 0 and 100", Field: "trainerStatus.progressPercentage"},
				{Type: metav1.CauseTypeFieldValueInvalid, Message: "Invalid value: -5: must be greater than or equal to 0 (seconds until training completes)", Field: "trainerStatus.estimatedRemainingSeconds"},
				{Type: metav1.CauseTypeFieldValueRequired, Message: `Required value: a metric name of 1 to 64 characters, e.g. "loss"`, Field: "trainerStatus.metrics[0].name"},
			},
			wantAuthorized: 1, wantObserved: metrics.ReasonInvalid, wantReview: "allowed cached=false",
		},
		"no lastUpdatedTime: 422 with the CRD's message": {
			body:     `{"trainerStatus":{"progressPercentage":10}}`,
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid,
			wantMessage: `TrainJob.trainer.kubeflow.org "llm" is invalid: trainerStatus.lastUpdatedTime: Required value: lastUpdatedTime is required when trainerStatus is present`,
			wantCauses: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueRequired,
				Message: "Required value: lastUpdatedTime is required when trainerStatus is present", Field: "trainerStatus.lastUpdatedTime"}},
			wantAuthorized: 1, wantObserved: metrics.ReasonInvalid, wantReview: "allowed cached=false",
		},
		"lastUpdatedTime an hour ahead: 422": {
			body:     `{"trainerStatus":{"progressPercentage":10,"lastUpdatedTime":"2026-03-04T11:00:00Z"}}`,
			wantCode: http.StatusUnprocessableEntity, wantReason: metav1.StatusReasonInvalid,
			wantMessage:    `trainerStatus.lastUpdatedTime: Invalid value: "2026-03-04T11:00:00Z": must not be more than 5m0s ahead of the server's clock (it is 1h0m0s ahead)`,
			wantAuthorized: 1, wantObserved: metrics.ReasonInvalid, wantReview: "allowed cached=false",
		},

		"GET on the endpoint: 404": {
			method: http.MethodGet, wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound,
			wantMessage: "no endpoint for GET " + endpoint, wantAuthorized: -1,
		},
		"other path: 404": {
			path: "/healthz", body: fullReport, wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound,
			wantMessage:    "trainers POST their progress to /apis/trainer.kubeflow.org/v1alpha1/namespaces/<namespace>/trainjobs/<name>/status",
			wantAuthorized: -1,
		},
		"endpoint of a sub-resource: 404": {
			path: endpoint + "/extra", body: fullReport, wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound,
			wantMessage: "no endpoint for POST", wantAuthorized: -1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			authz := tc.authorizer
			if authz == nil {
				authz = &fakeAuthorizer{decision: allow}
			}
			obs := &observer{}
			coalescer := progress.NewCoalescer(nil, obs)
			h := progress.NewHandler(progress.HandlerConfig{
				Authorizer: authz,
				Coalescer:  coalescer,
				Observer:   obs,
				Clock:      testingclock.NewFakePassiveClock(t0),
			})

			method, path := tc.method, tc.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = endpoint
			}
			var body io.Reader = strings.NewReader(tc.body)
			if tc.contentLength == -1 {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req := httptest.NewRequest(method, path, body)
			if tc.contentLength != 0 {
				req.ContentLength = tc.contentLength
			}
			switch tc.auth {
			case "":
				req.Header.Set("Authorization", "Bearer good-token")
			case "-":
			default:
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)

			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d; body %s", rec.Code, tc.wantCode, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if tc.wantCode == http.StatusOK {
				if got := rec.Body.String(); got != tc.wantBody {
					t.Errorf("body\n%s\nwant\n%s", got, tc.wantBody)
				}
			} else {
				var st metav1.Status
				if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
					t.Fatalf("body is not a Status: %v\n%s", err, rec.Body)
				}
				if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure ||
					st.Code != int32(tc.wantCode) || st.Reason != tc.wantReason {
					t.Errorf("Status %+v, want kind Status, apiVersion v1, status Failure, code %d, reason %s", st, tc.wantCode, tc.wantReason)
				}
				if !strings.Contains(st.Message, tc.wantMessage) {
					t.Errorf("message %q does not contain %q", st.Message, tc.wantMessage)
				}
				if strings.Contains(st.Message, "good-token") {
					t.Errorf("message %q leaks the token", st.Message)
				}
				if tc.wantCauses != nil {
					if st.Details == nil {
						t.Fatalf("no details, want causes %v", tc.wantCauses)
					}
					if diff := cmp.Diff(tc.wantCauses, st.Details.Causes); diff != "" {
						t.Errorf("causes (-want +got):\n%s", diff)
					}
				}
			}
			if tc.wantAuthorized >= 0 && authz.calls() != tc.wantAuthorized {
				t.Errorf("authorizer called %d times, want %d", authz.calls(), tc.wantAuthorized)
			}
			got := coalescer.Pending(key("team-a", "llm"))
			switch {
			case tc.wantRecorded == nil && got != nil:
				t.Errorf("recorded %+v, want nothing", got)
			case tc.wantRecorded != nil && (got == nil || *got.ProgressPercentage != *tc.wantRecorded):
				t.Errorf("recorded %+v, want progressPercentage %d", got, *tc.wantRecorded)
			}
			if tc.wantAuthorized >= 0 { // a request the endpoint served
				if diff := cmp.Diff([]string{tc.wantObserved}, obs.reports); diff != "" {
					t.Errorf("observed reports (-want +got):\n%s", diff)
				}
			} else if len(obs.reports) != 0 {
				t.Errorf("observed %v for a request outside the endpoint, want nothing", obs.reports)
			}
			var wantReviews []string
			if tc.wantReview != "" {
				wantReviews = []string{tc.wantReview}
			}
			if diff := cmp.Diff(wantReviews, obs.reviews); diff != "" {
				t.Errorf("observed token reviews (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandlerRecordsTheDecodedReport checks the recorded report field by field and that
// it is keyed by the TrainJob's uid.
func TestHandlerRecordsTheDecodedReport(t *testing.T) {
	var enq enqueued
	coalescer := progress.NewCoalescer(enq.add, nil)
	h := progress.NewHandler(progress.HandlerConfig{
		Authorizer: &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Allowed, TrainJobUID: allowedUID}},
		Coalescer:  coalescer,
		Clock:      testingclock.NewFakePassiveClock(t0),
	})
	for range 3 {
		req := httptest.NewRequest(http.MethodPost, wire.Path("team-a", "llm"), strings.NewReader(fullReport))
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("code %d: %s", rec.Code, rec.Body)
		}
	}
	want := &trainer.TrainerStatus{
		ProgressPercentage:        ptr.To[int32](42),
		EstimatedRemainingSeconds: ptr.To[int32](600),
		Metrics:                   []trainer.Metric{{Name: "loss", Value: "0.12"}, {Name: "loss", Value: "0.11"}},
		LastUpdatedTime:           ptr.To(metav1.NewTime(time.Date(2026, 3, 4, 9, 59, 58, 0, time.UTC))),
	}
	if diff := cmp.Diff(want, coalescer.Pending(key("team-a", "llm"))); diff != "" {
		t.Errorf("recorded (-want +got):\n%s", diff)
	}
	// Three reports, one enqueue: the later two replaced the pending one.
	if diff := cmp.Diff([]string{"team-a/llm"}, keyStrings(enq.get())); diff != "" {
		t.Errorf("enqueued (-want +got):\n%s", diff)
	}
}

// TestHandlerCreditsTheAuthorizedTrainJob: a report is credited to the TrainJob the
// authorizer checked (its uid), not to whatever holds the name by the time the body
// is read. A report authorized for a TrainJob deleted and re-created under the name in
// between stays the earlier one's: the re-created TrainJob's own report then replaces
// it as another TrainJob's (dropped "gone"), instead of coalescing with it.
func TestHandlerCreditsTheAuthorizedTrainJob(t *testing.T) {
	obs := &observer{}
	coalescer := progress.NewCoalescer(nil, obs)
	authz := &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Allowed, TrainJobUID: "earlier"}}
	h := progress.NewHandler(progress.HandlerConfig{Authorizer: authz, Coalescer: coalescer, Observer: obs, Clock: testingclock.NewFakePassiveClock(t0)})
	post := func() {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, wire.Path("team-a", "llm"), strings.NewReader(fullReport))
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("code %d: %s", rec.Code, rec.Body)
		}
	}
	post()
	authz.decision.TrainJobUID = "re-created"
	post()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if diff := cmp.Diff([]string{metrics.ReasonGone}, obs.dropped); diff != "" {
		t.Errorf("dropped reports (-want +got):\n%s", diff)
	}
	if obs.coalesced != 0 {
		t.Errorf("%d reports coalesced across two TrainJobs, want 0", obs.coalesced)
	}
}

func TestValidateTrainerStatus(t *testing.T) {
	at := ptr.To(metav1.NewTime(t0))
	metricsOf := func(n int, name, value string) []trainer.Metric {
		out := make([]trainer.Metric, n)
		for i := range out {
			out[i] = trainer.Metric{Name: name, Value: value}
		}
		return out
	}
	for name, tc := range map[string]struct {
		ts   *trainer.TrainerStatus
		want []string
	}{
		"nil":                  {ts: nil},
		"only lastUpdatedTime": {ts: &trainer.TrainerStatus{LastUpdatedTime: at}},
		"0 percent":            {ts: &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](0), LastUpdatedTime: at}},
		"100 percent":          {ts: &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](100), LastUpdatedTime: at}},
		"0 seconds remaining":  {ts: &trainer.TrainerStatus{EstimatedRemainingSeconds: ptr.To[int32](0), LastUpdatedTime: at}},
		"256 metrics, duplicate names (atomic list)":         {ts: &trainer.TrainerStatus{Metrics: metricsOf(256, "loss", "0.1"), LastUpdatedTime: at}},
		"64-character name and value, multi-byte":            {ts: &trainer.TrainerStatus{Metrics: metricsOf(1, strings.Repeat("é", 64), strings.Repeat("9", 64)), LastUpdatedTime: at}},
		"value that is not a number (no pattern in the CRD)": {ts: &trainer.TrainerStatus{Metrics: metricsOf(1, "acc", "n/a"), LastUpdatedTime: at}},

		"101 percent": {ts: &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](101), LastUpdatedTime: at},
			want: []string{"trainerStatus.progressPercentage: Invalid value: 101: must be between 0 and 100"}},
		"-1 percent": {ts: &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](-1), LastUpdatedTime: at},
			want: []string{"trainerStatus.progressPercentage: Invalid value: -1: must be between 0 and 100"}},
		"-1 seconds remaining": {ts: &trainer.TrainerStatus{EstimatedRemainingSeconds: ptr.To[int32](-1), LastUpdatedTime: at},
			want: []string{"trainerStatus.estimatedRemainingSeconds: Invalid value: -1: must be greater than or equal to 0 (seconds until training completes)"}},
		"257 metrics": {ts: &trainer.TrainerStatus{Metrics: metricsOf(257, "loss", "0.1"), LastUpdatedTime: at},
			want: []string{"trainerStatus.metrics: Too many: 257: must have at most 256 items"}},
		"empty metric name and value": {ts: &trainer.TrainerStatus{Metrics: metricsOf(1, "", ""), LastUpdatedTime: at},
			want: []string{
				`trainerStatus.metrics[0].name: Required value: a metric name of 1 to 64 characters, e.g. "loss"`,
				`trainerStatus.metrics[0].value: Required value: the metric's value as a string of 1 to 64 characters, e.g. "0.0123"`,
			}},
		"65-character name and value": {ts: &trainer.TrainerStatus{Metrics: metricsOf(1, strings.Repeat("é", 65), strings.Repeat("1", 65)), LastUpdatedTime: at},
			want: []string{
				"trainerStatus.metrics[0].name: Too long: may not be more than 64 characters",
				"trainerStatus.metrics[0].value: Too long: may not be more than 64 characters",
			}},
		"no lastUpdatedTime": {ts: &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](5)},
			want: []string{"trainerStatus.lastUpdatedTime: Required value: lastUpdatedTime is required when trainerStatus is present"}},
		"empty trainerStatus": {ts: &trainer.TrainerStatus{},
			want: []string{"trainerStatus.lastUpdatedTime: Required value: lastUpdatedTime is required when trainerStatus is present"}},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, e := range progress.ValidateTrainerStatus(tc.ts, field.NewPath("trainerStatus")) {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func keyStrings[T interface{ String() string }](keys []T) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.String()
	}
	return out
}
