package trainjob

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// progressWrites is the series of a replica's successful trainerStatus writes.
var progressWrites = metrics.ProgressWritesTotal + `{` + metrics.LabelResult + `="` + metrics.ProgressWriteSuccess + `"}`

// TestTrainerProgress (issue 14): a trainer pod reports its progress to the URL the
// controller injected, with a token minted for that pod through the TokenRequest API
// exactly as the kubelet mints the projected one (kwok runs no containers), over TLS
// trusting only the CA the pod mounts. The TrainJob gets status.trainerStatus with the
// exact values; a token of another TrainJob's pod, a token for another audience and a
// malformed or out-of-range body are refused and write nothing (none is accepted, by the
// controller's own counters, and the next valid report, older than the refused ones, is
// the one written, in exactly one more write); a burst of reports costs at most one
// write per period and the last one is written; the TrainJob still completes with
// exactly upstream's conditions.
func TestTrainerProgress(t *testing.T) {
	e := newEnv(t)
	ctrl := startController(t, e.c)
	e.createRuntime(t, "reporting", map[string]string{cluster.AnnotationCompleteDelay: "45s"})
	e.createTrainJob(t, trainJob("reporter", trainer.TrainingRuntimeKind, "reporting").withNumNodes(2))
	e.createTrainJob(t, trainJob("neighbour", trainer.TrainingRuntimeKind, "reporting"))
	pods := e.waitPods(t, "reporter", 2)
	neighbours := e.waitPods(t, "neighbour", 1)
	ctx := context.Background()

	// What the trainer container gets: upstream's env, mount and projected volume.
	wantURL := "https://trainyard-webhook.default.svc:" + ctrl.progressPort() + wire.Path(e.ns, "reporter")
	node := podContainer(t, pods[0], trainer.ContainerNode)
	expectEnv(t, pods[0].Name, node, map[string]string{
		wire.EnvServerURL: wantURL,
		wire.EnvCACert:    wire.MountPath + "/" + wire.CACertFile,
		wire.EnvToken:     wire.MountPath + "/" + wire.TokenFile,
	})
	if !hasMount(node.VolumeMounts, wire.VolumeName, wire.MountPath) {
		t.Errorf("pod %s: no mount of %s at %s: %+v", pods[0].Name, wire.VolumeName, wire.MountPath, node.VolumeMounts)
	}
	expectProgressVolume(t, pods[0], wire.Audience(e.ns, "reporter"))

	// The CA the pod mounts verifies the server: the URL's host is resolved to the
	// controller's 127.0.0.1 address, as a Service would route it.
	client := progressClient(t, e.progressCA(t), ctrl.progressAddr)

	token := e.podToken(t, pods[0], wire.Audience(e.ns, "reporter"))
	// Report times as a trainer stamps them: now, at the second precision stored.
	start := time.Now().UTC().Truncate(time.Second)
	stamp := func(d time.Duration) string { return start.Add(d).Format(time.RFC3339) }
	report := `{"trainerStatus":{"progressPercentage":42,"estimatedRemainingSeconds":120,` +
		`"metrics":[{"name":"loss","value":"0.25"},{"name":"accuracy","value":"0.9"}],"lastUpdatedTime":"` + stamp(0) + `"}}`
	code, body := postReport(t, client, wantURL, token, report)
	if code != http.StatusOK || !jsonEqual(body, report) {
		t.Fatalf("report: %d %s; want 200 and the request echoed", code, body)
	}
	want := trainer.TrainerStatus{
		ProgressPercentage: ptr.To[int32](42), EstimatedRemainingSeconds: ptr.To[int32](120),
		Metrics:         []trainer.Metric{{Name: "loss", Value: "0.25"}, {Name: "accuracy", Value: "0.9"}},
		LastUpdatedTime: ptr.To(metav1.NewTime(start)),
	}
	e.waitTrainerStatus(t, "reporter", want)

	// Refused, and nothing written. The refused reports carry values of their own, newer
	// (lastUpdatedTime +2 s) than the report that follows them (+1 s), so one accepted by
	// mistake would be written in its place, or keep it from being written.
	forged := `{"trainerStatus":{"progressPercentage":99,"metrics":[{"name":"loss","value":"9"}],"lastUpdatedTime":"` + stamp(2*time.Second) + `"}}`
	refusals := []struct {
		what, url, token, body string
		code                   int
	}{
		{"a token of another TrainJob's pod", wantURL, e.podToken(t, neighbours[0], wire.Audience(e.ns, "reporter")), forged, http.StatusForbidden},
		{"a token for another TrainJob's endpoint", wantURL, e.podToken(t, pods[0], wire.Audience(e.ns, "neighbour")), forged, http.StatusForbidden},
		{"no token", wantURL, "", forged, http.StatusForbidden},
		{"a malformed body", wantURL, token, `{"trainerStatus":`, http.StatusUnprocessableEntity},
		{"a percentage over 100", wantURL, token, `{"trainerStatus":{"progressPercentage":120,"lastUpdatedTime":"` + stamp(2*time.Second) + `"}}`, http.StatusUnprocessableEntity},
		{"the endpoint of another TrainJob", strings.Replace(wantURL, "/reporter/", "/neighbour/", 1), token, forged, http.StatusForbidden},
		{"an unknown TrainJob", strings.Replace(wantURL, "/reporter/", "/nobody/", 1), e.podToken(t, pods[0], wire.Audience(e.ns, "nobody")), forged, http.StatusNotFound},
	}
	waitProgressWrites(t, ctrl, 1) // one report, one write
	received, rejected := ctrl.metric(t, metrics.ProgressReportsTotal), ctrl.metric(t, metrics.ProgressReportsRejectedTotal)
	for _, r := range refusals {
		code, body := postReport(t, client, r.url, r.token, r.body)
		if code != r.code {
			t.Errorf("%s: %d %s; want %d", r.what, code, body, r.code)
			continue
		}
		var st metav1.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil || st.Status != metav1.StatusFailure || st.Code != int32(r.code) || st.Message == "" {
			t.Errorf("%s: body %s; want a metav1.Status failure with code %d and a message", r.what, body, r.code)
		}
	}
	// None reached the coalescer (accepted = received − rejected), and the next report is
	// the only thing written: exactly its values, in exactly one more write.
	if dr, dj := ctrl.metric(t, metrics.ProgressReportsTotal)-received, ctrl.metric(t, metrics.ProgressReportsRejectedTotal)-rejected; dr != float64(len(refusals)) || dj != dr {
		t.Errorf("the controller counted %v reports and %v rejections for %d refused reports; want all received and all rejected", dr, dj, len(refusals))
	}
	next := `{"trainerStatus":{"progressPercentage":43,"estimatedRemainingSeconds":110,"lastUpdatedTime":"` + stamp(time.Second) + `"}}`
	if code, body := postReport(t, client, wantURL, token, next); code != http.StatusOK {
		t.Fatalf("the report after the refusals: %d %s", code, body)
	}
	want = trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](43), EstimatedRemainingSeconds: ptr.To[int32](110),
		LastUpdatedTime: ptr.To(metav1.NewTime(start.Add(time.Second)))}
	e.waitTrainerStatus(t, "reporter", want)
	waitProgressWrites(t, ctrl, 2)

	// A burst of reports: the last one lands, at most one write per period (10 s).
	changes := e.countTrainerStatusChanges(t, "reporter")
	for i := 1; i <= 20; i++ {
		b := fmt.Sprintf(`{"trainerStatus":{"progressPercentage":%d,"lastUpdatedTime":%q}}`, 50+i, stamp(time.Duration(i)*time.Second))
		if code, body := postReport(t, client, wantURL, token, b); code != http.StatusOK {
			t.Fatalf("report %d: %d %s", i, code, body)
		}
	}
	e.waitTrainerStatus(t, "reporter", trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](70),
		LastUpdatedTime: ptr.To(metav1.NewTime(start.Add(20 * time.Second)))})
	if n := changes(); n > 2 {
		t.Errorf("20 reports within one period changed trainerStatus %d times; want at most 2 (one write per period)", n)
	}

	// The TrainJob completes as upstream's does: one condition, the JobSet's.
	e.waitCondition(t, "reporter", trainer.TrainJobComplete, metav1.ConditionTrue, 2*time.Minute)
	tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, "reporter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tj.Status.Conditions) != 1 || tj.Status.Conditions[0].Reason != "AllJobsCompleted" || tj.Status.Conditions[0].Message != "jobset completed successfully" {
		t.Errorf("conditions = %+v; want exactly Complete=True AllJobsCompleted (upstream's)", tj.Status.Conditions)
	}
	if got := tj.Status.TrainerStatus; got == nil || !ptr.Equal(got.ProgressPercentage, ptr.To[int32](70)) {
		t.Errorf("trainerStatus after completion = %+v; want the last report kept", got)
	}
}

