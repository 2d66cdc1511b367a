// Package admission is Trainyard's admission webhook: the validating and mutating
// handlers upstream Kubeflow Trainer v2.3 serves for TrainJob, TrainingRuntime and
// ClusterTrainingRuntime (docs/compatibility.md#admission-rules), and Trainyard's
// validating handler for OptimizationJob
// (docs/compatibility.md#optimizationjob-validation), over net/http and
// admission.k8s.io/v1, without controller-runtime.
//
// The rules are pure functions returning field.ErrorList and warnings, one file per
// kind (trainjob.go, trainingruntime.go, clustertrainingruntime.go,
// optimizationjob.go). An OptimizationJob's search rules are search.ValidateSpec, the
// OptimizationJob controller's own check, and its trials' TrainJob is held to the
// TrainJob rules (ValidateTrainJob). Where the
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
	"mime"
	"net/http"
	"os"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/metrics"
)

// Paths of the five webhooks: upstream's four (controller-runtime's naming convention),
// so webhook configurations written for upstream keep working, and the OptimizationJob
// validator's, named by the same convention (upstream serves none for it).
const (
	PathMutateTrainJob                 = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"
	PathValidateTrainJob               = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
	PathValidateTrainingRuntime        = "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime"
	PathValidateClusterTrainingRuntime = "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime"
	PathValidateOptimizationJob        = "/validate-trainer-kubeflow-org-v1alpha1-optimizationjob"
)

// MaxRequestBytes bounds an AdmissionReview request body, answered 413 beyond it. It
// lets the largest review the API server can send through: the object is at most
// 3 MiB (the API server refuses a larger request body before admission), the old
// object of an UPDATE at most as much (it was admitted under the same limit; etcd's
// default 1.5 MiB request limit keeps a stored object smaller still), and the envelope
// (kind, resource, userInfo, options) is well under 1 MiB. Reading a body does not
// reserve this size: BodyBudget charges bytes as they arrive.
const MaxRequestBytes = 7 << 20

// The handler's bounds on what requests hold at once (Deps.Limits overrides them). The
// API server calls the webhooks with a 10 s timeout (TimeoutSeconds) and retries a 429
// with Retry-After within it; after that its webhook's failurePolicy (Fail) refuses
// the write. So a refusal for load is a 429 with Retry-After: 1, never an
// AdmissionReview denying the object, which would refuse the write at once, whatever
// the failurePolicy.
const (
	// DefaultMaxRequests is how many requests the handler holds at once while their
	// bodies arrive with the server's whole ReadTimeout (a slow client's request holds
	// its goroutine and up to DefaultFreeBodyBytes until then). A request beyond it is
	// not refused: its body must arrive within OverflowBodyTimeout and is charged to
	// the budget whole, so slow bodies holding every slot (HTTP/2 multiplies them: 64
	// connections of 32 streams) cut off none of the API server's reviews, whose body
	// follows their header at once.
	DefaultMaxRequests = 2048
	// DefaultMaxReviewsInFlight is how many reviews are decoded, decided and encoded at
	// once, once their body has arrived; a slow client never holds one. A review read
	// from the caches takes ~0.1–1 ms: 64 at once is far beyond what 2 cores answer, and
	// bounds the decoded copies of bodies (each ~2–3× its body) the heap holds.
	DefaultMaxReviewsInFlight = 64
	// DefaultBodyBudgetBytes is the request-body bytes, beyond each body's first
	// DefaultFreeBodyBytes, held at once by all requests together
	// (httpserver.BodyBudget): 32 MiB, four of the largest reviews (MaxRequestBytes).
	DefaultBodyBudgetBytes = 32 << 20
	// DefaultFreeBodyBytes is the part of every body not charged to the budget: a
	// TrainJob's review (a few KiB, ~20 KiB for an UPDATE with managedFields) is never
	// refused because large bodies hold the budget.
	DefaultFreeBodyBytes = 64 << 10
	// OverflowBodyTimeout is how long the body of a request beyond MaxRequests may take
	// to arrive; a slower one is answered 408 and its stream or connection closed. The
	// API server sends a review's body with its header; 2 s leaves a loaded node room.
	OverflowBodyTimeout = 2 * time.Second
)

// Limits bound what the handler's requests hold at once; a zero field takes its
// Default* value, a negative one removes the bound. A request beyond
// MaxReviewsInFlight, or whose body does not fit the budget, is answered 429 Too Many
// Requests with Retry-After: 1 at once. One beyond MaxRequests has OverflowBodyTimeout
// for its body, charged whole to the budget (429 when its connection cannot set a read
// deadline).
type Limits struct {
	// MaxRequests is how many requests are held with the server's whole ReadTimeout
	// and FreeBodyBytes uncharged for their body (DefaultMaxRequests).
	MaxRequests int
	// MaxReviewsInFlight is how many reviews are decoded and decided at once
	// (DefaultMaxReviewsInFlight).
	MaxReviewsInFlight int
	// BodyBudgetBytes and FreeBodyBytes are the httpserver.BodyBudget of request bodies
	// (DefaultBodyBudgetBytes, DefaultFreeBodyBytes).
	BodyBudgetBytes, FreeBodyBytes int64
}

