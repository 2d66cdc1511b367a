package realnode

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
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

// peerReportScript posts a report every 2 s, each over a new connection and a TLS
// context built from the mounted CA file, and prints, per report, "report <i>: HTTP
// <code> leaf=<sha256 of the served certificate, 16 hex> cas=<certificates in the CA
// file> t=<unix time>" or "report <i>: failed: <reason> cas=<n> t=<unix time>". It
// stops once AFTER reports were served a certificate other than the first report's, or
// after MAX reports, and exits 0 either way: the test judges the log, and a container
// restarted after a failure would start over with the new certificate as its first.
const peerReportScript = `import datetime, hashlib, http.client, json, os, ssl, time, urllib.parse

url = urllib.parse.urlsplit(os.environ["KUBEFLOW_TRAINER_SERVER_URL"])
path = url.path + ("?" + url.query if url.query else "")
token_file = os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]
ca_file = os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"]
after, limit = int(os.environ["AFTER"]), int(os.environ["MAX"])
first, switched = None, 0
for i in range(1, limit + 1):
    cas = open(ca_file).read().count("BEGIN CERTIFICATE")
    ctx = ssl.create_default_context(cafile=ca_file)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = json.dumps({"trainerStatus": {"progressPercentage": min(i, 99), "lastUpdatedTime": now}})
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=ctx, timeout=10)
    try:
        conn.request("POST", path, body=body, headers={
            "Authorization": "Bearer " + open(token_file).read().strip(), "Content-Type": "application/json"})
        leaf = hashlib.sha256(conn.sock.getpeercert(binary_form=True)).hexdigest()[:16]
        status = conn.getresponse().status
        print(f"report {i}: HTTP {status} leaf={leaf} cas={cas} t={time.time():.3f}", flush=True)
        first = first or leaf
        switched += leaf != first
    except Exception as e:
        print(f"report {i}: failed: {e} cas={cas} t={time.time():.3f}", flush=True)
    finally:
        conn.close()
    if switched >= after:
        break
    time.sleep(2)
`

// providedCAPublishDelay is the test's webhook.certificates.caPublishDelay: the kubelet
// refreshes a mounted ConfigMap at a pod's resync, every syncFrequency (1m) plus up to
// half of it in jitter, so 2 min leave half a minute for a loaded machine.
const providedCAPublishDelay = 2 * time.Minute

