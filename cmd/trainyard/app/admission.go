package app

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/pkg/admission"
	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/httpserver"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/stages/dra"
)

// admissionServer is the HTTPS admission server every replica runs, leader or not, so
// that admission never waits for a leader election
// (docs/design/architecture.md#every-replica-serves-admission-and-progress). Its rules
// read only the informer caches the pipeline already keeps, plus PriorityClasses.
type admissionServer struct {
	cfg    configv1alpha1.WebhookConfiguration
	kube   kubeclient.Interface
	logger klog.Logger
	server *httpserver.Server
	// priorityClasses is the PriorityClass informer the rules read.
	priorityClasses cache.SharedIndexInformer
	// certificate is the serving certificate, shared with the progress server.
	certificate *servingCertificate
	// listening is set once the server's port is bound: before that, neither /readyz
	// nor the registration may send the API server to it (connection refused, which
	// with failurePolicy Fail refuses the write).
	listening atomic.Bool
}

// newAdmissionServer builds the admission server of cfg, or returns nil when
// cfg.BindAddress is "0": admission.NewHandler within its default Limits, served within
// admission.ServerLimits. certificate is the serving certificate. Errors: none today
// (bounds that contradict each other: a wiring bug).
func newAdmissionServer(cfg configv1alpha1.WebhookConfiguration, certificate *servingCertificate, kube kubeclient.Interface, inf *informers.Informers,
	claims *dra.Claims, m *metrics.Metrics, logger klog.Logger,
) (*admissionServer, error) {
	if cfg.BindAddress == "0" {
		return nil, nil
	}
	s := &admissionServer{cfg: cfg, kube: kube, logger: logger, certificate: certificate,
		priorityClasses: kubeclient.NewInformer(kube, kube.SchedulingV1().PriorityClasses(), &schedulingv1.PriorityClass{}, 0,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil)}
	deps := &admission.Deps{
		TrainingRuntimes:        inf.TrainingRuntimeLister,
		ClusterTrainingRuntimes: inf.ClusterTrainingRuntimeLister,
		JobSets:                 inf.JobSetLister,
		PriorityClasses:         schedulinglisters.NewPriorityClassLister(s.priorityClasses.GetIndexer()),
		TrainJobs:               admission.IndexedTrainJobs{Indexer: inf.TrainJobs.GetIndexer()},
		Claims:                  claims,
		// Whether an OptimizationJob's creator may create its trials (issue 41, finding 8).
		SubjectAccessReviews: kube.AuthorizationV1().SubjectAccessReviews(),
		Observer:             m,
	}
	server, err := httpserver.New(admission.NewHandler(deps), cfg.BindAddress, s.certificate.TLSConfig(), admission.ServerLimits())
	if err != nil {
		return nil, fmt.Errorf("admission server: %w", err)
	}
	s.server = server
	return s, nil
}

// start starts the PriorityClass informer; it stops with ctx. The certificate is
// started by its owner. Call WaitForCacheSync before serving.
func (s *admissionServer) start(ctx context.Context) {
	go s.priorityClasses.RunWithContext(ctx)
}

// hasSynced reports whether the PriorityClass cache has synced; the server listens
// only after it has.
func (s *admissionServer) hasSynced() bool {
	return s.priorityClasses.HasSynced()
}

// ready reports whether the server listens (so its caches have synced) and has a
// certificate to serve.
func (s *admissionServer) ready() bool { return s.listening.Load() && s.certificate.Ready() }

// listen binds the server's port. Errors: the address is in use or invalid.
func (s *admissionServer) listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.server.Addr)
	if err != nil {
		return nil, fmt.Errorf("admission server: %w", err)
	}
	s.listening.Store(true)
	return ln, nil
}

// serve serves HTTPS on ln, within the server's connection bounds, until the server is
// shut down; it returns http.ErrServerClosed then.
func (s *admissionServer) serve(ln net.Listener) error {
	return s.server.Serve(ln)
}