// TestProgressServedByEveryReplica (issue 14, "served by every replica"): two replicas
// with leader election, and a report posted to the one that is not the leader. As
// docs/design/progress.md says ("every replica serves and writes"), the follower accepts
// it and writes status.trainerStatus itself, with the exact values; the leader neither
// receives nor writes it. Reports keep being accepted while the leader is killed and the
// Lease changes hands, and the last of them is written.
func TestProgressServedByEveryReplica(t *testing.T) {
	e := newEnv(t)
	lease := []string{"--leader-elect", "--leader-elect-namespace=" + e.ns}
	leader := startController(t, e.c, lease...)
	cluster.Eventually(t, 30*time.Second, "the first replica leads", func(context.Context) (bool, string) {
		return readyzSays(leader, "leading"), "not leading yet"
	})
	follower := startController(t, e.c, lease...)
	if !readyzSays(follower, "following") {
		t.Fatal("the second replica does not report following")
	}
	e.createRuntime(t, "reporting", map[string]string{cluster.AnnotationCompleteDelay: "30m"})
	e.createTrainJob(t, trainJob("reporter", trainer.TrainingRuntimeKind, "reporting"))
	pod := e.waitPods(t, "reporter", 1)[0]
	// The URL the pod was given; its Service routes to any replica, here the follower.
	url := envOf(podContainer(t, pod, trainer.ContainerNode), wire.EnvServerURL)
	if url == "" {
		t.Fatalf("pod %s: no %s", pod.Name, wire.EnvServerURL)
	}
	client := progressClient(t, e.progressCA(t), follower.progressAddr)
	token := e.podToken(t, pod, wire.Audience(e.ns, "reporter"))
	start := time.Now().UTC().Truncate(time.Second)
	stamp := func(d time.Duration) string { return start.Add(d).Format(time.RFC3339) }

	report := `{"trainerStatus":{"progressPercentage":42,"estimatedRemainingSeconds":120,` +
		`"metrics":[{"name":"loss","value":"0.25"}],"lastUpdatedTime":"` + stamp(0) + `"}}`
	if code, body := postReport(t, client, url, token, report); code != http.StatusOK || !jsonEqual(body, report) {
		t.Fatalf("report to the follower: %d %s; want 200 and the request echoed", code, body)
	}
	e.waitTrainerStatus(t, "reporter", trainer.TrainerStatus{
		ProgressPercentage: ptr.To[int32](42), EstimatedRemainingSeconds: ptr.To[int32](120),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.25"}}, LastUpdatedTime: ptr.To(metav1.NewTime(start)),
	})
	if !readyzSays(follower, "following") {
		t.Fatal("the follower took the Lease before the failover; the write above proves nothing about followers")
	}
	waitProgressWrites(t, follower, 1)
	if n := leader.metric(t, metrics.ProgressReportsTotal); n != 0 {
		t.Errorf("the leader received %v progress reports; want 0 (all went to the follower)", n)
	}
	if n := leader.metric(t, metrics.ProgressWritesTotal); n != 0 {
		t.Errorf("the leader made %v trainerStatus writes; want 0 (the follower writes the reports it receives)", n)
	}

	// Kill the leader and go on reporting, one report every 500 ms, each a second newer
	// than the last, until the follower leads (and for at least 5 s): none may be refused.
	leader.kill(t)
	killed := time.Now()
	var sent int
	for i := 1; time.Since(killed) < 5*time.Second || !readyzSays(follower, "leading"); i++ {
		if time.Since(killed) > 90*time.Second {
			t.Fatal("the follower did not take the Lease over within 90s of the leader's death")
		}
		body := fmt.Sprintf(`{"trainerStatus":{"progressPercentage":50,"metrics":[{"name":"step","value":"%d"}],"lastUpdatedTime":%q}}`,
			i, stamp(time.Duration(i)*time.Second))
		if code, resp := postReport(t, client, url, token, body); code != http.StatusOK {
			t.Fatalf("report %d, %v after the leader was killed: %d %s", i, time.Since(killed).Round(time.Millisecond), code, resp)
		}
		sent = i
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%d reports accepted by the follower from the leader's death until it led, %v later", sent, time.Since(killed).Round(time.Second))
	e.waitTrainerStatus(t, "reporter", trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](50),
		Metrics:         []trainer.Metric{{Name: "step", Value: fmt.Sprint(sent)}},
		LastUpdatedTime: ptr.To(metav1.NewTime(start.Add(time.Duration(sent) * time.Second)))})
}

