package trainjob

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	trainerv1alpha1 "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/typed/trainer/v1alpha1"
)

// warnings collects the admission warnings the API server relays (what kubectl prints).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// admissionClient returns a trainer client whose warnings land in the returned collector.
func (e *env) admissionClient(t *testing.T) (trainerclient.Interface, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := e.c.RESTConfig()
	cfg.WarningHandler = w
	client, err := trainerclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, w
}

// expectRefused fails unless err is the webhook's denial (403 Forbidden, or 422 for a
// field error) whose message contains every want.
func expectRefused(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted, want refused", what)
		return
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("%s: error %v, want the webhook's Forbidden", what, err)
	}
	if !strings.Contains(err.Error(), "admission webhook") {
		t.Errorf("%s: error %q does not come from an admission webhook", what, err)
	}
	for _, s := range want {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: error %q does not mention %q", what, err, s)
		}
	}
}

const kueueManager = "kueue.x-k8s.io/manager"

// tolerationPatch is a runtime patch in the shape Kueue writes.
func tolerationPatch(manager, key string) trainer.RuntimePatch {
	return trainer.RuntimePatch{Manager: manager, TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
		Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
			Name: "node", Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{
				Spec: &trainer.PodSpecPatch{Tolerations: []corev1.Toleration{{Key: key, Operator: corev1.TolerationOpExists}}},
			}}},
		}}}},
	}}
}

// TestAdmission: the API server calls the controller's webhooks over 127.0.0.1, as a
// real installation's calls its Service. runtimePatches[].time is stamped and kept
// exactly as upstream's defaulter does; a patch change to a running TrainJob is refused;
// a TrainJob whose runtime is missing is admitted with a warning and runs once the
// runtime exists. (Every rule's bad object, refused with the field named, is a case of
// TestAdmissionRules.)
func TestAdmission(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.createRuntime(t, "torch", map[string]string{cluster.AnnotationCompleteDelay: "30m"})
	client, warned := e.admissionClient(t)
	tjs := client.TrainerV1alpha1().TrainJobs(e.ns)
	ctx := context.Background()

	t.Run("runtimePatches time is stamped and kept as upstream does", func(t *testing.T) {
		tj := trainJob("stamped", trainer.TrainingRuntimeKind, "torch").suspended()
		tj.Namespace = e.ns
		tj.Spec.RuntimePatches = []trainer.RuntimePatch{tolerationPatch(kueueManager, "first")}
		created, err := tjs.Create(ctx, tj.TrainJob, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stamped := created.Spec.RuntimePatches[0].Time
		if stamped == nil || time.Since(stamped.Time) > time.Minute {
			t.Fatalf("time of a new patch = %v, want now", stamped)
		}
		// An update that leaves the patch as it was keeps its time, even if the client
		// sends another time.
		updated := updateTrainJob(t, tjs, "stamped", func(tj *trainer.TrainJob) {
			tj.Spec.RuntimePatches[0].Time = &metav1.Time{Time: stamped.Add(-time.Hour)}
			metav1.SetMetaDataLabel(&tj.ObjectMeta, "touched", "yes")
		})
		if got := updated.Spec.RuntimePatches[0].Time; got == nil || !got.Equal(stamped) {
			t.Errorf("time of an unchanged patch after an update = %v, want %v kept", got, stamped)
		}
		// A changed patch gets a new time (second precision: wait for the next second).
		time.Sleep(1100 * time.Millisecond)
		changed := updateTrainJob(t, tjs, "stamped", func(tj *trainer.TrainJob) {
			tj.Spec.RuntimePatches[0] = tolerationPatch(kueueManager, "second")
		})
		if got := changed.Spec.RuntimePatches[0].Time; got == nil || !got.After(stamped.Time) {
			t.Errorf("time of a changed patch = %v, want after %v", got, stamped)
		}
	})

	t.Run("patches of a running TrainJob are refused", func(t *testing.T) {
		e.createTrainJob(t, trainJob("running", trainer.TrainingRuntimeKind, "torch"))
		e.waitJobSet(t, "running")
		body := `{"spec":{"runtimePatches":[{"manager":"kueue.x-k8s.io/manager","trainingRuntimeSpec":{}}]}}`
		_, err := tjs.Patch(ctx, "running", types.MergePatchType, []byte(body), metav1.PatchOptions{})
		expectRefused(t, "runtimePatches change on a running TrainJob", err, "spec.runtimePatches", "suspended")
	})

	t.Run("a TrainJob whose runtime is missing is admitted with a warning and runs later", func(t *testing.T) {
		warned.take()
		tj := trainJob("early", trainer.TrainingRuntimeKind, "later")
		tj.Namespace = e.ns
		if _, err := tjs.Create(ctx, tj.TrainJob, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a TrainJob whose runtime is missing: %v, want admitted", err)
		}
		got := warned.take()
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), `"later"`) {
			t.Errorf("warnings = %q, want one naming the missing runtime \"later\"", got)
		}
		e.createRuntime(t, "later", map[string]string{cluster.AnnotationCompleteDelay: "30m"})
		e.waitJobSet(t, "early")
	})
}

