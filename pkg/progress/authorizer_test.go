package progress_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

const ns = "team-a"

// cluster is what the authorizer reads: TokenReview answers by token, pods of namespace
// ns, and the TrainJob and JobSet caches. It counts TokenReviews and pod reads.
type cluster struct {
	clock     *testingclock.FakePassiveClock
	trainJobs cache.Indexer
	jobSets   cache.Indexer

	mu        sync.Mutex
	tokens    map[string]authenticationv1.TokenReviewStatus
	reviewErr error
	pods      map[string]*metav1.PartialObjectMetadata // by name
	podErr    error
	reviews   []authenticationv1.TokenReviewSpec
	podReads  int
	// reviewing, if set, is sent to when a TokenReview arrives; the TokenReview then
	// waits until reviewGate, if set, is closed.
	reviewing  chan<- struct{}
	reviewGate <-chan struct{}

	authorizer *progress.TokenReviewAuthorizer
}

// newCluster returns TrainJobs llm and other in ns, each with its JobSet (uids js-llm,
// js-other), and one pod of each, llm-node-0-0 (uid pod-llm) and other-node-0-0 (uid
// pod-other), with the labels and Job owner JobSet gives them.
func newCluster(t testing.TB) *cluster { return newClusterWith(t, nil) }

// newClusterWith is newCluster with the authorizer's configuration changed by configure
// (if not nil) before the authorizer is made.
func newClusterWith(t testing.TB, configure func(*progress.AuthorizerConfig)) *cluster {
	llm := utiltesting.MakeTrainJob(ns, "llm").Obj()
	other := utiltesting.MakeTrainJob(ns, "other").Obj()
	c := &cluster{
		clock:     testingclock.NewFakePassiveClock(t0),
		trainJobs: utiltesting.Indexer(t, llm, other),
		jobSets:   utiltesting.Indexer(t, jobSet("llm", "js-llm", llm), jobSet("other", "js-other", other)),
		tokens:    map[string]authenticationv1.TokenReviewStatus{},
		pods: map[string]*metav1.PartialObjectMetadata{
			"llm-node-0-0":   pod("llm-node-0-0", "pod-llm", "llm", "js-llm"),
			"other-node-0-0": pod("other-node-0-0", "pod-other", "other", "js-other"),
		},
	}
	kube := k8sfake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		tr := a.(clienttesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.reviews = append(c.reviews, *tr.Spec.DeepCopy())
		if c.reviewErr != nil {
			return true, nil, c.reviewErr
		}
		out := tr.DeepCopy()
		out.Status = c.tokens[tr.Spec.Token]
		return true, out, nil
	})
	meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	meta.PrependReactor("get", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		get := a.(clienttesting.GetAction)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.podReads++
		if c.podErr != nil {
			return true, nil, c.podErr
		}
		if p, ok := c.pods[get.GetName()]; ok && get.GetNamespace() == ns {
			return true, p.DeepCopy(), nil
		}
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, get.GetName())
	})
	cfg := progress.AuthorizerConfig{
		Client:    gatedKube{Interface: kube, c: c},
		Pods:      meta,
		TrainJobs: trainerlisters.NewTrainJobLister(c.trainJobs),
		JobSets:   jobsetlisters.NewJobSetLister(c.jobSets),
		Clock:     c.clock,
	}
	if configure != nil {
		configure(&cfg)
	}
	a, err := progress.NewTokenReviewAuthorizer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.authorizer = a
	return c
}

// gatedKube is a clientset whose TokenReviews say when they arrive (cluster.reviewing)
// and wait for cluster.reviewGate before the fake answers them: outside the fake's
// lock, which would serialise concurrent reviews.
type gatedKube struct {
	kubeclient.Interface
	c *cluster
}

func (k gatedKube) AuthenticationV1() authenticationv1client.AuthenticationV1Interface {
	return gatedAuthentication{AuthenticationV1Interface: k.Interface.AuthenticationV1(), c: k.c}
}

type gatedAuthentication struct {
	authenticationv1client.AuthenticationV1Interface
	c *cluster
}

func (a gatedAuthentication) TokenReviews() authenticationv1client.TokenReviewInterface {
	return gatedTokenReviews{TokenReviewInterface: a.AuthenticationV1Interface.TokenReviews(), c: a.c}
}

type gatedTokenReviews struct {
	authenticationv1client.TokenReviewInterface
	c *cluster
}

