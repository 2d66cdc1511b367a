package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newCertificateMetrics() (*prometheus.GaugeVec, *prometheus.CounterVec) {
	expiry := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: CertificateExpiryTimestampSeconds,
		Help: "NotAfter, in Unix seconds, of the self-managed serving certificate this process serves and of the active CA, by certificate (serving, ca).",
	}, []string{LabelCertificate})
	rotations := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: CertificateRotationsTotal,
		Help: "Certificates this process renewed and stored in the certificate Secret, by certificate (serving, ca).",
	}, []string{LabelCertificate})
	for _, c := range certificates {
		rotations.WithLabelValues(c)
	}
	return expiry, rotations
}

// SetCertificateExpiry sets trainyard_certificate_expiry_timestamp_seconds of
// certificate (CertificateServing or CertificateCA; other values are ignored,
// so the series stay bounded) to notAfter. Until it is first called the
// series is absent, so a process that does not manage certificates exports
// no expiry.
func (m *Metrics) SetCertificateExpiry(certificate string, notAfter time.Time) {
	if slices.Contains(certificates, certificate) {
		m.certExpiry.WithLabelValues(certificate).Set(float64(notAfter.Unix()))
	}
}

// CertificateRotated counts one rotation of certificate (CertificateServing or
// CertificateCA; other values are ignored).
func (m *Metrics) CertificateRotated(certificate string) {
	if slices.Contains(certificates, certificate) {
		m.certRotations.WithLabelValues(certificate).Inc()
	}
}
