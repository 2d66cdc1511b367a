package helm

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// Reports straight to a draining replica. The progress server answers 200 once a
// report is queued, and writes it later: a TrainJob's reports are written at most once
// per write period, and a stopping replica writes what it still holds after its
// shutdownDelay (pkg/progress/doc.go, "When a report is written"; progress.Stage.Drain).
// A report that a draining replica answered 200 is therefore in its memory only, and
// the trainer will not send it again. Through the Service such a report lands on a
// draining replica by chance; here the test is the trainer of one TrainJob per old
// controller Pod and, from the moment it sees that Pod's deletionTimestamp, sends it
// a report every drainReportInterval at its Pod IP (the URL's Service bypassed, its
// name kept as the TLS server name), with a token bound to the trainer's pod as the
// kubelet mints it, until the Pod stops answering. The last report it answered 200
// must be the TrainJob's status afterwards.

const (
	// drainReportInterval spaces the reports to a draining Pod: some 20 in its
	// shutdownDelay (5 s), all but the first held for the write period.
	drainReportInterval = 250 * time.Millisecond
	// drainReportsFor bounds the reports to one Pod (its drain takes shutdownDelay
	// and the flush, well under this).
	drainReportsFor = 20 * time.Second
)

// drainTarget is a TrainJob whose trainer pod only sleeps, reported for by the test to
// one controller Pod while it drains.
type drainTarget struct {
	name string
	pod  string // the controller Pod its reports go to
	// token is bound to the trainer pod, for the TrainJob's audience; path and port
	// are the injected URL's.
	token, path, port string

	mu      sync.Mutex
	seen    time.Time // when the Pod was first seen terminating
	answers []drainAnswer
}

// drainAnswer is one report to a draining Pod and how it was answered.
type drainAnswer struct {
	progress int32
	sent     time.Time
	code     int   // HTTP status, 0 when err
	err      error // no answer: refused, reset, timed out
}

// drainReports are the drain targets, one per controller Pod that runs before the upgrade.
type drainReports struct {
	l       *leg
	ns      string
	client  *http.Client
	host    string                  // the injected URL's host, the Service's DNS name
	targets map[string]*drainTarget // by controller Pod name
	wg      sync.WaitGroup
}

// createDrainTargets creates one sleeping TrainJob per running controller Pod; prepare
// then readies what their trainers would send.
func createDrainTargets(t *testing.T, l *leg) *drainReports {
	t.Helper()
	ctx := context.Background()
	pods, err := l.c.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var controllers []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			controllers = append(controllers, p.Name)
		}
	}
	sort.Strings(controllers)
	d := &drainReports{l: l, ns: cluster.NewNamespace(t, l.c), targets: map[string]*drainTarget{}}
	for i, pod := range controllers {
		name := fmt.Sprintf("drain-%d", i)
		tj := training.ShellTrainJob(d.ns, name, training.TorchRuntime, 1, "sleep 900")
		if _, err := l.trainers.TrainerV1alpha1().TrainJobs(d.ns).Create(ctx, tj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		d.targets[pod] = &drainTarget{name: name, pod: pod}
	}
	return d
}

// prepare waits for each target's trainer pod and readies what it would send: a token
// bound to the pod, the injected URL, and the CA the controller published in the
// namespace.
func (d *drainReports) prepare(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	l := d.l
	serverName := ""
	for _, target := range d.targets {
		var trainerPod corev1.Pod
		cluster.Eventually(t, trainingTimeout, target.name+"'s trainer pod running", func(ctx context.Context) (bool, string) {
			list, err := l.c.Client().CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=" + target.name})
			if err != nil || len(list.Items) == 0 {
				return false, fmt.Sprintf("no pod (%v)", err)
			}
			trainerPod = list.Items[0]
			return trainerPod.Status.Phase == corev1.PodRunning, "phase " + string(trainerPod.Status.Phase)
		})
		u := injectedURL(t, trainerPod)
		target.path, target.port = u.Path, u.Port()
		serverName = u.Hostname()
		tr, err := l.c.Client().CoreV1().ServiceAccounts(d.ns).CreateToken(ctx, trainerPod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				Audiences: []string{wire.Audience(d.ns, target.name)}, ExpirationSeconds: ptr.To[int64](600),
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: trainerPod.Name, UID: trainerPod.UID},
			}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("minting a token bound to %s: %v", trainerPod.Name, err)
		}
		target.token = tr.Status.Token
	}
	var ca []byte
	cluster.Eventually(t, time.Minute, "the progress server's CA ConfigMap in "+d.ns, func(ctx context.Context) (bool, string) {
		cm, err := l.c.Client().CoreV1().ConfigMaps(d.ns).Get(ctx, wire.CAConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ca = []byte(cm.Data[wire.CAConfigMapKey])
		return len(ca) > 0, "no " + wire.CAConfigMapKey
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("ConfigMap %s holds no PEM certificate", wire.CAConfigMapName)
	}
	// The certificate names the Service, not the Pod IP: it is verified for the name
	// the trainers use. One connection per report: a Pod whose listener closed refuses
	// the next one, where a kept-alive connection would hide when it stopped accepting.
	d.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext:       (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}}
	d.host = serverName
}

