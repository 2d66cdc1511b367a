package faults

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	floodToken := e.reporterTokens(t, flood, []string{"tj-flood"})[0]
	quietToken := e.reporterTokens(t, quiet, []string{"tj-quiet"})[0]

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

// reporterTokens makes each of names in ns a TrainJob whose pod may report its
// progress, as its JobSet's pods would (the suite runs no JobSet controller and no
// node): a batch/v1 Job whose pod (Pending) is labeled with the JobSet's name and uid;
// it returns, in names' order, a token bound to each pod for its TrainJob's audience
// (the projected token a trainer mounts). The objects are made 8 at a time and waited
// for with one list a second, so that 250 of them do not overload the API server.
func (e *env) reporterTokens(t *testing.T, ns string, names []string) []string {
	t.Helper()
	ctx := context.Background()
	kube := e.c.Client()
	each := func(what string, f func(i int) error) {
		t.Helper()
		var next atomic.Int64
		var first atomic.Pointer[error]
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < len(names); i = int(next.Add(1)) - 1 {
					if err := f(i); err != nil {
						first.CompareAndSwap(nil, &err)
					}
				}
			})
		}
		wg.Wait()
		if err := first.Load(); err != nil {
			t.Fatalf("%s: %v", what, *err)
		}
	}
	waitFor := func(what string, ready func() (int, error)) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
			n, err := ready()
			if err == nil && n >= len(names) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d after 2 minutes (%v)", what, n, len(names), err)
			}
		}
	}
	each("creating the TrainJobs", func(i int) error {
		_, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).Create(ctx, trainJob(ns, names[i]), metav1.CreateOptions{})
		return err
	})
	jobSets := map[string]string{} // TrainJob name: its JobSet's uid
	waitFor("the TrainJobs' JobSets", func() (int, error) {
		list, err := e.jobsets.JobsetV1alpha2().JobSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return len(jobSets), err
		}
		for _, js := range list.Items {
			jobSets[js.Name] = string(js.UID)
		}
		return len(jobSets), nil
	})
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "trainer"}}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	each("creating the Jobs", func(i int) error {
		_, err := kube.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: names[i] + "-node-0"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				ServiceAccountName: sa.Name, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "node", Image: "trainer"}},
			}}},
		}, metav1.CreateOptions{})
		return err
	})
	pods := map[string]corev1.Pod{} // by Job name
	waitFor("the Jobs' pods", func() (int, error) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name"})
		if err != nil {
			return len(pods), err
		}
		for _, p := range list.Items {
			pods[p.Labels["batch.kubernetes.io/job-name"]] = p
		}
		return len(pods), nil
	})
	tokens := make([]string, len(names))
	each("labeling the pods as their JobSet's and minting their tokens", func(i int) error {
		pod := pods[names[i]+"-node-0"]
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q,%q:%q}}}`, jobsetv1alpha2.JobSetNameKey, names[i], jobsetv1alpha2.JobSetUIDKey, jobSets[names[i]])
		if _, err := kube.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences:      []string{wire.Audience(ns, names[i])},
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		tokens[i] = tr.Status.Token
		return nil
	})
	return tokens
}

// drainReports is how many TrainJobs of one namespace have a report pending when the
// controller stops in TestShutdownDrainLosesNoAcceptedReport: twice the ~120 that the
// drain, paced at the namespace's 10 writes a second, wrote in its 10 s.
const drainReports = 250

// TestShutdownDrainLosesNoAcceptedReport: drainReports TrainJobs of one namespace each
// report twice, the first written at once, the second (progressPercentage 42, not the
// trainer's last: 100 skips the write period) answered 200 and left pending by the
// 10 s write period; the controller is then sent SIGTERM. Its drain must write every
// one: each TrainJob's stored trainerStatus is the second report. Before the drain's
// own pace (4 × statusServer.qps over all namespaces) it wrote ~120 and lost the rest.
func TestShutdownDrainLosesNoAcceptedReport(t *testing.T) {
	timed(t)
	e := newEnv(t)
	ctrl := e.startWebhookController(t, "trainyard-drain")
	ns := e.namespace(t)
	names := make([]string, drainReports)
	for i := range names {
		names[i] = trainJobName(i)
	}
	tokens := e.reporterTokens(t, ns, names)
	// Each TrainJob's trainer from an address of its own, as each pod has one: the
	// progress server limits the reviews of unknown tokens per address.
	clients := make([]*http.Client, drainReports)
	for i := range clients {
		source := net.IPv4(127, 2, byte(i/250), byte(i%250+1))
		clients[i] = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the test's own server
			DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: source}}).DialContext,
		}}
	}
	at := time.Now().UTC().Truncate(time.Second)
	report := func(percent int, stamp time.Time) {
		var failed atomic.Int64
		var first atomic.Pointer[string]
		var wg sync.WaitGroup
		for i := range drainReports {
			wg.Go(func() {
				body := fmt.Sprintf(`{"trainerStatus":{"progressPercentage":%d,"lastUpdatedTime":%q}}`, percent, stamp.Format(time.RFC3339))
				req, err := http.NewRequest(http.MethodPost, "https://"+ctrl.ProgressAddr+wire.Path(ns, trainJobName(i)), strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer "+tokens[i])
				req.Header.Set("Content-Type", "application/json")
				for attempt := 0; ; attempt++ {
					resp, err := clients[i].Do(req.Clone(context.Background()))
					if err == nil {
						answer, _ := io.ReadAll(resp.Body)
						_ = resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							return
						}
						if resp.StatusCode == http.StatusTooManyRequests && attempt < 20 { // as a trainer's next report
							req.Body = io.NopCloser(strings.NewReader(body))
							time.Sleep(time.Second)
							continue
						}
						msg := fmt.Sprintf("%d %s", resp.StatusCode, answer)
						first.CompareAndSwap(nil, &msg)
					} else {
						msg := err.Error()
						first.CompareAndSwap(nil, &msg)
					}
					failed.Add(1)
					return
				}
			})
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Fatalf("%d of %d reports of %d%% not accepted; first: %s", n, drainReports, percent, *first.Load())
		}
	}
	report(10, at.Add(-time.Minute))
	for deadline := time.Now().Add(time.Minute); ctrl.Metric(t, `trainyard_progress_writes_total{result="success"}`) < drainReports; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%.0f of the first %d reports written after a minute", ctrl.Metric(t, `trainyard_progress_writes_total{result="success"}`), drainReports)
		}
	}
	report(42, at) // within the write period of the first: pending
	stopped := time.Now()
	ctrl.Stop(t)
	stopTook := time.Since(stopped)

	list, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, tj := range list.Items {
		if ts := tj.Status.TrainerStatus; ts == nil || ts.ProgressPercentage == nil || *ts.ProgressPercentage != 42 {
			lost++
		}
	}
	t.Logf("%d reports of one namespace pending at SIGTERM (write period 10 s, last report 42%%): %d lost; the controller stopped in %v",
		drainReports, lost, stopTook.Round(100*time.Millisecond))
	if lost > 0 {
		t.Errorf("%d of %d accepted reports lost at shutdown, want none", lost, drainReports)
	}
}