// withDefaults returns l with its zero fields set to their defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxRequests == 0 {
		l.MaxRequests = DefaultMaxRequests
	}
	if l.MaxReviewsInFlight == 0 {
		l.MaxReviewsInFlight = DefaultMaxReviewsInFlight
	}
	if l.BodyBudgetBytes == 0 {
		l.BodyBudgetBytes = DefaultBodyBudgetBytes
	}
	if l.FreeBodyBytes == 0 {
		l.FreeBodyBytes = DefaultFreeBodyBytes
	}
	return l
}

// MaxConcurrentStreams is how many requests one HTTP/2 connection to the admission
// server carries at once (ServerLimits).
const MaxConcurrentStreams = 32

// ServerLimits are the admission server's timeouts and connection bounds
// (httpserver.Limits), for a slow client not to take what the API server needs:
//
//   - 5 s for a header (and the TLS handshake): the API server sends its header at
//     once, and a client sending nothing, or a byte at a time, loses its slot;
//   - 10 s to read a request and 10 s from its header to its answer: the API server
//     gives up on a review after TimeoutSeconds (10 s), so a slower one is useless;
//   - 120 s idle: above the 90 s after which the API server's client closes an idle
//     connection itself, so the server never closes one a review is being sent on;
//   - 16 KiB of header (the API server sends a few short headers);
//   - 1024 connections (~40 KiB each over TLS while a header arrives: 40 MiB), of which
//     768 kept open between requests: 500 slow clients leave room for the API servers,
//     and the timeouts free the slots of more, which new connections, the API server's
//     among them, take in the order they came (the kernel's accept queue);
//   - HTTP/2: at most 32 concurrent streams per connection (the API server's client
//     opens another connection when it has more reviews in flight), net/http's 1 MiB
//     receive buffers. A stream beyond the handler's MaxRequests holds a goroutine for
//     OverflowBodyTimeout at most: 1024 × 32 streams is the bound on them.
func ServerLimits() httpserver.Limits {
	return httpserver.Limits{
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: TimeoutSeconds * time.Second, WriteTimeout: TimeoutSeconds * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
		MaxConns: 1024, MaxKeepAliveConns: 768,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: MaxConcurrentStreams},
	}
}

// Observer is told about every request a webhook answers, e.g. to record metrics. ObserveReview:
// webhook is "mutate" or "validate", kind the webhook's kind (TrainJob, ...), operation
// the admission operation (CREATE, UPDATE, ...), resp the response sent (read it, never
// change it) and elapsed the time from receiving the request to writing the answer.
// resp.Allowed says whether the object was admitted, resp.Warnings what kubectl shows;
// a refusal's resp.Result.Code says why: 403 a rule denied the object, 400 the request
// could not be reviewed (another kind, an object that does not decode strictly), 500 an
// informer cache read failed. HTTP errors (wrong method, media type, size, not an
// AdmissionReview) answer no review and are not observed by it. ObserveAdmissionRejected:
// a request refused before its review for the server's bounds, reason
// metrics.ReasonTooManyRequests (429: a cap of Limits) or metrics.ReasonTooLarge (413:
// over MaxRequestBytes).
type Observer interface {
	ObserveReview(webhook, kind string, operation admissionv1.Operation, resp *admissionv1.AdmissionResponse, elapsed time.Duration)
	ObserveAdmissionRejected(reason string)
}

// NewHandler returns a mux serving the five webhooks at their paths (PathMutateTrainJob,
// ...) with the rules of deps, within deps.Limits. It is plain http.Handler: the caller
// serves it over TLS (httpserver.New with ServerLimits). Each path answers only POSTs
// of an admission.k8s.io/v1 AdmissionReview as application/json of at most
// MaxRequestBytes: anything else is an HTTP error (405, 415, 413, 400) with a message
// saying what was expected. A request beyond the bounds of Limits is 429 with
// Retry-After: 1. A review about an object that does not decode strictly into
// Trainyard's types (an unknown field: the CRD is newer than the controller) is
// answered Allowed=false with code 400.
func NewHandler(deps *Deps) http.Handler {
	l := deps.Limits.withDefaults()
	b := &bounds{
		requests: httpserver.NewInFlight(l.MaxRequests), reviews: httpserver.NewInFlight(l.MaxReviewsInFlight),
		bodies: &httpserver.BodyBudget{Total: l.BodyBudgetBytes, Free: l.FreeBodyBytes}, observer: deps.Observer,
	}
	mux := http.NewServeMux()
	mux.Handle(PathMutateTrainJob, &endpoint{webhook: "mutate", kind: trainer.TrainJobKind, bounds: b, review: deps.mutateTrainJob})
	mux.Handle(PathValidateTrainJob, &endpoint{webhook: "validate", kind: trainer.TrainJobKind, bounds: b, review: deps.validateTrainJob})
	mux.Handle(PathValidateTrainingRuntime, &endpoint{webhook: "validate", kind: trainer.TrainingRuntimeKind, bounds: b, review: deps.validateTrainingRuntime})
	mux.Handle(PathValidateClusterTrainingRuntime, &endpoint{webhook: "validate", kind: trainer.ClusterTrainingRuntimeKind, bounds: b, review: deps.validateClusterTrainingRuntime})
	mux.Handle(PathValidateOptimizationJob, &endpoint{webhook: "validate", kind: trainer.OptimizationJobKind, bounds: b, review: deps.validateOptimizationJob})
	return mux
}

