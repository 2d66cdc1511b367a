// Package auth is the filter in front of the controller's metrics endpoint (and
// /debug/pprof): every request carries a bearer token that a TokenReview
// (authentication.k8s.io/v1) authenticates and a SubjectAccessReview
// (authorization.k8s.io/v1) authorizes for the request's verb on its
// non-resource URL, as Kubernetes components (component-base's
// authenticated metrics) and controller-runtime's filters.WithAuthenticationAndAuthorization
// do. A Prometheus is let in by binding it a ClusterRole with
// nonResourceURLs ["/metrics"], verbs ["get"].
//
// Decisions are cached, allows and denials apart (a flood of bad tokens, each a
// denial, evicts older denials, never an allow). A request whose token, verb and path
// are in neither cache is unknown and costs a TokenReview: the controller gives the
// filter an API client of its own whose TokenReviews an authlimit.Limiter admits
// (pkg/util/authlimit), per client address and in flight, so that random tokens
// cannot make it send TokenReviews without bound.
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/klog/v2"
	utilclock "k8s.io/utils/clock"

	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/util/authlimit"
)

// Cache lifetimes of a decision. A denial is kept briefly so that a binding just
// created takes effect within seconds; an API error is never cached.
const (
	AllowTTL = time.Minute
	DenyTTL  = 10 * time.Second
	// cacheSize bounds the allows kept (token × path × verb), and apart from them the
	// denials: a handful of scrapers and profilers need a few allows each.
	cacheSize = 1024
	// reviewTimeout bounds the two API calls of a request.
	reviewTimeout = 10 * time.Second
)

// DefaultReviewLimits bound the TokenReviews of unknown tokens the metrics endpoint
// sends (authlimit.Limits; the controller's metrics client applies them, see New). Its
// clients are a few scrapers and an occasional profiler, each with one token reviewed
// once per AllowTTL: per address, 5 at once (SourceBurst) and one per second after
// that; in flight, all addresses, 8. A flood from one address costs 5 TokenReviews,
// then one per second; the rest are answered 429 with Retry-After.
var DefaultReviewLimits = authlimit.Limits{SourceQPS: 1, SourceBurst: 5, MaxInFlight: 8}

// Filter authenticates and authorizes requests. Create it with New.
type Filter struct {
	kube            kubeclient.Interface
	allows, denials *cache.LRUExpireCache
	logger          klog.Logger
}

// decision is a cached outcome: the HTTP status and the message of a refusal.
type decision struct {
	code int
	msg  string
}

// New returns a Filter asking kube's API server: the controller passes the metrics
// endpoint's own client, authlimit.Client, whose limiter refuses a TokenReview with a
// 429 error that the filter answers 429 with its Retry-After. clock may be nil (the
// wall clock); tests pass a fake one to expire cached decisions.
func New(kube kubeclient.Interface, logger klog.Logger, clock cache.Clock) *Filter {
	if clock == nil {
		clock = utilclock.RealClock{}
	}
	return &Filter{kube: kube, logger: logger,
		allows:  cache.NewLRUExpireCacheWithClock(cacheSize, clock),
		denials: cache.NewLRUExpireCacheWithClock(cacheSize, clock)}
}

// Wrap returns next behind the filter: 401 for a request without a bearer token or
// with one the TokenReview does not authenticate, 403 when the SubjectAccessReview
// does not allow the verb (get for GET and HEAD) on the URL path, 429 with Retry-After
// when the TokenReview of an unknown token was refused by kube's limiter (the request's
// source is r.RemoteAddr's IP) or throttled by the API server, 500 when either review
// fails otherwise (an API error, not cached: the next request asks again).
func (f *Filter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="trainyard"`)
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		dec, ok := f.decide(w, r, token)
		if !ok {
			return
		}
		if dec.code != http.StatusOK {
			f.logger.V(4).Info("Refused a metrics request", "path", r.URL.Path, "remote", r.RemoteAddr, "code", dec.code, "reason", dec.msg)
			if dec.code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="trainyard"`)
			}
			http.Error(w, dec.msg, dec.code)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// decide returns the cached or reviewed decision on token for r's verb and path, and
// true; or answers r itself (429 when the review was refused or throttled, 500 when it
// failed) and returns false.
func (f *Filter) decide(w http.ResponseWriter, r *http.Request, token string) (decision, bool) {
	verb := verbOf(r.Method)
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:]) + " " + verb + " " + r.URL.Path
	if d, ok := f.allows.Get(key); ok {
		return d.(decision), true
	}
	if d, ok := f.denials.Get(key); ok {
		return d.(decision), true
	}
	ctx, cancel := context.WithTimeout(authlimit.WithSource(r.Context(), authlimit.SourceOf(r)), reviewTimeout)
	dec, err := f.review(ctx, token, verb, r.URL.Path)
	cancel()
	if seconds, ok := authlimit.RetryAfter(err); ok && apierrors.IsTooManyRequests(err) {
		// Per request and caused by the client: logged at V(4) only, counted by
		// trainyard_auth_token_reviews_total.
		f.logger.V(4).Info("Refused a metrics request: too many unknown tokens", "path", r.URL.Path, "remote", r.RemoteAddr, "retryAfterSeconds", seconds)
		w.Header().Set("Retry-After", strconv.Itoa(seconds))
		http.Error(w, fmt.Sprintf("Too Many Requests: the token was not reviewed, retry after %d s", seconds), http.StatusTooManyRequests)
		return decision{}, false
	}
	if err != nil {
		f.logger.Error(err, "Reviewing a metrics request", "path", r.URL.Path, "remote", r.RemoteAddr)
		http.Error(w, "Internal Server Error: "+err.Error(), http.StatusInternalServerError)
		return decision{}, false
	}
	if dec.code == http.StatusOK {
		f.allows.Add(key, dec, AllowTTL)
	} else {
		f.denials.Add(key, dec, DenyTTL)
	}
	return dec, true
}

// review asks the API server about token: a decision with 200, 401 or 403, or an
// error when a review could not be made.
func (f *Filter) review(ctx context.Context, token, verb, path string) (decision, error) {
	tr, err := f.kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("creating TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		msg := "Unauthorized: the bearer token is not valid"
		if tr.Status.Error != "" {
			msg += ": " + tr.Status.Error
		}
		return decision{http.StatusUnauthorized, msg}, nil
	}
	user := tr.Status.User
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := f.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("creating SubjectAccessReview: %w", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		msg := fmt.Sprintf("Forbidden: user %q may not %s %s", user.Username, verb, path)
		if sar.Status.Reason != "" {
			msg += ": " + sar.Status.Reason
		}
		return decision{http.StatusForbidden, msg}, nil
	}
	return decision{code: http.StatusOK}, nil
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// verbOf maps an HTTP method to the verb of a non-resource request, as the API
// server does.
func verbOf(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	}
	return strings.ToLower(method)
}