func (r gatedTokenReviews) Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	r.c.mu.Lock()
	reviewing, gate := r.c.reviewing, r.c.reviewGate
	r.c.mu.Unlock()
	if reviewing != nil {
		reviewing <- struct{}{}
	}
	if gate != nil {
		<-gate
	}
	return r.TokenReviewInterface.Create(ctx, tr, opts)
}

func jobSet(name, jsUID string, owner *trainer.TrainJob) *jobsetv1alpha2.JobSet {
	w := utiltesting.MakeJobSet(ns, name)
	w.UID = uid(jsUID)
	if owner != nil {
		w.ControlledBy(owner)
	}
	return w.Obj()
}

// pod returns a pod's metadata as JobSet labels it, controlled by a batch/v1 Job.
func pod(name, podUID, jobSetName, jobSetUID string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: uid(podUID),
			Labels: map[string]string{jobsetv1alpha2.JobSetNameKey: jobSetName, jobsetv1alpha2.JobSetUIDKey: jobSetUID},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "Job", Name: jobSetName + "-node-0", UID: "job-uid", Controller: ptr.To(true),
			}},
		},
	}
}

// boundToken is the TokenReview status of a projected token of service account
// namespace:sa bound to pod name/podUID, valid for audiences.
func boundToken(namespace, podName, podUID string, audiences ...string) authenticationv1.TokenReviewStatus {
	return authenticationv1.TokenReviewStatus{
		Authenticated: true,
		Audiences:     audiences,
		User: authenticationv1.UserInfo{
			Username: "system:serviceaccount:" + namespace + ":default",
			UID:      "sa-uid",
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/pod-name": {podName},
				"authentication.kubernetes.io/pod-uid":  {podUID},
			},
		},
	}
}

func (c *cluster) counts() (reviews, podReads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reviews), c.podReads
}

