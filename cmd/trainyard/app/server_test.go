package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	jobsetfake "sigs.k8s.io/jobset/client-go/clientset/versioned/fake"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	"github.com/trainyard/trainyard/pkg/lease"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/stages"
)

// The start-up and shutdown rules of docs/design/architecture.md#start-up-and-shutdown,
// observed on the controller's own steps (controller.run) over fake clientsets: the TrainJob
// list is held until the test lets it through, the foreign Lease until the test
// releases it, and the pipeline's first JobSet write until the test lets it finish.
const (
	startStopLeaseNamespace = "trainyard-system"
	startStopLeaseName      = "trainyard-controller"
)

// startStop is a controller built for TestStartAndStopOrder, and what the test watches.
type startStop struct {
	c                        *controller
	kube                     *kubefake.Clientset
	healthURL, admissionAddr string

	listing     chan struct{} // closed when the TrainJob list reached the API server
	releaseList chan struct{} // closing it lets the list through
	syncing     chan struct{} // closed when the pipeline's first JobSet write started
	finishSync  chan struct{} // closing it lets that write finish

	mu        sync.Mutex
	events    []string  // what happened after cancellation, in order
	stopped   bool      // the context was cancelled
	stoppedAt time.Time // when
	renewals  int       // renewals of this replica's Lease since cancellation
	identity  string    // this replica's Lease identity, once it led
	failures  []string  // rule violations seen where they happened
	leaseSeen bool      // the elector read the Lease
}

func (s *startStop) record(event string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, event)
}

func (s *startStop) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, fmt.Sprintf(format, args...))
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// accepts reports whether something listens on addr.
func accepts(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, wait.ForeverTestTimeout)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// get returns the status and body of GET url, or an error when nothing answers.
func get(url string) (int, string, error) {
	resp, err := http.Get(url) //nolint:gosec,noctx // a test's loopback URL
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// eventually waits until cond holds; the timeout only guards against a hang.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out waiting until %s", what)
	}
}

func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// noCertificate is a serving certificate that is ready but completes no handshake: the
// test looks at whether the admission port accepts connections, not at TLS.
type noCertificate struct{}

func (noCertificate) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return nil, errors.New("no certificate in this test")
	}}
}
func (noCertificate) Ready() bool { return true }

