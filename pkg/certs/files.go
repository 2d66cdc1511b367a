package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Files serves a certificate provided by someone else — cert-manager, or a user's
// Secret mounted into the pod — as tls.crt and tls.key in Dir. The kubelet replaces a
// mounted Secret's files when the Secret changes; Files notices by their modification
// time and loads the new pair at the next handshake, so a renewal needs no restart. It
// writes nothing and needs no RBAC.
//
// With Trusted set, a new pair whose certificate clients do not trust yet (signed by a
// CA that has not reached them) is held back: the loaded pair keeps being served while
// it is valid, and the new one is taken at the first handshake after Trusted accepts it
// (ProvidedCABundle.Trusts: once its CA has been published to every trainer pod for a
// while).
type Files struct {
	Dir string
	// Trusted, when set, reports whether clients trust the certificate of a new pair
	// (its leaf first, then the rest of tls.crt's chain). It is asked at handshakes,
	// only while a new pair is held back, and must be cheap and safe for concurrent use.
	// nil: every new pair is served at once.
	Trusted func(chain []*x509.Certificate) bool
	// Clock is for tests; nil means the real clock.
	Clock clock.PassiveClock

	mu      sync.Mutex
	loaded  *tls.Certificate
	modTime time.Time // the newer of the two files' modification times when loaded
	held    *tls.Certificate
	heldMod time.Time
	nextAsk time.Time // Trusted is asked at most once per trustedAskInterval
}

// trustedAskInterval bounds how often a held-back pair's Trusted is asked: handshakes
// come in thousands a second under load, and the answer changes in minutes.
const trustedAskInterval = time.Second

// GetCertificate returns the pair in Dir, reloading it when a file changed since the
// last load (a new pair held back by Trusted aside). Errors: a file missing or
// unreadable, or a pair that does not parse; a pair loaded earlier is kept (and
// returned) while the new files are half written.
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	certFile, keyFile := filepath.Join(f.Dir, TLSCertKey), filepath.Join(f.Dir, TLSKeyKey)
	modTime, err := newestModTime(certFile, keyFile)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && (f.loaded == nil || modTime.After(f.modTime)) && (f.held == nil || modTime.After(f.heldMod)) {
		var pair *tls.Certificate
		if pair, err = loadPair(certFile, keyFile); err == nil {
			f.held, f.heldMod = pair, modTime
			if !f.takes(pair) {
				klog.Background().Info("Holding back the renewed provided certificate until its CA has reached the trainer pods",
					"certDir", f.Dir, "subject", pair.Leaf.Subject.String(), "issuer", pair.Leaf.Issuer.String(),
					"servingUntil", f.loaded.Leaf.NotAfter)
				return f.loaded, nil
			}
			f.loaded, f.modTime, f.held = pair, modTime, nil
			return f.loaded, nil
		}
	}
	if f.held != nil && f.takes(f.held) {
		f.loaded, f.modTime, f.held = f.held, f.heldMod, nil
	}
	if f.loaded == nil {
		return nil, fmt.Errorf("loading the serving certificate from %s: %w", f.Dir, err)
	}
	return f.loaded, nil
}

// takes reports whether the new pair replaces the loaded one now: with none loaded,
// without Trusted, when the same CA issued both (same issuer name and authority key
// ID: every client that verifies the served certificate verifies the new one, e.g. a
// renewal, or a CA renewed with its key kept), once the loaded one has expired, or when
// Trusted (asked at most once per trustedAskInterval) accepts it.
func (f *Files) takes(pair *tls.Certificate) bool {
	if f.loaded == nil || f.Trusted == nil || sameIssuer(pair.Leaf, f.loaded.Leaf) {
		return true
	}
	now := time.Now()
	if f.Clock != nil {
		now = f.Clock.Now()
	}
	if !now.Before(f.loaded.Leaf.NotAfter) {
		klog.Background().Info("Serving a provided certificate that trainer pods may not trust yet: the previous one has expired",
			"certDir", f.Dir, "subject", pair.Leaf.Subject.String(), "issuer", pair.Leaf.Issuer.String())
		return true
	}
	if now.Before(f.nextAsk) {
		return false
	}
	f.nextAsk = now.Add(trustedAskInterval)
	chain := make([]*x509.Certificate, 0, len(pair.Certificate))
	for _, der := range pair.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return true // tls.X509KeyPair parsed the leaf; let the handshake's peer judge the rest
		}
		chain = append(chain, c)
	}
	return f.Trusted(chain)
}

// sameIssuer reports whether a and b name the same issuer and carry the same, non-empty,
// authority key identifier (RFC 5280 4.2.1.1: the issuer's key).
func sameIssuer(a, b *x509.Certificate) bool {
	return len(a.AuthorityKeyId) > 0 && bytes.Equal(a.AuthorityKeyId, b.AuthorityKeyId) && bytes.Equal(a.RawIssuer, b.RawIssuer)
}

// loadPair loads a pair from PEM files with its Leaf set (keyPair).
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	return keyPair(certPEM, keyPEM)
}

// Ready reports whether a pair loads from Dir.
func (f *Files) Ready() bool {
	_, err := f.GetCertificate(nil)
	return err == nil
}

// TLSConfig returns a server configuration (TLS 1.2 or later) that serves the pair in
// Dir through GetCertificate.
func (f *Files) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: f.GetCertificate}
}

func newestModTime(paths ...string) (time.Time, error) {
	var newest time.Time
	for _, p := range paths {
		// Stat follows the symlinks the kubelet swaps atomically on an update.
		info, err := os.Stat(p)
		if err != nil {
			return time.Time{}, err
		}
		if info.ModTime().After(newest) {
			newest = info.ModTime()
		}
	}
	return newest, nil
}
