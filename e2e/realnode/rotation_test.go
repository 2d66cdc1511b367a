package realnode

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	"github.com/trainyard/trainyard/e2e/training"
)

// loopReportScript posts REPORTS reports, one every 2 s, each over a new TLS context
// built from the mounted CA file (as a trainer that reads it per request does), and
// prints "report <i>: HTTP <code>" or "report <i>: failed: <reason>"; it goes on
// after a failure, and exits non-zero when any report failed.
const loopReportScript = `import datetime, json, os, ssl, time, urllib.error, urllib.request

url = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
token_file = os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]
ca_file = os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"]
reports = int(os.environ["REPORTS"])
failed = 0
for i in range(1, reports + 1):
    ctx = ssl.create_default_context(cafile=ca_file)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = json.dumps({"trainerStatus": {"progressPercentage": i * 100 // (reports + 1), "lastUpdatedTime": now}}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": "Bearer " + open(token_file).read().strip(), "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            print(f"report {i}: HTTP {resp.status}", flush=True)
            failed += resp.status != 200
    except urllib.error.HTTPError as e:
        print(f"report {i}: HTTP {e.code}", flush=True)
        failed += 1
    except Exception as e:
        print(f"report {i}: failed: {e}", flush=True)
        failed += 1
    time.sleep(2)
raise SystemExit(1 if failed else 0)
`

// TestTrainerKeepsReportingAcrossACARenewal (issue 41): a trainer pod on the real node
// reports every 2 s while the provided certificate is renewed under a renewed CA — the
// same subject and key, a new certificate, as cert-manager renews the chart's own CA
// (privateKey.rotationPolicy: Never) — and ca.crt holds only the new CA certificate,
// as cert-manager's CA issuer writes it. The controller serves the new pair at the
// next handshake, adds the new CA to the published bundle (the old one stays), and
// every report before, during and after lands.
func TestTrainerKeepsReportingAcrossACARenewal(t *testing.T) {
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca1 := caCertificate(t, caKey, time.Now().Add(-time.Hour))
	leaf1, leaf1Key := newCertificate(t, ca1, caKey, progressServerNames)
	writeFiles(t, dir, map[string][]byte{"ca.crt": pemCert(ca1), "tls.crt": pemCert(leaf1), "tls.key": pemKey(t, leaf1Key)})
	e := newEnvWith(t, ctrlproc.Config{ProvidedCertDir: dir})

	const reports = 45
	tj := training.ShellTrainJob(e.ns, "rotation", training.TorchRuntime, 1,
		training.InlineScript("/tmp/report.py", loopReportScript)+"python3 /tmp/report.py",
		corev1.EnvVar{Name: "REPORTS", Value: fmt.Sprint(reports)})
	e.create(t, tj)
	reported := func(ctx context.Context) (int, string) {
		pods := e.trainerPods(t, tj.Name)
		if len(pods) == 0 {
			return 0, "no pod yet"
		}
		data, err := e.c.Client().CoreV1().Pods(e.ns).GetLogs(pods[0].Name, &corev1.PodLogOptions{Container: "node"}).DoRaw(ctx)
		if err != nil {
			return 0, err.Error()
		}
		return len(regexp.MustCompile(`(?m)^report \d+: HTTP 200$`).FindAll(data, -1)), string(data)
	}
	cluster.Eventually(t, 5*time.Minute, "three reports accepted before the renewal", func(ctx context.Context) (bool, string) {
		n, log := reported(ctx)
		return n >= 3, log
	})

	// The renewal: a new CA certificate for the same key, a new leaf it signs, and
	// ca.crt holding the new CA only.
	ca2 := caCertificate(t, caKey, time.Now().Add(-time.Minute))
	leaf2, leaf2Key := newCertificate(t, ca2, caKey, progressServerNames)
	writeFiles(t, dir, map[string][]byte{"ca.crt": pemCert(ca2), "tls.key": pemKey(t, leaf2Key), "tls.crt": pemCert(leaf2)})
	before, _ := reported(context.Background())
	cluster.Eventually(t, time.Minute, "the progress server serving the renewed certificate", func(ctx context.Context) (bool, string) {
		served, err := servedCertificate(e.ctrl.ProgressAddr)
		if err != nil {
			return false, err.Error()
		}
		return served.Equal(leaf2), "serving serial " + served.SerialNumber.String()
	})
	cluster.Eventually(t, time.Minute, "the CA ConfigMap holding the new and the previous CA", func(ctx context.Context) (bool, string) {
		cm, err := e.c.Client().CoreV1().ConfigMaps(e.ns).Get(ctx, progressCAConfigMap, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := []byte(cm.Data["ca.crt"])
		return bytes.Contains(got, bytes.TrimSpace(pemCert(ca2))) && bytes.Contains(got, bytes.TrimSpace(pemCert(ca1))), string(got)
	})

	e.waitComplete(t, tj.Name)
	n, log := reported(context.Background())
	if n != reports || strings.Contains(log, "failed") {
		t.Fatalf("%d of %d reports accepted (%d before the renewal); the trainer's log:\n%s", n, reports, before, log)
	}
	t.Logf("%d reports accepted, %d of them after the renewal", n, n-before)
}

// caCertificate returns a CA certificate for key, named as newCertificate's CAs, valid
// from notBefore for a day: two calls make two certificates of one CA.
func caCertificate(t *testing.T, key *ecdsa.PrivateKey, notBefore time.Time) *x509.Certificate {
	t.Helper()
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "trainyard e2e CA"},
		NotBefore: notBefore, NotAfter: notBefore.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// servedCertificate returns the certificate a TLS server at addr presents.
func servedCertificate(addr string) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the served certificate only
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}
