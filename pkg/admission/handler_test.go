package admission

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// review returns the JSON of an AdmissionReview the API server would send.
func review(t *testing.T, kind string, op admissionv1.Operation, obj, old any) []byte {
	t.Helper()
	raw := func(v any) runtime.RawExtension {
		if v == nil {
			return runtime.RawExtension{}
		}
		if b, ok := v.([]byte); ok {
			return runtime.RawExtension{Raw: b}
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	in := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("req-1"),
			Kind:      metav1.GroupVersionKind{Group: trainer.GroupName, Version: "v1alpha1", Kind: kind},
			Operation: op,
			Object:    raw(obj),
			OldObject: raw(old),
		},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends body to path and decodes the AdmissionReview answer.
func post(t *testing.T, srv *httptest.Server, path string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil || out.Response.UID != "req-1" {
		t.Fatalf("answer %+v: want an admission.k8s.io/v1 AdmissionReview answering uid req-1", out)
	}
	return out.Response
}

type observed struct{ reviews []string }

func (o *observed) ObserveAdmissionRejected(reason string) {
	o.reviews = append(o.reviews, "rejected "+reason)
}

func (o *observed) ObserveReview(webhook, kind string, op admissionv1.Operation, resp *admissionv1.AdmissionResponse, _ time.Duration) {
	o.reviews = append(o.reviews, strings.Join([]string{webhook, kind, string(op), map[bool]string{true: "allowed", false: "denied"}[resp.Allowed]}, " "))
}

func TestHandlerRoundTrips(t *testing.T) {
	deps := fixture{runtimes: []runtime.Object{ctr("test-runtime", skeleton(torchPolicy), nil)}}.deps(t)
	obs := &observed{}
	deps.Observer = obs
	srv := httptest.NewServer(NewHandler(deps))
	defer srv.Close()

	t.Run("validate TrainJob: admitted with a warning", func(t *testing.T) {
		resp := post(t, srv, PathValidateTrainJob, review(t, "TrainJob", admissionv1.Create, trainJob("nowhere", nil), nil))
		if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `"nowhere"`) {
			t.Errorf("response %+v: want allowed with a warning naming the runtime", resp)
		}
	})
	t.Run("validate TrainJob: denied as upstream denies", func(t *testing.T) {
		tj := trainJob("test-runtime", &trainer.Trainer{Env: envs("PET_NNODES")})
		resp := post(t, srv, PathValidateTrainJob, review(t, "TrainJob", admissionv1.Create, tj, nil))
		if resp.Allowed || resp.Result == nil {
			t.Fatalf("response %+v: want denied", resp)
		}
		want := metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Message: "spec.trainer.env: Invalid value: must not have reserved envs, invalid envs configured: [PET_NNODES]: " +
				"mlPolicy.torch (torchrun) sets them; remove PET_NNODES from spec.trainer.env",
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "FieldValueInvalid", Field: "spec.trainer.env",
				Message: "Invalid value: must not have reserved envs, invalid envs configured: [PET_NNODES]: " +
					"mlPolicy.torch (torchrun) sets them; remove PET_NNODES from spec.trainer.env"}}}}
		if diff := cmp.Diff(want, *resp.Result); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
	})
	t.Run("validate TrainJob UPDATE decodes the old object", func(t *testing.T) {
		old := trainJob("test-runtime", nil)
		tj := old.DeepCopy()
		tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "kueue.x-k8s.io/manager"}}
		resp := post(t, srv, PathValidateTrainJob, review(t, "TrainJob", admissionv1.Update, tj, old))
		if resp.Allowed || !strings.Contains(resp.Result.Message, "RuntimePatches can only be modified when the TrainJob is suspended") {
			t.Errorf("response %+v: want denied, patches changed while running", resp)
		}
	})
	t.Run("mutate TrainJob: JSON patch stamping time", func(t *testing.T) {
		tj := trainJob("test-runtime", nil)
		tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "kueue.x-k8s.io/manager"}}
		resp := post(t, srv, PathMutateTrainJob, review(t, "TrainJob", admissionv1.Create, tj, nil))
		if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("response %+v: want allowed with a JSONPatch", resp)
		}
		want := `[{"op":"add","path":"/spec/runtimePatches/0/time","value":"2026-05-04T10:11:12Z"}]`
		if string(resp.Patch) != want {
			t.Errorf("patch = %s, want %s", resp.Patch, want)
		}
	})
	t.Run("mutate TrainJob: nothing to do", func(t *testing.T) {
		resp := post(t, srv, PathMutateTrainJob, review(t, "TrainJob", admissionv1.Create, trainJob("test-runtime", nil), nil))
		if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
			t.Errorf("response %+v: want allowed without a patch", resp)
		}
	})
	t.Run("validate TrainingRuntime", func(t *testing.T) {
		obj := &trainer.TrainingRuntime{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rt"}, Spec: *skeleton(torchPolicy)}
		obj.Spec.Template.Spec.ReplicatedJobs[0].Replicas = 2
		resp := post(t, srv, PathValidateTrainingRuntime, review(t, "TrainingRuntime", admissionv1.Create, obj, nil))
		if resp.Allowed || !strings.Contains(resp.Result.Message,
			"spec.template.spec.replicatedJobs[name=dataset-initializer].replicas: Invalid value: 2: always must be 1") {
			t.Errorf("response %+v: want denied naming the replicas", resp)
		}
	})
	t.Run("validate ClusterTrainingRuntime", func(t *testing.T) {
		obj := ctr("rt", skeleton(torchPolicy), map[string]string{trainer.LabelSupport: trainer.SupportDeprecated})
		resp := post(t, srv, PathValidateClusterTrainingRuntime, review(t, "ClusterTrainingRuntime", admissionv1.Create, obj, nil))
		if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "is deprecated") {
			t.Errorf("response %+v: want allowed with the deprecation warning", resp)
		}
	})
	t.Run("DELETE is allowed", func(t *testing.T) {
		resp := post(t, srv, PathValidateClusterTrainingRuntime, review(t, "ClusterTrainingRuntime", admissionv1.Delete, nil, nil))
		if !resp.Allowed {
			t.Errorf("response %+v: want allowed", resp)
		}
	})
	t.Run("unknown field: refused with code 400", func(t *testing.T) {
		obj := []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"x"},"spec":{"runtimeRef":{"name":"a"},"bogus":1}}`)
		resp := post(t, srv, PathValidateTrainJob, review(t, "TrainJob", admissionv1.Create, obj, nil))
		if resp.Allowed || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, `unknown field "bogus"`) {
			t.Errorf("response %+v: want refused, code 400, naming the field", resp)
		}
	})
	t.Run("another kind: refused with code 400", func(t *testing.T) {
		resp := post(t, srv, PathValidateTrainJob, review(t, "TrainingRuntime", admissionv1.Create, skeleton(nil), nil))
		if resp.Allowed || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, "this webhook admits TrainJob.trainer.kubeflow.org") {
			t.Errorf("response %+v: want refused, code 400", resp)
		}
	})

	wantObserved := []string{
		"validate TrainJob CREATE allowed", "validate TrainJob CREATE denied", "validate TrainJob UPDATE denied",
		"mutate TrainJob CREATE allowed", "mutate TrainJob CREATE allowed", "validate TrainingRuntime CREATE denied",
		"validate ClusterTrainingRuntime CREATE allowed", "validate ClusterTrainingRuntime DELETE allowed",
		"validate TrainJob CREATE denied", "validate TrainJob CREATE denied",
	}
	if diff := cmp.Diff(wantObserved, obs.reviews); diff != "" {
		t.Errorf("observed reviews (-want +got):\n%s", diff)
	}
}

func envs(names ...string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, len(names))
	for i, n := range names {
		out[i] = env(n, "1")
	}
	return out
}

func TestHandlerHTTPErrors(t *testing.T) {
	srv := httptest.NewServer(NewHandler(fixture{}.deps(t)))
	defer srv.Close()
	valid := review(t, "TrainJob", admissionv1.Create, trainJob("rt", nil), nil)
	cases := map[string]struct {
		method, contentType string
		body                []byte
		wantStatus          int
		wantInBody          string
	}{
		"GET":                 {method: http.MethodGet, contentType: "application/json", wantStatus: 405, wantInBody: "POST only"},
		"YAML":                {method: http.MethodPost, contentType: "application/yaml", body: valid, wantStatus: 415, wantInBody: "want application/json"},
		"JSON with a charset": {method: http.MethodPost, contentType: "application/json; charset=utf-8", body: valid, wantStatus: 200},
		"too large": {method: http.MethodPost, contentType: "application/json", wantStatus: 413, wantInBody: "larger than",
			body: append(append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), MaxRequestBytes)...), '"', '}')},
		"not JSON":        {method: http.MethodPost, contentType: "application/json", body: []byte("{"), wantStatus: 400, wantInBody: "decoding the AdmissionReview"},
		"not a v1 review": {method: http.MethodPost, contentType: "application/json", body: []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}`), wantStatus: 400, wantInBody: "want an admission.k8s.io/v1 AdmissionReview"},
		"without request": {method: http.MethodPost, contentType: "application/json", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), wantStatus: 400, wantInBody: "with a request"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, srv.URL+PathValidateTrainJob, bytes.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", c.contentType)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.wantStatus || !strings.Contains(string(body), c.wantInBody) {
				t.Errorf("status %d body %q; want %d containing %q", resp.StatusCode, body, c.wantStatus, c.wantInBody)
			}
		})
	}
	t.Run("unknown path", func(t *testing.T) {
		resp, err := http.Post(srv.URL+"/validate-something", "application/json", bytes.NewReader(valid))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("status %d, want 404", resp.StatusCode)
		}
	})
}

