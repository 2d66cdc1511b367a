package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/certs"
	"github.com/trainyard/trainyard/pkg/metrics"
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
	manager *certs.Manager // self-managed; nil when provided
	caFile  string         // provided: the CA bundle file (cert-manager writes ca.crt)
}

// newServingCertificate returns the certificate cfg describes; namespace is the
// controller's (the Secret and the Service live there). onCAChange, when set, is called
// each time a self-managed CA bundle changes. Errors: a registerURL that does not parse,
// or invalid certificate options.
func newServingCertificate(cfg configv1alpha1.WebhookConfiguration, namespace string, kube kubernetes.Interface,
	m *metrics.Metrics, onCAChange func(),
) (*servingCertificate, error) {
	if cfg.Certificates.Mode == configv1alpha1.CertificatesProvided {
		return &servingCertificate{source: &certs.Files{Dir: cfg.Certificates.CertDir},
			caFile: filepath.Join(cfg.Certificates.CertDir, certs.CACertKey)}, nil
	}
	opts := certs.Options{
		Namespace: namespace, SecretName: cfg.Certificates.SecretName, Services: []string{cfg.ServiceName},
		ValidatingWebhookConfigurations: []string{cfg.ValidatingWebhookConfigurationName},
		MutatingWebhookConfigurations:   []string{cfg.MutatingWebhookConfigurationName},
		CAValidity:                      cfg.Certificates.CAValidity.Duration,
		ServingValidity:                 cfg.Certificates.ServingValidity.Duration,
		Metrics:                         m,
		OnCABundleChange:                onCAChange,
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

// start runs the self-managed certificate's Manager until ctx ends.
func (c *servingCertificate) start(ctx context.Context, logger klog.Logger) {
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
// Manager's, or the provided certDir's ca.crt; nil when none is known yet.
func (c *servingCertificate) CABundle() []byte {
	if c.manager != nil {
		return c.manager.CABundle()
	}
	data, err := os.ReadFile(c.caFile)
	if err != nil {
		return nil
	}
	return data
}