// TestAdmissionServedByEveryReplica: two replicas with leader election; the follower's
// admission server is the one registered. It answers while it follows, and keeps
// answering while the leader is killed and the Lease changes hands; the CA of the
// serving Secret is the same throughout (no new CA on a restart).
func TestAdmissionServedByEveryReplica(t *testing.T) {
	e := newEnv(t)
	lease := []string{"--leader-elect", "--leader-elect-namespace=" + e.ns}
	leader := startController(t, e.c, lease...)
	cluster.Eventually(t, 30*time.Second, "the first replica leads", func(ctx context.Context) (bool, string) {
		return readyzSays(leader, "leading"), "not leading yet"
	})
	caBefore := webhookCABundle(t, e)
	follower := startController(t, e.c, lease...) // registers its own URL: the API server now calls the follower
	if !readyzSays(follower, "following") {
		t.Fatal("the second replica does not report following")
	}
	e.createRuntime(t, "torch", map[string]string{cluster.AnnotationCompleteDelay: "30m"})
	client, _ := e.admissionClient(t)
	bad := trainJob("bad", trainer.TrainingRuntimeKind, "torch")
	bad.Namespace = e.ns
	bad.Spec.RuntimePatches = []trainer.RuntimePatch{tolerationPatch("not-a-domain", "x")}
	_, err := client.TrainerV1alpha1().TrainJobs(e.ns).Create(context.Background(), bad.TrainJob, metav1.CreateOptions{})
	expectRefused(t, "review by the follower", err, "manager")

	leader.kill(t)
	killed := time.Now()
	// During the election: still reviewed (by the follower), never failed open or closed.
	for i := 0; time.Since(killed) < 5*time.Second; i++ {
		_, err := client.TrainerV1alpha1().TrainJobs(e.ns).Create(context.Background(), bad.TrainJob, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		expectRefused(t, "review while the Lease changes hands", err, "manager")
		time.Sleep(250 * time.Millisecond)
	}
	e.createTrainJob(t, trainJob("after-failover", trainer.TrainingRuntimeKind, "torch"))
	e.waitJobSet(t, "after-failover")
	if !readyzSays(follower, "leading") {
		t.Error("the follower did not take the Lease over")
	}
	if caAfter := webhookCABundle(t, e); !bytes.Equal(caBefore, caAfter) {
		t.Error("the webhooks' CA bundle changed across replicas and restarts, want the one CA of the serving Secret")
	}
}

// updateTrainJob applies mutate to the current TrainJob name and updates it, again on
// a conflict (the controller writes status meanwhile), as kubectl edit would.
func updateTrainJob(t *testing.T, tjs trainerv1alpha1.TrainJobInterface, name string, mutate func(*trainer.TrainJob)) *trainer.TrainJob {
	t.Helper()
	var updated *trainer.TrainJob
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := tjs.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(cur)
		updated, err = tjs.Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("updating TrainJob %s: %v", name, err)
	}
	return updated
}

