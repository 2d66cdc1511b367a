// Package auth is the filter in front of the controller's metrics endpoint (and
// /debug/pprof): every request carries a bearer token that a TokenReview
// (authentication.k8s.io/v1) authenticates and a SubjectAccessReview
// (authorization.k8s.io/v1) authorizes for the request's verb on its
// non-resource URL, as Kubernetes components (component-base's
// authenticated metrics) and controller-runtime's filters.WithAuthenticationAndAuthorization
// do. A Prometheus is let in by binding it a ClusterRole with
// nonResourceURLs ["/metrics"], verbs ["get"].
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Cache lifetimes of a decision. A denial is kept briefly so that a binding just
// created takes effect within seconds; an API error is never cached.
const (
	AllowTTL = time.Minute
	DenyTTL  = 10 * time.Second
	// cacheSize bounds the decisions kept (token × path × verb).
	cacheSize = 1024
	// reviewTimeout bounds the two API calls of a request.
	reviewTimeout = 10 * time.Second
)

// Filter authenticates and authorizes requests. Create it with New.
type Filter struct {
	kube      kubernetes.Interface
	decisions *cache.LRUExpireCache
	logger    klog.Logger
}

// decision is a cached outcome: the HTTP status and the message of a refusal.
type decision struct {
	code int
	msg  string
}

// New returns a Filter asking kube's API server. clock may be nil (the wall clock);
// tests pass a fake one to expire cached decisions.
func New(kube kubernetes.Interface, logger klog.Logger, clock cache.Clock) *Filter {
	decisions := cache.NewLRUExpireCache(cacheSize)
	if clock != nil {
		decisions = cache.NewLRUExpireCacheWithClock(cacheSize, clock)
	}
	return &Filter{kube: kube, decisions: decisions, logger: logger}
}

// Wrap returns next behind the filter: 401 for a request without a bearer token or
// with one the TokenReview does not authenticate, 403 when the SubjectAccessReview
// does not allow the verb (get for GET and HEAD) on the URL path, 500 when either
// review fails (an API error, not cached: the next request asks again).
func (f *Filter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="trainyard"`)
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		verb := verbOf(r.Method)
		sum := sha256.Sum256([]byte(token))
		key := hex.EncodeToString(sum[:]) + " " + verb + " " + r.URL.Path
		d, cached := f.decisions.Get(key)
		if !cached {
			ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
			dec, err := f.review(ctx, token, verb, r.URL.Path)
			cancel()
			if err != nil {
				f.logger.Error(err, "Reviewing a metrics request", "path", r.URL.Path, "remote", r.RemoteAddr)
				http.Error(w, "Internal Server Error: "+err.Error(), http.StatusInternalServerError)
				return
			}
			ttl := DenyTTL
			if dec.code == http.StatusOK {
				ttl = AllowTTL
			}
			f.decisions.Add(key, dec, ttl)
			d = dec
		}
		if dec := d.(decision); dec.code != http.StatusOK {
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
