package certs

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/trainyard/trainyard/pkg/metrics"
)

// backdate is subtracted from the NotBefore of every certificate the Manager
// issues, so that a peer whose clock is a little behind accepts it.
const backdate = 5 * time.Minute

// state is the parsed content of the Secret. A part that is missing or does
// not parse is nil; renew replaces it.
type state struct {
	ca      *tls.Certificate    // the active CA and its key (ca.crt's first certificate, ca.key)
	bundle  []*x509.Certificate // every certificate of ca.crt, the active CA first
	serving *tls.Certificate    // tls.crt and tls.key
	data    map[string][]byte   // the four data keys as stored, when not empty
}

// parseState parses the Secret data. It never fails: what does not parse is
// left out.
func parseState(data map[string][]byte) *state {
	s := &state{data: map[string][]byte{}}
	for _, k := range []string{TLSCertKey, TLSKeyKey, CACertKey, CAKeyKey} {
		if len(data[k]) > 0 {
			s.data[k] = data[k]
		}
	}
	if pair, err := keyPair(data[CACertKey], data[CAKeyKey]); err == nil && pair.Leaf.IsCA {
		s.ca = pair
	}
	s.bundle, _ = cert.ParseCertsPEM(data[CACertKey])
	s.serving, _ = keyPair(data[TLSCertKey], data[TLSKeyKey])
	return s
}

// keyPair parses a PEM certificate chain and the PEM key of its first
// certificate. The result's Leaf is that first certificate.
func keyPair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if pair.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &pair, nil
}

// renew returns the Secret data that cur should be replaced with at now, and
// the certificates (metrics.Certificate* values) it rotated, i.e. replaced
// one that was stored; nil data when cur needs no change. published says whether the webhook configurations already
// carry cur's bundle: only then may a serving certificate signed by an
// earlier CA be replaced by one signed by the active CA.
//
// The rules, in order:
//   - a CA that is missing, unparsable or past RenewFraction of its lifetime
//     is replaced by a new one;
//   - the bundle is the active CA followed by the earlier CAs of cur's bundle
//     that have not expired;
//   - a serving certificate that is missing, unparsable, not valid under the
//     bundle, missing a SAN of o or past RenewFraction of its lifetime is
//     replaced by one signed by the active CA;
//   - a valid serving certificate signed by an earlier CA is replaced once the
//     active CA has been published for CAPublishDelay;
//   - until then the active CA signs nothing (and in the pass that creates it,
//     nobody trusts it yet: the webhook configurations and the trainer pods' CA
//     ConfigMaps get it from this very write). A serving certificate that still
//     verifies is kept, due or not, until the rule above replaces it; one
//     that must go now (missing, expired, a SAN missing) is signed by the
//     outgoing CA in the pass that replaces it, which every client still trusts
//     (later passes no longer hold its key, and sign with the active CA).
func renew(o *Options, now time.Time, cur *state, published bool) (map[string][]byte, []string, error) {
	out := maps.Clone(cur.data)
	var rotated []string

	ca := cur.ca
	var outgoing *tls.Certificate // the replaced CA, while still valid
	if ca == nil || due(ca.Leaf, now, o.RenewFraction) {
		if ca != nil && now.Before(ca.Leaf.NotAfter) {
			outgoing = ca
		}
		if ca != nil || len(cur.bundle) > 0 {
			rotated = append(rotated, metrics.CertificateCA)
		}
		var keyPEM []byte
		var err error
		if ca, keyPEM, err = issueCA(o, now); err != nil {
			return nil, nil, err
		}
		out[CAKeyKey] = keyPEM
	}

	bundle := []*x509.Certificate{ca.Leaf}
	for _, c := range cur.bundle {
		if c.IsCA && now.Before(c.NotAfter) && !slices.ContainsFunc(bundle, c.Equal) {
			bundle = append(bundle, c)
		}
	}
	bundlePEM, err := cert.EncodeCertificates(bundle...)
	if err != nil {
		return nil, nil, err
	}
	out[CACertKey] = bundlePEM

	alt := o.altNames()
	s := cur.serving
	// Whether every client has had time to get the active CA: not when it is
	// created in this pass, nor before the webhook configurations carry it and
	// CAPublishDelay has passed.
	caTrusted := outgoing == nil && published && !now.Before(ca.Leaf.NotBefore.Add(backdate+o.CAPublishDelay))
	earlier := s != nil && s.Leaf.CheckSignatureFrom(ca.Leaf) != nil // signed by an earlier CA
	replace := s == nil || !servingValid(s.Leaf, bundle, alt, now, o.RenewFraction)
	if !replace && earlier {
		// Signed by an earlier CA still in the bundle: switch once every API
		// server has had time to see the active CA.
		replace = caTrusted
	}
	signer := ca
	if replace && !caTrusted && (earlier || outgoing != nil) {
		// The active CA is not trusted yet: keep a serving certificate that still
		// verifies, due or not, else sign with the outgoing CA while there is one.
		if s != nil && verifiesFor(s.Leaf, bundle, alt, now) {
			replace = false
		} else if outgoing != nil {
			signer = outgoing
		}
	}
	if replace {
		if len(cur.data[TLSCertKey]) > 0 {
			rotated = append(rotated, metrics.CertificateServing)
		}
		certPEM, keyPEM, err := issueServing(o, now, alt, signer)
		if err != nil {
			return nil, nil, err
		}
		out[TLSCertKey], out[TLSKeyKey] = certPEM, keyPEM
	}

	if maps.EqualFunc(out, cur.data, bytes.Equal) {
		return nil, nil, nil
	}
	return out, rotated, nil
}

