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

// newClients builds the clients of c, each with its own client-side rate limiter.
// Errors: an invalid configuration.
func newClients(c *rest.Config) (*clients, error) {
	var (
		cs  clients
		err error
	)
	if cs.kube, err = kubeclient.NewForConfig(c); err != nil {
		return nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	if cs.metadata, err = metadata.NewForConfig(c); err != nil {
		return nil, fmt.Errorf("creating metadata client: %w", err)
	}
	// Custom resources speak JSON only.
	crdConfig := rest.CopyConfig(c)
	crdConfig.ContentType, crdConfig.AcceptContentTypes = "application/json", "application/json"
	if cs.trainers, err = trainerclient.NewForConfig(crdConfig); err != nil {
		return nil, fmt.Errorf("creating trainer.kubeflow.org client: %w", err)
	}
	if cs.jobsets, err = jobsetclient.NewForConfig(crdConfig); err != nil {
		return nil, fmt.Errorf("creating jobset.x-k8s.io client: %w", err)
	}
	if cs.jobSetWatch, err = informers.NewJobSetWatchClient(crdConfig); err != nil {
		return nil, err
	}
	if cs.dynamic, err = dynamic.NewForConfig(crdConfig); err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	return &cs, nil
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
