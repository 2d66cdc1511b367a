package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the throw-away public key infrastructure of one cluster: a CA that
// signs the API server's and the JobSet webhook's serving certificates, and
// the service-account token signing key. Everything lives in dir.
type pki struct {
	dir    string
	caPEM  []byte
	caCert *x509.Certificate
	caKey  crypto.Signer
}

// certValidity bounds the lifetime of every certificate; a local cluster
// lives minutes to days.
const certValidity = 30 * 24 * time.Hour

// newPKI creates dir and a fresh CA in it (ca.crt).
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pki dir: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "trainyard-local-ca"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: cert, caKey: key, caPEM: pemBlock("CERTIFICATE", der)}
	return p, os.WriteFile(p.caFile(), p.caPEM, 0o644)
}

func (p *pki) caFile() string { return filepath.Join(p.dir, "ca.crt") }

// servingCert issues a TLS server certificate for 127.0.0.1 plus the given
// DNS names (an IP address among them becomes an IP SAN) and writes <dir>/<name>/tls.crt and tls.key (the file names
// controller-runtime webhooks expect). It returns that folder.
func (p *pki) servingCert(name string, dnsNames ...string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generating %s key: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	for _, n := range dnsNames {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return "", fmt.Errorf("signing %s certificate: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(p.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pemBlock("CERTIFICATE", der), 0o644); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "tls.key"), pemBlock("PRIVATE KEY", keyDER), 0o600)
}

// serviceAccountKey writes an RSA key used both to sign and to verify
// service-account tokens, and returns its path.
func (p *pki) serviceAccountKey() (string, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", fmt.Errorf("generating service-account key: %w", err)
	}
	path := p.serviceAccountKeyFile()
	return path, os.WriteFile(path, pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)), 0o600)
}

// serviceAccountKeyFile is where serviceAccountKey writes the key.
func (p *pki) serviceAccountKeyFile() string { return filepath.Join(p.dir, "sa.key") }

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// randomToken returns 32 hex characters of randomness, used as the admin
// bearer token.
func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newCertPool returns a pool holding the PEM certificates in caPEM.
func newCertPool(caPEM []byte) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return pool
}

// clientCert issues a TLS client certificate for user in groups (the API
// server maps the subject's CommonName to the user name and its
// Organizations to groups) and returns it and its key, PEM-encoded.
func (p *pki) clientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating %s key: %w", user, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing %s certificate: %w", user, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER), nil
}
