package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

// testPKI issues certificates with issue, the Manager's own minting.
type testPKI struct {
	t   *testing.T
	now time.Time
}

// ca returns a CA named name, signed by parent (self-signed when nil).
func (p testPKI) ca(name string, parent *tls.Certificate) *tls.Certificate {
	p.t.Helper()
	c, _, _, err := issue(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, p.now, 24*time.Hour, parent)
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// leaf returns a serving certificate for testDNSName signed by parent (self-signed when
// nil), and its key's PEM.
func (p testPKI) leaf(parent *tls.Certificate) (*tls.Certificate, []byte) {
	p.t.Helper()
	c, _, keyPEM, err := issue(&x509.Certificate{Subject: pkix.Name{CommonName: testDNSName}, DNSNames: []string{testDNSName},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true},
		p.now, 12*time.Hour, parent)
	if err != nil {
		p.t.Fatal(err)
	}
	return c, keyPEM
}

// pemOf encodes certificates as PEM, in order.
func pemOf(t *testing.T, certs ...*tls.Certificate) []byte {
	t.Helper()
	var out []byte
	for _, c := range certs {
		b, err := cert.EncodeCertificates(c.Leaf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// writeFiles replaces dir's files by files (name to content); a nil content removes the
// file. Like the kubelet's, each replacement gets a later modification time.
func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if data == nil {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// subjects returns the common names of a PEM bundle's certificates.
func subjects(t *testing.T, pemBytes []byte) []string {
	t.Helper()
	var out []string
	for _, c := range parseBundle(t, pemBytes) {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

func TestReadProvidedCA(t *testing.T) {
	pki := testPKI{t: t, now: time.Now()}
	root := pki.ca("root", nil)
	intermediate := pki.ca("intermediate", root)
	other := pki.ca("other", nil)
	byRoot, byRootKey := pki.leaf(root)
	byIntermediate, byIntermediateKey := pki.leaf(intermediate)
	selfSigned, selfSignedKey := pki.leaf(nil)

	for name, tc := range map[string]struct {
		files    map[string][]byte
		source   string
		subjects []string // of the bundle
		warning  string   // a part of ProvidedCA.Warning; "" wants none
		err      string   // a part of the error; "" wants none
		noCA     bool     // the error is ErrNoProvidedCA
	}{
		"ca.crt, as is": {
			files:  map[string][]byte{TLSCertKey: pemOf(t, byRoot), TLSKeyKey: byRootKey, CACertKey: pemOf(t, root)},
			source: CAFromCACertFile, subjects: []string{"root"},
		},
		"ca.crt wins over the chain": {
			files:  map[string][]byte{TLSCertKey: pemOf(t, byIntermediate, intermediate), TLSKeyKey: byIntermediateKey, CACertKey: pemOf(t, root)},
			source: CAFromCACertFile, subjects: []string{"root"},
		},
		"ca.crt of another CA: published, with a warning": {
			files:  map[string][]byte{TLSCertKey: pemOf(t, byRoot), TLSKeyKey: byRootKey, CACertKey: pemOf(t, other)},
			source: CAFromCACertFile, subjects: []string{"other"}, warning: "ca.crt does not verify tls.crt",
		},
		"leaf, then its chain to the root": {
			files:  map[string][]byte{TLSCertKey: pemOf(t, byIntermediate, intermediate, root), TLSKeyKey: byIntermediateKey},
			source: CAFromChain, subjects: []string{"intermediate", "root"},
		},
		"leaf and its issuer": {
			files:  map[string][]byte{TLSCertKey: pemOf(t, byRoot, root), TLSKeyKey: byRootKey},
			source: CAFromChain, subjects: []string{"root"},
		},
		"leaf and an intermediate only: published, with a warning": {
			files:  map[string][]byte{TLSCertKey: pemOf(t, byIntermediate, intermediate), TLSKeyKey: byIntermediateKey},
			source: CAFromChain, subjects: []string{"intermediate"}, warning: `ends with "CN=intermediate", which is not self-signed`,
		},
		"empty ca.crt is no ca.crt": {
			files:  map[string][]byte{TLSCertKey: pemOf(t, byRoot, root), TLSKeyKey: byRootKey, CACertKey: []byte("\n")},
			source: CAFromChain, subjects: []string{"root"},
		},
		"self-signed leaf": {
			files:  map[string][]byte{TLSCertKey: pemOf(t, selfSigned), TLSKeyKey: selfSignedKey},
			source: CAFromSelfSigned, subjects: []string{testDNSName},
		},
		"leaf without its issuer": {
			files: map[string][]byte{TLSCertKey: pemOf(t, byRoot), TLSKeyKey: byRootKey},
			err:   `no ca.crt, and tls.crt's leaf "CN=` + testDNSName + `" (its only certificate) was issued by "CN=root"`, noCA: true,
		},
		"leaf followed by a certificate that did not sign it": {
			files: map[string][]byte{TLSCertKey: pemOf(t, byIntermediate, root), TLSKeyKey: byIntermediateKey},
			err:   `(followed by 1 certificates, the first of which did not sign it) was issued by "CN=intermediate"`, noCA: true,
		},
		"ca.crt that is no certificate": {
			files: map[string][]byte{TLSCertKey: pemOf(t, byRoot), TLSKeyKey: byRootKey, CACertKey: []byte("not PEM")},
			err:   "ca.crt holds no PEM certificate",
		},
		"no tls.crt and no ca.crt": {
			files: map[string][]byte{},
			err:   "tls.crt: no such file or directory",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			ca, err := ReadProvidedCA(dir)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if got := errors.Is(err, ErrNoProvidedCA); got != tc.noCA {
					t.Errorf("errors.Is(ErrNoProvidedCA) = %v, want %v", got, tc.noCA)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ca.Source != tc.source {
				t.Errorf("Source %q, want %q", ca.Source, tc.source)
			}
			if got := subjects(t, ca.PEM); strings.Join(got, ",") != strings.Join(tc.subjects, ",") {
				t.Errorf("bundle %v, want %v", got, tc.subjects)
			}
			if (tc.warning == "") != (ca.Warning == "") || !strings.Contains(ca.Warning, tc.warning) {
				t.Errorf("Warning %q, want one containing %q", ca.Warning, tc.warning)
			}
			// Whatever the rule, a client trusting the bundle only verifies the
			// served chain (Go accepts an intermediate as anchor).
			if tc.warning == "" {
				chain, err := cert.ParseCertsPEM(tc.files[TLSCertKey])
				if err != nil {
					t.Fatal(err)
				}
				if w := verifies(chain, parseBundle(t, ca.PEM)); w != "" {
					t.Errorf("the bundle does not verify the served chain: %s", w)
				}
			}
		})
	}
}

// The bundle follows the files: a renewal under a new CA is published (OnChange), files
// that stop yielding a bundle leave the last one published, and ones that yield it again
// are taken.
func TestProvidedCABundleFollowsTheFiles(t *testing.T) {
	pki := testPKI{t: t, now: time.Now()}
	first, second := pki.ca("first", nil), pki.ca("second", nil)
	byFirst, byFirstKey := pki.leaf(first)
	bySecond, bySecondKey := pki.leaf(second)
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, byFirst), TLSKeyKey: byFirstKey, CACertKey: pemOf(t, first)})

	var changes atomic.Int32
	clk := clocktesting.NewFakeClock(pki.now)
	b, err := NewProvidedCABundle(dir, ProvidedCABundleOptions{OnChange: func() { changes.Add(1) }, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.CABundle(), pemOf(t, first)) || b.Current().Source != CAFromCACertFile {
		t.Fatalf("first bundle %v from %q, want [first] from ca.crt", subjects(t, b.CABundle()), b.Current().Source)
	}
	logger, _ := ktesting.NewTestContext(t)
	expect := func(what string, want []byte, source string, wantChanges int32) {
		t.Helper()
		b.check(logger)
		if got := b.CABundle(); !bytes.Equal(got, want) {
			t.Errorf("%s: bundle %v, want %v", what, subjects(t, got), subjects(t, want))
		}
		if got := b.Current().Source; got != source {
			t.Errorf("%s: source %q, want %q", what, got, source)
		}
		if got := changes.Load(); got != wantChanges {
			t.Errorf("%s: OnChange called %d times in all, want %d", what, got, wantChanges)
		}
	}
	expect("unchanged files", pemOf(t, first), CAFromCACertFile, 0)

	// Renewed under a new CA, ca.crt included, as cert-manager writes it: the new CA is
	// added in front, the previous one kept (issue 41: trainer pods must trust both the
	// certificate still served and the next one).
	writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, bySecond), TLSKeyKey: bySecondKey, CACertKey: pemOf(t, second)})
	expect("renewed under a new CA", pemOf(t, second, first), CAFromCACertFile, 1)

	// ca.crt gone, and the leaf's issuer nowhere: the last bundle stays, logged once.
	writeFiles(t, dir, map[string][]byte{CACertKey: nil})
	expect("ca.crt gone", pemOf(t, second, first), CAFromCACertFile, 1)
	expect("ca.crt still gone", pemOf(t, second, first), CAFromCACertFile, 1)

	// The issuer appended to tls.crt: the same CA, from the chain now; not a change.
	writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, bySecond, second)})
	expect("the chain in tls.crt", pemOf(t, second, first), CAFromChain, 1)

	// A self-signed leaf: its own CA, in front of the earlier ones.
	selfSigned, selfSignedKey := pki.leaf(nil)
	writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, selfSigned), TLSKeyKey: selfSignedKey})
	expect("a self-signed leaf", pemOf(t, selfSigned, second, first), CAFromSelfSigned, 2)

	// The earlier CAs leave the bundle when they expire (24 h), not before.
	clk.Step(23 * time.Hour)
	expect("earlier CAs still valid", pemOf(t, selfSigned, second, first), CAFromSelfSigned, 2)
	clk.Step(2 * time.Hour)
	expect("earlier CAs expired", pemOf(t, selfSigned), CAFromSelfSigned, 3)
}

