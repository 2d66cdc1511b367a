// Package admission is Trainyard's admission webhook: the validating and mutating
// handlers upstream Kubeflow Trainer v2.3 serves for TrainJob, TrainingRuntime and
// ClusterTrainingRuntime (docs/compatibility.md#admission-rules), over net/http and
// admission.k8s.io/v1, without controller-runtime.
//
// The rules are pure functions returning field.ErrorList and warnings, one file per
// kind (trainjob.go, trainingruntime.go, clustertrainingruntime.go). Where the
// controller's stages check the same rule, both call one function of the stage's own
// package (mergepatches.ValidateSteps and ValidateRuntimePatches,
// mlpolicy.ValidateRuntime and ValidateTrainJob, volcano.ValidateQueue,
// dra.Claims.ProcsPerNodeUnknown): admission reports every finding, a stage the first
// as a JobSetReady=False condition for objects admitted without the webhook.
//
// Other objects are read from informer caches (listers), never from the API, so every
// replica answers, leader or not, and a request costs no API call. A TrainJob whose
// runtime is absent is admitted with a warning (GitOps applies in any order; the
// controller's RuntimeResolved condition takes over), where upstream denies it.
package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Paths of the four webhooks, upstream's (controller-runtime's naming convention), so
// webhook configurations written for upstream keep working.
const (
	PathMutateTrainJob                 = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"
	PathValidateTrainJob               = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
	PathValidateTrainingRuntime        = "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime"
	PathValidateClusterTrainingRuntime = "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime"
)

// MaxRequestBytes bounds an AdmissionReview request body. The API server sends at most
// the object and the old object, each within etcd's 1.5 MiB limit, plus the envelope.
const MaxRequestBytes = 7 << 20

// Observer is told about every review a webhook answers, e.g. to record metrics:
// webhook is "mutate" or "validate", kind the webhook's kind (TrainJob, ...), operation
// the admission operation (CREATE, UPDATE, ...), resp the response sent (read it, never
// change it) and elapsed the time from receiving the request to writing the answer.
// resp.Allowed says whether the object was admitted, resp.Warnings what kubectl shows;
// a refusal's resp.Result.Code says why: 403 a rule denied the object, 400 the request
// could not be reviewed (another kind, an object that does not decode strictly), 500 an
// informer cache read failed. HTTP errors (wrong method, media type, size, not an
// AdmissionReview) answer no review and are not observed.
type Observer interface {
	ObserveReview(webhook, kind string, operation admissionv1.Operation, resp *admissionv1.AdmissionResponse, elapsed time.Duration)
}

// NewHandler returns a mux serving the four webhooks at their paths (PathMutateTrainJob,
// ...) with the rules of deps. It is plain http.Handler: the caller serves it over TLS.
// Each path answers only POSTs of an admission.k8s.io/v1 AdmissionReview as
// application/json of at most MaxRequestBytes: anything else is an HTTP error (405,
// 415, 413, 400) with a message saying what was expected. A review about an object
// that does not decode strictly into Trainyard's types (an unknown field: the CRD is
// newer than the controller) is answered Allowed=false with code 400.
func NewHandler(deps *Deps) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(PathMutateTrainJob, &endpoint{webhook: "mutate", kind: trainer.TrainJobKind, observer: deps.Observer, review: deps.mutateTrainJob})
	mux.Handle(PathValidateTrainJob, &endpoint{webhook: "validate", kind: trainer.TrainJobKind, observer: deps.Observer, review: deps.validateTrainJob})
	mux.Handle(PathValidateTrainingRuntime, &endpoint{webhook: "validate", kind: trainer.TrainingRuntimeKind, observer: deps.Observer, review: deps.validateTrainingRuntime})
	mux.Handle(PathValidateClusterTrainingRuntime, &endpoint{webhook: "validate", kind: trainer.ClusterTrainingRuntimeKind, observer: deps.Observer, review: deps.validateClusterTrainingRuntime})
	return mux
}