func TestTokenReviewAuthorizer(t *testing.T) {
	llmAudience := wire.Audience(ns, "llm")
	for name, tc := range map[string]struct {
		token  authenticationv1.TokenReviewStatus
		setup  func(c *cluster)
		empty  bool   // send no token at all
		target string // the TrainJob of the request; default llm

		want       progress.Verdict
		wantReason string // substring
		wantReview bool   // a TokenReview was sent
		wantPod    bool   // the pod was read
	}{
		"pod of the TrainJob": {
			token: boundToken(ns, "llm-node-0-0", "pod-llm", llmAudience),
			want:  progress.Allowed, wantReview: true, wantPod: true,
		},
		"no token": {
			empty: true, want: progress.Unauthenticated, wantReason: "no bearer token",
		},
		"not authenticated": {
			token: authenticationv1.TokenReviewStatus{Authenticated: false, Error: "token audiences [x] is invalid for the target audiences"},
			want:  progress.Unauthenticated, wantReason: `the API server does not authenticate the token for audience "` + llmAudience + `"`, wantReview: true,
		},
		"wrong audience": {
			token: boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "other")),
			want:  progress.Unauthenticated, wantReason: `the token is not valid for audience "` + llmAudience + `"`, wantReview: true,
		},
		"service account of another namespace": {
			token: boundToken("team-b", "llm-node-0-0", "pod-llm", llmAudience),
			want:  progress.Forbidden, wantReason: `the token is not a service account token of namespace "team-a"`, wantReview: true,
		},
		"a user, not a service account": {
			token: func() authenticationv1.TokenReviewStatus {
				s := boundToken(ns, "llm-node-0-0", "pod-llm", llmAudience)
				s.User.Username = "alice"
				return s
			}(),
			want: progress.Forbidden, wantReason: "not a service account token", wantReview: true,
		},
		"token not bound to a pod": {
			token: func() authenticationv1.TokenReviewStatus {
				s := boundToken(ns, "llm-node-0-0", "pod-llm", llmAudience)
				s.User.Extra = nil
				return s
			}(),
			want: progress.Forbidden, wantReason: "the token is not bound to a pod", wantReview: true,
		},
		"pod of another TrainJob": {
			token: boundToken(ns, "other-node-0-0", "pod-other", llmAudience),
			want:  progress.Forbidden, wantReason: `pod "other-node-0-0" is not a pod of TrainJob team-a/llm: its label jobset.sigs.k8s.io/jobset-name is not "llm"`,
			wantReview: true, wantPod: true,
		},
		"pod named after the TrainJob's JobSet, of another JobSet uid": {
			token: boundToken(ns, "impostor", "pod-impostor", llmAudience),
			setup: func(c *cluster) { c.pods["impostor"] = pod("impostor", "pod-impostor", "llm", "js-earlier") },
			want:  progress.Forbidden, wantReason: `pod "impostor" is not a pod of TrainJob team-a/llm: its label jobset.sigs.k8s.io/jobset-uid is not the uid of the TrainJob's JobSet`,
			wantReview: true, wantPod: true,
		},
		"pod not in any TrainJob": {
			token: boundToken(ns, "notebook", "pod-nb", llmAudience),
			setup: func(c *cluster) {
				p := pod("notebook", "pod-nb", "", "")
				p.Labels = nil
				c.pods["notebook"] = p
			},
			want: progress.Forbidden, wantReason: `pod "notebook" is not a pod of TrainJob team-a/llm`, wantReview: true, wantPod: true,
		},
		"pod re-created under the same name": {
			token: boundToken(ns, "llm-node-0-0", "pod-llm-earlier", llmAudience),
			want:  progress.Forbidden, wantReason: `pod "llm-node-0-0" was re-created since the token was issued`, wantReview: true, wantPod: true,
		},
		"pod deleted": {
			token: boundToken(ns, "llm-node-0-1", "pod-gone", llmAudience),
			want:  progress.Forbidden, wantReason: `pod "llm-node-0-1", which the token is bound to, no longer exists`, wantReview: true, wantPod: true,
		},
		"pod not controlled by a Job": {
			token: boundToken(ns, "llm-node-0-0", "pod-llm", llmAudience),
			setup: func(c *cluster) { c.pods["llm-node-0-0"].OwnerReferences[0].Kind = "ReplicaSet" },
			want:  progress.Forbidden, wantReason: `pod "llm-node-0-0" is not controlled by a batch/v1 Job`, wantReview: true, wantPod: true,
		},
		"JobSet not controlled by the TrainJob": {
			token: boundToken(ns, "llm-node-0-0", "pod-llm", llmAudience),
			setup: func(c *cluster) { _ = c.jobSets.Update(jobSet("llm", "js-llm", nil)) },
			want:  progress.Forbidden, wantReason: "JobSet team-a/llm is not controlled by TrainJob team-a/llm", wantReview: true,
		},
		"TrainJob without a JobSet": {
			token: boundToken(ns, "llm-node-0-0", "pod-llm", llmAudience),
			setup: func(c *cluster) { _ = c.jobSets.Delete(jobSet("llm", "js-llm", nil)) },
			want:  progress.Forbidden, wantReason: "TrainJob team-a/llm has no JobSet", wantReview: true,
		},
		"TrainJob not in the cache": {
			token:  boundToken(ns, "gone-node-0-0", "pod-gone", wire.Audience(ns, "gone")),
			target: "gone",
			want:   progress.NoTrainJob, wantReason: "TrainJob team-a/gone not found", wantReview: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t)
			const token = "header.payload.signature"
			c.tokens[token] = tc.token
			if tc.setup != nil {
				tc.setup(c)
			}
			target := tc.target
			if target == "" {
				target = "llm"
			}
			sent := token
			if tc.empty {
				sent = ""
			}
			d, err := c.authorizer.Authorize(context.Background(), sent, key(ns, target))
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if d.Verdict != tc.want || d.Cached {
				t.Errorf("decision %+v, want verdict %v, not cached", d, tc.want)
			}
			if !strings.Contains(d.Reason, tc.wantReason) {
				t.Errorf("reason %q does not contain %q", d.Reason, tc.wantReason)
			}
			if strings.Contains(d.Reason, token) {
				t.Errorf("reason %q leaks the token", d.Reason)
			}
			reviews, podReads := c.counts()
			if (reviews == 1) != tc.wantReview || reviews > 1 {
				t.Errorf("%d TokenReviews, want one: %t", reviews, tc.wantReview)
			}
			if reviews == 1 {
				want := authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{wire.Audience(ns, target)}}
				if diff := cmp.Diff(want, c.reviews[0]); diff != "" {
					t.Errorf("TokenReview spec (-want +got):\n%s", diff)
				}
			}
			if (podReads == 1) != tc.wantPod || podReads > 1 {
				t.Errorf("%d pod reads, want one: %t", podReads, tc.wantPod)
			}
		})
	}
}

