package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/util/authlimit"
)

// Observer is told what the progress server does, e.g. to record metrics;
// *metrics.Metrics implements it. Label values are package metrics' constants.
type Observer interface {
	// ObserveProgressReport: one POST to the endpoint answered after elapsed; rejected
	// is "" when it was accepted (200), else the metrics.Reason* value of why not
	// (ReasonTooLarge 413, ReasonUnauthenticated and ReasonForbidden 403,
	// ReasonNotFound 404, ReasonInvalid 422, ReasonInternal 500).
	ObserveProgressReport(rejected string, elapsed time.Duration)
	// ObserveProgressTokenReview: one Authorizer decision, result a metrics.TokenReview*
	// value, cached whether the review cache answered.
	ObserveProgressTokenReview(result string, cached bool)
	// ObserveProgressCoalesced: a pending report was replaced by a newer one.
	ObserveProgressCoalesced()
	// ObserveProgressDropped: an accepted report will not be written, for
	// metrics.ReasonUnchanged, ReasonStale or ReasonGone.
	ObserveProgressDropped(reason string)
	// ObserveProgressWrite: one apply of status.trainerStatus, failed when err is not nil.
	ObserveProgressWrite(err error)
}

var _ Observer = (*metrics.Metrics)(nil)

type nopObserver struct{}

func (nopObserver) ObserveProgressReport(string, time.Duration) {}
func (nopObserver) ObserveProgressTokenReview(string, bool)     {}
func (nopObserver) ObserveProgressCoalesced()                   {}
func (nopObserver) ObserveProgressDropped(string)               {}
func (nopObserver) ObserveProgressWrite(error)                  {}

// HandlerConfig configures NewHandler. Authorizer and Coalescer are required.
type HandlerConfig struct {
	// Authorizer decides who may report (TokenReviewAuthorizer).
	Authorizer Authorizer
	// Coalescer receives accepted reports.
	Coalescer *Coalescer
	// Observer, which may be nil, is told about every report and token decision.
	Observer Observer
	// MaxClockSkew is how far ahead of the server's clock a report's lastUpdatedTime may
	// be; further is 422. Not a CRD rule, and upstream has none: it guards the Stage's
	// forward-only rule, under which one report stamped far in the future would freeze
	// trainerStatus until the clock caught up. 0 means DefaultMaxClockSkew (5m);
	// negative disables the check.
	MaxClockSkew time.Duration
	// Clock times requests and the skew check; nil means the real clock.
	Clock clock.PassiveClock
	// MaxInFlight is how many reports are handled at once; a report beyond it is
	// answered 429 Too Many Requests with Retry-After: 1 at once, before its token is
	// reviewed, and the trainer's next report tries again. It bounds the memory and
	// the TokenReviews of a flood of uncached reports (the issue-14 benchmark's peak of
	// 551 MiB of Go heap). 0 means DefaultMaxInFlight (256); negative, no bound.
	MaxInFlight int
	// MaxInFlightPerNamespace is how many of them may be for TrainJobs of one namespace
	// (the path's): beyond it a report is answered 429 as beyond MaxInFlight, so that
	// one namespace's trainers, sending their bodies slowly or reviewed slowly, leave
	// the other namespaces' reports their slots. 0 means a quarter of MaxInFlight (at
	// least 1); negative, no share (MaxInFlight alone).
	MaxInFlightPerNamespace int
}

