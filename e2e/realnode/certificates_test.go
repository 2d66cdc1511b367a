package realnode

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
)

// progressServerNames are the DNS names of the progress server's Service that a
// provided serving certificate must cover: the injected URL's host
// (<webhook.serviceName>.<controller namespace>.svc, the namespace "default" outside a
// pod) and its fully qualified form.
var progressServerNames = []string{"trainyard-webhook.default.svc", "trainyard-webhook.default.svc.cluster.local"}

// progressCAConfigMap is the ConfigMap of the progress server's CA the controller
// writes into each namespace with trainer pods (docs/design/progress.md).
const progressCAConfigMap = "trainyard-status-server-ca"

// TestTrainerTrustsTheProgressServerInEachCertificateMode: whatever the certificate
// mode, a trainer pod mounts the CA the controller publishes (the pod starts only if
// the ConfigMap exists), that CA verifies the progress server's certificate for the
// injected URL's host, and the report lands. Modes: self-managed (the default);
// provided with ca.crt; provided without ca.crt, the CA taken from the chain in
// tls.crt; provided without ca.crt, a self-signed tls.crt its own CA.
func TestTrainerTrustsTheProgressServerInEachCertificateMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		// files writes the certDir of mode Provided and returns the CA the trainer
		// must be given, in PEM; nil runs self-managed certificates.
		files func(t *testing.T, dir string) []byte
	}{
		{name: "self-managed"},
		{name: "provided with ca.crt", files: func(t *testing.T, dir string) []byte {
			ca, caKey := newCertificate(t, nil, nil, nil)
			leaf, leafKey := newCertificate(t, ca, caKey, progressServerNames)
			writeFiles(t, dir, map[string][]byte{"ca.crt": pemCert(ca), "tls.crt": pemCert(leaf), "tls.key": pemKey(t, leafKey)})
			return pemCert(ca)
		}},
		{name: "provided, the CA in tls.crt's chain", files: func(t *testing.T, dir string) []byte {
			ca, caKey := newCertificate(t, nil, nil, nil)
			leaf, leafKey := newCertificate(t, ca, caKey, progressServerNames)
			writeFiles(t, dir, map[string][]byte{"tls.crt": append(pemCert(leaf), pemCert(ca)...), "tls.key": pemKey(t, leafKey)})
			return pemCert(ca)
		}},
		{name: "provided, a self-signed tls.crt", files: func(t *testing.T, dir string) []byte {
			leaf, leafKey := newCertificate(t, nil, nil, progressServerNames)
			writeFiles(t, dir, map[string][]byte{"tls.crt": pemCert(leaf), "tls.key": pemKey(t, leafKey)})
			return pemCert(leaf)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg ctrlproc.Config
			var wantCA []byte
			if tc.files != nil {
				cfg.ProvidedCertDir = t.TempDir()
				wantCA = tc.files(t, cfg.ProvidedCertDir)
			}
			e := newEnvWith(t, cfg)
			tj := reporterTrainJob(e.ns, "reporter", "")
			e.create(t, tj)
			e.waitComplete(t, tj.Name)
			if log := podLog(t, e.c, e.ns, e.trainerPods(t, tj.Name)[0].Name, "node"); !strings.Contains(log, "report to own: HTTP 200") {
				t.Fatalf("the trainer's report was not accepted; its log:\n%s", log)
			}
			e.waitReported(t, tj.Name)
			if wantCA == nil {
				return
			}
			cm, err := e.c.Client().CoreV1().ConfigMaps(e.ns).Get(context.Background(), progressCAConfigMap, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := cm.Data["ca.crt"]; !bytes.Contains([]byte(got), bytes.TrimSpace(wantCA)) {
				t.Errorf("ConfigMap %s holds ca.crt\n%s\nwant it to hold the provided CA\n%s", progressCAConfigMap, got, wantCA)
			}
		})
	}
}

// newCertificate returns a certificate and its key: a CA when dnsNames is nil, else a
// serving certificate for dnsNames; signed by parent (self-signed when parent is nil).
func newCertificate(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, dnsNames []string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "trainyard e2e CA"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		IsCA:         true, BasicConstraintsValid: true,
	}
	if dnsNames != nil {
		tmpl.Subject.CommonName = dnsNames[0]
		tmpl.DNSNames = dnsNames
		tmpl.IsCA = false
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func pemKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