// readyzSays reports whether the controller's verbose readiness mentions s.
func readyzSays(ctrl *controller, s string) bool {
	resp, err := httpGet("http://" + ctrl.healthAddr + "/readyz?verbose")
	return err == nil && strings.Contains(resp, s)
}

// webhookCABundle is the CA bundle the API server uses to call the TrainJob validator.
func webhookCABundle(t *testing.T, e *env) []byte {
	t.Helper()
	cfg, err := e.c.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "trainyard-validator", metav1.GetOptions{})
	if err != nil || len(cfg.Webhooks) == 0 {
		t.Fatalf("reading the validating webhooks: %v", err)
	}
	if len(cfg.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatal("the validating webhooks have no CA bundle")
	}
	return cfg.Webhooks[0].ClientConfig.CABundle
}

var _ rest.WarningHandler = (*warnings)(nil)

// httpGet returns the body of a plain GET.
func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// TestWebhookCertificateRotation: with a 30-second serving certificate the controller
// renews it after 20 seconds; the admission server serves the new one without a
// restart, the API server keeps calling the webhook (the new certificate chains to the
// CA it already trusts), and a restarted controller keeps that CA.
func TestWebhookCertificateRotation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// A fresh CA and pair: the Secret earlier tests' controllers left has a 90-day pair.
	if err := e.c.Client().CoreV1().Secrets(metav1.NamespaceDefault).Delete(ctx, "trainyard-webhook-certs", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwebhook:\n  certificates:\n    servingValidity: 30s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctrl := startController(t, e.c, "--config="+config)
	e.createRuntime(t, "torch", nil)
	first := servedCertificate(t, ctrl.webhookURL)
	ca := webhookCABundle(t, e)
	// NotBefore is backdated for clock skew; the lifetime from now is what was asked.
	if left := time.Until(first.NotAfter); left > 40*time.Second {
		t.Fatalf("serving certificate expires in %v, want within 30s", left)
	}

	var renewed *x509.Certificate
	cluster.Eventually(t, time.Minute, "serving certificate renewed", func(context.Context) (bool, string) {
		renewed = servedCertificate(t, ctrl.webhookURL)
		return renewed.SerialNumber.Cmp(first.SerialNumber) != 0, "still serial " + first.SerialNumber.String()
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("the webhooks' CA bundle holds no certificate")
	}
	if _, err := renewed.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("the renewed certificate does not chain to the CA the API server trusts: %v", err)
	}
	client, _ := e.admissionClient(t)
	bad := trainJob("bad", trainer.TrainingRuntimeKind, "torch")
	bad.Namespace = e.ns
	bad.Spec.RuntimePatches = []trainer.RuntimePatch{tolerationPatch("not-a-domain", "x")}
	_, err := client.TrainerV1alpha1().TrainJobs(e.ns).Create(ctx, bad.TrainJob, metav1.CreateOptions{})
	expectRefused(t, "review after the renewal", err, "manager")
	if after := webhookCABundle(t, e); !bytes.Equal(ca, after) {
		t.Error("renewing the serving certificate changed the CA bundle")
	}
	// Once, not in a loop: the next renewal is 20 s after this one.
	body, err := httpGet("http://" + ctrl.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, `trainyard_certificate_rotations_total{certificate="serving"} 1`+"\n") {
		t.Errorf("serving certificate rotations: want exactly 1 so far; metrics:\n%s", grepLines(body, "trainyard_certificate_rotations_total"))
	}

	ctrl.stop(t)
	restarted := startController(t, e.c, "--config="+config)
	if after := webhookCABundle(t, e); !bytes.Equal(ca, after) {
		t.Error("a restarted controller published another CA, want the Secret's")
	}
	if _, err := servedCertificate(t, restarted.webhookURL).Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("the restarted controller serves a certificate of another CA: %v", err)
	}
}

// servedCertificate returns the leaf certificate the admission server at url presents.
func servedCertificate(t *testing.T, url string) *x509.Certificate {
	t.Helper()
	// Not verified here: the caller verifies it against the CA bundle the API server uses.
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec
	if err != nil {
		t.Fatalf("connecting to the admission server: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
