package faults

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Timings of TestRollingUpdateRefusesNoWrite.
const (
	// endpointLag is how long the test's Service stand-in (serviceProxy) takes to
	// follow a replica's readiness: a replica that stopped being ready still gets new
	// connections for that long, as kube-proxy and the API server's webhook client
	// follow EndpointSlices a moment after a pod's readiness changes (about a second on
	// an idle cluster, more under load).
	endpointLag = 2 * time.Second
	// readinessPoll is how often the stand-in looks at each replica's /readyz.
	readinessPoll = 100 * time.Millisecond
	// rollingShutdownDelay is the replicas' --shutdown-delay: above endpointLag, as the
	// chart's 5 s is above a real cluster's propagation.
	rollingShutdownDelay = 3 * time.Second
	// createPace is the pace of the users' creates during the update (20/s).
	createPace = 50 * time.Millisecond
)

// TestRollingUpdateRefusesNoWrite (issue 25, item 3): two replicas behind a Service
// with webhook failurePolicy Fail, rolled one at a time as a Deployment's rolling
// update does (a new replica ready, then an old one sent SIGTERM) while users create
// TrainJobs at 20/s. Not one create may be refused: a terminating replica reports not
// ready at once and keeps serving for shutdownDelay, until the Service no longer sends
// it connections, and its open connections are closed gracefully (HTTP/2 GOAWAY), not
// cut; and every TrainJob gets its JobSet though the Lease changed hands twice.
// Without the delay the replica's port closes while the Service still routes new
// connections to it, and the API server refuses the creates that land there
// ("failed calling webhook": connection reset; 4 of 229 in one of two runs, as the
// proxy picks replicas at random). The replica stopped first is the one the API
// server's connection goes through, whose shutdown makes it connect anew. The Service is a TCP proxy that routes each new
// connection to the replicas it takes for ready, following their /readyz endpointLag
// (2 s) late; the replicas share one provided serving certificate, as under
// cert-manager.
func TestRollingUpdateRefusesNoWrite(t *testing.T) {
	timed(t)
	e := newEnv(t)
	ns := e.namespace(t)
	certDir, caBundle := providedServingCertificate(t)
	svc := startServiceProxy(t)
	e.registerWebhooks(t, svc.url(), caBundle)

	start := func(name string) *ctrlproc.Process {
		p := ctrlproc.Run(t, e.c, ctrlproc.Config{
			Binary: controllerBinary, Name: name, Kubeconfig: e.userKubeconfig(t, "trainyard-"+name),
			ProvidedCertDir: certDir,
			Args: []string{"--leader-elect", "--leader-elect-namespace=" + ns,
				"--shutdown-delay=" + rollingShutdownDelay.String(), "--kube-api-qps=200", "--kube-api-burst=400"},
		})
		svc.add(p)
		return p
	}
	old := []*ctrlproc.Process{start("a"), start("b")}
	const replicas = 2
	svc.waitReady(t, 2)

	creates := startCreates(e, ns, createPace)
	time.Sleep(3 * time.Second)
	for i := range replicas {
		start(fmt.Sprintf("new-%d", i))
		svc.waitReady(t, 3) // the Deployment's surge replica serves before an old one goes
		// The old replica the API server's connection goes through first: its shutdown
		// is the one that makes the API server connect anew.
		p := svc.busiest(old)
		old = slices.DeleteFunc(old, func(o *ctrlproc.Process) bool { return o == p })
		stopping := time.Now()
		p.Stop(t)
		t.Logf("replica %d of 2 replaced: the old one exited %v after SIGTERM", i+1, time.Since(stopping).Round(100*time.Millisecond))
	}
	time.Sleep(3 * time.Second)
	got := creates.stop()

	t.Logf("%d TrainJobs created during the rolling update, %d refused; create latency p50 %v, p99 %v, max %v",
		got.created, len(got.refused), got.quantile(0.5), got.quantile(0.99), got.quantile(1))
	if len(got.refused) > 0 {
		t.Errorf("%d of %d creates refused during the rolling update; first: %v", len(got.refused), got.created+len(got.refused), got.refused[0])
	}
	if got.created < 200 {
		t.Errorf("only %d TrainJobs created: the update went by too fast to test anything", got.created)
	}
	// The Lease changed hands twice meanwhile: every TrainJob still gets its JobSet.
	e.waitAllJobSets(t, ns, got.created, 2*time.Minute)
}

