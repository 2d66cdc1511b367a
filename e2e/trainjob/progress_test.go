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
	"github.com/trainyard/trainyard/pkg/progress"
)

// TestTrainerProgress (issue 14): a trainer pod reports its progress to the URL the
// controller injected, with a token minted for that pod through the TokenRequest API
// exactly as the kubelet mints the projected one (kwok runs no containers), over TLS
// trusting only the CA the pod mounts. The TrainJob gets status.trainerStatus with the
// exact values; a token of another TrainJob's pod, a token for another audience and a
// malformed or out-of-range body are refused and write nothing; a burst of reports costs
// at most one write per period and the last one is written; the TrainJob still completes
// with exactly upstream's conditions.
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
	wantURL := "https://trainyard-webhook.default.svc:" + ctrl.progressPort() + progress.Path(e.ns, "reporter")
	node := podContainer(t, pods[0], trainer.ContainerNode)
	expectEnv(t, pods[0].Name, node, map[string]string{
		progress.EnvServerURL: wantURL,
		progress.EnvCACert:    progress.MountPath + "/" + progress.CACertFile,
		progress.EnvToken:     progress.MountPath + "/" + progress.TokenFile,
	})
	if !hasMount(node.VolumeMounts, progress.VolumeName, progress.MountPath) {
		t.Errorf("pod %s: no mount of %s at %s: %+v", pods[0].Name, progress.VolumeName, progress.MountPath, node.VolumeMounts)
	}
	expectProgressVolume(t, pods[0], progress.Audience(e.ns, "reporter"))

	// The CA the pod mounts verifies the server: the URL's host is resolved to the
	// controller's 127.0.0.1 address, as a Service would route it.
	var caPEM []byte
	cluster.Eventually(t, time.Minute, "CA ConfigMap "+progress.CAConfigMapName, func(ctx context.Context) (bool, string) {
		cm, err := e.c.Client().CoreV1().ConfigMaps(e.ns).Get(ctx, progress.CAConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		caPEM = []byte(cm.Data[progress.CAConfigMapKey])
		return len(caPEM) > 0, "empty " + progress.CAConfigMapKey
	})
	client := progressClient(t, caPEM, ctrl.progressAddr)

	token := e.podToken(t, pods[0], progress.Audience(e.ns, "reporter"))
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

	// Refused, and nothing written.
	refusals := []struct {
		what, url, token, body string
		code                   int
	}{
		{"a token of another TrainJob's pod", wantURL, e.podToken(t, neighbours[0], progress.Audience(e.ns, "reporter")), report, http.StatusForbidden},
		{"a token for another TrainJob's endpoint", wantURL, e.podToken(t, pods[0], progress.Audience(e.ns, "neighbour")), report, http.StatusForbidden},
		{"no token", wantURL, "", report, http.StatusForbidden},
		{"a malformed body", wantURL, token, `{"trainerStatus":`, http.StatusUnprocessableEntity},
		{"a percentage over 100", wantURL, token, `{"trainerStatus":{"progressPercentage":120,"lastUpdatedTime":"` + stamp(time.Second) + `"}}`, http.StatusUnprocessableEntity},
		{"the endpoint of another TrainJob", strings.Replace(wantURL, "/reporter/", "/neighbour/", 1), token, report, http.StatusForbidden},
		{"an unknown TrainJob", strings.Replace(wantURL, "/reporter/", "/nobody/", 1), e.podToken(t, pods[0], progress.Audience(e.ns, "nobody")), report, http.StatusNotFound},
	}
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

// expectProgressVolume checks the pod's projected volume: the token for audience and
// the CA from the namespace's CA ConfigMap (upstream's file layout).
func expectProgressVolume(t *testing.T, pod corev1.Pod, audience string) {
	t.Helper()
	for _, v := range pod.Spec.Volumes {
		if v.Name != progress.VolumeName || v.Projected == nil {
			continue
		}
		var token, ca bool
		for _, s := range v.Projected.Sources {
			if st := s.ServiceAccountToken; st != nil {
				token = st.Audience == audience && st.Path == progress.TokenFile && ptr.Deref(st.ExpirationSeconds, 0) == progress.TokenExpirationSeconds
			}
			if cm := s.ConfigMap; cm != nil {
				ca = cm.Name == progress.CAConfigMapName && len(cm.Items) == 1 &&
					cm.Items[0].Key == progress.CAConfigMapKey && cm.Items[0].Path == progress.CACertFile
			}
		}
		if !token || !ca {
			t.Errorf("pod %s: projected volume %s = %+v; want a token for %q and the CA ConfigMap", pod.Name, v.Name, v.Projected.Sources, audience)
		}
		return
	}
	t.Errorf("pod %s: no projected volume %s", pod.Name, progress.VolumeName)
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
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
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

// countTrainerStatusChanges watches the TrainJob and returns a function reporting how
// many times its status.trainerStatus changed since the call.
func (e *env) countTrainerStatusChanges(t *testing.T, name string) func() int {
	t.Helper()
	return e.countChanges(t, name, func(tj *trainer.TrainJob) any { return tj.Status.TrainerStatus.DeepCopy() },
		func(*trainer.TrainJob) bool { return false })
}