// TestTrainerKeepsReportingAcrossAProvidedCARotation (issue 41, finding 5): with
// provided certificates (webhook.certificates.mode Provided, an operator or an external
// tool writing tls.crt, tls.key and ca.crt), a trainer pod on the real node reports
// every 2 s while the files are replaced by a pair under a new CA with a different key,
// ca.crt holding that CA alone. The controller adds the new CA to the trainers' CA
// ConfigMap beside the old one and holds the new pair back until the ConfigMap has
// carried the new CA for caPublishDelay, the time the kubelet takes to refresh the
// trainer's mounted ca.crt; every report before, during and after is accepted, and the
// old CA stays in the bundle after the switch. Without the hold (caPublishDelay 1ms) the
// new pair is served while the pod's ca.crt holds the old CA only, and the reports fail
// with "certificate verify failed: unable to get local issuer certificate" until the
// kubelet refreshes the pod's ca.crt (30 refused over 58 s in a run of 2026-11-29).
func TestTrainerKeepsReportingAcrossAProvidedCARotation(t *testing.T) {
	dir := t.TempDir()
	ca1, ca1Key := newCertificate(t, nil, nil, nil)
	leaf1, leaf1Key := newCertificate(t, ca1, ca1Key, progressServerNames)
	writeFiles(t, dir, map[string][]byte{"ca.crt": pemCert(ca1), "tls.crt": pemCert(leaf1), "tls.key": pemKey(t, leaf1Key)})
	e := newEnvWith(t, ctrlproc.Config{ProvidedCertDir: dir, CAPublishDelay: providedCAPublishDelay})

	const after = 5
	tj := training.ShellTrainJob(e.ns, "rotation", training.TorchRuntime, 1,
		training.InlineScript("/tmp/report.py", peerReportScript)+"python3 /tmp/report.py",
		corev1.EnvVar{Name: "AFTER", Value: fmt.Sprint(after)},
		corev1.EnvVar{Name: "MAX", Value: fmt.Sprint(int((trainingTimeout - time.Minute) / (2 * time.Second)))})
	e.create(t, tj)
	trainerLog := func(ctx context.Context) (string, error) {
		pods := e.trainerPods(t, tj.Name)
		if len(pods) == 0 {
			return "", errors.New("no pod yet")
		}
		data, err := e.c.Client().CoreV1().Pods(e.ns).GetLogs(pods[0].Name, &corev1.PodLogOptions{Container: "node"}).DoRaw(ctx)
		return string(data), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, err := trainerLog(context.Background())
			t.Logf("the trainer's log (%v):\n%s", err, log)
		}
	})
	cluster.Eventually(t, trainingTimeout, "three reports accepted before the rotation", func(ctx context.Context) (bool, string) {
		log, err := trainerLog(ctx)
		if err != nil {
			return false, err.Error()
		}
		accepted := 0
		for _, r := range parseReports(t, log) {
			if r.accepted {
				accepted++
			}
		}
		return accepted >= 3, log
	})

	// The rotation: a new CA with a key of its own, a leaf it signs, ca.crt holding the
	// new CA only.
	ca2, ca2Key := newCertificate(t, nil, nil, nil)
	leaf2, leaf2Key := newCertificate(t, ca2, ca2Key, progressServerNames)
	rotated := time.Now()
	writeFiles(t, dir, map[string][]byte{"ca.crt": pemCert(ca2), "tls.key": pemKey(t, leaf2Key), "tls.crt": pemCert(leaf2)})

	// Until the new pair is served: the CA ConfigMap gains the new CA and keeps the old
	// one, and the old pair is served for caPublishDelay after the ConfigMap got the new
	// CA (the controller's cache sees it no earlier than the API server has it, this test
	// at most slack later).
	var published, switched time.Time
	caConfigMap := func(ctx context.Context) (hasOld, hasNew bool, err error) {
		cm, err := e.c.Client().CoreV1().ConfigMaps(e.ns).Get(ctx, progressCAConfigMap, metav1.GetOptions{})
		if err != nil {
			return false, false, err
		}
		got := []byte(cm.Data["ca.crt"])
		return bytes.Contains(got, bytes.TrimSpace(pemCert(ca1))), bytes.Contains(got, bytes.TrimSpace(pemCert(ca2))), nil
	}
	// slack bounds how late this test sees the ConfigMap change: a poll (250 ms) and
	// the requests of one round on a loaded machine.
	const slack = 5 * time.Second
	cluster.Eventually(t, providedCAPublishDelay+2*time.Minute, "the progress server serving the new pair", func(ctx context.Context) (bool, string) {
		hasOld, hasNew, err := caConfigMap(ctx)
		switch {
		case err != nil:
			return false, err.Error()
		case !hasOld:
			t.Fatalf("%s lost the old CA %.1f s after the rotation, while the old pair may still be served", progressCAConfigMap, time.Since(rotated).Seconds())
		case hasNew && published.IsZero():
			published = time.Now()
		}
		served, err := servedCertificate(e.ctrl.ProgressAddr)
		switch {
		case err != nil:
			return false, err.Error()
		case served.Equal(leaf2):
			switched = time.Now()
			return true, ""
		case !served.Equal(leaf1):
			t.Fatalf("the progress server serves %s (serial %s), neither the old pair nor the new", served.Subject, served.SerialNumber)
		}
		return false, fmt.Sprintf("serving the old pair %.0f s after the rotation; CA ConfigMap with the new CA: %v", time.Since(rotated).Seconds(), hasNew)
	})
	// Errors, not fatal: the trainer's reports below show what an early switch costs.
	if published.IsZero() {
		t.Errorf("the new pair was served %.1f s after the rotation, before %s carried the new CA", switched.Sub(rotated).Seconds(), progressCAConfigMap)
	} else if held := switched.Sub(published); held < providedCAPublishDelay-slack {
		t.Errorf("the new pair was served %.1f s after %s carried the new CA, want at least caPublishDelay (%v)", held.Seconds(), progressCAConfigMap, providedCAPublishDelay)
	}

	tj = e.waitFinished(t, tj.Name)
	log, err := trainerLog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	reports := parseReports(t, log)
	oldLeaf, newLeaf := leafDigest(leaf1), leafDigest(leaf2)
	var before, afterSwitch int
	var refused []peerReport
	refreshed := -1.0 // seconds from the rotation to the first report whose CA file held two CAs
	for _, r := range reports {
		switch {
		case !r.accepted:
			refused = append(refused, r)
		case r.leaf == oldLeaf:
			before++
		case r.leaf == newLeaf:
			afterSwitch++
		default:
			t.Errorf("report %d was served a certificate of neither pair: %s", r.n, r.line)
		}
		if refreshed < 0 && r.cas >= 2 {
			refreshed = r.at.Sub(rotated).Seconds()
		}
		if r.leaf == newLeaf && r.cas < 2 {
			t.Errorf("report %d was served the new pair with a CA file of %d certificates, want the old CA kept beside the new one: %s", r.n, r.cas, r.line)
		}
	}
	if len(refused) > 0 {
		first, last := refused[0], refused[len(refused)-1]
		t.Errorf("%d reports refused, from %.1f s to %.1f s after the rotation; the first: %s",
			len(refused), first.at.Sub(rotated).Seconds(), last.at.Sub(rotated).Seconds(), first.line)
	}
	if t.Failed() || !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) || afterSwitch < after {
		t.Fatalf("%d reports accepted under the old pair, %d under the new (want %d), conditions %v",
			before, afterSwitch, after, tj.Status.Conditions)
	}
	if hasOld, hasNew, err := caConfigMap(context.Background()); err != nil || !hasOld || !hasNew {
		t.Fatalf("after the switch %s holds the old CA: %v, the new: %v (%v); want both until the old CA expires", progressCAConfigMap, hasOld, hasNew, err)
	}
	t.Logf("%d reports accepted under the old pair, %d under the new, none refused; after the rotation the CA ConfigMap carried the new CA in %.1f s, "+
		"the trainer's ca.crt in %.0f s (first report with both CAs), the new pair was served in %.1f s (%.1f s after the ConfigMap)",
		before, afterSwitch, published.Sub(rotated).Seconds(), refreshed, switched.Sub(rotated).Seconds(), switched.Sub(published).Seconds())
}