func TestTokenReviewAuthorizerCache(t *testing.T) {
	llm, other := key(ns, "llm"), key(ns, "other")
	good, bad := "good-token", "bad-token"
	type step struct {
		advance time.Duration // of the clock, before the call
		do      func(c *cluster)
		token   string
		key     cache.ObjectName

		want        progress.Verdict
		wantCached  bool
		wantErr     bool
		wantReviews int // TokenReviews so far
	}
	for name, steps := range map[string][]step{
		"allow cached for a minute": {
			{token: good, key: llm, want: progress.Allowed, wantReviews: 1},
			{token: good, key: llm, want: progress.Allowed, wantCached: true, wantReviews: 1},
			{advance: 59 * time.Second, token: good, key: llm, want: progress.Allowed, wantCached: true, wantReviews: 1},
			{advance: 2 * time.Second, token: good, key: llm, want: progress.Allowed, wantReviews: 2},
		},
		"deny cached for 10 seconds": {
			{token: bad, key: llm, want: progress.Unauthenticated, wantReviews: 1},
			{token: bad, key: llm, want: progress.Unauthenticated, wantCached: true, wantReviews: 1},
			{advance: 9 * time.Second, token: bad, key: llm, want: progress.Unauthenticated, wantCached: true, wantReviews: 1},
			{advance: 2 * time.Second, token: bad, key: llm, want: progress.Unauthenticated, wantReviews: 2},
		},
		"one entry per TrainJob": {
			{token: good, key: llm, want: progress.Allowed, wantReviews: 1},
			{token: good, key: other, want: progress.Unauthenticated, wantReviews: 2}, // the token's audience is llm's
			{token: good, key: other, want: progress.Unauthenticated, wantCached: true, wantReviews: 2},
			{token: good, key: llm, want: progress.Allowed, wantCached: true, wantReviews: 2},
		},
		"TokenReview error: 500, not cached": {
			{do: func(c *cluster) { c.reviewErr = apierrors.NewServiceUnavailable("etcd") }, token: good, key: llm, wantErr: true, wantReviews: 1},
			{do: func(c *cluster) { c.reviewErr = nil }, token: good, key: llm, want: progress.Allowed, wantReviews: 2},
			{token: good, key: llm, want: progress.Allowed, wantCached: true, wantReviews: 2},
		},
		"pod read error: 500, not cached": {
			{do: func(c *cluster) { c.podErr = errors.New("connection refused") }, token: good, key: llm, wantErr: true, wantReviews: 1},
			{do: func(c *cluster) { c.podErr = nil }, token: good, key: llm, want: progress.Allowed, wantReviews: 2},
		},
		"TrainJob deleted after a cached allow: NoTrainJob without a review": {
			{token: good, key: llm, want: progress.Allowed, wantReviews: 1},
			{do: func(c *cluster) { _ = c.trainJobs.Delete(utiltesting.MakeTrainJob(ns, "llm").Obj()) },
				token: good, key: llm, want: progress.NoTrainJob, wantCached: true, wantReviews: 1},
		},
		"TrainJob re-created after a cached allow: reviewed again": {
			{token: good, key: llm, want: progress.Allowed, wantReviews: 1},
			{do: func(c *cluster) { _ = c.trainJobs.Update(utiltesting.MakeTrainJob(ns, "llm").UID("llm-uid-2").Obj()) },
				token: good, key: llm, want: progress.Forbidden, wantReviews: 2}, // the JobSet is the earlier TrainJob's
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t)
			c.tokens[good] = boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "llm"))
			c.tokens[bad] = authenticationv1.TokenReviewStatus{Authenticated: false}
			for i, s := range steps {
				c.clock.SetTime(c.clock.Now().Add(s.advance))
				if s.do != nil {
					s.do(c)
				}
				d, err := c.authorizer.Authorize(context.Background(), s.token, s.key)
				switch {
				case s.wantErr && err == nil:
					t.Errorf("step %d: decision %+v, want an error", i, d)
				case !s.wantErr && err != nil:
					t.Errorf("step %d: %v", i, err)
				case !s.wantErr && (d.Verdict != s.want || d.Cached != s.wantCached):
					t.Errorf("step %d: decision %+v, want verdict %v cached %t", i, d, s.want, s.wantCached)
				}
				if reviews, _ := c.counts(); reviews != s.wantReviews {
					t.Errorf("step %d: %d TokenReviews, want %d", i, reviews, s.wantReviews)
				}
			}
		})
	}
}

