package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
)

const (
	testNamespace = "trainyard-system"
	testSecret    = "trainyard-webhook-certs"
	testService   = "trainyard-webhook"
	testVWC       = "trainyard-validating"
	testMWC       = "trainyard-mutating"
	// testDNSName is a Service SAN of testOptions.
	testDNSName = testService + "." + testNamespace + ".svc"
)

// testOptions: a 30 h CA and 12 h serving certificates renewed at 2/3, so
// that a test steps through rotations with a fake clock.
func testOptions(clk *clocktesting.FakeClock, rec *recorder) Options {
	o := Options{
		Namespace:                       testNamespace,
		SecretName:                      testSecret,
		Services:                        []string{testService},
		IPs:                             []net.IP{net.ParseIP("127.0.0.1")},
		ValidatingWebhookConfigurations: []string{testVWC},
		MutatingWebhookConfigurations:   []string{testMWC},
		CAValidity:                      30 * time.Hour,
		ServingValidity:                 12 * time.Hour,
		RenewFraction:                   2.0 / 3.0,
		CAPublishDelay:                  time.Minute,
		CheckInterval:                   time.Hour,
		Clock:                           clk,
	}
	if rec != nil {
		o.Metrics = rec
	}
	return o
}

// webhookConfigs returns the two named configurations, each with two webhooks
// and no caBundle.
func webhookConfigs() []runtime.Object {
	cc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: testNamespace, Name: testService}}
	return []runtime.Object{
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: testVWC, ResourceVersion: "1"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{
				{Name: "trainjobs.trainyard.dev", ClientConfig: cc},
				{Name: "runtimes.trainyard.dev", ClientConfig: cc},
			},
		},
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: testMWC, ResourceVersion: "1"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{
				{Name: "trainjobs.trainyard.dev", ClientConfig: cc},
				{Name: "defaults.trainyard.dev", ClientConfig: cc},
			},
		},
	}
}

// apiClient is a fake clientset that writes like the API server: every
// create and update sets a new resourceVersion, and an update whose
// resourceVersion is not the stored one fails with Conflict. (The plain fake
// ignores resourceVersions, so it cannot show a lost race.)
type apiClient struct {
	*fake.Clientset
	mu      sync.Mutex
	rv      int
	creates map[string]int // successful creates by resource
	updates map[string]int // successful updates by resource
}

func newAPIClient(objs ...runtime.Object) *apiClient {
	c := &apiClient{Clientset: fake.NewClientset(objs...), rv: 100, creates: map[string]int{}, updates: map[string]int{}}
	tracker := c.Tracker()
	c.PrependReactor("create", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		obj := a.(clienttesting.CreateAction).GetObject().DeepCopyObject()
		c.bump(obj)
		if err := tracker.Create(a.GetResource(), obj, a.GetNamespace(), metav1.CreateOptions{FieldManager: DefaultFieldManager}); err != nil {
			return true, nil, err
		}
		c.creates[a.GetResource().Resource]++
		return true, obj, nil
	})
	c.PrependReactor("update", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		obj := a.(clienttesting.UpdateAction).GetObject().DeepCopyObject()
		m, _ := meta.Accessor(obj)
		stored, err := tracker.Get(a.GetResource(), a.GetNamespace(), m.GetName())
		if err != nil {
			return true, nil, err
		}
		if sm, _ := meta.Accessor(stored); sm.GetResourceVersion() != m.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), m.GetName(), errors.New("the object has been modified"))
		}
		c.bump(obj)
		if err := tracker.Update(a.GetResource(), obj, a.GetNamespace(), metav1.UpdateOptions{FieldManager: DefaultFieldManager}); err != nil {
			return true, nil, err
		}
		c.updates[a.GetResource().Resource]++
		return true, obj, nil
	})
	return c
}

func (c *apiClient) bump(obj runtime.Object) {
	c.rv++
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.Itoa(c.rv))
}

// writes returns the successful creates and updates of resource so far.
func (c *apiClient) writes(resource string) (creates, updates int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.creates[resource], c.updates[resource]
}

func (c *apiClient) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := c.CoreV1().Secrets(testNamespace).Get(context.Background(), testSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the Secret: %v", err)
	}
	return s
}

// caBundles returns the caBundle of every webhook of both configurations.
func (c *apiClient) caBundles(t *testing.T) [][]byte {
	t.Helper()
	ctx := context.Background()
	v, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, testVWC, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, testMWC, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, b := range append(caBundles(v), caBundles(mw)...) {
		out = append(out, *b)
	}
	return out
}

// recorder is a Metrics that remembers what it was told.
type recorder struct {
	mu        sync.Mutex
	expiry    map[string]time.Time
	rotations map[string]int
}

func newRecorder() *recorder {
	return &recorder{expiry: map[string]time.Time{}, rotations: map[string]int{}}
}

func (r *recorder) SetCertificateExpiry(c string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expiry[c] = t
}

func (r *recorder) CertificateRotated(c string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotations[c]++
}

func (r *recorder) get() (map[string]time.Time, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, n := map[string]time.Time{}, map[string]int{}
	for k, v := range r.expiry {
		e[k] = v
	}
	for k, v := range r.rotations {
		n[k] = v
	}
	return e, n
}

// start runs a Manager for opts on client until the test ends and waits until
// it is Ready.
func start(t *testing.T, client *apiClient, opts Options) (*Manager, context.CancelFunc) {
	t.Helper()
	m, err := New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	waitCtx, waitCancel := context.WithTimeout(ctx, 10*time.Second)
	defer waitCancel()
	if err := m.WaitReady(waitCtx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	return m, stop
}

// eventually fails the test unless cond becomes true within 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// step advances clk by d once the Manager's loop waits on it.
func step(t *testing.T, clk *clocktesting.FakeClock, d time.Duration) {
	t.Helper()
	eventually(t, "the Manager to wait on the clock", clk.HasWaiters)
	clk.Step(d)
}

// serving returns the leaf the Manager serves.
func serving(t *testing.T, m *Manager) *x509.Certificate {
	t.Helper()
	c, err := m.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

func parseBundle(t *testing.T, pemBytes []byte) []*x509.Certificate {
	t.Helper()
	certs, err := cert.ParseCertsPEM(pemBytes)
	if err != nil {
		t.Fatalf("parsing the CA bundle: %v", err)
	}
	return certs
}