// register creates or updates the two webhook configurations with clientConfig.url =
// registerURL + path and the current CA bundle, retrying until it succeeds: what a
// controller running outside the cluster (make run, the e2e tests) needs, and what the
// Helm chart does for a controller inside it. The certificate manager keeps the bundle
// current afterwards. The OptimizationJob validator is registered even when the API
// server does not serve optimizationjobs (unlike the OptimizationJob controller, which
// needs a cache that would never sync): its rules read only the runtime caches, a rule
// for a resource not served is never called, and a CRD installed later is validated
// from its first object on, as with the chart, which renders it unconditionally
// (admission.WebhookConfigurations).
func (s *admissionServer) register(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !s.ready() {
			return false, nil
		}
		var bundle []byte
		if s.certificate.manager != nil {
			bundle = s.certificate.manager.CABundle()
		}
		mutating, validating := admission.WebhookConfigurations(s.cfg.MutatingWebhookConfigurationName, s.cfg.ValidatingWebhookConfigurationName,
			func(path string) admissionregistrationv1.WebhookClientConfig {
				return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(s.cfg.RegisterURL + path), CABundle: bundle}
			})
		err := upsert(ctx, s.kube.AdmissionregistrationV1().MutatingWebhookConfigurations(), mutating,
			func(cur, want *admissionregistrationv1.MutatingWebhookConfiguration) bool {
				return replaceWebhooks(&cur.Webhooks, want.Webhooks)
			})
		if err == nil {
			err = upsert(ctx, s.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations(), validating,
				func(cur, want *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
					return replaceWebhooks(&cur.Webhooks, want.Webhooks)
				})
		}
		if err != nil {
			s.logger.Error(err, "Registering the webhook configurations; retrying")
			return false, nil
		}
		s.logger.Info("Registered the webhook configurations", "url", s.cfg.RegisterURL,
			"mutating", mutating.Name, "validating", validating.Name)
		return true, nil
	})
}

// unregister deletes the webhook configurations register created, if they still call
// this process (another replica may have registered itself since): a controller run
// outside the cluster that stopped must not leave the API server calling nothing, which
// with failurePolicy Fail would refuse every TrainJob write. A killed process cannot do
// this; the next one to start registers itself over it.
func (s *admissionServer) unregister(ctx context.Context) {
	if s.cfg.RegisterURL == "" {
		return
	}
	admissionAPI := s.kube.AdmissionregistrationV1()
	cur, err := admissionAPI.ValidatingWebhookConfigurations().Get(ctx, s.cfg.ValidatingWebhookConfigurationName, metav1.GetOptions{})
	if err != nil || len(cur.Webhooks) == 0 || cur.Webhooks[0].ClientConfig.URL == nil ||
		!strings.HasPrefix(*cur.Webhooks[0].ClientConfig.URL, s.cfg.RegisterURL+"/") {
		return
	}
	precondition := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cur.ResourceVersion}}
	if err := admissionAPI.ValidatingWebhookConfigurations().Delete(ctx, cur.Name, precondition); err != nil && !apierrors.IsNotFound(err) {
		s.logger.Error(err, "Removing the webhook configurations this process registered")
		return
	}
	if err := admissionAPI.MutatingWebhookConfigurations().Delete(ctx, s.cfg.MutatingWebhookConfigurationName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		s.logger.Error(err, "Removing the webhook configurations this process registered")
		return
	}
	s.logger.Info("Removed the webhook configurations this process registered", "url", s.cfg.RegisterURL)
}

// replaceWebhooks sets *cur to want and reports whether that changed anything.
func replaceWebhooks[W any](cur *[]W, want []W) bool {
	changed := !equality.Semantic.DeepEqual(*cur, want)
	*cur = want
	return changed
}

// webhookConfigurations is the typed client of one webhook configuration kind.
type webhookConfigurations[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*T, error)
	Create(ctx context.Context, obj *T, opts metav1.CreateOptions) (*T, error)
	Update(ctx context.Context, obj *T, opts metav1.UpdateOptions) (*T, error)
}

// upsert creates want, or sets its webhooks on the existing object (set reports whether
// that changed anything) with an update, resourceVersion-checked: a conflict is retried
// by the caller. An object already as wanted costs no write.
func upsert[T any, P interface {
	*T
	metav1.Object
}](ctx context.Context, client webhookConfigurations[T], want P, set func(cur, want P) bool) error {
	cur, err := client.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.Create(ctx, want, metav1.CreateOptions{FieldManager: "trainyard"})
		return err
	}
	if err != nil {
		return err
	}
	if !set(cur, want) {
		return nil
	}
	_, err = client.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "trainyard"})
	return err
}
