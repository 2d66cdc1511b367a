package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Where ReadProvidedCA found a provided certificate's CA bundle (ProvidedCA.Source).
const (
	// CAFromCACertFile: ca.crt in the directory (cert-manager's Secrets have it).
	CAFromCACertFile = "ca.crt"
	// CAFromChain: the certificates after the leaf in tls.crt, the first of which
	// signed the leaf.
	CAFromChain = "tls.crt chain"
	// CAFromSelfSigned: tls.crt's leaf, self-signed, is its own CA.
	CAFromSelfSigned = "self-signed tls.crt"
)

// DefaultProvidedCACheckInterval is how often a ProvidedCABundle reads its files again.
// The kubelet takes up to a minute or so to replace a mounted Secret's files; a few
// seconds more do not matter.
const DefaultProvidedCACheckInterval = 10 * time.Second

// ErrNoProvidedCA is wrapped by ReadProvidedCA when the directory has no ca.crt and
// tls.crt carries no CA either: its leaf is not self-signed and no certificate after it
// signed it.
var ErrNoProvidedCA = errors.New("no CA certificate to publish")

// ProvidedCA is the CA bundle that lets a client verify a certificate provided as files.
type ProvidedCA struct {
	// PEM is the bundle, one or more PEM certificates.
	PEM []byte
	// Source is one of the CAFrom* values.
	Source string
	// Warning, when not empty, says why some clients may still fail to verify the
	// served certificate with PEM (PEM does not verify tls.crt, or holds intermediates
	// only); the bundle is published all the same.
	Warning string
}

// ReadProvidedCA reads the CA bundle of the certificate provided in dir as tls.crt
// (PEM, the leaf first, optionally followed by its issuers), for clients that trust no
// other CA, such as trainer pods reporting progress. The rules, in order:
//
//   - ca.crt in dir, when it holds at least one certificate, as is;
//   - else the certificates of tls.crt after the leaf, when the first of them signed it;
//   - else the leaf itself, when it is self-signed (its own CA).
//
// Errors: ca.crt unreadable, or not empty but holding no certificate; without ca.crt,
// tls.crt missing or holding no certificate; and ErrNoProvidedCA (wrapped, with the
// leaf's subject and issuer) when none of the rules applies: no client can verify the
// leaf with anything in dir.
func ReadProvidedCA(dir string) (ProvidedCA, error) {
	var chain []*x509.Certificate
	certPEM, certErr := os.ReadFile(filepath.Join(dir, TLSCertKey))
	if certErr == nil {
		chain, certErr = cert.ParseCertsPEM(certPEM)
	}

	caFile := filepath.Join(dir, CACertKey)
	caPEM, err := os.ReadFile(caFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return ProvidedCA{}, fmt.Errorf("reading %s: %w", caFile, err)
	case len(bytes.TrimSpace(caPEM)) > 0: // an empty ca.crt, as some issuers write, is no ca.crt
		bundle, err := cert.ParseCertsPEM(caPEM)
		if err != nil {
			return ProvidedCA{}, fmt.Errorf("%s holds no PEM certificate: %w", caFile, err)
		}
		ca := ProvidedCA{PEM: caPEM, Source: CAFromCACertFile}
		if certErr == nil {
			ca.Warning = verifies(chain, bundle)
		}
		return ca, nil
	}

	certFile := filepath.Join(dir, TLSCertKey)
	if certErr != nil {
		return ProvidedCA{}, fmt.Errorf("no %s, and reading %s: %w", caFile, certFile, certErr)
	}
	leaf := chain[0]
	if len(chain) > 1 && leaf.CheckSignatureFrom(chain[1]) == nil {
		issuers := chain[1:]
		pem, err := cert.EncodeCertificates(issuers...)
		if err != nil {
			return ProvidedCA{}, err
		}
		ca := ProvidedCA{PEM: pem, Source: CAFromChain}
		if !selfSigned(issuers[len(issuers)-1]) {
			// OpenSSL accepts a CA that is not self-signed as a trust anchor only with
			// X509_V_FLAG_PARTIAL_CHAIN (Python sets it from 3.13 on); Go always does.
			ca.Warning = fmt.Sprintf("tls.crt's chain ends with %q, which is not self-signed: clients that need a root "+
				"(OpenSSL without partial chains, e.g. Python before 3.13) will not verify it; add the root to ca.crt or tls.crt",
				issuers[len(issuers)-1].Subject)
		}
		return ca, nil
	}
	if selfSigned(leaf) {
		pem, err := cert.EncodeCertificates(leaf)
		if err != nil {
			return ProvidedCA{}, err
		}
		return ProvidedCA{PEM: pem, Source: CAFromSelfSigned}, nil
	}
	what := "its only certificate"
	if len(chain) > 1 {
		what = fmt.Sprintf("followed by %d certificates, the first of which did not sign it", len(chain)-1)
	}
	return ProvidedCA{}, fmt.Errorf("%w in %s: no %s, and %s's leaf %q (%s) was issued by %q, whose certificate is not there",
		ErrNoProvidedCA, dir, CACertKey, TLSCertKey, leaf.Subject, what, leaf.Issuer)
}

