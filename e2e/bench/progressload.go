package bench

// Progress mode's reporting pods (issue 14): the pods listed with the URL the controller
// injected, a token minted for each, and one goroutine per pod POSTing its progress
// every interval over a shared keep-alive transport.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// reporter is one pod reporting its TrainJob's progress.
type reporter struct {
	namespace, pod, trainJob string
	podUID                   string
	serviceAccount           string
	url                      string
	token                    string
}

// listReporters lists the Running pods of the reporting TrainJobs with the URL the
// controller injected into their trainer container, ordered so that the pods of one
// TrainJob are spread over the interval: every TrainJob's first pod, then every
// second pod, and so on.
func (r *runner) listReporters(ctx context.Context, namespaces []string) ([]reporter, error) {
	type ranked struct {
		reporter
		rank int
	}
	var all []ranked
	for _, ns := range namespaces {
		list, err := r.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			pod := &list.Items[i]
			if pod.Status.Phase != corev1.PodRunning {
				continue
			}
			url := injectedURL(pod)
			if url == "" {
				return nil, fmt.Errorf("pod %s/%s: no %s in container %q: the controller injected no progress URL", ns, pod.Name, wire.EnvServerURL, trainer.ContainerNode)
			}
			rank, _ := strconv.Atoi(pod.Labels[jobsetv1alpha2.JobIndexKey]) // the pod's Job within the JobSet...
			if idx, err := strconv.Atoi(pod.Annotations["batch.kubernetes.io/job-completion-index"]); err == nil {
				rank = rank*1000 + idx // ... and within the Job
			}
			all = append(all, ranked{reporter: reporter{
				namespace: ns, pod: pod.Name, podUID: string(pod.UID), serviceAccount: pod.Spec.ServiceAccountName,
				trainJob: pod.Labels[jobsetv1alpha2.JobSetNameKey], url: url,
			}, rank: rank})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.namespace != b.namespace {
			return a.namespace < b.namespace
		}
		if a.trainJob != b.trainJob {
			return a.trainJob < b.trainJob
		}
		return a.pod < b.pod
	})
	out := make([]reporter, len(all))
	for i := range all {
		out[i] = all[i].reporter
	}
	return out, nil
}

// injectedURL is KUBEFLOW_TRAINER_SERVER_URL of the pod's trainer container.
func injectedURL(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name != trainer.ContainerNode {
			continue
		}
		for _, e := range c.Env {
			if e.Name == wire.EnvServerURL {
				return e.Value
			}
		}
	}
	return ""
}

// tokenRequester is the part of the ServiceAccounts client that mints tokens.
type tokenRequester interface {
	CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// mintPodToken mints the token the kubelet would project into the pod: bound to the
// pod, for its TrainJob's audience.
func mintPodToken(ctx context.Context, sa tokenRequester, rep reporter) (string, error) {
	name := rep.serviceAccount
	if name == "" {
		name = "default"
	}
	tr, err := sa.CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{wire.Audience(rep.namespace, rep.trainJob)},
		ExpirationSeconds: ptr.To[int64](tokenSeconds),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: rep.pod, UID: types.UID(rep.podUID)},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for pod %s/%s: %w", rep.namespace, rep.pod, err)
	}
	return tr.Status.Token, nil
}

// newReportClient is the trainers' HTTPS client: it trusts only caPEM and sends every
// request to addr, the controller's 127.0.0.1 address, whatever the URL's host (the
// in-cluster Service name, kept as the TLS server name). One transport for every pod,
// keeping up to conns idle connections so that a connection is reused from one
// report to the next. The counter counts the connections dialled. Each connection
// comes from its own loopback address (127.1.0.1, 127.1.0.2, ...), as each trainer pod
// has its own IP: the progress server limits the TokenReviews of unknown tokens per
// client address (pkg/util/authlimit), and 4,000 pods behind one address would be
// limited as one client.
func newReportClient(caPEM []byte, addr string, conns int) (*http.Client, *atomic.Int64, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("the CA ConfigMap holds no PEM certificate: %q", caPEM)
	}
	dials := &atomic.Int64{}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			n := dials.Add(1)
			dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
			if host, _, err := net.SplitHostPort(addr); err == nil && net.ParseIP(host).IsLoopback() {
				dialer.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 1, byte(n/250), byte(n%250+1))}
			}
			return dialer.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout: 10 * time.Second,
		// Twice the pods: a connection dialled while another came free is kept too.
		MaxIdleConns: 2 * conns, MaxIdleConnsPerHost: 2 * conns,
		IdleConnTimeout: time.Minute,
	}}, dials, nil
}

