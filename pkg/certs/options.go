package certs

import (
	"errors"
	"fmt"
	"net"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/utils/clock"
)

// Defaults of Options.
const (
	// DefaultCAValidity is the lifetime of a new CA: three years.
	DefaultCAValidity = 3 * 365 * 24 * time.Hour
	// DefaultServingValidity is the lifetime of a new serving certificate: 90 days.
	DefaultServingValidity = 90 * 24 * time.Hour
	// DefaultRenewFraction renews a certificate once two thirds of its lifetime
	// have passed (after 60 days for a 90-day serving certificate).
	DefaultRenewFraction = 2.0 / 3.0
	// DefaultCAPublishDelay is how long a new CA is published before serving
	// certificates signed by it replace those signed by the previous CA.
	DefaultCAPublishDelay = 5 * time.Minute
	// DefaultCheckInterval is the period of the re-check that runs even when no
	// informer reports a change.
	DefaultCheckInterval = 10 * time.Minute
	// DefaultFieldManager is the field manager of every write the Manager makes,
	// the same as the controller's other writes.
	DefaultFieldManager = "trainyard"
	// DefaultCAName is the common name prefix of the CAs the Manager mints.
	DefaultCAName = "trainyard-ca"
)

// Secret data keys. The Secret has type kubernetes.io/tls, so tls.crt and
// tls.key are the serving pair; ca.crt is the CA bundle (the active CA first,
// then earlier CAs until they expire) and ca.key the active CA's key.
const (
	TLSCertKey = "tls.crt"
	TLSKeyKey  = "tls.key"
	CACertKey  = "ca.crt"
	CAKeyKey   = "ca.key"
)

// Options configure a Manager. Namespace, SecretName and at least one name
// (Services, DNSNames or IPs) are required; zero values of the other fields
// take the Default* values.
type Options struct {
	// Namespace holds the Secret and the Services: the controller's own
	// namespace.
	Namespace string
	// SecretName is the Secret that keeps the CA and the serving pair. The
	// Manager creates it when it is absent; an existing Secret (for example an
	// empty one the chart created, so that the controller needs no create
	// permission) is filled in with an update. Data keys other than the four
	// above are kept.
	SecretName string

	// Services are Service names in Namespace that front the servers using the
	// certificate. Each adds the SANs <svc>.<ns>.svc and
	// <svc>.<ns>.svc.cluster.local.
	Services []string
	// DNSNames are extra DNS SANs, such as "localhost".
	DNSNames []string
	// IPs are extra IP SANs, such as 127.0.0.1 for a controller run outside
	// the cluster.
	IPs []net.IP

	// ValidatingWebhookConfigurations and MutatingWebhookConfigurations name
	// the configurations whose every webhook's clientConfig.caBundle the
	// Manager keeps equal to CABundle(). A named configuration that does not
	// exist is skipped until it is created.
	ValidatingWebhookConfigurations []string
	MutatingWebhookConfigurations   []string

	// CAValidity is the lifetime of a new CA. Default DefaultCAValidity.
	CAValidity time.Duration
	// ServingValidity is the lifetime of a new serving certificate, cut short
	// to the expiry of the CA that signs it. Default DefaultServingValidity.
	// It must not exceed CAValidity.
	ServingValidity time.Duration
	// RenewFraction is the fraction of a certificate's lifetime (NotBefore to
	// NotAfter) after which it is replaced, in (0, 1). It applies to the CA and
	// the serving certificate alike. Default DefaultRenewFraction.
	RenewFraction float64
	// CAPublishDelay is how long a new CA stays in the published bundle, next
	// to the previous one, before the serving certificate signed by the
	// previous CA is replaced by one signed by the new CA: the time API servers
	// need to see the new bundle. A serving certificate due for renewal on its
	// own does not wait. Default DefaultCAPublishDelay.
	CAPublishDelay time.Duration
	// CheckInterval is the longest time between two checks of the Secret and
	// the webhook configurations. Default DefaultCheckInterval.
	CheckInterval time.Duration

	// CAName is the common name prefix of new CAs; "@<unix seconds>" is
	// appended so that each CA has its own name. Default DefaultCAName.
	CAName string
	// FieldManager is the field manager of the Manager's writes. Default
	// DefaultFieldManager.
	FieldManager string

	// Clock is for tests; nil means the real clock.
	Clock clock.WithTicker
	// Metrics receives certificate expiry times and rotations; nil records
	// nothing. *metrics.Metrics implements it.
	Metrics Metrics
	// OnCABundleChange, when set, is called (from the Manager's goroutine; it
	// must not block) each time CABundle changes, the first load included: the
	// progress server's CA ConfigMaps follow the bundle through it.
	OnCABundleChange func()
	// CAPublished, when set, reports whether the bundle is published everywhere else
	// its clients read it (the progress server's CA ConfigMaps, which trainer pods
	// mount) and since when this process has seen it so; the Manager switches the
	// serving certificate to a new CA only CAPublishDelay after that time too, so a
	// kubelet has refreshed every mounted copy first (within about a minute). It is
	// called from the Manager's goroutine and must not block. A replica that cannot
	// tell (it does not keep those ConfigMaps) answers false, and leaves the switch
	// to the replica that can.
	CAPublished func(bundle []byte) (since time.Time, ok bool)
}

