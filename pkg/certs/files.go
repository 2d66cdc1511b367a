package certs

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Files serves a certificate provided by someone else — cert-manager, or a user's
// Secret mounted into the pod — as tls.crt and tls.key in Dir. The kubelet replaces a
// mounted Secret's files when the Secret changes; Files notices by their modification
// time and loads the new pair at the next handshake, so a renewal needs no restart. It
// writes nothing and needs no RBAC.
type Files struct {
	Dir string

	mu      sync.Mutex
	loaded  *tls.Certificate
	modTime time.Time // the newer of the two files' modification times when loaded
}

// GetCertificate returns the pair in Dir, reloading it when a file changed since the
// last load. Errors: a file missing or unreadable, or a pair that does not parse; a
// pair loaded earlier is kept (and returned) while the new files are half written.
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	certFile, keyFile := filepath.Join(f.Dir, TLSCertKey), filepath.Join(f.Dir, TLSKeyKey)
	modTime, err := newestModTime(certFile, keyFile)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && (f.loaded == nil || modTime.After(f.modTime)) {
		var pair tls.Certificate
		if pair, err = tls.LoadX509KeyPair(certFile, keyFile); err == nil {
			f.loaded, f.modTime = &pair, modTime
		}
	}
	if f.loaded == nil {
		return nil, fmt.Errorf("loading the serving certificate from %s: %w", f.Dir, err)
	}
	return f.loaded, nil
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