// Trusts accepts a renewed certificate once it verifies under the published bundle and
// that bundle has been in every trainer pod's CA ConfigMap for the delay.
func TestProvidedCABundleTrusts(t *testing.T) {
	pki := testPKI{t: t, now: time.Now()}
	first, second := pki.ca("first", nil), pki.ca("second", nil)
	byFirst, byFirstKey := pki.leaf(first)
	bySecond, bySecondKey := pki.leaf(second)
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, byFirst), TLSKeyKey: byFirstKey, CACertKey: pemOf(t, first)})
	clk := clocktesting.NewFakeClock(pki.now)
	b, err := NewProvidedCABundle(dir, ProvidedCABundleOptions{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var publishedBundle []byte
	var publishedSince time.Time
	trusted := b.Trusts(func(bundle []byte) (time.Time, bool) {
		return publishedSince, publishedBundle != nil && bytes.Equal(bundle, publishedBundle)
	}, time.Minute)

	publishedBundle, publishedSince = b.CABundle(), clk.Now().Add(-time.Hour)
	if !trusted([]*x509.Certificate{byFirst.Leaf}) {
		t.Error("a certificate of the published CA is not trusted")
	}
	if trusted([]*x509.Certificate{bySecond.Leaf}) {
		t.Error("a certificate of a CA that is not in the bundle is trusted")
	}
	logger, _ := ktesting.NewTestContext(t)
	writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, bySecond), TLSKeyKey: bySecondKey, CACertKey: pemOf(t, second)})
	b.check(logger)
	if trusted([]*x509.Certificate{bySecond.Leaf}) {
		t.Error("trusted before the new bundle reached the trainer pods")
	}
	publishedBundle, publishedSince = b.CABundle(), clk.Now()
	if trusted([]*x509.Certificate{bySecond.Leaf}) {
		t.Error("trusted as soon as the new bundle is published, before the delay")
	}
	clk.Step(time.Minute)
	if !trusted([]*x509.Certificate{bySecond.Leaf}) || !trusted([]*x509.Certificate{byFirst.Leaf}) {
		t.Error("the new and the previous CA's certificates are not both trusted once the bundle has been published for the delay")
	}
}

