package faults

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	"github.com/trainyard/trainyard/pkg/httpserver/slowclient"
)

// The attack of TestAdmissionUnderSlowClients: 1,100 connections to the controller's
// admission server, more than its 1,024-connection cap.
const (
	// maxRequestBytes, validateTrainJobPath and webhookTimeout are package admission's
	// MaxRequestBytes, PathValidateTrainJob and TimeoutSeconds (importing it would bring
	// the stages' dependencies into this module).
	maxRequestBytes      = 7 << 20
	validateTrainJobPath = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
	webhookTimeout       = 10 * time.Second
	// slowHeaders send a request header a byte a second (reconnecting when cut).
	slowHeaders = 850
	// admissionMaxConns is the admission server's connection cap (ServerLimits).
	admissionMaxConns = 1024
	// slowBodies announce a body of maxRequestBytes and send a byte a second.
	slowBodies = 200
	// stalledBodies send maxRequestBytes−1 bytes at once and hold the last.
	stalledBodies = 50
	// admissionHeapBound is the controller's heap growth allowed under the attack
	// (go_memstats_heap_inuse_bytes): 1,024 TLS connections (~40 MiB), the body budget
	// (32 MiB), each stalled body's uncharged 64 KiB, the TrainJobs' cache. Without the
	// bounds the stalled bodies alone hold ~400 MiB.
	admissionHeapBound = 192 << 20
)

// TestAdmissionUnderSlowClients holds 1,100 slow connections, more than its
// 1,024-connection cap, against a running controller's admission server (registered
// with failurePolicy Fail; the API server's connection to it made before, as it keeps
// one) while 300 TrainJobs are created, each once, 8 at a time: none may be refused, the
// creates' p99 must stay within the webhook timeout, the controller's heap must stay
// bounded, and the slow headers must be cut (5 s header timeout), their slots going to
// the connections queued. It logs the refusals, create latency p50/p99, the
// controller's heap and RSS, the connections cut, and the requests it refused for its
// bounds (trainyard_admission_requests_rejected_total).
func TestAdmissionUnderSlowClients(t *testing.T) {
	timed(t)
	const n = 300
	e := newEnv(t)
	ns := e.namespace(t)
	ctrl := e.startWebhookController(t, "trainyard-admission-load")
	u, err := url.Parse(ctrl.WebhookURL)
	if err != nil {
		t.Fatal(err)
	}
	// A create before the attack: the API server's connection to the webhook, kept.
	if _, err := e.trainers.TrainerV1alpha1().TrainJobs(ns).Create(context.Background(), trainJob(ns, "warm-up"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a create before the attack: %v", err)
	}
	heapBefore := ctrl.Metric(t, "go_memstats_heap_inuse_bytes")
	stop := make(chan struct{})
	var attackers sync.WaitGroup
	var cut atomic.Int64
	stopped := false
	stopAttack := func() {
		if !stopped {
			stopped = true
			close(stop)
			attackers.Wait()
		}
	}
	defer stopAttack()
	attackStart := time.Now()
	startAttack(u.Host, &attackers, &cut, stop)
	time.Sleep(3 * time.Second) // the attackers connected and sent what they send at once

	var heapPeak, rssPeak atomic.Int64
	sample := func() {
		heapPeak.Store(max(heapPeak.Load(), int64(ctrl.Metric(t, "go_memstats_heap_inuse_bytes"))))
		rssPeak.Store(max(rssPeak.Load(), int64(ctrl.Metric(t, "process_resident_memory_bytes"))))
	}
	sample()
	latencies, refused := e.createEach(t, ns, n, 8, sample)
	sample()
	// The slow headers holding a slot once the cap is reached are cut 5 s later, and a
	// client sees the cut at its next byte: 10 s after the attack began, each of them
	// was cut at least once.
	time.Sleep(time.Until(attackStart.Add(10 * time.Second)))
	stopAttack()
	attack := slowHeaders + slowBodies + stalledBodies
	cutWant := int64(slowHeaders - (attack - admissionMaxConns)) // held a slot

	slices.Sort(latencies)
	p50, p99 := latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	growth := heapPeak.Load() - int64(heapBefore)
	t.Logf("%d slow connections (cap %d): %d cut; %d of %d creates refused; create latency p50 %s, p99 %s, max %s; controller heap in use %d MiB before, peak %d MiB (growth %d MiB), RSS peak %d MiB; requests refused for the bounds: %.0f",
		attack, admissionMaxConns, cut.Load(), len(refused), n, p50.Round(time.Millisecond), p99.Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond),
		int64(heapBefore)>>20, heapPeak.Load()>>20, growth>>20, rssPeak.Load()>>20, ctrl.Metric(t, "trainyard_admission_requests_rejected_total"))
	if len(refused) > 0 {
		t.Errorf("%d TrainJob creates refused under the attack, want none; first: %v", len(refused), first(refused, 3))
	}
	if p99 > webhookTimeout/2 {
		t.Errorf("create p99 %s under the attack, want within half the webhook timeout (%s)", p99, webhookTimeout)
	}
	if growth > admissionHeapBound {
		t.Errorf("the controller's heap grew by %d MiB under the attack, want at most %d MiB", growth>>20, admissionHeapBound>>20)
	}
	if cut.Load() < cutWant {
		t.Errorf("%d slow connections cut, want at least the %d slow headers that held a slot", cut.Load(), cutWant)
	}
	expectExact(t, e.waitAllJobSets(t, ns, n+1, 2*time.Minute), n+1)
}