// waitingContext is a context that says, once, when its Done channel is first asked
// for: Authorize asks for it when it starts waiting for a review in flight.
type waitingContext struct {
	context.Context
	waiting chan<- struct{}
	once    sync.Once
}

func (c *waitingContext) Done() <-chan struct{} {
	c.once.Do(func() { c.waiting <- struct{}{} })
	return c.Context.Done()
}

// TestTokenReviewAuthorizerSharesConcurrentReviews: requests that arrive with the same
// uncached token while its review is in flight wait for that review (issue 14's
// benchmark: 7,678 TokenReviews for 4,000 tokens); a failed review fails them all and
// is not cached.
func TestTokenReviewAuthorizerSharesConcurrentReviews(t *testing.T) {
	const n = 20
	llm := key(ns, "llm")
	for name, tc := range map[string]struct {
		reviewErr error
		want      progress.Verdict
	}{
		"allowed":           {want: progress.Allowed},
		"denied":            {want: progress.Forbidden}, // the token is other's pod's
		"TokenReview fails": {reviewErr: apierrors.NewServiceUnavailable("etcd")},
	} {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t)
			good := "good-token"
			c.tokens[good] = boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "llm"))
			if tc.want == progress.Forbidden {
				c.tokens[good] = boundToken(ns, "other-node-0-0", "pod-other", wire.Audience(ns, "llm"))
			}
			c.reviewErr = tc.reviewErr
			reviewing, waiting, gate := make(chan struct{}, n), make(chan struct{}, n), make(chan struct{})
			c.reviewing, c.reviewGate = reviewing, gate

			type answer struct {
				d   progress.Decision
				err error
			}
			answers := make(chan answer, n)
			for range n {
				go func() {
					ctx := &waitingContext{Context: context.Background(), waiting: waiting}
					d, err := c.authorizer.Authorize(ctx, good, llm)
					answers <- answer{d, err}
				}()
			}
			// Hold the review until every request waits for one (shared), or a second
			// TokenReview arrives (not shared: the test fails below).
			for reviews, waits := 0, 0; reviews < 2 && waits < n; {
				select {
				case <-reviewing:
					reviews++
				case <-waiting:
					waits++
				case <-time.After(10 * time.Second):
					close(gate)
					t.Fatalf("%d TokenReviews and %d requests waiting, want every request waiting", reviews, waits)
				}
			}
			close(gate)

			var reviewed int
			for range n {
				a := <-answers
				switch {
				case tc.reviewErr != nil && a.err == nil:
					t.Errorf("decision %+v, want the TokenReview's error", a.d)
				case tc.reviewErr == nil && a.err != nil:
					t.Errorf("Authorize: %v", a.err)
				case tc.reviewErr == nil && a.d.Verdict != tc.want:
					t.Errorf("decision %+v, want %v", a.d, tc.want)
				case tc.reviewErr == nil && !a.d.Cached:
					reviewed++
				}
			}
			wantPodReads := 1
			if tc.reviewErr != nil {
				wantPodReads = 0
			}
			reviews, podReads := c.counts()
			if reviews != 1 || podReads != wantPodReads {
				t.Errorf("%d TokenReviews and %d pod reads for %d concurrent requests with one token, want 1 and %d", reviews, podReads, n, wantPodReads)
			}
			if tc.reviewErr == nil && reviewed != 1 {
				t.Errorf("%d decisions not marked Cached, want 1 (the request whose review the others shared)", reviewed)
			}

			// A failed review was not cached: the next request reviews again.
			c.mu.Lock()
			c.reviewErr, c.reviewing, c.reviewGate = nil, nil, nil
			c.mu.Unlock()
			d, err := c.authorizer.Authorize(context.Background(), good, llm)
			wantReviews := 1
			if tc.reviewErr != nil {
				wantReviews = 2
			}
			if reviews, _ := c.counts(); err != nil || reviews != wantReviews || d.Cached == (tc.reviewErr != nil) {
				t.Errorf("next request: decision %+v, error %v, %d TokenReviews in all; want %d, cached %t", d, err, reviews, wantReviews, tc.reviewErr == nil)
			}
		})
	}
}

