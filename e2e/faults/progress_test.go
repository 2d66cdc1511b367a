package faults

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/pkg/httpserver/slowclient"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// Figures of TestOneNamespaceCannotStarveAnothersReports: the flood's slow reports,
// more than the progress server's 256 report slots, and the bound on another
// namespace's report under it (its trainers' requests time out after 10 s).
const (
	slowReports       = 320
	reportUnderFlood  = 3 * time.Second
	reportsUnderFlood = 20
)

// TestOneNamespaceCannotStarveAnothersReports: the trainers of one namespace, with
// valid pod-bound tokens, open 320 reports to a running controller's progress server
// and send their bodies a byte a second (more than the server's 256 report slots; cut
// after its 10 s read timeout, then sent again), while a trainer of another namespace
// sends 20 reports: each must be answered 200 within reportUnderFlood. The flood holds
// its namespace's share (64 slots); the rest are answered 429. Before the per-namespace
// share it held all 256 and the other namespace's reports were answered 429.
func TestOneNamespaceCannotStarveAnothersReports(t *testing.T) {
	timed(t)
	e := newEnv(t)
	ctrl := e.startWebhookController(t, "trainyard-progress-flood")
	flood, quiet := e.namespace(t), e.namespace(t)
	floodToken := e.reporterToken(t, flood, "tj-flood")
	quietToken := e.reporterToken(t, quiet, "tj-quiet")

	stop := make(chan struct{})
	var attackers sync.WaitGroup
	defer func() { close(stop); attackers.Wait() }()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: trainyard\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n",
		wire.Path(flood, "tj-flood"), floodToken)
	for range slowReports {
		attackers.Go(func() { slowclient.Trickle(ctrl.ProgressAddr, head, `{"trainerStatus":`, stop) })
	}
	time.Sleep(3 * time.Second) // the flood's reports hold their slots
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the test's own server
	}}
	took := &latencies{}
	for i := range reportsUnderFlood {
		body := fmt.Sprintf(`{"trainerStatus":{"progressPercentage":%d,"lastUpdatedTime":%q}}`, i+1, time.Now().UTC().Format(time.RFC3339))
		req, err := http.NewRequest(http.MethodPost, "https://"+ctrl.ProgressAddr+wire.Path(quiet, "tj-quiet"), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+quietToken)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		took.add(time.Since(start))
		if err != nil {
			t.Fatalf("report %d of another namespace during the flood: %v", i, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || time.Since(start) > reportUnderFlood {
			t.Fatalf("report %d of another namespace during the flood: %d %s after %v, want 200 within %v", i, resp.StatusCode, answer, time.Since(start), reportUnderFlood)
		}
		time.Sleep(200 * time.Millisecond)
	}
	refused := ctrl.Metric(t, `trainyard_progress_reports_rejected_total{reason="too_many_requests"}`)
	t.Logf("%d slow reports of one namespace: another namespace's %d reports all 200, p50 %v, max %v; reports refused 429: %.0f",
		slowReports, reportsUnderFlood, took.quantile(0.5), took.quantile(1), refused)
	if refused < slowReports-256 {
		t.Errorf("%.0f reports refused 429, want at least the flood's %d beyond its share", refused, slowReports-256)
	}
}

// reporterToken makes name in ns a TrainJob whose pod may report its progress, as its
// JobSet's pods would (the suite runs no JobSet controller and no node): a batch/v1 Job
// whose pod (Pending) is labeled with the JobSet's name and uid, and returns a token
// bound to that pod for the TrainJob's audience (the projected token a trainer mounts).
func (e *env) reporterToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, trainJob(ns, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var js *jobsetv1alpha2.JobSet
	for deadline := time.Now().Add(time.Minute); js == nil; time.Sleep(100 * time.Millisecond) {
		got, err := e.jobsets.JobsetV1alpha2().JobSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			js = got
		} else if time.Now().After(deadline) {
			t.Fatalf("TrainJob %s/%s got no JobSet: %v", ns, name, err)
		}
	}
	kube := e.c.Client()
	sa, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "trainer"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job, err := kube.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-node-0"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			ServiceAccountName: sa.Name, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "node", Image: "trainer"}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The Job controller creates its pod (Pending: no node); labeled as the JobSet's.
	var pod *corev1.Pod
	for deadline := time.Now().Add(time.Minute); pod == nil; time.Sleep(100 * time.Millisecond) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
		if err == nil && len(pods.Items) > 0 {
			pod = &pods.Items[0]
		} else if time.Now().After(deadline) {
			t.Fatalf("Job %s/%s created no pod: %v", ns, job.Name, err)
		}
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q,%q:%q}}}`, jobsetv1alpha2.JobSetNameKey, name, jobsetv1alpha2.JobSetUIDKey, js.UID)
	if pod, err = kube.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:      []string{wire.Audience(ns, name)},
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