// injectedURL is the progress URL the controller injected into the trainer pod.
func injectedURL(t *testing.T, pod corev1.Pod) *url.URL {
	t.Helper()
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == wire.EnvServerURL {
				u, err := url.Parse(e.Value)
				if err != nil {
					t.Fatalf("pod %s: %s %q: %v", pod.Name, wire.EnvServerURL, e.Value, err)
				}
				return u
			}
		}
	}
	t.Fatalf("pod %s: no %s", pod.Name, wire.EnvServerURL)
	return nil
}

// draining is watchDrains' callback: it starts reporting to pod if it has a target.
func (d *drainReports) draining(pod corev1.Pod) {
	target := d.targets[pod.Name]
	if target == nil || pod.Status.PodIP == "" {
		return
	}
	target.mu.Lock()
	started := !target.seen.IsZero()
	if !started {
		target.seen = time.Now()
	}
	target.mu.Unlock()
	if started {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.report(target, pod.Status.PodIP)
	}()
}

// report sends target's reports to the Pod at ip, progress 1, 2, 3, … every
// drainReportInterval, until one gets no answer (the listener closed, the Pod gone)
// or drainReportsFor passed.
func (d *drainReports) report(target *drainTarget, ip string) {
	addr := net.JoinHostPort(ip, target.port)
	end := time.Now().Add(drainReportsFor)
	for progress := int32(1); progress < 100 && time.Now().Before(end); progress++ {
		a := d.send(target, addr, progress)
		target.mu.Lock()
		target.answers = append(target.answers, a)
		target.mu.Unlock()
		if a.err != nil {
			return
		}
		time.Sleep(drainReportInterval)
	}
}

func (d *drainReports) send(target *drainTarget, addr string, progress int32) drainAnswer {
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	body, _ := json.Marshal(wire.UpdateTrainJobStatusRequest{TrainerStatus: &trainer.TrainerStatus{ProgressPercentage: ptr.To(progress), LastUpdatedTime: &now}})
	req, err := http.NewRequest(http.MethodPost, "https://"+addr+target.path, bytes.NewReader(body))
	if err != nil {
		return drainAnswer{progress: progress, sent: time.Now(), err: err}
	}
	req.Host = net.JoinHostPort(d.host, target.port)
	req.Header.Set("Authorization", "Bearer "+target.token)
	req.Header.Set("Content-Type", "application/json")
	a := drainAnswer{progress: progress, sent: time.Now()}
	resp, err := d.client.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	resp.Body.Close()
	a.code = resp.StatusCode
	return a
}

// verify waits for the reporting loops, then checks each target: at least one report
// answered 200 by its draining Pod, and the last of them in the TrainJob's status. It
// logs the other answers (a refused connection ends a loop: the Pod closed its listener).
func (d *drainReports) verify(t *testing.T) {
	t.Helper()
	d.wg.Wait()
	pods := make([]string, 0, len(d.targets))
	for pod := range d.targets {
		pods = append(pods, pod)
	}
	slices.Sort(pods)
	for _, pod := range pods {
		target := d.targets[pod]
		target.mu.Lock()
		answers, seen := slices.Clone(target.answers), target.seen
		target.mu.Unlock()
		if len(answers) == 0 {
			t.Errorf("%s: no report sent to the controller Pod %s: it was not seen draining", target.name, pod)
			continue
		}
		var last *drainAnswer
		other := map[string]int{}
		for i, a := range answers {
			switch {
			case a.err == nil && a.code == http.StatusOK:
				last = &answers[i]
			case a.err != nil:
				other[answerClass(a.err)]++
			default:
				other[fmt.Sprintf("HTTP %d", a.code)]++
			}
		}
		if last == nil {
			t.Errorf("%s: none of %d reports to the draining Pod %s was answered 200 (%v): the check proves nothing", target.name, len(answers), pod, other)
			continue
		}
		t.Logf("%s: %d reports to the draining Pod %s from %s: the last answered 200 is %d, sent %s after its deletion was seen; other answers %v",
			target.name, len(answers), pod, answers[0].sent.Format(time.StampMilli), last.progress, last.sent.Sub(seen).Round(10*time.Millisecond), other)
		state := "no trainerStatus"
		cluster.Eventually(t, 30*time.Second, fmt.Sprintf("%s's status at report %d, answered 200 by the draining Pod %s", target.name, last.progress, pod), func(ctx context.Context) (bool, string) {
			tj, err := d.l.trainers.TrainerV1alpha1().TrainJobs(d.ns).Get(ctx, target.name, metav1.GetOptions{})
			if err != nil {
				return false, state + "; then " + err.Error()
			}
			if ts := tj.Status.TrainerStatus; ts != nil && ts.ProgressPercentage != nil {
				state = fmt.Sprintf("trainerStatus progress %d (lastUpdatedTime %v)", *ts.ProgressPercentage, ts.LastUpdatedTime)
				return *ts.ProgressPercentage == last.progress, state
			}
			return false, state
		})
	}
}

// answerClass names why a report got no answer, for the log.
func answerClass(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF):
		return "closed unanswered (EOF)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, context.DeadlineExceeded), strings.Contains(err.Error(), "timeout"):
		return "timed out"
	}
	return err.Error()
}