// NewHandler returns the progress endpoint (upstream v2.3's status server, KEP-2779):
//
//	POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status
//	Authorization: Bearer <projected service account token, audience Audience(namespace, name)>
//	{"trainerStatus": {"progressPercentage": 42, "estimatedRemainingSeconds": 600,
//	  "metrics": [{"name": "loss", "value": "0.12"}], "lastUpdatedTime": "2026-01-02T03:04:05Z"}}
//
// It is a plain http.Handler: the caller serves it over TLS (upstream serves it on its
// own port, 10443 by default, with the webhooks' certificate, read and write timeouts
// of 10 s and an idle timeout of 120 s). A request goes through, in this order (the
// status codes are upstream's; upstream finds a missing TrainJob only when its write
// fails, after decoding, where Trainyard reads its cache first):
//
//  0. load: a report beyond MaxInFlight, or beyond MaxInFlightPerNamespace for its
//     namespace, is 429 with Retry-After (upstream has no bound; its trainers treat
//     any answer but 200 as a lost report and send the next);
//  1. body size: a Content-Length over MaxBodyBytes (64 KiB) is 413; a longer body
//     without one is cut at the limit and also answered 413 when read (upstream
//     answers that case 422);
//  2. the bearer token (Authorization: Bearer <token>, scheme case-insensitive): none,
//     or one the Authorizer refuses, is 403 with the failed check as message; an
//     authorizer error is 500 (retry), but a 429 error (a TokenReview the progress
//     client's limiter refused for the request's source, r.RemoteAddr's IP, or the API
//     server throttled; pkg/util/authlimit) is 429 with its Retry-After;
//  3. the TrainJob exists in the informer cache: else 404;
//  4. the body decodes as UpdateTrainJobStatusRequest (unknown fields ignored, as
//     upstream's decoder ignores them) and passes ValidateTrainerStatus and the clock
//     skew check: else 422, with the API server's Invalid message and one cause per
//     field error;
//  5. the report is recorded in the Coalescer (written later by the Stage), and the
//     answer is 200 with the decoded request re-encoded as JSON (upstream's echo). A
//     request without trainerStatus ({}) is answered 200 and records nothing. A report
//     the Coalescer cannot keep within its bound in bytes is 429 with Retry-After.
//
// Every error body is a metav1.Status (kind Status, apiVersion v1, status Failure,
// message, reason, code). Other paths and methods, e.g. GET on the endpoint, are 404
// with a Status body, as upstream's catch-all answers them; so is a namespace or name
// that is not a DNS label (no TrainJob can have it; answered before any TokenReview). A
// panic is recovered, logged with its stack and answered 500. Nothing is written to the
// API server while a request is served.
//
// NewHandler panics if a required field of cfg is nil: a wiring bug.
func NewHandler(cfg HandlerConfig) http.Handler {
	if cfg.Authorizer == nil || cfg.Coalescer == nil {
		panic("progress.NewHandler: Authorizer and Coalescer are required")
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.MaxClockSkew == 0 {
		cfg.MaxClockSkew = DefaultMaxClockSkew
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	switch perNamespace := cfg.MaxInFlightPerNamespace; {
	case perNamespace == 0:
		cfg.MaxInFlightPerNamespace = max(1, cfg.MaxInFlight/4)
	case perNamespace < 0:
		cfg.MaxInFlightPerNamespace = 0
	}
	h := &handler{cfg: cfg, inFlight: httpserver.NewFairInFlight(cfg.MaxInFlight, cfg.MaxInFlightPerNamespace)}
	mux := http.NewServeMux()
	mux.Handle(http.MethodPost+" "+wire.Path("{namespace}", "{name}"), h)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound,
			fmt.Sprintf("no endpoint for %s %s: trainers POST their progress to %s", r.Method, r.URL.Path, wire.Path("<namespace>", "<name>")), nil)
	})
	return recoverPanics(mux)
}

type handler struct {
	cfg      HandlerConfig
	inFlight *httpserver.FairInFlight // reports being handled, by namespace
}

// trainerStatusPath is the request's trainerStatus, the root of field errors.
var trainerStatusPath = field.NewPath("trainerStatus")

// bodyBuffers recycles request body buffers across requests.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.cfg.Clock.Now()
	rejected := metrics.ReasonInternal // if serve panics
	defer func() {
		h.cfg.Observer.ObserveProgressReport(rejected, h.cfg.Clock.Since(start))
		// Per request, so only at high verbosity: what an operator greps to find the
		// source of a flood (the runbook's TrainyardProgressReportFlood).
		if logger := klog.FromContext(r.Context()); rejected != "" {
			logger.V(4).Info("Rejected a progress report", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", rejected)
		} else {
			logger.V(5).Info("Accepted a progress report", "path", r.URL.Path, "remote", r.RemoteAddr)
		}
	}()
	rejected = h.serve(w, r)
}

// serve answers one report and returns "" if it was accepted, else the
// metrics.Reason* value of why not.
func (h *handler) serve(w http.ResponseWriter, r *http.Request) string {
	key := cache.ObjectName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if !h.inFlight.TryAcquire(key.Namespace) {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			fmt.Sprintf("too many progress reports in flight (%d, %d per namespace): retry after %d s",
				h.inFlight.Max(), h.inFlight.PerKey(), RetryAfterSeconds), nil)
		return metrics.ReasonTooManyRequests
	}
	defer h.inFlight.Release(key.Namespace)
	if r.ContentLength > wire.MaxBodyBytes {
		writeStatus(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, tooLarge(r.ContentLength), nil)
		return metrics.ReasonTooLarge
	}
	if len(validation.IsDNS1123Label(key.Namespace)) > 0 || len(validation.IsDNS1123Label(key.Name)) > 0 {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound,
			fmt.Sprintf("TrainJob %s not found: a namespace and a TrainJob name are DNS labels", key), nil)
		return metrics.ReasonNotFound
	}
	uid, rejected := h.authorize(w, r, key)
	if rejected != "" {
		return rejected
	}
	return h.record(w, r, key, uid)
}

