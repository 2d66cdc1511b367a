package progress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/util/authlimit"
)

// Verdict is the outcome of an authorization. The zero Verdict denies.
type Verdict int

const (
	// Unauthenticated: there is no bearer token, or the API server does not
	// authenticate it for the TrainJob's Audience (expired, revoked, bound to a deleted
	// pod, issued for another audience). Answered 403, as upstream answers every bad
	// token.
	Unauthenticated Verdict = iota
	// Forbidden: the token authenticates, but not as a pod of the TrainJob: a service
	// account of another namespace, a token not bound to a pod, or a pod that is not one
	// of the TrainJob's JobSet's. Answered 403.
	Forbidden
	// NoTrainJob: the token authenticates as a pod-bound service account token of the
	// TrainJob's namespace issued for its audience, but the TrainJob is not in the
	// informer cache (deleted, or not seen yet). Answered 404, upstream's answer for a
	// missing TrainJob; only a caller holding a token for that very audience learns it.
	NoTrainJob
	// Allowed: the token is a pod's of the TrainJob; the report may be recorded.
	Allowed
)

// String returns the verdict's name, which is also its "result" label value in
// trainyard_progress_token_reviews_total.
func (v Verdict) String() string {
	switch v {
	case Allowed:
		return "allowed"
	case Unauthenticated:
		return "unauthenticated"
	case Forbidden:
		return "forbidden"
	case NoTrainJob:
		return "not_found"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Decision is an Authorizer's answer.
type Decision struct {
	Verdict Verdict
	// Reason says which check failed when Verdict is not Allowed, in words safe to send
	// to the client: it names the check and the pod or TrainJob, never token contents.
	Reason string
	// TrainJobUID is the uid of the TrainJob the allow was granted for (empty unless
	// Allowed). The report is credited to that TrainJob only: one deleted and
	// re-created under the name after the check must not receive it.
	TrainJobUID types.UID
	// Cached is true when the decision cost this request no TokenReview or pod read:
	// it came from the review cache, or from the review of a concurrent request
	// carrying the same token for the same TrainJob (see TokenReviewAuthorizer).
	Cached bool
}

// Authorizer decides whether a bearer token may report the progress of the TrainJob
// at key. A non-nil error means the decision could not be made (an API call failed):
// the handler answers 500 and the client retries.
type Authorizer interface {
	Authorize(ctx context.Context, token string, key cache.ObjectName) (Decision, error)
}

// Defaults of AuthorizerConfig.
const (
	// DefaultReviewCacheSize is how many allows the review cache holds: one per token
	// and TrainJob, so far more than the trainer pods that report at once (a projected
	// token rotates about hourly, leaving a dead entry that ages out). An entry is about
	// 200 bytes.
	DefaultReviewCacheSize = 10000
	// DefaultDenyCacheSize is how many denials (and NoTrainJob answers) the denial cache
	// holds, apart from the allows: a flood of bad tokens evicts older denials, never an
	// allow, so it cannot make the trainers' tokens cost a TokenReview again. At the
	// progress client's default limits a flood adds at most a few hundred denials per
	// DefaultDenyTTL; an entry is about 200 bytes.
	DefaultDenyCacheSize = 10000
	// DefaultAllowTTL is how long an allow is cached: a pod reporting every few seconds
	// costs one TokenReview and one pod read per minute. It bounds how long a token
	// stays accepted after its pod is deleted.
	DefaultAllowTTL = time.Minute
	// DefaultDenyTTL is how long a denial (or NoTrainJob) is cached, so that a client
	// retrying a bad token in a loop costs one TokenReview per 10 s, not one per request.
	DefaultDenyTTL = 10 * time.Second
)

// DefaultReviewLimits bound the TokenReviews of unknown tokens the progress endpoint
// sends (authlimit.Limits; the controller's progress client applies them, see
// AuthorizerConfig.Client). Per source: a trainer pod sends one token, reviewed once
// per AllowTTL, and even a node of hostNetwork pods, all one address, starts with
// fewer than SourceBurst (20) tokens; 5 reviews per second refill it in 4 s. A flood
// from one address costs 20 TokenReviews, then 5 per second. In flight, all sources:
// 64, more than three sources' bursts, so one address cannot take every slot, and far
// fewer than the API server's seats for the controller, so a flood from many addresses
// stays a bounded load; beyond it an unknown token is answered 429 and its trainer
// retries (a known token is answered from the cache either way). Of the 64, at most 24
// for one share (the TrainJob's namespace, or all TrainJobs not in the cache): more
// than a source's burst, so one address cannot fill a share, and a flood of unknown
// tokens from many addresses, aimed at one namespace's TrainJobs or at TrainJobs that
// do not exist, leaves the reviews of other namespaces' new trainer tokens (a new pod,
// an hourly rotation) 40 slots; filling all 64 takes floods at three shares.
var DefaultReviewLimits = authlimit.Limits{SourceQPS: 5, SourceBurst: 20, MaxInFlight: 64, MaxInFlightPerShare: 24}

// reviewShare is the share (authlimit.WithShare) the review of a token for the
// TrainJob at key counts in: the TrainJob's namespace when the cache has it, else one
// share of all TrainJobs it does not have, which a flood at random names lands in. The
// answers do not depend on it, so it tells a client nothing about which TrainJobs
// exist.
func (a *TokenReviewAuthorizer) reviewShare(key cache.ObjectName) string {
	if _, err := a.trainJobs.TrainJobs(key.Namespace).Get(key.Name); err != nil {
		return "no TrainJob"
	}
	return "namespace " + key.Namespace
}

// Keys of a service account token's user.extra naming the pod it is bound to (the
// API server's, k8s.io/apiserver/pkg/authentication/serviceaccount PodNameKey and
// PodUIDKey).
const (
	podNameExtra = "authentication.kubernetes.io/pod-name"
	podUIDExtra  = "authentication.kubernetes.io/pod-uid"

	serviceAccountUserPrefix = "system:serviceaccount:"
)

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// AuthorizerConfig configures a TokenReviewAuthorizer. Client, Pods, TrainJobs and
// JobSets are required; zero values of the others take their defaults.
type AuthorizerConfig struct {
	// Client sends TokenReviews (authentication.k8s.io/v1; RBAC: create tokenreviews).
	// The controller gives it a client of its own whose TokenReviews an
	// authlimit.Limiter admits (pkg/util/authlimit): a refused review fails Authorize
	// with the limiter's 429 error (apierrors.IsTooManyRequests), which the handler
	// answers 429 with its Retry-After. The Limiter charges the review to the source
	// in ctx (authlimit.WithSource), which the handler sets.
	Client kubeclient.Interface
	// Pods reads the metadata of the pod a token is bound to (RBAC: get pods). A
	// metadata-only client, not a typed one: the check needs only uid, labels and
	// ownerReferences, and a pod's metadata is a fraction of its bytes (the spec and
	// status of a training pod run to tens of KiB). Not an informer either: caching every
	// pod of the cluster would cost far more memory than one read per token per
	// AllowTTL.
	Pods metadata.Interface
	// TrainJobs and JobSets are the informer caches the pod is checked against.
	TrainJobs trainerlisters.TrainJobLister
	JobSets   jobsetlisters.JobSetLister

	// CacheSize is how many allows are cached (DefaultReviewCacheSize), DenyCacheSize
	// how many denials (DefaultDenyCacheSize), in two caches so that denials never evict
	// an allow; in each the least recently used go first.
	CacheSize, DenyCacheSize int
	// AllowTTL and DenyTTL are how long allows and denials are cached (DefaultAllowTTL,
	// DefaultDenyTTL). Errors are never cached.
	AllowTTL, DenyTTL time.Duration
	// Clock ages the cache entries; nil means the real clock.
	Clock clock.PassiveClock
}

// TokenReviewAuthorizer is the Authorizer of the progress endpoint. Where upstream
// verifies the token as an OIDC ID token of the cluster's issuer and accepts any token
// of the namespace with the TrainJob's audience, it asks the API server (TokenReview)
// and accepts only a token bound to a pod of the TrainJob. In order, cheapest first:
//
//  1. TokenReview with spec.audiences [Audience(namespace, name)]: status.authenticated,
//     and status.audiences contains that audience (else Unauthenticated);
//  2. the user is a service account of the URL's namespace, system:serviceaccount:<ns>:*
//     (else Forbidden);
//  3. the token is bound to a pod: user.extra authentication.kubernetes.io/pod-name and
//     pod-uid (projected tokens are; else Forbidden);
//  4. the TrainJob is in the informer cache (else NoTrainJob), and so is its JobSet (same
//     name), controlled by the TrainJob (metav1.IsControlledBy; else Forbidden);
//  5. the pod (one metadata read) has the bound uid (not a re-created pod of the same
//     name), labels jobset.sigs.k8s.io/jobset-name = the TrainJob's name and
//     jobset.sigs.k8s.io/jobset-uid = the cached JobSet's uid, and a batch/v1 Job as its
//     controller (else Forbidden).
//
// The API server checked, in step 1, that the bound pod exists with that uid, so a
// token outliving its pod is refused there. The labels and owner references of step 5
// are as trustworthy as the namespace's pod creators: whoever may create pods in the
// namespace can forge them (and run a pod as the TrainJob's service account anyway).
// The checks keep the pods of other TrainJobs, and other workloads, from writing a
// TrainJob's progress; they do not stand between a namespace's pod creators and its
// TrainJobs.
//
// Decisions are cached in two LRUs keyed by the token's SHA-256 (the token itself is
// not kept) and the TrainJob: an allow for AllowTTL in one, a denial or NoTrainJob for
// DenyTTL in the other (so a flood of bad tokens, each a denial, cannot evict a
// trainer's allow), errors never. A token in neither is unknown: only unknown tokens
// cost a TokenReview, and only those the Client's limiter admits. A cached allow is used only while the TrainJob in the cache has the uid
// it was granted for, so a TrainJob re-created under the same name is reviewed afresh.
//
// Concurrent requests with the same uncached token and TrainJob share one review (one
// TokenReview, one pod read; golang.org/x/sync/singleflight): a trainer's pods send
// their first reports at once, and each retries when the answer is slow, so without it
// a restart's empty cache cost 7,678 TokenReviews for 4,000 tokens in the issue-14
// benchmark. The shared review runs under the first request's context values but not
// its cancellation, bounded by ReviewTimeout, so a client that gives up does not fail
// the others; each request still stops waiting when its own context ends. A failed
// review fails every request that shared it and is not cached: the next request
// reviews again. It is safe for concurrent use.
type TokenReviewAuthorizer struct {
	client    kubeclient.Interface
	pods      metadata.Interface
	trainJobs trainerlisters.TrainJobLister
	jobSets   jobsetlisters.JobSetLister

	allows, denials   *utilcache.LRUExpireCache
	allowTTL, denyTTL time.Duration
	reviews           singleflight.Group // keyed by reviewKey.String
}

// reviewKey keys the review cache: the token's digest and the TrainJob.
type reviewKey struct {
	token [sha256.Size]byte
	key   cache.ObjectName
}

// String returns k as a singleflight key: the digest in hex, then the TrainJob.
func (k reviewKey) String() string {
	return hex.EncodeToString(k.token[:]) + "/" + k.key.String()
}

// ReviewTimeout bounds a review shared by concurrent requests (a TokenReview and a
// pod read): the progress server's request timeout, 10 s, as upstream's.
const ReviewTimeout = 10 * time.Second

// cachedDecision is a review cache entry.
type cachedDecision struct {
	verdict Verdict
	reason  string
	uid     types.UID // the TrainJob an allow was granted for
}

var _ Authorizer = (*TokenReviewAuthorizer)(nil)

// NewTokenReviewAuthorizer returns the authorizer of cfg, or an error naming the
// missing required field or the negative setting.
func NewTokenReviewAuthorizer(cfg AuthorizerConfig) (*TokenReviewAuthorizer, error) {
	var errs []error
	for name, missing := range map[string]bool{
		"Client": cfg.Client == nil, "Pods": cfg.Pods == nil,
		"TrainJobs": cfg.TrainJobs == nil, "JobSets": cfg.JobSets == nil,
	} {
		if missing {
			errs = append(errs, fmt.Errorf("progress authorizer: %s is required", name))
		}
	}
	if cfg.CacheSize < 0 || cfg.DenyCacheSize < 0 || cfg.AllowTTL < 0 || cfg.DenyTTL < 0 {
		errs = append(errs, fmt.Errorf("progress authorizer: CacheSize %d, DenyCacheSize %d, AllowTTL %v and DenyTTL %v must not be negative",
			cfg.CacheSize, cfg.DenyCacheSize, cfg.AllowTTL, cfg.DenyTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultReviewCacheSize
	}
	if cfg.DenyCacheSize == 0 {
		cfg.DenyCacheSize = DefaultDenyCacheSize
	}
	if cfg.AllowTTL == 0 {
		cfg.AllowTTL = DefaultAllowTTL
	}
	if cfg.DenyTTL == 0 {
		cfg.DenyTTL = DefaultDenyTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &TokenReviewAuthorizer{
		client:    cfg.Client,
		pods:      cfg.Pods,
		trainJobs: cfg.TrainJobs,
		jobSets:   cfg.JobSets,
		allows:    utilcache.NewLRUExpireCacheWithClock(cfg.CacheSize, cfg.Clock),
		denials:   utilcache.NewLRUExpireCacheWithClock(cfg.DenyCacheSize, cfg.Clock),
		allowTTL:  cfg.AllowTTL,
		denyTTL:   cfg.DenyTTL,
	}, nil
}

// Authorize implements Authorizer with the checks of the type's doc. An empty token is
// Unauthenticated without a TokenReview. Errors are the failed TokenReview (the
// Client's limiter refusing it included: apierrors.IsTooManyRequests), pod read or
// cache read, wrapped, or ctx's error when it ends while the review is in flight.
func (a *TokenReviewAuthorizer) Authorize(ctx context.Context, token string, key cache.ObjectName) (Decision, error) {
	if token == "" {
		return Decision{Verdict: Unauthenticated, Reason: reasonNoToken}, nil
	}
	k := reviewKey{token: sha256.Sum256([]byte(token)), key: key}
	if d, ok, err := a.cached(k); ok || err != nil {
		return d, err
	}
	var reviewed bool // set by this request's own review, not by one it shared
	ch := a.reviews.DoChan(k.String(), func() (any, error) {
		// A request that missed the cache just before a review of the same key ended
		// finds the decision here instead of reviewing again.
		if d, ok, err := a.cached(k); ok || err != nil {
			return d, err
		}
		reviewed = true
		rctx, cancel := context.WithTimeout(authlimit.WithShare(context.WithoutCancel(ctx), a.reviewShare(key)), ReviewTimeout)
		defer cancel()
		d, uid, err := a.review(rctx, token, key)
		if err != nil {
			return Decision{}, err
		}
		if d.Verdict == Allowed {
			a.allows.Add(k, cachedDecision{verdict: d.Verdict, uid: uid}, a.allowTTL)
		} else {
			a.denials.Add(k, cachedDecision{verdict: d.Verdict, reason: d.Reason}, a.denyTTL)
		}
		return d, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return Decision{}, r.Err
		}
		d := r.Val.(Decision)
		d.Cached = !reviewed
		return d, nil
	case <-ctx.Done():
		return Decision{}, fmt.Errorf("waiting for the review of a token for TrainJob %s: %w", key, context.Cause(ctx))
	}
}

// cached returns the cached decision of k, with ok, or ok false when there is none (or
// the TrainJob was re-created since the allow was cached, which drops the entry). The
// error is a failed read of the TrainJob cache.
func (a *TokenReviewAuthorizer) cached(k reviewKey) (d Decision, ok bool, err error) {
	v, ok := a.allows.Get(k)
	if !ok {
		if v, ok := a.denials.Get(k); ok {
			c := v.(cachedDecision)
			return Decision{Verdict: c.verdict, Reason: c.reason, Cached: true}, true, nil
		}
		return Decision{}, false, nil
	}
	c := v.(cachedDecision)
	tj, err := a.trainJobs.TrainJobs(k.key.Namespace).Get(k.key.Name)
	switch {
	case err != nil && apierrors.IsNotFound(err):
		return Decision{Verdict: NoTrainJob, Reason: noTrainJob(k.key), Cached: true}, true, nil
	case err != nil:
		return Decision{}, false, fmt.Errorf("reading TrainJob %s from the cache: %w", k.key, err)
	case tj.UID == c.uid:
		return Decision{Verdict: Allowed, TrainJobUID: c.uid, Cached: true}, true, nil
	}
	a.allows.Remove(k) // the TrainJob was re-created: review again
	return Decision{}, false, nil
}

const reasonNoToken = "no bearer token: send the projected service account token (the file $" + wire.EnvToken +
	" names) as the header Authorization: Bearer <token>"

func noTrainJob(key cache.ObjectName) string {
	return fmt.Sprintf("TrainJob %s not found: it was deleted (stop reporting), or this server has not seen it yet (retry)", key)
}

// review runs the checks of the type's doc without the cache. It returns the TrainJob's
// uid with an allow.
func (a *TokenReviewAuthorizer) review(ctx context.Context, token string, key cache.ObjectName) (Decision, types.UID, error) {
	podName, podUID, denied, err := a.authenticate(ctx, token, key)
	if denied != nil || err != nil {
		return ptr.Deref(denied, Decision{}), "", err
	}
	tj, js, denied, err := a.trainJobAndJobSet(ctx, key, podName)
	if denied != nil || err != nil {
		return ptr.Deref(denied, Decision{}), "", err
	}
	if denied, err := a.checkPod(ctx, key, podName, podUID, tj, js); denied != nil || err != nil {
		return ptr.Deref(denied, Decision{}), "", err
	}
	return Decision{Verdict: Allowed, TrainJobUID: tj.UID}, tj.UID, nil
}

// deny returns the denial v of a report for the TrainJob at key, its reason format and
// args, and logs it at V(4).
func deny(ctx context.Context, key cache.ObjectName, v Verdict, format string, args ...any) *Decision {
	d := Decision{Verdict: v, Reason: fmt.Sprintf(format, args...)}
	klog.FromContext(ctx).V(4).Info("Denied a progress report", "trainJob", klog.KRef(key.Namespace, key.Name), "verdict", v, "reason", d.Reason)
	return &d
}

// authenticate has the API server review token for the Audience of the TrainJob at key
// (a TokenReview) and returns the name and uid of the pod the token is bound to. It
// returns a denial instead when the token does not authenticate for that audience
// (Unauthenticated) or is no pod-bound service account token of key's namespace
// (Forbidden), and an error when the TokenReview fails.
func (a *TokenReviewAuthorizer) authenticate(ctx context.Context, token string, key cache.ObjectName) (podName, podUID string, denied *Decision, err error) {
	audience := wire.Audience(key.Namespace, key.Name)
	review, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", nil, fmt.Errorf("TokenReview for TrainJob %s: %w", key, err)
	}
	st := &review.Status
	if !st.Authenticated {
		// st.Error may quote the token's audiences: logged, not sent.
		klog.FromContext(ctx).V(4).Info("TokenReview did not authenticate a progress token", "trainJob", klog.KRef(key.Namespace, key.Name), "error", st.Error)
		return "", "", deny(ctx, key, Unauthenticated, "the API server does not authenticate the token for audience %q: it is expired, "+
			"bound to a deleted pod, or issued for another audience; send the projected token mounted at %s/%s", audience, wire.MountPath, wire.TokenFile), nil
	}
	if !slices.Contains(st.Audiences, audience) {
		return "", "", deny(ctx, key, Unauthenticated, "the token is not valid for audience %q: send the projected token mounted at %s/%s", audience, wire.MountPath, wire.TokenFile), nil
	}
	rest, isSA := strings.CutPrefix(st.User.Username, serviceAccountUserPrefix)
	if ns, _, ok := strings.Cut(rest, ":"); !isSA || !ok || ns != key.Namespace {
		return "", "", deny(ctx, key, Forbidden, "the token is not a service account token of namespace %q: only the TrainJob's pods may report its progress", key.Namespace), nil
	}
	podName, podUID = single(st.User.Extra[podNameExtra]), single(st.User.Extra[podUIDExtra])
	if podName == "" || podUID == "" {
		return "", "", deny(ctx, key, Forbidden, "the token is not bound to a pod: send the projected token mounted at %s/%s, not a service account token from a Secret or the TokenRequest API", wire.MountPath, wire.TokenFile), nil
	}
	return podName, podUID, nil, nil
}

// trainJobAndJobSet returns the TrainJob at key and its JobSet from the informer
// caches. It returns a denial instead when the TrainJob is not there (NoTrainJob), or
// has no JobSet or one it does not control (Forbidden: the token's pod podName cannot
// be one of its pods), and an error when a cache read fails otherwise.
func (a *TokenReviewAuthorizer) trainJobAndJobSet(ctx context.Context, key cache.ObjectName, podName string) (*trainer.TrainJob, *jobsetv1alpha2.JobSet, *Decision, error) {
	tj, err := a.trainJobs.TrainJobs(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil, deny(ctx, key, NoTrainJob, "%s", noTrainJob(key)), nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading TrainJob %s from the cache: %w", key, err)
	}
	js, err := a.jobSets.JobSets(key.Namespace).Get(tj.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil, deny(ctx, key, Forbidden, "TrainJob %s has no JobSet, so pod %q cannot be one of its pods", key, podName), nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading JobSet %s from the cache: %w", key, err)
	}
	if !metav1.IsControlledBy(js, tj) {
		return nil, nil, deny(ctx, key, Forbidden, "JobSet %s is not controlled by TrainJob %s, so pod %q is not one of the TrainJob's pods", key, key, podName), nil
	}
	return tj, js, nil, nil
}

// checkPod reads the token's pod podName from the API server and returns a denial
// (Forbidden) unless it is still the pod of uid podUID, a pod of tj's JobSet js (by
// its JobSet name and uid labels) and controlled by a batch/v1 Job; nil when it is,
// and an error when reading it fails otherwise.
func (a *TokenReviewAuthorizer) checkPod(ctx context.Context, key cache.ObjectName, podName, podUID string, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) (*Decision, error) {
	pod, err := a.pods.Resource(podsResource).Namespace(key.Namespace).Get(ctx, podName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return deny(ctx, key, Forbidden, "pod %q, which the token is bound to, no longer exists", podName), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", key.Namespace, podName, err)
	}
	if string(pod.UID) != podUID {
		return deny(ctx, key, Forbidden, "pod %q was re-created since the token was issued: the token is bound to the earlier pod", podName), nil
	}
	if pod.Labels[jobsetv1alpha2.JobSetNameKey] != tj.Name {
		return deny(ctx, key, Forbidden, "pod %q is not a pod of TrainJob %s: its label %s is not %q", podName, key, jobsetv1alpha2.JobSetNameKey, tj.Name), nil
	}
	if pod.Labels[jobsetv1alpha2.JobSetUIDKey] != string(js.UID) {
		return deny(ctx, key, Forbidden, "pod %q is not a pod of TrainJob %s: its label %s is not the uid of the TrainJob's JobSet", podName, key, jobsetv1alpha2.JobSetUIDKey), nil
	}
	if owner := metav1.GetControllerOfNoCopy(pod); owner == nil || owner.APIVersion != batchv1.SchemeGroupVersion.String() || owner.Kind != "Job" {
		return deny(ctx, key, Forbidden, "pod %q is not controlled by a batch/v1 Job, as the pods of a TrainJob's JobSet are", podName), nil
	}
	return nil, nil
}

// single returns the only value of vs, or "" if there is not exactly one.
func single(vs []string) string {
	if len(vs) != 1 {
		return ""
	}
	return vs[0]
}
