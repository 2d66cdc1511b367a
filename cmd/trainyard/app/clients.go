package app

import (
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/util/authlimit"
	"github.com/trainyard/trainyard/pkg/util/fairlimit"
	"github.com/trainyard/trainyard/pkg/version"
)

// clients are the API clients built from one rest.Config.
type clients struct {
	kube     kubeclient.Interface
	trainers trainerclient.Interface // JSON only, as custom resources
	jobsets  jobsetclient.Interface  // JSON only
	// jobSetWatch lists and watches JobSets for the informers, decoding them trimmed
	// (informers.NewJobSetWatchClient); never used to write.
	jobSetWatch jobsetclient.Interface
	dynamic     dynamic.Interface // JSON only
	metadata    metadata.Interface

	// progressAuth and metricsAuth are the progress and metrics endpoints' own clients
	// (authClient); set by buildClients on the clients of every replica only.
	progressAuth, metricsAuth kubeclient.Interface
}

// newClients builds the clients of c, each with its own client-side rate limiter of
// c's QPS and burst, which serves the requests waiting for a token namespace by
// namespace (withFairLimiter). Errors: an invalid configuration.
func newClients(c *rest.Config) (*clients, error) {
	var (
		cs  clients
		err error
	)
	if cs.kube, err = kubeclient.NewForConfig(withFairLimiter(c)); err != nil {
		return nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	if cs.metadata, err = metadata.NewForConfig(withFairLimiter(c)); err != nil {
		return nil, fmt.Errorf("creating metadata client: %w", err)
	}
	// Custom resources speak JSON only.
	crdConfig := rest.CopyConfig(c)
	crdConfig.ContentType, crdConfig.AcceptContentTypes = "application/json", "application/json"
	if cs.trainers, err = trainerclient.NewForConfig(withFairLimiter(crdConfig)); err != nil {
		return nil, fmt.Errorf("creating trainer.kubeflow.org client: %w", err)
	}
	if cs.jobsets, err = jobsetclient.NewForConfig(withFairLimiter(crdConfig)); err != nil {
		return nil, fmt.Errorf("creating jobset.x-k8s.io client: %w", err)
	}
	if cs.jobSetWatch, err = informers.NewJobSetWatchClient(withFairLimiter(crdConfig)); err != nil {
		return nil, err
	}
	if cs.dynamic, err = dynamic.NewForConfig(withFairLimiter(crdConfig)); err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	return &cs, nil
}

// withFairLimiter returns a copy of c whose rate limiter is a new fairlimit.Limiter of
// c's QPS and burst (client-go's defaults, 5 and 10, when unset): the same budget as
// client-go's token bucket, but the requests waiting for it are served flow by flow
// in turn, the flow being the namespace of the TrainJob a pipeline stage syncs
// (engine sets it), so that one namespace's burst, which keeps the client at its QPS,
// does not hold another namespace's writes behind all of its own (issue 43). A
// negative QPS (no limit) or a limiter already set is kept.
func withFairLimiter(c *rest.Config) *rest.Config {
	fc := rest.CopyConfig(c)
	if fc.RateLimiter != nil || fc.QPS < 0 {
		return fc
	}
	qps, burst := fc.QPS, fc.Burst
	if qps == 0 {
		qps = rest.DefaultQPS
	}
	if burst == 0 {
		burst = rest.DefaultBurst
	}
	fc.RateLimiter = fairlimit.New(qps, burst)
	return fc
}

// restConfig builds the client configuration: --kubeconfig (or $KUBECONFIG, or
// in-cluster) with the configured QPS, burst and content types.
func restConfig(cc componentbaseconfigv1alpha1.ClientConnectionConfiguration) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = cc.Kubeconfig
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading Kubernetes client configuration: %w", err)
	}
	c.QPS, c.Burst = cc.QPS, int(cc.Burst)
	c.ContentType, c.AcceptContentTypes = cc.ContentType, cc.AcceptContentTypes
	c.UserAgent = "trainyard/" + version.Version
	return c, nil
}

// Client-side rate limits of the authenticating endpoints' own clients (authClient), in
// requests per second and at once. Each endpoint's limiter (authlimit.Limits: per
// client address and in flight) bounds what a flood of unknown tokens sends; these
// bound the rest — an allowed token's pod read or SubjectAccessReview, one per token
// per AllowTTL — and cap the endpoint's load on the API server whatever its limiter
// admits. Progress: a restart's 4,000 trainer tokens are reviewed within a minute.
const (
	progressAuthQPS, progressAuthBurst = 100, 200
	metricsAuthQPS, metricsAuthBurst   = 10, 20
)

// authClient returns the client an authenticating endpoint (endpoint, the "endpoint"
// label of trainyard_auth_token_reviews_total) sends its TokenReviews and
// SubjectAccessReviews or pod reads with: built from a copy of c with its own QPS and
// burst, so a flood of tokens waits in its own client-side rate limiter, never in the
// one the certificate manager, the informers or the pipeline use, and with every
// TokenReview admitted by a Limiter of limits first (authlimit.Client), observed by
// obs. Errors: an invalid configuration.
func authClient(c *rest.Config, endpoint string, qps float32, burst int, limits authlimit.Limits, obs authlimit.Observer) (kubeclient.Interface, error) {
	ac := rest.CopyConfig(c)
	ac.QPS, ac.Burst = qps, burst
	ac.UserAgent += " (" + endpoint + " auth)"
	kube, err := kubeclient.NewForConfig(ac)
	if err != nil {
		return nil, fmt.Errorf("creating the %s endpoint's authentication client: %w", endpoint, err)
	}
	return authlimit.Client(kube, authlimit.New(endpoint, limits, obs, nil)), nil
}