// authorize checks the request's bearer token for the TrainJob at key (steps 2 and 3
// of NewHandler's list) and returns the uid of the TrainJob the Authorizer allowed it
// for, and "". When it does not allow the report, it answers it (403, 404, or 500 on an
// authorizer error or an allow without a uid) and returns the metrics.Reason* value of
// why.
func (h *handler) authorize(w http.ResponseWriter, r *http.Request, key cache.ObjectName) (types.UID, string) {
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "forbidden: "+reasonNoToken, nil)
		return "", metrics.ReasonUnauthenticated
	}
	d, err := h.cfg.Authorizer.Authorize(authlimit.WithSource(r.Context(), authlimit.SourceOf(r)), token, key)
	if seconds, ok := authlimit.RetryAfter(err); ok && apierrors.IsTooManyRequests(err) {
		// The token's review was refused (its source's budget, or the reviews in
		// flight; pkg/util/authlimit) or throttled by the API server: not an error of
		// the token, and no decision; trainyard_auth_token_reviews_total counts it.
		w.Header().Set("Retry-After", strconv.Itoa(seconds))
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			fmt.Sprintf("too many unknown tokens: the token was not reviewed, retry after %d s: %v", seconds, err), nil)
		return "", metrics.ReasonTooManyRequests
	}
	if err != nil {
		h.cfg.Observer.ObserveProgressTokenReview(metrics.TokenReviewError, false)
		klog.FromContext(r.Context()).Error(err, "Could not authorize a progress report", "trainJob", klog.KRef(key.Namespace, key.Name))
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError,
			"internal error: the token could not be reviewed, retry later: "+err.Error(), nil)
		return "", metrics.ReasonInternal
	}
	h.cfg.Observer.ObserveProgressTokenReview(d.Verdict.String(), d.Cached)
	switch d.Verdict {
	case Allowed:
	case NoTrainJob:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, d.Reason, nil)
		return "", metrics.ReasonNotFound
	case Unauthenticated:
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "forbidden: "+d.Reason, nil)
		return "", metrics.ReasonUnauthenticated
	default:
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "forbidden: "+d.Reason, nil)
		return "", metrics.ReasonForbidden
	}

	if d.TrainJobUID == "" {
		klog.FromContext(r.Context()).Error(nil, "The authorizer allowed a progress report without naming the TrainJob's uid", "trainJob", klog.KRef(key.Namespace, key.Name))
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "internal error: the report could not be credited, retry later", nil)
		return "", metrics.ReasonInternal
	}
	return d.TrainJobUID, ""
}

// record reads, decodes and validates the body of an authorized report for the
// TrainJob of uid at key, records its trainerStatus in the Coalescer and answers 200
// with the request re-encoded (NewHandler's steps 4 and 5, and step 1's cut of a body
// without Content-Length). It returns "" then, else the metrics.Reason* value of the answer it gave instead: ReasonTooLarge
// (413) for a body over MaxBodyBytes, ReasonInvalid (422) for one that cannot be read,
// decoded or validated.
func (h *handler) record(w http.ResponseWriter, r *http.Request, key cache.ObjectName, uid types.UID) string {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer bodyBuffers.Put(buf)
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, wire.MaxBodyBytes)); err != nil {
		if tooBig := new(http.MaxBytesError); errors.As(err, &tooBig) {
			writeStatus(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, tooLarge(-1), nil)
			return metrics.ReasonTooLarge
		}
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "reading the request body: "+err.Error(), nil)
		return metrics.ReasonInvalid
	}
	req := new(wire.UpdateTrainJobStatusRequest)
	if err := json.NewDecoder(bytes.NewReader(buf.Bytes())).Decode(req); err != nil {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`the body is not a JSON {"trainerStatus": {...}}: `+err.Error(), nil)
		return metrics.ReasonInvalid
	}
	if ts := req.TrainerStatus; ts != nil {
		errs := ValidateTrainerStatus(ts, trainerStatusPath)
		errs = append(errs, validateClockSkew(ts, trainerStatusPath, h.cfg.Clock.Now(), h.cfg.MaxClockSkew)...)
		if len(errs) > 0 {
			st := apierrors.NewInvalid(trainer.Kind(trainer.TrainJobKind), key.Name, errs).ErrStatus
			writeStatus(w, int(st.Code), st.Reason, st.Message, st.Details)
			return metrics.ReasonInvalid
		}
		if err := h.cfg.Coalescer.Record(key, uid, ts); err != nil {
			return refusePendingFull(w, err) // 429: the pending reports hold the most bytes allowed
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if err := json.NewEncoder(w).Encode(req); err != nil {
		klog.FromContext(r.Context()).V(4).Info("Could not write a progress answer", "err", err)
	}
	return ""
}

func tooLarge(n int64) string {
	size := "the request body is"
	if n >= 0 {
		size = fmt.Sprintf("the request body of %d bytes is", n)
	}
	return fmt.Sprintf("%s larger than the %d bytes allowed: send fewer or shorter metrics", size, wire.MaxBodyBytes)
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header value (the
// scheme is case-insensitive, as upstream's parser has it), or false.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}

// writeStatus answers code with a metav1.Status body.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string, details *metav1.StatusDetails) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code),
		Details:  details,
	}
	body, err := json.Marshal(&st)
	if err != nil { // not reached: a Status always encodes
		http.Error(w, message, code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

// recoverPanics answers a panic in next with 500 and logs it with its stack, instead of
// letting net/http drop the connection. http.ErrAbortHandler is re-panicked, as
// net/http expects.
func recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler { // net/http panics with this exact value
				panic(p)
			}
			klog.FromContext(r.Context()).Error(nil, "Observed a panic serving a progress report", "panic", fmt.Sprint(p),
				"path", r.URL.Path, "stacktrace", string(debug.Stack()))
			writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "internal error, retry later", nil)
		}()
		next.ServeHTTP(w, r)
	})
}