// endpoint serves one webhook: it checks and decodes the HTTP request, passes the
// admission request of the expected kind to review and writes its response.
type endpoint struct {
	webhook, kind string
	observer      Observer
	// review answers a CREATE or UPDATE of kind; other operations are allowed as is.
	review func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "admission webhooks accept POST only", http.StatusMethodNotAllowed)
		return
	}
	if mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mediaType != "application/json" {
		http.Error(w, fmt.Sprintf("Content-Type %q: want application/json (an admission.k8s.io/v1 AdmissionReview)", r.Header.Get("Content-Type")),
			http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("AdmissionReview larger than %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil {
		http.Error(w, "decoding the AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	if gvk := in.GroupVersionKind(); gvk != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") || in.Request == nil {
		http.Error(w, fmt.Sprintf("want an admission.k8s.io/v1 AdmissionReview with a request, got apiVersion %q kind %q",
			in.APIVersion, in.Kind), http.StatusBadRequest)
		return
	}
	req := in.Request
	var resp *admissionv1.AdmissionResponse
	switch {
	case req.Kind.Group != trainer.GroupName || req.Kind.Kind != e.kind:
		resp = badRequest(fmt.Sprintf("this webhook admits %s.%s, not %s: check the webhook configuration's rules", e.kind, trainer.GroupName, req.Kind.String()))
	case req.Operation == admissionv1.Create || req.Operation == admissionv1.Update:
		resp = e.review(req)
	default:
		resp = &admissionv1.AdmissionResponse{Allowed: true}
	}
	resp.UID = req.UID
	out := admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: resp}
	encoded, err := json.Marshal(&out)
	if err != nil {
		http.Error(w, "encoding the AdmissionReview: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(encoded)
	if e.observer != nil {
		e.observer.ObserveReview(e.webhook, e.kind, req.Operation, resp, time.Since(start))
	}
}

// decodeStrict decodes an object of an admission request into out, refusing unknown
// fields: the API server prunes fields its CRD does not declare, so an unknown one means
// Trainyard's types are older than the CRD and a rule could miss what it says.
func decodeStrict(raw []byte, what string, out any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("decoding %s as %s: %w (is the CRD newer than Trainyard?)", what, trainer.SchemeGroupVersion.String(), err)
	}
	if dec.More() {
		return fmt.Errorf("decoding %s: unexpected data after the object", what)
	}
	return nil
}

// decodeRequest decodes req's object, and on UPDATE its old object (else old is nil),
// strictly. It returns a response to send instead when one does not decode.
func decodeRequest[T any](req *admissionv1.AdmissionRequest) (obj, old *T, resp *admissionv1.AdmissionResponse) {
	obj = new(T)
	if err := decodeStrict(req.Object.Raw, "request.object", obj); err != nil {
		return nil, nil, badRequest(err.Error())
	}
	if req.Operation == admissionv1.Update {
		old = new(T)
		if err := decodeStrict(req.OldObject.Raw, "request.oldObject", old); err != nil {
			return nil, nil, badRequest(err.Error())
		}
	}
	return obj, old, nil
}

// badRequest refuses a request that cannot be reviewed.
func badRequest(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest, Message: message,
	}}
}

// verdict answers a validation: allowed with warnings when errs is empty; else denied
// as upstream's webhooks deny (controller-runtime's Denied: code 403, reason Forbidden,
// the aggregated field errors as message, which the API server prefixes with
// `admission webhook "<name>" denied the request: `), plus each error as a cause. A
// failed cache read (field.InternalError) is code 500, reason InternalError.
func verdict(warnings []string, errs field.ErrorList) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{Allowed: len(errs) == 0, Warnings: warnings}
	if len(errs) == 0 {
		return resp
	}
	status := &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusForbidden,
		Reason:  metav1.StatusReasonForbidden,
		Message: errs.ToAggregate().Error(),
		Details: &metav1.StatusDetails{},
	}
	for _, e := range errs {
		if e.Type == field.ErrorTypeInternal {
			status.Code, status.Reason = http.StatusInternalServerError, metav1.StatusReasonInternalError
		}
		status.Details.Causes = append(status.Details.Causes, metav1.StatusCause{
			Type: metav1.CauseType(e.Type), Message: e.ErrorBody(), Field: e.Field,
		})
	}
	resp.Result = status
	return resp
}
