package authlimit

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/trainyard/trainyard/pkg/kubeclient"
)

// Client returns kube with every TokenReview (AuthenticationV1().TokenReviews().Create)
// admitted by l first: a refused one returns Admit's 429 error without being sent. The
// other requests, SubjectAccessReviews and pod reads included, pass unchanged: the
// endpoints make them only for a token the API server authenticated.
//
// Give each endpoint a client of its own, built from its own rest.Config (own QPS and
// Burst): the client-side rate limiter of a client that the certificate manager or the
// pipeline shares would make their requests wait behind a flood's reviews.
func Client(kube kubeclient.Interface, l *Limiter) kubeclient.Interface {
	return &client{Interface: kube, limiter: l}
}

type client struct {
	kubeclient.Interface
	limiter *Limiter
}

func (c *client) AuthenticationV1() authenticationv1client.AuthenticationV1Interface {
	return &authentication{AuthenticationV1Interface: c.Interface.AuthenticationV1(), limiter: c.limiter}
}

type authentication struct {
	authenticationv1client.AuthenticationV1Interface
	limiter *Limiter
}

func (a *authentication) TokenReviews() authenticationv1client.TokenReviewInterface {
	return &tokenReviews{TokenReviewInterface: a.AuthenticationV1Interface.TokenReviews(), limiter: a.limiter}
}

type tokenReviews struct {
	authenticationv1client.TokenReviewInterface
	limiter *Limiter
}

// Create sends tr once the Limiter admits it, or returns its refusal.
func (t *tokenReviews) Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	release, err := t.limiter.Admit(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return t.TokenReviewInterface.Create(ctx, tr, opts)
}
