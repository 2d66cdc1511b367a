// Package kubeclient holds the typed clients of the Kubernetes API groups Trainyard calls,
// and only those. client-go's kubernetes.Clientset would link every group's client into
// the controller binary, and its all-groups informer factory every group's informers and
// listers (docs/design/memory.md#linked-packages).
package kubeclient

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/discovery"
	admissionregistrationv1 "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	eventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	schedulingv1 "k8s.io/client-go/kubernetes/typed/scheduling/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Interface is the part of client-go's kubernetes.Interface Trainyard uses: discovery
// and the typed clients of the groups it reads or writes. A kubernetes.Interface (the
// fake clientset of the tests included) is one.
type Interface interface {
	Discovery() discovery.DiscoveryInterface
	AdmissionregistrationV1() admissionregistrationv1.AdmissionregistrationV1Interface
	AuthenticationV1() authenticationv1.AuthenticationV1Interface
	AuthorizationV1() authorizationv1.AuthorizationV1Interface
	CoordinationV1() coordinationv1.CoordinationV1Interface
	CoreV1() corev1.CoreV1Interface
	EventsV1() eventsv1.EventsV1Interface
	ResourceV1() resourcev1.ResourceV1Interface
	SchedulingV1() schedulingv1.SchedulingV1Interface
}

// Clientset is the Interface of a rest.Config: every group's client shares one HTTP
// client (so one connection pool) and one client-side rate limiter, as client-go's
// kubernetes.NewForConfig builds them.
type Clientset struct {
	discovery               *discovery.DiscoveryClient
	admissionregistrationV1 *admissionregistrationv1.AdmissionregistrationV1Client
	authenticationV1        *authenticationv1.AuthenticationV1Client
	authorizationV1         *authorizationv1.AuthorizationV1Client
	coordinationV1          *coordinationv1.CoordinationV1Client
	coreV1                  *corev1.CoreV1Client
	eventsV1                *eventsv1.EventsV1Client
	resourceV1              *resourcev1.ResourceV1Client
	schedulingV1            *schedulingv1.SchedulingV1Client
}

var _ Interface = (*Clientset)(nil)

// NewForConfig returns the clients of c: its transport (rest.HTTPClientFor) shared by
// all, its rate limiter or, when it has none and c.QPS > 0, one token bucket of c.QPS
// and c.Burst shared by all, and client-go's default user agent when c has none.
// Errors: an invalid configuration (a transport that cannot be built; QPS > 0 with
// Burst ≤ 0 and no rate limiter).
func NewForConfig(c *rest.Config) (*Clientset, error) {
	config := *c
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(&config)
	if err != nil {
		return nil, err
	}
	return NewForConfigAndClient(&config, httpClient)
}

// NewForConfigAndClient returns the clients of c sending with httpClient; the rate
// limiter is shared as in NewForConfig. Errors: those of NewForConfig.
func NewForConfigAndClient(c *rest.Config, httpClient *http.Client) (*Clientset, error) {
	config := *c
	if config.RateLimiter == nil && config.QPS > 0 {
		if config.Burst <= 0 {
			return nil, fmt.Errorf("kubeclient: burst must be greater than 0 when QPS (%v) is and no rate limiter is set", config.QPS)
		}
		config.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(config.QPS, config.Burst)
	}
	var cs Clientset
	var err error
	if cs.admissionregistrationV1, err = admissionregistrationv1.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cs.authenticationV1, err = authenticationv1.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cs.authorizationV1, err = authorizationv1.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cs.coordinationV1, err = coordinationv1.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cs.coreV1, err = corev1.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cs.eventsV1, err = eventsv1.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cs.resourceV1, err = resourcev1.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cs.schedulingV1, err = schedulingv1.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cs.discovery, err = discovery.NewDiscoveryClientForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	return &cs, nil
}

// Discovery returns the discovery client.
func (c *Clientset) Discovery() discovery.DiscoveryInterface { return c.discovery }

// AdmissionregistrationV1 returns the admissionregistration.k8s.io/v1 client.
func (c *Clientset) AdmissionregistrationV1() admissionregistrationv1.AdmissionregistrationV1Interface {
	return c.admissionregistrationV1
}

// AuthenticationV1 returns the authentication.k8s.io/v1 client.
func (c *Clientset) AuthenticationV1() authenticationv1.AuthenticationV1Interface {
	return c.authenticationV1
}

// AuthorizationV1 returns the authorization.k8s.io/v1 client.
func (c *Clientset) AuthorizationV1() authorizationv1.AuthorizationV1Interface {
	return c.authorizationV1
}

// CoordinationV1 returns the coordination.k8s.io/v1 client.
func (c *Clientset) CoordinationV1() coordinationv1.CoordinationV1Interface { return c.coordinationV1 }

// CoreV1 returns the core v1 client.
func (c *Clientset) CoreV1() corev1.CoreV1Interface { return c.coreV1 }

// EventsV1 returns the events.k8s.io/v1 client.
func (c *Clientset) EventsV1() eventsv1.EventsV1Interface { return c.eventsV1 }

// ResourceV1 returns the resource.k8s.io/v1 client.
func (c *Clientset) ResourceV1() resourcev1.ResourceV1Interface { return c.resourceV1 }

// SchedulingV1 returns the scheduling.k8s.io/v1 client.
func (c *Clientset) SchedulingV1() schedulingv1.SchedulingV1Interface { return c.schedulingV1 }