// expectProgressVolume checks the pod's projected volume: the token for audience and
// the CA from the namespace's CA ConfigMap (upstream's file layout).
func expectProgressVolume(t *testing.T, pod corev1.Pod, audience string) {
	t.Helper()
	for _, v := range pod.Spec.Volumes {
		if v.Name != wire.VolumeName || v.Projected == nil {
			continue
		}
		var token, ca bool
		for _, s := range v.Projected.Sources {
			if st := s.ServiceAccountToken; st != nil {
				token = st.Audience == audience && st.Path == wire.TokenFile && ptr.Deref(st.ExpirationSeconds, 0) == wire.TokenExpirationSeconds
			}
			if cm := s.ConfigMap; cm != nil {
				ca = cm.Name == wire.CAConfigMapName && len(cm.Items) == 1 &&
					cm.Items[0].Key == wire.CAConfigMapKey && cm.Items[0].Path == wire.CACertFile
			}
		}
		if !token || !ca {
			t.Errorf("pod %s: projected volume %s = %+v; want a token for %q and the CA ConfigMap", pod.Name, v.Name, v.Projected.Sources, audience)
		}
		return
	}
	t.Errorf("pod %s: no projected volume %s", pod.Name, wire.VolumeName)
}

// podToken mints a token bound to pod for audience, as the kubelet does for the
// projected volume.
func (e *env) podToken(t *testing.T, pod corev1.Pod, audience string) string {
	t.Helper()
	tr, err := e.c.Client().CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), pod.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minting a token for pod %s: %v", pod.Name, err)
	}
	return tr.Status.Token
}