// peerReport is one line of peerReportScript's output.
type peerReport struct {
	n        int
	accepted bool   // HTTP 200
	leaf     string // leafDigest of the served certificate; empty when the report failed
	cas      int    // certificates in the trainer's CA file
	at       time.Time
	line     string
}

var peerReportLine = regexp.MustCompile(`^report (\d+): (?:HTTP (\d+) leaf=([0-9a-f]+)|failed: .*) cas=(\d+) t=([0-9.]+)$`)

// parseReports parses peerReportScript's output, failing the test on a line it does
// not know.
func parseReports(t *testing.T, log string) []peerReport {
	t.Helper()
	var out []peerReport
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if !strings.HasPrefix(line, "report ") {
			continue
		}
		m := peerReportLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected report line %q", line)
		}
		r := peerReport{accepted: m[2] == "200", leaf: m[3], line: line}
		r.n, _ = strconv.Atoi(m[1])
		r.cas, _ = strconv.Atoi(m[4])
		sec, _ := strconv.ParseFloat(m[5], 64)
		r.at = time.Unix(0, int64(sec*1e9))
		out = append(out, r)
	}
	return out
}

// leafDigest is peerReportScript's name of a served certificate: the first 16 hex
// digits of its DER's SHA-256.
func leafDigest(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])[:16]
}