// newStartStop builds a controller with leader election as build does, over fake
// clientsets holding the torch runtime and a TrainJob of it, and a Lease another replica
// holds.
func newStartStop(t *testing.T) *startStop {
	logger, ctx := ktesting.NewTestContext(t)
	s := &startStop{
		listing: make(chan struct{}), releaseList: make(chan struct{}),
		syncing: make(chan struct{}), finishSync: make(chan struct{}),
		admissionAddr: freeAddr(t),
	}
	healthAddr := freeAddr(t)
	s.healthURL = "http://" + healthAddr
	t.Cleanup(func() {
		closeOnce(s.releaseList)
		closeOnce(s.finishSync)
	})

	cfg := &configv1alpha1.Configuration{}
	configv1alpha1.SetObjectDefaults_Configuration(cfg)
	cfg.Health.HealthProbeBindAddress = healthAddr
	cfg.Metrics.BindAddress = "0"
	cfg.Webhook.BindAddress = s.admissionAddr
	cfg.Webhook.RegisterURL = "https://" + s.admissionAddr
	cfg.ShutdownDelay = &metav1.Duration{Duration: startStopShutdownDelay}
	// A short retryPeriod: client-go's elector keeps a real clock, and the test waits
	// for it to take the Lease once released.
	cfg.LeaderElection = leaseTimings()

	rt := &trainer.ClusterTrainingRuntime{}
	tj := &trainer.TrainJob{}
	if err := errors.Join(yaml.UnmarshalStrict([]byte(torchRuntime), rt), yaml.UnmarshalStrict([]byte(torchJob), tj)); err != nil {
		t.Fatal(err)
	}
	tj.UID, tj.Generation = types.UID("tj-uid"), 1
	trainers := trainerfake.NewSimpleClientset(rt, tj)
	trainers.PrependReactor("list", "trainjobs", func(clienttesting.Action) (bool, runtime.Object, error) {
		closeOnce(s.listing)
		<-s.releaseList
		return false, nil, nil
	})
	// The informers' TrainJob watch, to see when it stops.
	trainers.PrependWatchReactor("trainjobs", func(a clienttesting.Action) (bool, watch.Interface, error) {
		w, err := trainers.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(clienttesting.WatchActionImpl).ListOptions)
		if err != nil {
			return false, nil, err
		}
		return true, &stopRecordingWatch{Interface: w, stop: s.informerStopped}, nil
	})

	now := metav1.NowMicro()
	s.kube = kubefake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: startStopLeaseNamespace, Name: startStopLeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other-replica"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &now, RenewTime: &now},
	})
	s.kube.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		s.mu.Lock()
		s.leaseSeen = true
		s.mu.Unlock()
		return false, nil, nil
	})
	s.kube.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		s.leaseWritten(a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease))
		return false, nil, nil
	})
	s.kube.PrependReactor("delete", "validatingwebhookconfigurations", func(clienttesting.Action) (bool, runtime.Object, error) {
		s.record("webhook configurations removed")
		s.mu.Lock()
		served := time.Since(s.stoppedAt)
		s.mu.Unlock()
		if served < startStopShutdownDelay {
			s.fail("the servers began to stop %v after cancellation, before shutdownDelay (%v)", served, startStopShutdownDelay)
		}
		if !accepts(s.admissionAddr) {
			s.fail("the webhook configurations were removed after admission stopped serving")
		}
		return false, nil, nil
	})

	c := &controller{cfg: cfg, logger: logger, kube: s.kube, fence: lease.NewFence(clock.RealClock{}, cfg.LeaderElection.RenewDeadline.Duration)}
	c.registry = prometheus.NewRegistry()
	c.metrics = metrics.New(c.registry)
	jobsets := jobsetfake.NewSimpleClientset()
	all := &clients{
		kube: s.kube, trainers: trainers, jobsets: jobsets, jobSetWatch: jobsets,
		dynamic:  dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
		metadata: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()),
	}
	if err := c.buildCaches(all, all); err != nil {
		t.Fatal(err)
	}
	var err error
	c.pipeline, c.hooks, err = newPipeline(cfg, c.informers, pipelineDeps{
		trainers: trainers, jobsets: all.jobsets, applyJobSet: s.applyJobSet, recorder: &events.FakeRecorder{},
		metrics: c.metrics, logger: logger, gangBackends: stages.GangBackends(nil), claims: c.apis.claims,
		gangWaiting: func(*trainer.TrainJob) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	c.apis.router = c.pipeline
	c.certificate = &servingCertificate{source: noCertificate{}}
	if c.admission, err = newAdmissionServer(cfg.Webhook, c.certificate, s.kube, c.informers, c.apis.claims, c.metrics, logger); err != nil {
		t.Fatal(err)
	}
	c.admission.server.ErrorLog = log.New(io.Discard, "", 0) // the test's dials end in failed handshakes
	if err := c.buildProbes(all, false); err != nil {
		t.Fatal(err)
	}
	if err := c.apis.register(ctx); err != nil {
		t.Fatal(err)
	}
	s.c = c
	return s
}

// startStopShutdownDelay is the shutdownDelay of TestStartAndStopOrder's controller.
const startStopShutdownDelay = 300 * time.Millisecond

func leaseTimings() (le componentbaseconfigv1alpha1.LeaderElectionConfiguration) {
	le.LeaderElect = ptr.To(true)
	le.ResourceName, le.ResourceNamespace = startStopLeaseName, startStopLeaseNamespace
	le.LeaseDuration = metav1.Duration{Duration: 15 * time.Second}
	le.RenewDeadline = metav1.Duration{Duration: 10 * time.Second}
	le.RetryPeriod = metav1.Duration{Duration: 20 * time.Millisecond}
	return le
}

// leaseWritten watches this replica's writes of the Lease: it notes its identity when it
// first holds it, counts its renewals after cancellation, and records the release.
func (s *startStop) leaseWritten(l *coordinationv1.Lease) {
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case holder != "" && s.identity == "":
		s.identity = holder
	case holder != "" && s.stopped:
		s.renewals++
	case holder == "" && s.stopped:
		s.events = append(s.events, "Lease released")
		if !accepts(s.admissionAddr) {
			s.failures = append(s.failures, "admission stopped serving before the Lease was released")
		}
	}
}

// applyJobSet is the pipeline's JobSet write: the first one checks that this replica
// holds the Lease, then waits for the test to let it finish.
func (s *startStop) applyJobSet(context.Context, string, string, []byte) error {
	select {
	case <-s.syncing:
		return nil
	default:
	}
	l, err := s.kube.CoordinationV1().Leases(startStopLeaseNamespace).Get(context.Background(), startStopLeaseName, metav1.GetOptions{})
	if err != nil {
		s.fail("reading the Lease during a sync: %v", err)
	} else if h := ptr.Deref(l.Spec.HolderIdentity, ""); h == "" || h == "other-replica" {
		s.fail("the pipeline wrote a JobSet while the Lease was held by %q", h)
	}
	close(s.syncing)
	<-s.finishSync // in flight, deaf to its context as an HTTP request on the wire
	s.record("in-flight sync finished")
	return nil
}

// informerStopped records the first stop of the informers' TrainJob watch after
// cancellation, and checks that the probes still answer.
func (s *startStop) informerStopped() {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if !stopped {
		s.fail("the informers' TrainJob watch stopped before cancellation")
		return
	}
	s.record("informers stopped")
	if code, _, err := get(s.healthURL + "/healthz"); err != nil || code != http.StatusOK {
		s.fail("/healthz did not answer when the informers stopped: %d, %v", code, err)
	}
}

type stopRecordingWatch struct {
	watch.Interface
	once sync.Once
	stop func()
}

