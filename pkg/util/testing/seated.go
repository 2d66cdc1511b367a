package testing

import (
	"context"
	"strings"
	"sync/atomic"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/trainyard/trainyard/pkg/kubeclient"
)

// SeatedKube models an overloaded API server for TokenReview floods: it has cap(Seats)
// concurrent TokenReviews, a review takes a seat (waiting for one, or for its context),
// and a review of a token starting "random-" then holds its seat until Gate is closed.
// Entered counts those random tokens' reviews that reached it. Every other call goes
// to the embedded Interface.
type SeatedKube struct {
	kubeclient.Interface
	Seats   chan struct{}
	Gate    chan struct{}
	Entered *atomic.Int64
}

// AuthenticationV1 returns the embedded group with TokenReviews seated.
func (k SeatedKube) AuthenticationV1() authenticationv1client.AuthenticationV1Interface {
	return seatedAuthentication{k.Interface.AuthenticationV1(), k}
}

type seatedAuthentication struct {
	authenticationv1client.AuthenticationV1Interface
	k SeatedKube
}

func (a seatedAuthentication) TokenReviews() authenticationv1client.TokenReviewInterface {
	return seatedTokenReviews{a.AuthenticationV1Interface.TokenReviews(), a.k}
}

type seatedTokenReviews struct {
	authenticationv1client.TokenReviewInterface
	k SeatedKube
}

func (r seatedTokenReviews) Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	random := strings.HasPrefix(tr.Spec.Token, "random-")
	if random {
		r.k.Entered.Add(1)
	}
	select {
	case r.k.Seats <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.k.Seats }()
	if random {
		<-r.k.Gate
	}
	return r.TokenReviewInterface.Create(ctx, tr, opts)
}