// providedServingCertificate writes a serving certificate for 127.0.0.1, signed by a
// CA of its own, into a temporary certDir (tls.crt holding the chain, tls.key), and
// returns the directory and the CA bundle that verifies it.
func providedServingCertificate(t *testing.T) (dir string, caBundle []byte) {
	t.Helper()
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, certPEM
}

// registerWebhooks creates webhook configurations that send TrainJob creates and
// updates to the controller's defaulting and validating endpoints at baseURL, failing
// closed, as the Helm chart does for its Service; and deletes them when the test ends
// (a webhook that fails closed with nothing behind it would refuse the next test's
// TrainJobs). The controller's own configurations also cover the runtimes; the test
// creates none during the update.
func (e *env) registerWebhooks(t *testing.T, baseURL string, caBundle []byte) {
	t.Helper()
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{trainer.GroupName}, APIVersions: []string{"v1alpha1"},
			Resources: []string{"trainjobs"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	client := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(baseURL + path), CABundle: caBundle}
	}
	none, fail := ptr.To(admissionregistrationv1.SideEffectClassNone), ptr.To(admissionregistrationv1.Fail)
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ctrlproc.MutatingWebhookName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "defaulter.trainjob.trainer.kubeflow.org", ClientConfig: client("/mutate-trainer-kubeflow-org-v1alpha1-trainjob"),
			Rules: rules, FailurePolicy: fail, SideEffects: none, AdmissionReviewVersions: []string{"v1"},
		}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ctrlproc.ValidatingWebhookName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "validator.trainjob.trainer.kubeflow.org", ClientConfig: client("/validate-trainer-kubeflow-org-v1alpha1-trainjob"),
			Rules: rules, FailurePolicy: fail, SideEffects: none, AdmissionReviewVersions: []string{"v1"},
		}},
	}
	api := e.c.Client().AdmissionregistrationV1()
	ctx := context.Background()
	if _, err := api.MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, err := range []error{
			api.ValidatingWebhookConfigurations().Delete(ctx, validating.Name, metav1.DeleteOptions{}),
			api.MutatingWebhookConfigurations().Delete(ctx, mutating.Name, metav1.DeleteOptions{}),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("removing the test's webhook configurations: %v", err)
			}
		}
	})
}

// creates is users creating TrainJobs one per pace, each create tried once.
type creates struct {
	start time.Time
	done  chan struct{}
	wg    sync.WaitGroup

	mu        sync.Mutex
	latencies []time.Duration
	refused   []error
}

// createResult is what the users saw.
type createResult struct {
	created   int
	refused   []error
	latencies []time.Duration // sorted
}

// quantile returns the q-quantile of the successful creates' latencies.
func (r createResult) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[int(q*float64(len(r.latencies)-1))].Round(time.Millisecond)
}

func startCreates(e *env, ns string, pace time.Duration) *creates {
	c := &creates{start: time.Now(), done: make(chan struct{})}
	tjs := e.trainers.TrainerV1alpha1().TrainJobs(ns)
	c.wg.Go(func() {
		ticker := time.NewTicker(pace)
		defer ticker.Stop()
		for i := 0; ; i++ {
			select {
			case <-c.done:
				return
			case <-ticker.C:
			}
			c.wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				began := time.Now()
				_, err := tjs.Create(ctx, trainJob(ns, trainJobName(i)), metav1.CreateOptions{})
				c.mu.Lock()
				defer c.mu.Unlock()
				if err != nil {
					c.refused = append(c.refused, fmt.Errorf("%s, %v into the run: %w", trainJobName(i), began.Sub(c.start).Round(time.Millisecond), err))
					return
				}
				c.latencies = append(c.latencies, time.Since(began))
			})
		}
	})
	return c
}

// stop ends the creates, waits for those in flight and returns what happened.
func (c *creates) stop() createResult {
	close(c.done)
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	lat := slices.Clone(c.latencies)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return createResult{created: len(lat), refused: slices.Clone(c.refused), latencies: lat}
}