// issueCA returns a new self-signed CA named "<o.CAName>@<now in Unix seconds>", valid
// for o.CAValidity from now (backdated, see issue), and its key in PEM. Its error
// starts "certs: creating a CA".
func issueCA(o *Options, now time.Time) (*tls.Certificate, []byte, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", o.CAName, now.Unix())},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	ca, _, keyPEM, err := issue(tmpl, now, o.CAValidity, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: creating a CA: %w", err)
	}
	return ca, keyPEM, nil
}

// issueServing returns a new serving certificate for alt's DNS names and IPs (its
// common name the first DNS name, else the first IP), signed by ca and valid for
// o.ServingValidity from now but not past ca's expiry (see issue), and its key, both in
// PEM. Its error starts "certs: creating a serving certificate".
func issueServing(o *Options, now time.Time, alt cert.AltNames, ca *tls.Certificate) (certPEM, keyPEM []byte, err error) {
	name := ""
	if len(alt.DNSNames) > 0 {
		name = alt.DNSNames[0]
	} else {
		name = alt.IPs[0].String()
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              alt.DNSNames,
		IPAddresses:           alt.IPs,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if _, certPEM, keyPEM, err = issue(tmpl, now, o.ServingValidity, ca); err != nil {
		return nil, nil, fmt.Errorf("certs: creating a serving certificate: %w", err)
	}
	return certPEM, keyPEM, nil
}

// servingValid reports whether leaf is a serving certificate valid at now
// under a CA of bundle, carrying every name of alt, and not yet due for
// renewal.
func servingValid(leaf *x509.Certificate, bundle []*x509.Certificate, alt cert.AltNames, now time.Time, fraction float64) bool {
	return verifiesFor(leaf, bundle, alt, now) && !due(leaf, now, fraction)
}

// verifiesFor reports whether leaf is a serving certificate valid at now under a
// CA of bundle and carrying every name of alt, due for renewal or not.
func verifiesFor(leaf *x509.Certificate, bundle []*x509.Certificate, alt cert.AltNames, now time.Time) bool {
	roots := x509.NewCertPool()
	for _, c := range bundle {
		roots.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := leaf.Verify(opts); err != nil {
		return false
	}
	for _, name := range alt.DNSNames {
		if !slices.Contains(leaf.DNSNames, name) {
			return false
		}
	}
	for _, ip := range alt.IPs {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// renewAt returns the time at which c is due for renewal: fraction of the way from
// its issue to its NotAfter. The Manager backdates NotBefore by backdate (clock skew),
// so it issued c at NotBefore + backdate; measured from NotBefore instead, a certificate
// living less than backdate/(1-fraction) (15 minutes at 2/3) would be due as soon as it
// was issued, and renewed in a loop. A certificate shorter than backdate (not the
// Manager's) is measured from its NotBefore.
func renewAt(c *x509.Certificate, fraction float64) time.Time {
	issued := c.NotBefore.Add(backdate)
	if !issued.Before(c.NotAfter) {
		issued = c.NotBefore
	}
	return issued.Add(time.Duration(fraction * float64(c.NotAfter.Sub(issued))))
}

func due(c *x509.Certificate, now time.Time, fraction float64) bool {
	return !now.Before(renewAt(c, fraction))
}

// issue creates an ECDSA P-256 key and a certificate for it from tmpl, valid
// from now (backdated) for validity but not past parent's expiry, signed by
// parent, or self-signed when parent is nil. It returns the pair (Leaf set)
// and both in PEM.
//
// client-go's cert.NewSelfSignedCACert fixes a CA's validity at ten years from
// the wall clock and offers nothing to sign a leaf with a given CA; this is
// the part of X.509 it lacks. Keys and PEM encoding are client-go's.
func issue(tmpl *x509.Certificate, now time.Time, validity time.Duration, parent *tls.Certificate) (*tls.Certificate, []byte, []byte, error) {
	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, nil, nil, err
	}
	parsed, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, nil, err
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, nil, nil, fmt.Errorf("key of type %T cannot sign", parsed)
	}
	// A positive serial of at most 128 bits, within RFC 5280's 20 octets.
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl.SerialNumber = serial.Add(serial, big.NewInt(1))
	tmpl.NotBefore = now.Add(-backdate).UTC()
	tmpl.NotAfter = now.Add(validity).UTC()
	signerCert, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert = parent.Leaf
		if signerKey, ok = parent.PrivateKey.(crypto.Signer); !ok {
			return nil, nil, nil, fmt.Errorf("CA key of type %T cannot sign", parent.PrivateKey)
		}
		if tmpl.NotAfter.After(parent.Leaf.NotAfter) {
			tmpl.NotAfter = parent.Leaf.NotAfter
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		return nil, nil, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM, err := cert.EncodeCertificates(leaf)
	if err != nil {
		return nil, nil, nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, certPEM, keyPEM, nil
}