// TestHandlerRefusesBeyondItsLimits: a request beyond MaxRequests on a connection that
// cannot bound its body's time (a ResponseRecorder; TestServerCutsHTTP2SlowBodies covers
// a server's), or whose body does not fit the body budget, is answered 429 with Retry-After: 1 (the API server retries
// it within the webhook's timeout), one over MaxRequestBytes 413, each observed as
// rejected; a small review still passes while a large body holds the budget.
func TestHandlerRefusesBeyondItsLimits(t *testing.T) {
	deps := fixture{runtimes: []runtime.Object{ctr("test-runtime", skeleton(torchPolicy), nil)}}.deps(t)
	obs := &observed{}
	deps.Observer = obs
	deps.Limits = Limits{MaxRequests: 2, BodyBudgetBytes: 64 << 10, FreeBodyBytes: 16 << 10}
	h := NewHandler(deps)
	small := review(t, "TrainJob", admissionv1.Create, trainJob("test-runtime", nil), nil)
	send := func(body io.Reader, length int64) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, PathValidateTrainJob, body)
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = length
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	// A slow client holds a request slot and 48 KiB of the budget (64 KiB buffer less Free) while its body arrives.
	pr, pw := io.Pipe()
	held := make(chan *httptest.ResponseRecorder)
	go func() { held <- send(pr, -1) }()
	if _, err := pw.Write(make([]byte, 60<<10)); err != nil {
		t.Fatal(err)
	}
	if rec := send(bytes.NewReader(make([]byte, 80<<10)), 80<<10); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("an 80 KiB body while the budget is held: %d, Retry-After %q; want 429, 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	if rec := send(bytes.NewReader(small), int64(len(small))); rec.Code != http.StatusOK {
		t.Errorf("a small review while the budget is held: %d %s, want 200", rec.Code, rec.Body)
	}
	// A second slow client takes the other request slot: a third request is refused.
	pr2, pw2 := io.Pipe()
	held2 := make(chan *httptest.ResponseRecorder)
	go func() { held2 <- send(pr2, -1) }()
	if _, err := pw2.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	if rec := send(bytes.NewReader(small), int64(len(small))); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("a review beyond MaxRequests: %d, Retry-After %q; want 429, 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	_ = pw.CloseWithError(io.ErrUnexpectedEOF)
	_ = pw2.CloseWithError(io.ErrUnexpectedEOF)
	<-held
	<-held2
	if rec := send(bytes.NewReader(nil), MaxRequestBytes+1); rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a Content-Length over MaxRequestBytes: %d, want 413", rec.Code)
	}
	if rec := send(bytes.NewReader(small), int64(len(small))); rec.Code != http.StatusOK {
		t.Errorf("a review once the slow clients are gone: %d %s, want 200", rec.Code, rec.Body)
	}
	want := []string{"rejected too_many_requests", "validate TrainJob CREATE allowed", "rejected too_many_requests", "rejected too_large", "validate TrainJob CREATE allowed"}
	if diff := cmp.Diff(want, obs.reviews); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}