// bounds are what the five endpoints of one handler share: the caps of Limits.
type bounds struct {
	requests, reviews *httpserver.InFlight
	bodies            *httpserver.BodyBudget
	observer          Observer
}

// refuse answers a request refused for the bounds: 429 with Retry-After for a cap, 413
// for a body over MaxRequestBytes, and tells the observer.
func (b *bounds) refuse(w http.ResponseWriter, r *http.Request, code int, message string) {
	reason := metrics.ReasonTooManyRequests
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(httpserver.RetryAfterSeconds))
		message += fmt.Sprintf(": retry after %d s", httpserver.RetryAfterSeconds)
	} else {
		reason = metrics.ReasonTooLarge
	}
	http.Error(w, message, code)
	if b.observer != nil {
		b.observer.ObserveAdmissionRejected(reason)
	}
	// Per request, so only at high verbosity: what an operator greps to find the source
	// of a flood (trainyard_admission_requests_rejected_total rising).
	klog.FromContext(r.Context()).V(4).Info("Refused an admission request", "path", r.URL.Path, "remote", r.RemoteAddr, "code", code, "reason", message)
}

// readBody reads r's body within the bounds and returns it with the function that
// frees its share of the budget; ok false when it answered the request instead. A
// request holding no request slot (overflow) is charged every byte and given
// OverflowBodyTimeout for its body.
func (b *bounds) readBody(w http.ResponseWriter, r *http.Request, overflow bool) (body []byte, release func(), ok bool) {
	if r.ContentLength > MaxRequestBytes {
		b.refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("AdmissionReview larger than %d bytes", MaxRequestBytes))
		return nil, nil, false
	}
	read := b.bodies.ReadBody
	if overflow {
		read = b.bodies.ReadBodyCharged
		if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(OverflowBodyTimeout)); err != nil {
			b.refuse(w, r, http.StatusTooManyRequests, fmt.Sprintf("too many admission requests open (%d)", b.requests.Max()))
			return nil, nil, false
		}
	}
	body, release, err := read(r.Body, MaxRequestBytes)
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return body, release, true
	case errors.As(err, &tooLarge):
		b.refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("AdmissionReview larger than %d bytes", MaxRequestBytes))
	case errors.Is(err, httpserver.ErrBusy):
		b.refuse(w, r, http.StatusTooManyRequests, fmt.Sprintf("too many AdmissionReview bytes in flight (%d)", b.bodies.Total))
	case overflow && errors.Is(err, os.ErrDeadlineExceeded):
		// A slow body beyond the slots: cut, so that it holds its goroutine briefly.
		http.Error(w, fmt.Sprintf("the AdmissionReview did not arrive within %v", OverflowBodyTimeout), http.StatusRequestTimeout)
		klog.FromContext(r.Context()).V(4).Info("Cut a slow admission request", "path", r.URL.Path, "remote", r.RemoteAddr)
	default:
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
	}
	return nil, nil, false
}

// endpoint serves one webhook: it checks and decodes the HTTP request, passes the
// admission request of the expected kind to review and writes its response.
type endpoint struct {
	webhook, kind string
	*bounds
	// review answers a CREATE or UPDATE of kind; other operations are allowed as is.
	review func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

// ServeHTTP holds a request slot (MaxRequests), when one is free, while the body
// arrives (else the body has OverflowBodyTimeout), then a review slot
// (MaxReviewsInFlight) while the review is decoded, decided and encoded.
func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	overflow := !e.requests.TryAcquire()
	if !overflow {
		defer e.requests.Release()
	}
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
	body, release, ok := e.readBody(w, r, overflow)
	if !ok {
		return
	}
	defer release()
	if !e.reviews.TryAcquire() {
		e.refuse(w, r, http.StatusTooManyRequests, fmt.Sprintf("too many AdmissionReviews in flight (%d)", e.reviews.Max()))
		return
	}
	defer e.reviews.Release()
	e.serveReview(w, body, start)
}

// serveReview decodes the AdmissionReview in body, reviews its request and writes the
// answer; start is when the request arrived.
func (e *endpoint) serveReview(w http.ResponseWriter, body []byte, start time.Time) {
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