func (w *stopRecordingWatch) Stop() {
	w.once.Do(w.stop)
	w.Interface.Stop()
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// The start-up and shutdown order of docs/design/architecture.md#start-up-and-shutdown:
//
//   - /healthz answers and /readyz says why not ready while the caches sync;
//   - the admission port accepts no connection before the caches have synced;
//   - a follower serves admission but runs no pipeline: the first JobSet write comes after
//     the Lease is won;
//   - on cancellation, /readyz fails at once; the in-flight sync finishes (the Lease
//     renewed meanwhile) before the Lease is released; the servers serve on for
//     shutdownDelay; then the self-registered webhook configurations are removed
//     while admission still serves; then the informers stop while the probes still answer;
//     then the probes stop.
func TestStartAndStopOrder(t *testing.T) {
	s := newStartStop(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.c.run(ctx) }()

	// Caches syncing: the TrainJob list is held.
	awaitClosed(t, s.listing, "the informers' TrainJob list")
	eventually(t, "/healthz answers", func() bool {
		code, _, err := get(s.healthURL + "/healthz")
		return err == nil && code == http.StatusOK
	})
	if code, body, err := get(s.healthURL + "/readyz"); err != nil || code != http.StatusServiceUnavailable || body != "[-]informers: caches not synced\n" {
		t.Errorf("/readyz while the caches sync: %d %q %v; want 503 saying the caches have not synced", code, body, err)
	}
	if accepts(s.admissionAddr) {
		t.Fatal("the admission port accepts connections before the caches have synced")
	}
	if l := s.lease(t); ptr.Deref(l.Spec.HolderIdentity, "") != "other-replica" {
		t.Errorf("Lease holder %q before the caches synced, want the other replica's", ptr.Deref(l.Spec.HolderIdentity, ""))
	}

	// Caches synced: admission serves and registers itself; this replica follows.
	closeOnce(s.releaseList)
	eventually(t, "the admission port accepts connections", func() bool { return accepts(s.admissionAddr) })
	eventually(t, "the webhook configurations are registered", func() bool {
		_, err := s.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, s.c.cfg.Webhook.ValidatingWebhookConfigurationName, metav1.GetOptions{})
		return err == nil
	})
	eventually(t, "the elector has read the Lease", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.leaseSeen
	})
	if code, body, err := get(s.healthURL + "/readyz?verbose"); err != nil || code != http.StatusOK ||
		body != "[+]informers ok\n[+]admission ok\n[+]leader-election following\nok\n" {
		t.Errorf("/readyz?verbose of a synced follower: %d %q %v", code, body, err)
	}
	select {
	case <-s.syncing:
		t.Fatal("the pipeline wrote a JobSet while another replica held the Lease")
	default:
	}

	// The other replica releases the Lease: this one leads, and its pipeline syncs.
	l := s.lease(t)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
	if err := s.kube.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"), l, startStopLeaseNamespace); err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, s.syncing, "the pipeline's first JobSet write")

	// Cancelled mid-sync: the Lease stays this replica's, renewed, until the sync ends.
	s.mu.Lock()
	s.stopped, s.stoppedAt = true, time.Now()
	s.mu.Unlock()
	cancel()
	eventually(t, "/readyz fails once stopping", func() bool {
		code, body, err := get(s.healthURL + "/readyz")
		return err == nil && code == http.StatusServiceUnavailable && strings.HasPrefix(body, "[-]shutdown: stopping")
	})
	eventually(t, "the Lease is renewed twice after the cancellation", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.renewals >= 2
	})
	if h := ptr.Deref(s.lease(t).Spec.HolderIdentity, ""); h == "" || h != s.identity {
		t.Errorf("Lease holder %q while a sync is in flight, want this replica's %q", h, s.identity)
	}
	closeOnce(s.finishSync)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run = %v, want nil after a clean shutdown", err)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("run did not return after cancellation")
	}

	s.mu.Lock()
	failures, events := s.failures, s.events
	s.mu.Unlock()
	for _, f := range failures {
		t.Error(f)
	}
	want := []string{"in-flight sync finished", "Lease released", "webhook configurations removed", "informers stopped"}
	if !slices.Equal(events, want) {
		t.Errorf("shutdown order:\n  %s\nwant\n  %s", strings.Join(events, "\n  "), strings.Join(want, "\n  "))
	}
	if _, _, err := get(s.healthURL + "/healthz"); err == nil {
		t.Error("/healthz still answers after run returned")
	}
	if accepts(s.admissionAddr) {
		t.Error("the admission port still accepts connections after run returned")
	}
	if l := s.lease(t); ptr.Deref(l.Spec.HolderIdentity, "") != "" {
		t.Errorf("Lease holder %q after run returned, want none (released)", ptr.Deref(l.Spec.HolderIdentity, ""))
	}
}

func (s *startStop) lease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l, err := s.kube.CoordinationV1().Leases(startStopLeaseNamespace).Get(context.Background(), startStopLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