// startWebhookController runs a controller as user with its admission server
// registered (the suite's other tests run without one); it is stopped, and its webhook
// configurations removed, when the test ends.
func (e *env) startWebhookController(t *testing.T, user string) *ctrlproc.Process {
	t.Helper()
	return ctrlproc.Run(t, e.c, ctrlproc.Config{
		Binary: controllerBinary, Kubeconfig: e.userKubeconfig(t, user),
		Args: []string{"--kube-api-qps=200", "--kube-api-burst=400"},
	})
}

// createEach creates n TrainJobs in ns, workers at a time, each once (no retry: a
// refused create is counted), calling sample every 50 creates. It returns each
// create's latency and the errors of the refused ones.
func (e *env) createEach(t *testing.T, ns string, n, workers int, sample func()) ([]time.Duration, []string) {
	t.Helper()
	tjs := e.trainers.TrainerV1alpha1().TrainJobs(ns)
	var mu sync.Mutex
	var latencies []time.Duration
	var refused []string
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				start := time.Now()
				_, err := tjs.Create(ctx, trainJob(ns, trainJobName(i)), metav1.CreateOptions{})
				elapsed := time.Since(start)
				cancel()
				mu.Lock()
				latencies = append(latencies, elapsed)
				if err != nil {
					refused = append(refused, fmt.Sprintf("%s: %v", trainJobName(i), err))
				}
				mu.Unlock()
				if i%50 == 0 {
					sample()
				}
			}
		})
	}
	wg.Wait()
	return latencies, refused
}

// startAttack opens the attack's 1,100 connections to addr from goroutines that stop
// with stop, and adds the slow headers' connections the server cut to cut as they stop.
func startAttack(addr string, wg *sync.WaitGroup, cut *atomic.Int64, stop <-chan struct{}) {
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: trainyard\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		validateTrainJobPath, maxRequestBytes)
	stalled := bytes.Repeat([]byte{'x'}, maxRequestBytes-1)
	for i := range slowHeaders + slowBodies + stalledBodies {
		wg.Go(func() {
			switch {
			case i < slowHeaders:
				cut.Add(int64(slowclient.Trickle(addr, "", head, stop)))
			case i < slowHeaders+slowBodies:
				slowclient.Trickle(addr, head, `{"kind":"AdmissionReview"`, stop)
			default:
				slowclient.Hold(addr, []byte(head), stalled, 30*time.Second, stop)
			}
		})
	}
}