// selfSigned reports whether c names itself as issuer and its signature checks with its
// own key (CheckSignatureFrom would also demand that c be a CA, which a self-signed leaf
// need not be).
func selfSigned(c *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, c.RawSubject) && c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil
}

// verifies returns "" when the leaf of chain verifies under bundle (with chain's other
// certificates as intermediates) now, else why not.
func verifies(chain, bundle []*x509.Certificate) string {
	roots, intermediates := x509.NewCertPool(), x509.NewCertPool()
	for _, c := range bundle {
		roots.AddCert(c)
	}
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return fmt.Sprintf("ca.crt does not verify tls.crt (%v): clients trusting ca.crt only will refuse the server", err)
	}
	return ""
}

// ProvidedCABundle keeps the CA bundle of a certificate provided as files (ReadProvidedCA)
// for the life of the process: the files are read again every Interval, so a renewal the
// kubelet writes into a mounted Secret reaches the bundle without a restart. A new CA is
// added, not substituted: the bundle is the files' CA certificates followed by those it
// published before that have not expired, so a trainer pod that mounts it keeps
// trusting the certificate still served (Files holds a renewed one back until its CA has
// been published, Trusts) as well as the next one. When the files stop yielding a bundle
// (ca.crt removed, a leaf without its issuer), the last bundle is kept and the error
// logged once per distinct error: clients keep a CA rather than none. Create it with
// NewProvidedCABundle and start it with Run.
type ProvidedCABundle struct {
	dir      string
	interval time.Duration
	clock    clock.WithTicker
	onChange func()

	current atomic.Pointer[ProvidedCA]
	lastErr string // Run's goroutine only
}

// ProvidedCABundleOptions configure a ProvidedCABundle. All are optional.
type ProvidedCABundleOptions struct {
	// Interval between two reads of the files. Default DefaultProvidedCACheckInterval.
	Interval time.Duration
	// OnChange, when set, is called from Run's goroutine (it must not block) each time
	// the bundle changes, not on the first read.
	OnChange func()
	// Clock is for tests; nil means the real clock.
	Clock clock.WithTicker
}

// NewProvidedCABundle reads the CA bundle of the certificate provided in dir once. It
// fails as ReadProvidedCA does: the caller should refuse to start rather than hand
// clients a bundle that will never exist.
func NewProvidedCABundle(dir string, opts ProvidedCABundleOptions) (*ProvidedCABundle, error) {
	ca, err := ReadProvidedCA(dir)
	if err != nil {
		return nil, err
	}
	b := &ProvidedCABundle{dir: dir, interval: opts.Interval, clock: opts.Clock, onChange: opts.OnChange}
	if b.interval <= 0 {
		b.interval = DefaultProvidedCACheckInterval
	}
	if b.clock == nil {
		b.clock = clock.RealClock{}
	}
	b.current.Store(&ca)
	return b, nil
}

