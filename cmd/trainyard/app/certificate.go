package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"time"

	"k8s.io/klog/v2"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/certs"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// servingCertificate is the one TLS serving certificate of the controller's HTTPS
// servers, admission and progress (issue 14: one implementation for both): self-managed
// (certs.Manager: a CA and a serving certificate in a Secret, rotated, the CA written
// into the webhook configurations) or provided as files (certs.Files, e.g. cert-manager's
// Secret mounted in certDir). It is issued for the webhook Service's DNS names, which the
// progress server's injected URL uses too.
type servingCertificate struct {
	source interface {
		TLSConfig() *tls.Config
		Ready() bool
	}
	manager    *certs.Manager          // self-managed; nil when provided
	providedCA *certs.ProvidedCABundle // provided, with the progress server on: certDir's CA bundle
}

// caCopies are the copies of the serving certificate's CA bundle kept outside it: the
// progress server's CA ConfigMaps, which trainer pods mount (docs/design/progress.md).
// With provided certificates (cert-manager, a user's Secret) Trainyard adds a new
// ca.crt to the published bundle (the previous CA stays until it expires) and holds a
// renewed certificate its trainer pods do not trust yet back until the bundle that
// verifies it has been in every copy for webhook.certificates.caPublishDelay, or until the
// served one expires (issue 41).
type caCopies struct {
	// changed, when set, is called each time the bundle changes (it must not block).
	changed func()
	// published, when set, reports whether every copy carries bundle, and since when
	// (certs.Options.CAPublished).
	published func(bundle []byte) (since time.Time, ok bool)
}

// newServingCertificate returns the certificate cfg describes; namespace is the
// controller's (the Secret and the Service live there). publishCA says the progress
// server runs and so needs the CA bundle that trainer pods trust (its CA ConfigMaps).
// copies are told each time that bundle changes, and, with self-managed certificates,
// hold a new CA back from the serving certificate until they carry it. Errors: a
// registerURL that does not parse, invalid certificate options, or, with provided
// certificates and publishCA, files in certDir that yield no CA bundle
// (providedCAError).
func newServingCertificate(cfg configv1alpha1.WebhookConfiguration, publishCA bool, namespace string, kube kubeclient.Interface,
	m *metrics.Metrics, copies caCopies,
) (*servingCertificate, error) {
	if cfg.Certificates.Mode == configv1alpha1.CertificatesProvided {
		files := &certs.Files{Dir: cfg.Certificates.CertDir}
		c := &servingCertificate{source: files}
		if publishCA {
			// Issue 23: trainer pods mount the CA ConfigMap, which cannot be optional;
			// without a CA to publish, every one of them would wait for it forever.
			ca, err := certs.NewProvidedCABundle(cfg.Certificates.CertDir, certs.ProvidedCABundleOptions{OnChange: copies.changed})
			if err != nil {
				return nil, providedCAError(err)
			}
			c.providedCA = ca
			if copies.published != nil {
				files.Trusted = ca.Trusts(copies.published, cfg.Certificates.CAPublishDelay.Duration)
			}
		}
		return c, nil
	}
	opts := certs.Options{
		Namespace: namespace, SecretName: cfg.Certificates.SecretName, Services: []string{cfg.ServiceName},
		ValidatingWebhookConfigurations: []string{cfg.ValidatingWebhookConfigurationName},
		MutatingWebhookConfigurations:   []string{cfg.MutatingWebhookConfigurationName},
		CAValidity:                      cfg.Certificates.CAValidity.Duration,
		ServingValidity:                 cfg.Certificates.ServingValidity.Duration,
		CAPublishDelay:                  cfg.Certificates.CAPublishDelay.Duration,
		Metrics:                         m,
		OnCABundleChange:                copies.changed,
		CAPublished:                     copies.published,
	}
	if cfg.RegisterURL != "" {
		u, err := url.Parse(cfg.RegisterURL)
		if err != nil {
			return nil, fmt.Errorf("webhook.registerURL: %w", err)
		}
		if ip := net.ParseIP(u.Hostname()); ip != nil {
			opts.IPs = append(opts.IPs, ip)
		} else {
			opts.DNSNames = append(opts.DNSNames, u.Hostname())
		}
	}
	manager, err := certs.New(kube, opts)
	if err != nil {
		return nil, fmt.Errorf("webhook certificates: %w", err)
	}
	return &servingCertificate{source: manager, manager: manager}, nil
}

// start runs the self-managed certificate's Manager, or the provided CA bundle's reload,
// until ctx ends.
func (c *servingCertificate) start(ctx context.Context, logger klog.Logger) {
	if c.providedCA != nil {
		go c.providedCA.Run(klog.NewContext(ctx, logger))
	}
	if c.manager == nil {
		return
	}
	go func() {
		if err := c.manager.Run(ctx); err != nil {
			logger.Error(err, "Serving certificate manager stopped")
		}
	}()
}

// TLSConfig returns a new server configuration serving the current certificate.
func (c *servingCertificate) TLSConfig() *tls.Config { return c.source.TLSConfig() }

// Ready reports whether a serving certificate is loaded.
func (c *servingCertificate) Ready() bool { return c.source.Ready() }

// CABundle returns the PEM CA bundle that verifies the serving certificate: the
// Manager's, or the one found in the provided certDir (certs.ReadProvidedCA: ca.crt, else
// tls.crt's issuers, else its self-signed leaf); nil when none is known yet, or when
// provided certificates were loaded without publishCA.
func (c *servingCertificate) CABundle() []byte {
	switch {
	case c.manager != nil:
		return c.manager.CABundle()
	case c.providedCA != nil:
		return c.providedCA.CABundle()
	}
	return nil
}

// providedCAError explains why the controller refuses to start: provided certificates
// yield no CA bundle for the progress server's CA ConfigMaps (err, from
// certs.ReadProvidedCA), naming the settings involved and the fixes
// (docs/design/progress.md, "Provided certificates").
func providedCAError(err error) error {
	return fmt.Errorf("webhook.certificates.certDir (webhook.certificates.mode Provided): %w. "+
		"The progress server (statusServer.bindAddress, feature gate %s) publishes the CA that verifies its certificate "+
		"to trainer pods in ConfigMap %s, which they mount and cannot start without. "+
		"Fix: add %s to certDir holding the CA that signed %s (with the Helm chart, mode Provided mounts webhook.certificates.caBundle there; "+
		"a cert-manager Secret has it when its issuer knows its CA), or append the issuing CA certificates to %s after the leaf; "+
		`or turn the progress server off (statusServer.bindAddress "0", --status-server-bind-address=0)`,
		err, wire.FeatureGate, wire.CAConfigMapName, certs.CACertKey, certs.TLSCertKey, certs.TLSCertKey)
}
