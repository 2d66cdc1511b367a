package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
	clocktesting "k8s.io/utils/clock/testing"
)

// Files serves the mounted pair and picks up a replacement without a restart; a half
// written replacement keeps the last good pair.
func TestFilesReloadsAChangedPair(t *testing.T) {
	dir := t.TempDir()
	write := func(certPEM, keyPEM []byte, at time.Time) {
		t.Helper()
		for name, data := range map[string][]byte{TLSCertKey: certPEM, TLSKeyKey: keyPEM} {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := &Files{Dir: dir}
	if f.Ready() {
		t.Fatal("Ready with no files")
	}
	if _, err := f.GetCertificate(nil); err == nil {
		t.Fatal("GetCertificate with no files: no error")
	}

	first, firstKey, err := cert.GenerateSelfSignedCertKey("first.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, secondKey, err := cert.GenerateSelfSignedCertKey("second.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	write(first, firstKey, t0)
	if got := servedBy(t, f); !bytes.Equal(got, leafDER(t, first)) {
		t.Fatal("not serving the first pair")
	}
	write(second, secondKey, t0.Add(time.Minute))
	if got := servedBy(t, f); !bytes.Equal(got, leafDER(t, second)) {
		t.Fatal("not serving the replaced pair")
	}
	write([]byte("half written"), secondKey, t0.Add(2*time.Minute))
	if got := servedBy(t, f); !bytes.Equal(got, leafDER(t, second)) {
		t.Fatal("a broken replacement replaced the last good pair")
	}
	if cfg := f.TLSConfig(); cfg.MinVersion < 0x0303 || cfg.GetCertificate == nil {
		t.Errorf("TLSConfig = %+v, want TLS 1.2+ through GetCertificate", cfg)
	}
}

func servedBy(t *testing.T, f *Files) []byte {
	t.Helper()
	pair, err := f.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pair.Certificate[0]
}

func leafDER(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	certs, err := cert.ParseCertsPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0].Raw
}

// issue 41: a renewed pair whose CA has not reached the clients yet is held back while
// the served one is valid, and served once Trusted accepts it — or once the served one
// expires.
func TestFilesHoldsARenewalUntilTrusted(t *testing.T) {
	pki := testPKI{t: t, now: time.Now()}
	dir := t.TempDir()
	first, firstKey := pki.leaf(pki.ca("first", nil))
	// A new CA of the same name: a new key, as cert-manager's rotationPolicy Always makes.
	second, secondKey := pki.leaf(pki.ca("first", nil))
	secondCA := pki.ca("second", nil)
	third, thirdKey := pki.leaf(secondCA)
	fourth, fourthKey := pki.leaf(secondCA)
	t0 := pki.now.Add(-time.Hour)
	write := func(c *tls.Certificate, key []byte, at time.Time) {
		t.Helper()
		writeFiles(t, dir, map[string][]byte{TLSCertKey: pemOf(t, c), TLSKeyKey: key})
		for _, name := range []string{TLSCertKey, TLSKeyKey} {
			if err := os.Chtimes(filepath.Join(dir, name), at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	var trust atomic.Bool
	var asked atomic.Int32
	clk := clocktesting.NewFakeClock(pki.now)
	f := &Files{Dir: dir, Clock: clk, Trusted: func(chain []*x509.Certificate) bool {
		asked.Add(1)
		return trust.Load()
	}}

	write(first, firstKey, t0)
	if got := servedBy(t, f); !bytes.Equal(got, first.Certificate[0]) || asked.Load() != 0 {
		t.Fatalf("first pair: served it %v, Trusted asked %d times; want served without asking", bytes.Equal(got, first.Certificate[0]), asked.Load())
	}
	write(second, secondKey, t0.Add(time.Minute))
	for range 2 {
		if got := servedBy(t, f); !bytes.Equal(got, first.Certificate[0]) {
			t.Fatal("a renewal clients do not trust yet replaced the served pair")
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("Trusted asked %d times in two handshakes within a second, want once", n)
	}
	trust.Store(true)
	clk.Step(trustedAskInterval)
	if got := servedBy(t, f); !bytes.Equal(got, second.Certificate[0]) {
		t.Fatal("the renewal not served once trusted")
	}

	// Never trusted: served once the served pair expires (12 h), not before.
	trust.Store(false)
	write(third, thirdKey, t0.Add(2*time.Minute))
	clk.Step(11 * time.Hour)
	if got := servedBy(t, f); !bytes.Equal(got, second.Certificate[0]) {
		t.Fatal("an untrusted renewal replaced a valid served pair")
	}
	clk.Step(2 * time.Hour)
	if got := servedBy(t, f); !bytes.Equal(got, third.Certificate[0]) {
		t.Fatal("the renewal not served once the served pair expired")
	}

	// A renewal by the CA that issued the served certificate: served at once, without
	// asking (every client that verifies the served one verifies it).
	asked.Store(0)
	write(fourth, fourthKey, t0.Add(3*time.Minute))
	if got := servedBy(t, f); !bytes.Equal(got, fourth.Certificate[0]) || asked.Load() != 0 {
		t.Fatalf("a renewal by the same CA: served %v, Trusted asked %d times; want served at once", bytes.Equal(got, fourth.Certificate[0]), asked.Load())
	}
}