// Run reads the files every Interval and calls OnChange when the bundle changed.
func TestProvidedCABundleRunPollsTheFiles(t *testing.T) {
	pki := testPKI{t: t, now: time.Now()}
	first, second := pki.ca("first", nil), pki.ca("second", nil)
	leaf, key := pki.leaf(first)
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, leaf, first), TLSKeyKey: key})
	clk := clocktesting.NewFakeClock(pki.now)
	changed := make(chan struct{}, 1)
	b, err := NewProvidedCABundle(dir, ProvidedCABundleOptions{Interval: time.Minute, Clock: clk,
		OnChange: func() { changed <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	defer func() { cancel(); <-done }()

	renewed, renewedKey := pki.leaf(second)
	writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, renewed, second), TLSKeyKey: renewedKey})
	if !bytes.Equal(b.CABundle(), pemOf(t, first)) {
		t.Fatal("the bundle changed before Interval passed")
	}
	eventually(t, "Run to wait on the clock", clk.HasWaiters)
	clk.Step(time.Minute)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("OnChange not called after Interval")
	}
	if !bytes.Equal(b.CABundle(), pemOf(t, second, first)) {
		t.Errorf("bundle %v, want [second first]", subjects(t, b.CABundle()))
	}
}

func TestNewProvidedCABundleRefusesALeafWithoutItsCA(t *testing.T) {
	pki := testPKI{t: t, now: time.Now()}
	leaf, key := pki.leaf(pki.ca("elsewhere", nil))
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, leaf), TLSKeyKey: key})
	if _, err := NewProvidedCABundle(dir, ProvidedCABundleOptions{}); !errors.Is(err, ErrNoProvidedCA) {
		t.Fatalf("error %v, want ErrNoProvidedCA", err)
	}
}