// Metrics receives the Manager's certificate events. certificate is
// metrics.CertificateServing or metrics.CertificateCA. *metrics.Metrics
// implements it.
type Metrics interface {
	// SetCertificateExpiry records the NotAfter of the serving certificate this
	// process serves, or of the active CA.
	SetCertificateExpiry(certificate string, notAfter time.Time)
	// CertificateRotated counts a certificate this process renewed and stored
	// in the Secret (not the first one it created).
	CertificateRotated(certificate string)
}

// withDefaults returns o with defaults applied, or an error naming the first
// invalid field.
func (o Options) withDefaults() (Options, error) {
	if o.Namespace == "" {
		return o, errors.New("certs: Namespace is required")
	}
	if o.SecretName == "" {
		return o, errors.New("certs: SecretName is required")
	}
	if len(o.Services)+len(o.DNSNames)+len(o.IPs) == 0 {
		return o, errors.New("certs: at least one of Services, DNSNames or IPs is required")
	}
	setDefault(&o.CAValidity, DefaultCAValidity)
	setDefault(&o.ServingValidity, DefaultServingValidity)
	setDefault(&o.RenewFraction, DefaultRenewFraction)
	setDefault(&o.CAPublishDelay, DefaultCAPublishDelay)
	setDefault(&o.CheckInterval, DefaultCheckInterval)
	setDefault(&o.CAName, DefaultCAName)
	setDefault(&o.FieldManager, DefaultFieldManager)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	switch {
	case o.CAValidity < 0 || o.ServingValidity < 0 || o.CAPublishDelay < 0 || o.CheckInterval < 0:
		return o, errors.New("certs: durations must not be negative")
	case o.ServingValidity > o.CAValidity:
		return o, fmt.Errorf("certs: ServingValidity %v exceeds CAValidity %v", o.ServingValidity, o.CAValidity)
	case o.RenewFraction <= 0 || o.RenewFraction >= 1:
		return o, fmt.Errorf("certs: RenewFraction %v is not in (0, 1)", o.RenewFraction)
	}
	return o, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// altNames returns the SANs of the serving certificate: the Service names,
// then the extra DNS names, and the IPs.
func (o Options) altNames() cert.AltNames {
	var dns []string
	for _, svc := range o.Services {
		dns = append(dns, svc+"."+o.Namespace+".svc", svc+"."+o.Namespace+".svc.cluster.local")
	}
	return cert.AltNames{DNSNames: append(dns, o.DNSNames...), IPs: o.IPs}
}