// progressClient is an HTTPS client that trusts only caPEM and sends every request to
// addr, whatever the URL's host (the in-cluster Service name), keeping that host as
// the TLS server name.
func progressClient(t *testing.T, caPEM []byte, addr string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("the CA ConfigMap holds no PEM certificate: %q", caPEM)
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
	}}
}

// postReport POSTs body to url with token as bearer token ("" sends none) and returns
// the status code and response body.
func postReport(t *testing.T, client *http.Client, url, token, body string) (int, string) {
	t.Helper()
	code, data, err := postReportOnce(client, url, token, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, data
}

// postReportOnce posts body to url with token (none when empty) and returns the
// answer's status and body, or the error when no answer came.
func postReportOnce(client *http.Client, url, token, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), nil
}

func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && equality.Semantic.DeepEqual(x, y)
}

// waitTrainerStatus waits until the TrainJob's status.trainerStatus equals want.
func (e *env) waitTrainerStatus(t *testing.T, name string, want trainer.TrainerStatus) {
	t.Helper()
	cluster.Eventually(t, time.Minute, "trainerStatus of "+name, func(ctx context.Context) (bool, string) {
		tj, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got, _ := json.Marshal(tj.Status.TrainerStatus)
		return tj.Status.TrainerStatus != nil && equality.Semantic.DeepEqual(*tj.Status.TrainerStatus, want), string(got)
	})
}

// waitProgressWrites waits until ctrl has counted n successful trainerStatus writes,
// and fails at once if it counted more. The counter moves just after the API server
// stores a write, so a reader of the TrainJob may see the write first.
func waitProgressWrites(t *testing.T, ctrl *controller, n float64) {
	t.Helper()
	cluster.Eventually(t, 10*time.Second, fmt.Sprintf("%v trainerStatus writes counted", n), func(context.Context) (bool, string) {
		got := ctrl.metric(t, progressWrites)
		if got > n {
			t.Fatalf("%s = %v; want %v", progressWrites, got, n)
		}
		return got == n, fmt.Sprint(got)
	})
}

// progressCA waits for the CA ConfigMap the leader publishes in the test's namespace
// and returns the PEM CA bundle trainer pods mount.
func (e *env) progressCA(t *testing.T) []byte {
	t.Helper()
	var caPEM []byte
	cluster.Eventually(t, time.Minute, "CA ConfigMap "+wire.CAConfigMapName, func(ctx context.Context) (bool, string) {
		cm, err := e.c.Client().CoreV1().ConfigMaps(e.ns).Get(ctx, wire.CAConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		caPEM = []byte(cm.Data[wire.CAConfigMapKey])
		return len(caPEM) > 0, "empty " + wire.CAConfigMapKey
	})
	return caPEM
}

// countTrainerStatusChanges watches the TrainJob and returns a function reporting how
// many times its status.trainerStatus changed since the call.
func (e *env) countTrainerStatusChanges(t *testing.T, name string) func() int {
	t.Helper()
	return e.countChanges(t, name, func(tj *trainer.TrainJob) any { return tj.Status.TrainerStatus.DeepCopy() },
		func(*trainer.TrainJob) bool { return false })
}