// serviceProxy stands in for a Service in front of the replicas' admission servers: a
// TCP proxy on 127.0.0.1 sending each new connection to the next replica, round robin,
// among those it takes for ready: those whose /readyz answered 200 endpointLag ago or
// more, and has not failed for endpointLag since. A connection stays with its replica
// until either end closes it.
type serviceProxy struct {
	ln net.Listener

	mu       sync.Mutex
	backends []*backend
	next     int
}

type backend struct {
	proc   *ctrlproc.Process
	addr   string    // the admission server's host:port
	ready  bool      // the proxy sends it connections
	seen   bool      // what its /readyz said at the last look
	seenAt time.Time // when /readyz last changed its answer
	conns  int       // connections open through the proxy
}

func startServiceProxy(t *testing.T) *serviceProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &serviceProxy{ln: ln}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.accept() })
	wg.Go(func() { s.followReadiness(ctx) })
	t.Cleanup(func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
	})
	return s
}

func (s *serviceProxy) url() string { return "https://" + s.ln.Addr().String() }

// add puts p behind the proxy; it gets connections once its /readyz answers.
func (s *serviceProxy) add(p *ctrlproc.Process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backends = append(s.backends, &backend{proc: p, addr: p.WebhookAddr})
}

// waitReady waits until n replicas get connections.
func (s *serviceProxy) waitReady(t *testing.T, n int) {
	t.Helper()
	cluster.Eventually(t, 30*time.Second, fmt.Sprintf("%d replicas behind the Service", n), func(context.Context) (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		ready := 0
		for _, b := range s.backends {
			if b.ready {
				ready++
			}
		}
		return ready >= n, fmt.Sprintf("%d ready", ready)
	})
}

// followReadiness looks at every replica's /readyz every readinessPoll and applies
// what it saw endpointLag later, as EndpointSlices reach kube-proxy and the API server
// some time after a pod's readiness changes.
func (s *serviceProxy) followReadiness(ctx context.Context) {
	ticker := time.NewTicker(readinessPoll)
	defer ticker.Stop()
	for {
		s.mu.Lock()
		backends := slices.Clone(s.backends)
		s.mu.Unlock()
		for _, b := range backends {
			rctx, cancel := context.WithTimeout(ctx, readinessPoll)
			seen := b.proc.Ready(rctx)
			cancel()
			now := time.Now()
			s.mu.Lock()
			if seen != b.seen {
				b.seen, b.seenAt = seen, now
			}
			if b.ready != b.seen && now.Sub(b.seenAt) >= endpointLag {
				b.ready = b.seen
			}
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// pick returns a ready replica chosen at random, as kube-proxy chooses an endpoint,
// or nil when none is ready.
func (s *serviceProxy) pick() *backend {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ready []*backend
	for _, b := range s.backends {
		if b.ready {
			ready = append(ready, b)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	return ready[rand.IntN(len(ready))]
}

// busiest returns the one of procs with the most connections open through the proxy:
// the replica whose shutdown makes the API server open a new connection.
func (s *serviceProxy) busiest(procs []*ctrlproc.Process) *ctrlproc.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, most := procs[0], -1
	for _, b := range s.backends {
		if slices.Contains(procs, b.proc) && b.conns > most {
			best, most = b.proc, b.conns
		}
	}
	return best
}

func (s *serviceProxy) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.forward(conn)
	}
}

// forward copies conn to and from the replica pick chooses; with none ready, or the
// replica's port closed, it closes conn, as a Service without endpoints or a closed
// port would refuse it.
func (s *serviceProxy) forward(conn net.Conn) {
	defer conn.Close()
	b := s.pick()
	if b == nil {
		return
	}
	upstream, err := net.DialTimeout("tcp", b.addr, 5*time.Second)
	if err != nil {
		return
	}
	defer upstream.Close()
	s.mu.Lock()
	b.conns++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		b.conns--
		s.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = copyAndCloseWrite(upstream, conn); done <- struct{}{} }()
	go func() { _, _ = copyAndCloseWrite(conn, upstream); done <- struct{}{} }()
	<-done
	<-done
}

// copyAndCloseWrite copies src to dst until src ends, then half-closes dst so that its
// reader sees the end too.
func copyAndCloseWrite(dst, src net.Conn) (int64, error) {
	n, err := io.Copy(dst, src)
	if tcp, ok := dst.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
	return n, err
}