// CABundle returns the current PEM bundle, never empty. The caller must not modify it.
func (b *ProvidedCABundle) CABundle() []byte { return b.current.Load().PEM }

// Current returns the current bundle, its source and warning.
func (b *ProvidedCABundle) Current() ProvidedCA { return *b.current.Load() }

// Run logs the bundle's source (and warning), then reads the files every Interval until
// ctx ends, replacing the bundle and calling OnChange when it changed.
func (b *ProvidedCABundle) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("certDir", b.dir)
	ca := b.current.Load()
	logger.Info("Publishing the CA bundle of the provided certificate", "source", ca.Source)
	if ca.Warning != "" {
		logger.Error(nil, "The published CA bundle may not verify the served certificate", "source", ca.Source, "problem", ca.Warning)
	}
	ticker := b.clock.NewTicker(b.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			b.check(logger)
		}
	}
}

// check reads the files once.
func (b *ProvidedCABundle) check(logger klog.Logger) {
	ca, err := ReadProvidedCA(b.dir)
	if err != nil {
		if msg := err.Error(); msg != b.lastErr {
			b.lastErr = msg
			logger.Error(err, "The provided certificate's files yield no CA bundle; still publishing the previous one",
				"source", b.current.Load().Source)
		}
		return
	}
	b.lastErr = ""
	prev := b.current.Load()
	if ca.PEM, err = withUnexpired(ca.PEM, prev.PEM, b.clock.Now()); err != nil {
		logger.Error(err, "Encoding the CA bundle; still publishing the previous one")
		return
	}
	if bytes.Equal(prev.PEM, ca.PEM) && prev.Source == ca.Source && prev.Warning == ca.Warning {
		return
	}
	b.current.Store(&ca)
	if bytes.Equal(prev.PEM, ca.PEM) {
		logger.V(2).Info("The provided certificate's CA bundle is unchanged but now comes from elsewhere", "source", ca.Source, "previousSource", prev.Source)
		return
	}
	logger.Info("The provided certificate's CA bundle changed", "source", ca.Source, "previousSource", prev.Source)
	if ca.Warning != "" {
		logger.Error(nil, "The published CA bundle may not verify the served certificate", "source", ca.Source, "problem", ca.Warning)
	}
	if b.onChange != nil {
		b.onChange()
	}
}

// withUnexpired returns bundle (PEM) followed by the certificates of previous (PEM) that
// are not in it and have not expired at now.
func withUnexpired(bundle, previous []byte, now time.Time) ([]byte, error) {
	current, err := cert.ParseCertsPEM(bundle)
	if err != nil {
		return nil, err
	}
	old, _ := cert.ParseCertsPEM(previous) // this process encoded it
	var kept []*x509.Certificate
	for _, c := range old {
		if now.Before(c.NotAfter) && !slices.ContainsFunc(current, c.Equal) && !slices.ContainsFunc(kept, c.Equal) {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		return bundle, nil
	}
	tail, err := cert.EncodeCertificates(kept...)
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(bundle)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, tail...), nil
}

// Trusts returns a Files.Trusted for the certificate whose CA b publishes: a renewed
// certificate is trusted once it verifies under b's bundle and published (the CA
// ConfigMaps' progress.CAPublisher.Published) has reported that bundle in every copy
// for delay — the time the kubelet takes to update the file a trainer pod mounts. A
// certificate from the same CA verifies under the bundle already published, so it
// waits delay at most once, after a restart.
func (b *ProvidedCABundle) Trusts(published func(bundle []byte) (since time.Time, ok bool), delay time.Duration) func([]*x509.Certificate) bool {
	return func(chain []*x509.Certificate) bool {
		bundle := b.CABundle()
		roots, err := cert.ParseCertsPEM(bundle)
		if err != nil || len(chain) == 0 {
			return false
		}
		if verifies(chain, roots) != "" {
			return false
		}
		since, ok := published(bundle)
		return ok && !b.clock.Now().Before(since.Add(delay))
	}
}
