package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2/ktesting"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// providedCerts writes files into a new certDir and returns the Provided webhook
// configuration reading it.
func providedCerts(t *testing.T, files map[string][]byte) configv1alpha1.WebhookConfiguration {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return configv1alpha1.WebhookConfiguration{Certificates: configv1alpha1.WebhookCertificates{
		Mode: configv1alpha1.CertificatesProvided, CertDir: dir}}
}

// leafOnly returns a serving certificate signed by a CA that is written nowhere, and its
// key, both PEM.
func leafOnly(t *testing.T) ([]byte, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "corporate-ca"}, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "trainyard-webhook.trainyard-system.svc"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := cert.EncodeCertificates(leaf)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// Issue 23: provided certificates without ca.crt, the leaf followed by its CA in
// tls.crt. The CA ConfigMap the trainer pods mount is published, holding that CA.
func TestProvidedCertificatesWithoutCACertPublishTheCA(t *testing.T) {
	chain, key, err := cert.GenerateSelfSignedCertKey("trainyard-webhook.trainyard-system.svc", nil, nil) // leaf, then its CA
	if err != nil {
		t.Fatal(err)
	}
	certs, err := cert.ParseCertsPEM(chain)
	if err != nil || len(certs) != 2 {
		t.Fatalf("GenerateSelfSignedCertKey: %d certificates, %v; want the leaf and its CA", len(certs), err)
	}
	wantCA, err := cert.EncodeCertificates(certs[1])
	if err != nil {
		t.Fatal(err)
	}
	kube := kubefake.NewClientset()
	sc, err := newServingCertificate(providedCerts(t, map[string][]byte{"tls.crt": chain, "tls.key": key}), true, "trainyard-system", kube, nil, caCopies{})
	if err != nil {
		t.Fatal(err)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := idx.Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tj"}}); err != nil {
		t.Fatal(err)
	}
	p, err := progress.NewCAPublisher(progress.CAPublisherOptions{Client: kube, Bundle: sc.CABundle,
		TrainJobs: progress.NamespaceIndex{Indexer: idx}, NotReadyRetry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sc.start(ctx, logger)
	go func() { _ = p.Run(ctx) }()
	var got string
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		cm, err := kube.CoreV1().ConfigMaps("team-a").Get(ctx, wire.CAConfigMapName, metav1.GetOptions{})
		if err == nil {
			got = cm.Data[wire.CAConfigMapKey]
		}
		return err == nil, nil
	}); err != nil {
		t.Fatalf("ConfigMap team-a/%s never published: trainer pods would wait for it forever", wire.CAConfigMapName)
	}
	if got != string(wantCA) {
		t.Errorf("published ca.crt:\n%s\nwant tls.crt's CA:\n%s", got, wantCA)
	}
}

func TestProvidedCertificatesCABundle(t *testing.T) {
	leaf, leafKey := leafOnly(t)

	t.Run("ca.crt is published as is", func(t *testing.T) {
		chain, key, err := cert.GenerateSelfSignedCertKey("a.example", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		certs, err := cert.ParseCertsPEM(chain)
		if err != nil {
			t.Fatal(err)
		}
		leafPEM, _ := cert.EncodeCertificates(certs[0])
		caPEM, _ := cert.EncodeCertificates(certs[1])
		sc, err := newServingCertificate(providedCerts(t, map[string][]byte{"tls.crt": leafPEM, "tls.key": key, "ca.crt": caPEM}), true, "ns", nil, nil, caCopies{})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(sc.CABundle()); got != string(caPEM) {
			t.Errorf("CABundle %q, want ca.crt %q", got, caPEM)
		}
	})

	t.Run("a self-signed certificate is its own CA", func(t *testing.T) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		self, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "trainyard-webhook.trainyard-system.svc"}, key)
		if err != nil {
			t.Fatal(err)
		}
		selfPEM, _ := cert.EncodeCertificates(self)
		keyPEM, _ := keyutil.MarshalPrivateKeyToPEM(key)
		sc, err := newServingCertificate(providedCerts(t, map[string][]byte{"tls.crt": selfPEM, "tls.key": keyPEM}), true, "ns", nil, nil, caCopies{})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(sc.CABundle()); got != string(selfPEM) {
			t.Errorf("CABundle %q, want tls.crt %q", got, selfPEM)
		}
	})

	t.Run("a leaf without its CA is refused, naming the field and the fix", func(t *testing.T) {
		cfg := providedCerts(t, map[string][]byte{"tls.crt": leaf, "tls.key": leafKey})
		_, err := newServingCertificate(cfg, true, "ns", nil, nil, caCopies{})
		if err == nil {
			t.Fatal("no error: the controller would start and trainer pods wait for a ConfigMap that never comes")
		}
		for _, want := range []string{
			"webhook.certificates.certDir (webhook.certificates.mode Provided): no CA certificate to publish in " + cfg.Certificates.CertDir + ": ",
			`no ca.crt, and tls.crt's leaf "CN=trainyard-webhook.trainyard-system.svc" (its only certificate) was issued by "CN=corporate-ca"`,
			"ConfigMap " + wire.CAConfigMapName,
			"Fix: add ca.crt to certDir holding the CA that signed tls.crt",
			"append the issuing CA certificates to tls.crt after the leaf",
			`statusServer.bindAddress "0"`,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q\nlacks %q", err, want)
			}
		}
	})

	t.Run("without the progress server, no CA is needed", func(t *testing.T) {
		sc, err := newServingCertificate(providedCerts(t, map[string][]byte{"tls.crt": leaf, "tls.key": leafKey}), false, "ns", nil, nil, caCopies{})
		if err != nil {
			t.Fatal(err)
		}
		if !sc.Ready() || sc.CABundle() != nil {
			t.Errorf("Ready %v, CABundle %q; want the pair served and no bundle", sc.Ready(), sc.CABundle())
		}
	})
}