// reportLog is one report sent.
type reportLog struct {
	// At is when it was sent, in seconds from the window's start.
	At float64
	// Latency is the time to the response's end, in seconds.
	Latency float64
	// Code is the HTTP status, 0 for a transport error.
	Code int
	// First is the pod's first report: its token is reviewed, not found in the cache.
	First bool
}

// loadGen is the reporting pods: one goroutine per pod.
type loadGen struct {
	start    time.Time
	duration time.Duration
	wg       sync.WaitGroup
	logs     [][]reportLog
	skipped  atomic.Int64
	mu       sync.Mutex
	firstErr string
}

// startLoad starts every reporter: pod i reports at start + i/len(reps) × interval +
// k × interval for k = 0, 1, ... until ctx ends, so the pods' reports are spread evenly
// over the interval. A pod that falls a whole interval behind skips the ticks it
// missed, as a trainer's timer would.
func startLoad(ctx context.Context, client *http.Client, reps []reporter, interval, duration time.Duration) *loadGen {
	g := &loadGen{start: time.Now(), duration: duration, logs: make([][]reportLog, len(reps))}
	for i := range reps {
		phase := interval * time.Duration(i) / time.Duration(len(reps))
		g.wg.Go(func() { g.logs[i] = g.report(ctx, client, reps[i], phase, interval) })
	}
	return g
}

func (g *loadGen) report(ctx context.Context, client *http.Client, rep reporter, phase, interval time.Duration) []reportLog {
	logs := make([]reportLog, 0, int(g.duration/interval)+2)
	for k := 0; ; k++ {
		at := g.start.Add(phase + time.Duration(k)*interval)
		if d := time.Until(at); d > 0 {
			if sleepCtx(ctx, d) != nil {
				return logs
			}
		} else if -d >= interval {
			g.skipped.Add(1)
			continue
		}
		sent := time.Now()
		code, err := postReport(ctx, client, rep, reportBody(sent.Sub(g.start), g.duration, sent))
		if ctx.Err() != nil {
			return logs // cut off by the window's end: not a failure
		}
		if err != nil {
			g.noteError(err.Error())
		}
		logs = append(logs, reportLog{At: sent.Sub(g.start).Seconds(), Latency: time.Since(sent).Seconds(), Code: code, First: len(logs) == 0})
	}
}

func (g *loadGen) noteError(msg string) {
	g.mu.Lock()
	if g.firstErr == "" {
		g.firstErr = msg
	}
	g.mu.Unlock()
}

func (g *loadGen) firstError() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.firstErr
}

// wait waits for every reporter to stop (after ctx ended) and returns the logs.
func (g *loadGen) wait() [][]reportLog {
	g.wg.Wait()
	return g.logs
}

// reportBody is a trainer's report elapsed into a run of duration: progress rising
// from 0 to 100, the remaining time falling, a loss decaying, lastUpdatedTime now at
// the second precision the API server stores.
func reportBody(elapsed, duration time.Duration, now time.Time) []byte {
	frac := min(max(elapsed.Seconds()/duration.Seconds(), 0), 1)
	return fmt.Appendf(nil, `{"trainerStatus":{"progressPercentage":%d,"estimatedRemainingSeconds":%d,`+
		`"metrics":[{"name":"loss","value":"%.4f"}],"lastUpdatedTime":%q}}`,
		int(100*frac), int(math.Ceil((1-frac)*duration.Seconds())), 2*math.Exp(-3*frac), now.UTC().Truncate(time.Second).Format(time.RFC3339))
}

// postReport POSTs body to the reporter's URL with its token and returns the status
// code; an error with a code is the start of the body of a refusal.
func postReport(ctx context.Context, client *http.Client, rep reporter, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rep.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+rep.token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode, fmt.Errorf("%s/%s: %s: %s", rep.namespace, rep.pod, resp.Status, msg)
	}
	_, err = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused
	return resp.StatusCode, err
}