// TestTokenReviewAuthorizerWaiterGivesUp: a request whose context ends while it waits
// for a shared review gets its context's error; the review goes on for the others and
// is cached.
func TestTokenReviewAuthorizerWaiterGivesUp(t *testing.T) {
	llm := key(ns, "llm")
	c := newCluster(t)
	good := "good-token"
	c.tokens[good] = boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "llm"))
	reviewing, gate := make(chan struct{}, 1), make(chan struct{})
	c.reviewing, c.reviewGate = reviewing, gate

	first := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := c.authorizer.Authorize(ctx, good, llm)
		first <- err
	}()
	<-reviewing // the first request's review is in flight
	cancel()
	select {
	case err := <-first:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Authorize with a cancelled context: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("Authorize did not return when its context was cancelled")
	}
	close(gate) // the review, under its own context, completes and is cached
	second, err := c.authorizer.Authorize(context.Background(), good, llm)
	if err != nil || second.Verdict != progress.Allowed {
		t.Errorf("Authorize = %+v, %v; want Allowed", second, err)
	}
	if reviews, _ := c.counts(); reviews != 1 {
		t.Errorf("%d TokenReviews, want 1", reviews)
	}
}

func TestNewTokenReviewAuthorizerRequiresItsDependencies(t *testing.T) {
	_, err := progress.NewTokenReviewAuthorizer(progress.AuthorizerConfig{AllowTTL: -time.Second})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"Client is required", "Pods is required", "TrainJobs is required", "JobSets is required", "must not be negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestHandlerWithTokenReviewAuthorizer runs the real authorizer behind the handler: the
// second report of a pod costs no TokenReview, and a stranger gets 403.
func TestHandlerWithTokenReviewAuthorizer(t *testing.T) {
	c := newCluster(t)
	c.tokens["good"] = boundToken(ns, "llm-node-0-0", "pod-llm", wire.Audience(ns, "llm"))
	c.tokens["other"] = boundToken(ns, "other-node-0-0", "pod-other", wire.Audience(ns, "llm"))
	obs := &observer{}
	h := progress.NewHandler(progress.HandlerConfig{
		Authorizer: c.authorizer,
		Coalescer:  progress.NewCoalescer(nil, obs),
		Observer:   obs,
		Clock:      c.clock,
	})
	c.tokens["late"] = c.tokens["good"]
	for i, s := range []struct {
		reviewErr error
		token     string
		wantCode  int
	}{
		{token: "good", wantCode: 200}, {token: "good", wantCode: 200},
		{token: "other", wantCode: 403}, {token: "other", wantCode: 403},
		{token: "good", wantCode: 200},
		{reviewErr: apierrors.NewInternalError(errors.New("etcd timeout")), token: "late", wantCode: 500},
		// The API server's throttling is passed on as such, with its Retry-After.
		{reviewErr: apierrors.NewTooManyRequests("slow down", 1), token: "late", wantCode: 429},
		{token: "late", wantCode: 200}, // the errors were not cached
	} {
		c.mu.Lock()
		c.reviewErr = s.reviewErr
		c.mu.Unlock()
		code := post(t, h, wire.Path(ns, "llm"), s.token, fullReport)
		if code != s.wantCode {
			t.Errorf("request %d: code %d, want %d", i, code, s.wantCode)
		}
	}
	if reviews, podReads := c.counts(); reviews != 5 || podReads != 3 {
		t.Errorf("%d TokenReviews and %d pod reads, want 5 and 3 (one per token, and the failed reviews)", reviews, podReads)
	}
	want := []string{"allowed cached=false", "allowed cached=true", "forbidden cached=false", "forbidden cached=true", "allowed cached=true",
		"error cached=false", "allowed cached=false"} // a throttled review is no decision
	if diff := cmp.Diff(want, obs.reviews); diff != "" {
		t.Errorf("observed reviews (-want +got):\n%s", diff)
	}
	wantReports := []string{"", "", "forbidden", "forbidden", "", "internal", "too_many_requests", ""}
	if diff := cmp.Diff(wantReports, obs.reports); diff != "" {
		t.Errorf("observed reports (-want +got):\n%s", diff)
	}
}

// TestVerdictNames: a verdict's name is its "result" label value.
func TestVerdictNames(t *testing.T) {
	for v, want := range map[progress.Verdict]string{
		progress.Allowed:         metrics.TokenReviewAllowed,
		progress.Unauthenticated: metrics.TokenReviewUnauthenticated,
		progress.Forbidden:       metrics.TokenReviewForbidden,
		progress.NoTrainJob:      metrics.TokenReviewNotFound,
		progress.Verdict(42):     "Verdict(42)",
	} {
		if got := v.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(v), got, want)
		}
	}
}
