package progress_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// FuzzProgressReport posts arbitrary bodies, with a Content-Length or chunked, to the
// progress endpoint of an existing TrainJob with a token the (fake) Authorizer allows:
// the handler's body decoding, ValidateTrainerStatus and the clock-skew check. Seeds:
// valid reports and hand-written edge cases (every CRD limit at and past its bound,
// multi-byte and invalid UTF-8 metric strings, future and malformed times, overflowing
// and fractional numbers, wrong JSON types, trailing data, deep nesting, a body past
// MaxBodyBytes). The answer must be exactly what the documented rules give, computed
// here from the body:
//
//   - never a panic (answered 500 by the handler's recovery) or any other 5xx;
//   - 413 for a body over MaxBodyBytes; 422 for one that does not decode as
//     {"trainerStatus": ...} or whose trainerStatus breaks ValidateTrainerStatus or is
//     stamped more than DefaultMaxClockSkew ahead; else 200;
//   - a refusal is a metav1.Status carrying the same code, and records nothing;
//   - a 200 echoes the decoded request and, when it has a trainerStatus, records exactly
//     that report in the Coalescer.
func FuzzProgressReport(f *testing.F) {
	for _, body := range []string{
		fullReport, `{}`, `null`, `{"trainerStatus":null}`, `{"trainerStatus":{}}`, ``, `[]`, `"x"`, `{"trainerStatus":[]}`,
		`{"trainerStatus":{"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"progressPercentage":100,"estimatedRemainingSeconds":0,"lastUpdatedTime":"2026-03-04T10:04:59Z"}}`,
		`{"trainerStatus":{"progressPercentage":101,"estimatedRemainingSeconds":-1,"lastUpdatedTime":"2026-03-04T10:05:01Z"}}`,
		`{"trainerStatus":{"progressPercentage":-1,"lastUpdatedTime":"9999-12-31T23:59:59Z"}}`,
		`{"trainerStatus":{"progressPercentage":2147483648,"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"progressPercentage":4.5,"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"estimatedRemainingSeconds":1e300,"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"progressPercentage":"42","lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"lastUpdatedTime":"yesterday"}}`,
		`{"trainerStatus":{"lastUpdatedTime":null,"metrics":null}}`,
		`{"trainerStatus":{"lastUpdatedTime":"0001-01-01T00:00:00Z"}}`,
		`{"trainerStatus":{"lastUpdatedTime":"2026-03-04T10:00:00+14:00"}}`,
		`{"trainerStatus":{"metrics":[{"name":"","value":""}],"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"metrics":[{"name":"` + strings.Repeat("n", 64) + `","value":"` + strings.Repeat("v", 65) + `"}],"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"metrics":[{"name":"` + strings.Repeat("é", 64) + `","value":"` + strings.Repeat("é", 65) + `"}],"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		"{\"trainerStatus\":{\"metrics\":[{\"name\":\"\xff\xfe\",\"value\":\"\xc3\"}],\"lastUpdatedTime\":\"2026-03-04T10:00:00Z\"}}",
		`{"trainerStatus":{"metrics":[{"name":"a\u0000b","value":"\ud800"}],"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"metrics":[` + strings.TrimSuffix(strings.Repeat(`{"name":"l","value":"1"},`, 257), ",") + `],"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"metrics":{"name":"loss"},"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"trainerStatus":{"lastUpdatedTime":"2026-03-04T10:00:00Z"}} trailing`,
		`{"trainerStatus":{"lastUpdatedTime":"2026-03-04T10:00:00Z"}}{"trainerStatus":{"progressPercentage":500}}`,
		`{"trainerStatus":{"progressPercentage":1,"progressPercentage":200,"lastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"TRAINERSTATUS":{"ProgressPercentage":7,"LastUpdatedTime":"2026-03-04T10:00:00Z"}}`,
		`{"extra":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
		`{"trainerStatus":{"lastUpdatedTime":"2026-03-04T10:00:00Z"},"pad":"` + strings.Repeat("x", wire.MaxBodyBytes) + `"}`,
	} {
		f.Add([]byte(body), false)
		f.Add([]byte(body), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, chunked bool) {
		k := key("team-a", "llm")
		coalescer := progress.NewCoalescer(nil, nil)
		h := progress.NewHandler(progress.HandlerConfig{
			Authorizer: &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Allowed, TrainJobUID: allowedUID}},
			Coalescer:  coalescer,
			Clock:      testingclock.NewFakePassiveClock(t0),
		})
		var reader io.Reader = bytes.NewReader(body)
		if chunked {
			reader = io.MultiReader(reader) // not a *bytes.Reader: no Content-Length
		}
		req := httptest.NewRequest(http.MethodPost, wire.Path(k.Namespace, k.Name), reader)
		req.Header.Set("Authorization", "Bearer valid-token")
		if chunked {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		want, wantReq := expectedAnswer(body)
		if rec.Code >= 500 || rec.Code != want {
			t.Fatalf("HTTP %d, want %d: %s", rec.Code, want, rec.Body.Bytes())
		}
		pending := coalescer.Pending(k)
		if rec.Code != http.StatusOK {
			var st metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Status" || int(st.Code) != rec.Code || st.Status != metav1.StatusFailure {
				t.Fatalf("HTTP %d answered %s: want a metav1.Status of that code (%v)", rec.Code, rec.Body.Bytes(), err)
			}
			if pending != nil {
				t.Fatalf("refused with %d, but a report was recorded: %+v", rec.Code, pending)
			}
			return
		}
		echo, err := json.Marshal(wantReq)
		if err != nil {
			t.Fatalf("encoding the decoded request: %v", err)
		}
		if got := rec.Body.Bytes(); !bytes.Equal(got, append(echo, '\n')) {
			t.Fatalf("200 answered %s, want the decoded request %s", got, echo)
		}
		if !equality.Semantic.DeepEqual(pending, wantReq.TrainerStatus) {
			t.Fatalf("recorded %+v, want %+v", pending, wantReq.TrainerStatus)
		}
	})
}

// expectedAnswer is the status code the handler must answer a report of body with (the
// TrainJob exists and the token is allowed), and the request it decodes to when 200.
func expectedAnswer(body []byte) (int, *wire.UpdateTrainJobStatusRequest) {
	if len(body) > wire.MaxBodyBytes {
		return http.StatusRequestEntityTooLarge, nil
	}
	req := new(wire.UpdateTrainJobStatusRequest)
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(req); err != nil {
		return http.StatusUnprocessableEntity, nil
	}
	if ts := req.TrainerStatus; ts != nil {
		if len(progress.ValidateTrainerStatus(ts, field.NewPath("trainerStatus"))) > 0 {
			return http.StatusUnprocessableEntity, nil
		}
		if ts.LastUpdatedTime.Sub(t0) > progress.DefaultMaxClockSkew {
			return http.StatusUnprocessableEntity, nil
		}
	}
	return http.StatusOK, req
}
