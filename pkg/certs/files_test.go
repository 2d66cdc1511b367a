package certs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
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
