package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trainyard/trainyard/pkg/metrics"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

func TestSecretCreatedOnceAndReusedAfterRestart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	client := newAPIClient(webhookConfigs()...)
	m1, stop := start(t, client, testOptions(clk, newRecorder()))

	s := client.secret(t)
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type = %q, want %q", s.Type, corev1.SecretTypeTLS)
	}
	for _, k := range []string{TLSCertKey, TLSKeyKey, CACertKey, CAKeyKey} {
		if len(s.Data[k]) == 0 {
			t.Errorf("Secret key %s is empty", k)
		}
	}
	if !bytes.Equal(m1.CABundle(), s.Data[CACertKey]) {
		t.Error("CABundle() is not the Secret's ca.crt")
	}
	leaf := serving(t, m1)
	for _, name := range []string{testDNSName, testDNSName + ".cluster.local", "127.0.0.1"} {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}
	eventually(t, "the CA bundle in all four webhooks", func() bool {
		for _, b := range client.caBundles(t) {
			if !bytes.Equal(b, m1.CABundle()) {
				return false
			}
		}
		return true
	})
	stop()

	// A restart: a new Manager on the same cluster serves the stored pair and
	// writes nothing.
	client.ClearActions()
	m2, _ := start(t, client, testOptions(clk, newRecorder()))
	if !bytes.Equal(m2.CABundle(), s.Data[CACertKey]) {
		t.Error("after a restart the CA bundle changed")
	}
	if !serving(t, m2).Equal(leaf) {
		t.Error("after a restart the serving certificate changed")
	}
	if _, err := m2.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := utiltesting.Writes(client.Actions()); len(w) != 0 {
		t.Errorf("a restart wrote %v, want nothing", w)
	}
	if creates, _ := client.writes("secrets"); creates != 1 {
		t.Errorf("Secret created %d times, want 1", creates)
	}
}

func TestPreCreatedEmptySecretIsFilledWithoutCreate(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	empty := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: testSecret, Namespace: testNamespace, ResourceVersion: "1"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{TLSCertKey: nil, TLSKeyKey: nil, "other": []byte("kept")},
	}
	client := newAPIClient(append(webhookConfigs(), empty)...)
	start(t, client, testOptions(clk, newRecorder()))
	if creates, updates := client.writes("secrets"); creates != 0 || updates != 1 {
		t.Errorf("Secret writes: %d creates, %d updates; want 0 and 1", creates, updates)
	}
	if got := string(client.secret(t).Data["other"]); got != "kept" {
		t.Errorf("data key other = %q, want it kept", got)
	}
}

func TestDeletedSecretRecreatedWithSameCA(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	client := newAPIClient(webhookConfigs()...)
	m, _ := start(t, client, testOptions(clk, newRecorder()))
	before := client.secret(t).Data
	// The fake watch, unlike the API server's, does not replay events from
	// the list's resourceVersion: wait until the informer has the Secret, or
	// it could miss both its creation and its deletion.
	eventually(t, "the informer to see the Secret", func() bool {
		_, ok, _ := m.secrets.GetStore().GetByKey(testNamespace + "/" + testSecret)
		return ok
	})
	if err := client.CoreV1().Secrets(testNamespace).Delete(context.Background(), testSecret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Secret re-created", func() bool { creates, _ := client.writes("secrets"); return creates == 2 })
	after := client.secret(t).Data
	for _, k := range []string{TLSCertKey, TLSKeyKey, CACertKey, CAKeyKey} {
		if !bytes.Equal(before[k], after[k]) {
			t.Errorf("re-created Secret: %s changed", k)
		}
	}
	if !bytes.Equal(m.CABundle(), before[CACertKey]) {
		t.Error("CA bundle changed")
	}
}

// Two replicas that both find no Secret both create one: the loser reads the
// winner's and serves it, writing nothing else.
func TestRacingManagersConvergeOnOneCA(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(time.Now())
	client := newAPIClient(webhookConfigs()...)
	rec1, rec2 := newRecorder(), newRecorder()
	m1, err := New(client, testOptions(clk, rec1))
	if err != nil {
		t.Fatal(err)
	}
	m2, err := New(client, testOptions(clk, rec2))
	if err != nil {
		t.Fatal(err)
	}
	// Neither runs its informers: both see no Secret.
	if _, err := m1.ensureSecret(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.ensureSecret(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m1.CABundle(), m2.CABundle()) || !serving(t, m1).Equal(serving(t, m2)) {
		t.Fatal("the replicas serve different certificates")
	}
	if creates, updates := client.writes("secrets"); creates != 1 || updates != 0 {
		t.Errorf("Secret writes: %d creates, %d updates; want 1 and 0", creates, updates)
	}

	// Both decide to renew the serving certificate from the same Secret: the
	// second update conflicts, and the loser adopts the winner's certificate.
	stale := client.secret(t)
	clk.Step(9 * time.Hour)
	if err := m2.secrets.GetStore().Add(stale); err != nil { // m2's informer lags
		t.Fatal(err)
	}
	if _, err := m1.ensureSecret(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.ensureSecret(ctx); err != nil {
		t.Fatal(err)
	}
	if !serving(t, m1).Equal(serving(t, m2)) {
		t.Fatal("after the rotation race the replicas serve different certificates")
	}
	if bytes.Equal(client.secret(t).Data[TLSCertKey], stale.Data[TLSCertKey]) {
		t.Error("the serving certificate was not renewed")
	}
	if _, updates := client.writes("secrets"); updates != 1 {
		t.Errorf("Secret updates = %d, want 1", updates)
	}
	_, r1 := rec1.get()
	_, r2 := rec2.get()
	if r1[metrics.CertificateServing]+r2[metrics.CertificateServing] != 1 {
		t.Errorf("rotations counted: %v and %v, want one serving rotation in all", r1, r2)
	}
}

// Replicas started together, each with its informers, converge on one Secret.
func TestConcurrentReplicasConverge(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	client := newAPIClient(webhookConfigs()...)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	managers := make([]*Manager, 3)
	for i := range managers {
		m, err := New(client, testOptions(clk, newRecorder()))
		if err != nil {
			t.Fatal(err)
		}
		managers[i] = m
	}
	for _, m := range managers {
		wg.Go(func() { _ = m.Run(ctx) })
	}
	for i, m := range managers {
		eventually(t, fmt.Sprintf("replica %d ready", i), m.Ready)
	}
	want := client.secret(t).Data[CACertKey]
	for i, m := range managers {
		eventually(t, fmt.Sprintf("replica %d to serve the stored CA", i), func() bool { return bytes.Equal(m.CABundle(), want) })
	}
	if creates, _ := client.writes("secrets"); creates != 1 {
		t.Errorf("Secret created %d times, want 1", creates)
	}
}

func TestServingCertificateRotation(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	client := newAPIClient(webhookConfigs()...)
	rec := newRecorder()
	m, _ := start(t, client, testOptions(clk, rec))
	first := serving(t, m)
	bundle := m.CABundle()
	eventually(t, "the webhooks to carry the bundle", func() bool { return bytes.Equal(client.caBundles(t)[0], bundle) })
	srv := tlsServer(t, m)
	handshake(t, srv, bundle, clk.Now(), first)

	// Not yet due: nothing changes.
	step(t, clk, 7*time.Hour)
	step(t, clk, 50*time.Minute)
	if !serving(t, m).Equal(first) {
		t.Fatal("serving certificate renewed before 2/3 of its lifetime")
	}
	// Past 2/3 of 12h05m (8h03m20s after NotBefore, 7h58m20s after issue).
	step(t, clk, 10*time.Minute)
	eventually(t, "a new serving certificate", func() bool { return !serving(t, m).Equal(first) })
	second := serving(t, m)
	if !bytes.Equal(m.CABundle(), bundle) {
		t.Error("a serving rotation changed the CA bundle")
	}
	if err := second.CheckSignatureFrom(parseBundle(t, bundle)[0]); err != nil {
		t.Errorf("new serving certificate not signed by the CA: %v", err)
	}
	if !bytes.Equal(client.secret(t).Data[TLSCertKey], mustPEM(t, second)) {
		t.Error("the Secret does not hold the served certificate")
	}
	handshake(t, srv, bundle, clk.Now(), second)

	// The manager counts a rotation after it puts the certificate in use.
	eventually(t, "the serving rotation to be counted", func() bool {
		_, rotations := rec.get()
		return rotations[metrics.CertificateServing] > 0
	})
	expiry, rotations := rec.get()
	if !expiry[metrics.CertificateServing].Equal(second.NotAfter) || !expiry[metrics.CertificateCA].Equal(parseBundle(t, bundle)[0].NotAfter) {
		t.Errorf("expiry metrics = %v", expiry)
	}
	if rotations[metrics.CertificateServing] != 1 || rotations[metrics.CertificateCA] != 0 {
		t.Errorf("rotations = %v, want one serving", rotations)
	}
	if _, updates := client.writes("validatingwebhookconfigurations"); updates != 1 {
		t.Errorf("ValidatingWebhookConfiguration updated %d times, want 1 (the first bundle)", updates)
	}
}

// A CA rotation publishes the new CA next to the old one, switches the
// serving certificate CAPublishDelay later, and drops the old CA when it
// expires.
func TestCARotationKeepsOldAndNewCA(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	t0 := clk.Now()
	client := newAPIClient(webhookConfigs()...)
	rec := newRecorder()
	opts := testOptions(clk, rec)
	var bundleChanges atomic.Int32
	opts.OnCABundleChange = func() { bundleChanges.Add(1) }
	m, _ := start(t, client, opts)
	ca0 := parseBundle(t, m.CABundle())[0]
	srv := tlsServer(t, m)
	webhooksCarry := func(bundle []byte) func() bool {
		return func() bool {
			for _, b := range client.caBundles(t) {
				if !bytes.Equal(b, bundle) {
					return false
				}
			}
			return true
		}
	}

	// Serving renewals at 8h and 16h; the one of 16h is valid until 28h.
	step(t, clk, 8*time.Hour)
	eventually(t, "the 8h serving renewal", func() bool { return serving(t, m).NotBefore.After(t0) })
	step(t, clk, 8*time.Hour)
	eventually(t, "the 16h serving renewal", func() bool { return serving(t, m).NotBefore.After(t0.Add(15 * time.Hour)) })
	leaf := serving(t, m)

	// At 20h the CA is past 2/3 of its 30h05m: a new CA, published next to
	// the old; the serving certificate stays (signed by the old CA).
	step(t, clk, 4*time.Hour)
	eventually(t, "a second CA", func() bool { return len(parseBundle(t, m.CABundle())) == 2 })
	both := m.CABundle()
	cas := parseBundle(t, both)
	if !cas[1].Equal(ca0) || cas[0].Equal(ca0) {
		t.Fatal("bundle is not [new CA, old CA]")
	}
	eventually(t, "the webhooks to carry both CAs", webhooksCarry(both))
	if !serving(t, m).Equal(leaf) {
		t.Error("serving certificate replaced before the new CA was published for CAPublishDelay")
	}
	handshake(t, srv, both, clk.Now(), leaf)
	// A client that still has only the old CA keeps working too.
	handshake(t, srv, mustPEM(t, ca0), clk.Now(), leaf)

	// CAPublishDelay later the serving certificate switches to the new CA.
	step(t, clk, 2*time.Minute)
	eventually(t, "a serving certificate signed by the new CA", func() bool { return serving(t, m).CheckSignatureFrom(cas[0]) == nil })
	switched := serving(t, m)
	handshake(t, srv, both, clk.Now(), switched)
	if !bytes.Equal(m.CABundle(), both) {
		t.Error("the switch changed the bundle")
	}

	// When the old CA expires (30h) it leaves the bundle.
	step(t, clk, 10*time.Hour)
	eventually(t, "the old CA dropped", func() bool { return len(parseBundle(t, m.CABundle())) == 1 })
	if !parseBundle(t, m.CABundle())[0].Equal(cas[0]) {
		t.Error("the remaining CA is not the new one")
	}
	eventually(t, "the webhooks to carry the new CA alone", webhooksCarry(m.CABundle()))
	handshake(t, srv, m.CABundle(), clk.Now(), serving(t, m))

	_, rotations := rec.get()
	if rotations[metrics.CertificateCA] != 1 {
		t.Errorf("CA rotations = %d, want 1", rotations[metrics.CertificateCA])
	}
	// The first load, the new CA published, the old one dropped: serving renewals and
	// the switch leave the bundle as it was.
	if n := bundleChanges.Load(); n != 3 {
		t.Errorf("OnCABundleChange called %d times, want 3", n)
	}
}

func TestBlankedOrEditedCABundleRestored(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(time.Now())
	client := newAPIClient(webhookConfigs()...)
	m, _ := start(t, client, testOptions(clk, newRecorder()))
	bundle := m.CABundle()
	eventually(t, "the bundle published", func() bool { return bytes.Equal(client.caBundles(t)[3], bundle) })

	vwcs := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	v, err := vwcs.Get(ctx, testVWC, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v.Webhooks[1].ClientConfig.CABundle = nil
	if _, err := vwcs.Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the blanked caBundle restored", func() bool { return bytes.Equal(client.caBundles(t)[1], bundle) })

	mwcs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	mw, err := mwcs.Get(ctx, testMWC, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mw.Webhooks[0].ClientConfig.CABundle = []byte("not a certificate")
	if _, err := mwcs.Update(ctx, mw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the edited caBundle restored", func() bool { return bytes.Equal(client.caBundles(t)[2], bundle) })

	// A configuration created later (a chart upgrade) gets the bundle too.
	if err := vwcs.Delete(ctx, testVWC, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	v.ResourceVersion = ""
	v.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := vwcs.Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the re-created configuration filled", func() bool { return bytes.Equal(client.caBundles(t)[0], bundle) })
}

func TestNoWriteWhenNothingChanged(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	client := newAPIClient(webhookConfigs()...)
	m, _ := start(t, client, testOptions(clk, newRecorder()))
	eventually(t, "the bundle published", func() bool {
		for _, b := range client.caBundles(t) {
			if !bytes.Equal(b, m.CABundle()) {
				return false
			}
		}
		return true
	})
	// Let the informers deliver the Manager's own writes.
	eventually(t, "the informer caches to catch up", func() bool {
		cur, _ := m.current()
		return cur != nil && cur.ResourceVersion == client.secret(t).ResourceVersion && m.published(parseState(cur.Data), clk.Now())
	})
	client.ClearActions()

	for range 3 {
		if _, err := m.sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	step(t, clk, time.Hour) // a periodic check
	step(t, clk, time.Hour)
	eventually(t, "the last periodic check done", clk.HasWaiters)
	if a := nonWatchActions(client.Actions()); len(a) != 0 {
		t.Errorf("steady-state syncs made API calls %v, want none", a)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	valid := Options{Namespace: "ns", SecretName: "s", Services: []string{"svc"}}
	if _, err := New(newAPIClient(), valid); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for name, mutate := range map[string]func(*Options){
		"no namespace":                func(o *Options) { o.Namespace = "" },
		"no secret":                   func(o *Options) { o.SecretName = "" },
		"no names":                    func(o *Options) { o.Services = nil },
		"serving outlives CA":         func(o *Options) { o.CAValidity, o.ServingValidity = time.Hour, 2*time.Hour },
		"fraction 1":                  func(o *Options) { o.RenewFraction = 1 },
		"negative fraction":           func(o *Options) { o.RenewFraction = -0.5 },
		"negative check interval":     func(o *Options) { o.CheckInterval = -time.Second },
		"negative CA publish delay":   func(o *Options) { o.CAPublishDelay = -time.Second },
		"negative serving validity":   func(o *Options) { o.ServingValidity = -time.Hour },
		"negative validity of the CA": func(o *Options) { o.CAValidity = -time.Hour },
	} {
		o := valid
		mutate(&o)
		if _, err := New(newAPIClient(), o); err == nil {
			t.Errorf("%s: New succeeded, want an error", name)
		}
	}
}

func TestNotReadyBeforeRun(t *testing.T) {
	m, err := New(newAPIClient(), testOptions(clocktesting.NewFakeClock(time.Now()), nil))
	if err != nil {
		t.Fatal(err)
	}
	if m.Ready() || m.CABundle() != nil {
		t.Error("Ready or CABundle before Run")
	}
	if _, err := m.GetCertificate(&tls.ClientHelloInfo{}); err == nil {
		t.Error("GetCertificate succeeded before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.WaitReady(ctx); err == nil {
		t.Error("WaitReady succeeded on a cancelled context")
	}
}

// tlsServer starts an HTTPS server on 127.0.0.1 serving m.TLSConfig().
func tlsServer(t *testing.T, m *Manager) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Listener = tls.NewListener(srv.Listener, m.TLSConfig())
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// handshake makes an HTTPS request to srv, once by IP and once by the
// Service name (SNI), trusting only bundle at time now, and checks that the
// server presented want.
func handshake(t *testing.T, srv *httptest.Server, bundle []byte, now time.Time, want *x509.Certificate) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatal("no certificate in the bundle")
	}
	for _, serverName := range []string{"", testDNSName} {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: serverName, Time: func() time.Time { return now }},
		}}
		resp, err := client.Get("https://" + srv.Listener.Addr().String())
		if err != nil {
			t.Fatalf("request (server name %q): %v", serverName, err)
		}
		_ = resp.Body.Close()
		if got := resp.TLS.PeerCertificates[0]; !got.Equal(want) {
			t.Errorf("server name %q: served serial %x, want %x", serverName, got.SerialNumber, want.SerialNumber)
		}
	}
}

func mustPEM(t *testing.T, c *x509.Certificate) []byte {
	t.Helper()
	b, err := cert.EncodeCertificates(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nonWatchActions returns the actions other than the informers' list and
// watch, as "verb resource".
func nonWatchActions(actions []clienttesting.Action) []string {
	var out []string
	for _, a := range actions {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}

// Issue 25, item 1: with CAPublished set (the progress server's CA ConfigMaps), a new CA
// is served only once those copies have carried it for CAPublishDelay too, however long
// the webhook configurations have: a trainer pod whose mounted CA lags would refuse a
// serving certificate signed by a CA it does not know.
func TestCARotationWaitsForEveryCopyOfTheBundle(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	client := newAPIClient(webhookConfigs()...)
	opts := testOptions(clk, newRecorder())
	var mu sync.Mutex
	var copies []byte // what the other copies carry
	var since time.Time
	opts.CAPublished = func(bundle []byte) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		return since, bytes.Equal(copies, bundle)
	}
	publish := func(bundle []byte) {
		mu.Lock()
		defer mu.Unlock()
		copies, since = bundle, clk.Now()
	}
	m, _ := start(t, client, opts)
	publish(m.CABundle())
	serving(t, m) // serving from the start

	// 20h: a new CA, next to the old one in the bundle (two serving renewals before).
	step(t, clk, 8*time.Hour)
	step(t, clk, 8*time.Hour)
	step(t, clk, 4*time.Hour)
	eventually(t, "a second CA", func() bool { return len(parseBundle(t, m.CABundle())) == 2 })
	both := m.CABundle()
	newCA := parseBundle(t, both)[0]
	leaf := serving(t, m)
	if leaf.CheckSignatureFrom(newCA) == nil {
		t.Fatal("the serving certificate was signed by the new CA at once")
	}

	// Past CAPublishDelay the webhooks carry both CAs, the other copies still the old
	// bundle: the serving certificate stays.
	step(t, clk, 2*time.Minute)
	step(t, clk, time.Hour) // a periodic check
	if s := serving(t, m); s.CheckSignatureFrom(newCA) == nil {
		t.Fatal("the serving certificate switched to the new CA before the CA ConfigMaps carried it")
	}

	// The copies carry it now, and a check runs at once (a webhook configuration
	// event, say): CAPublishDelay later, and not before, the switch, without waiting
	// for the periodic check.
	publish(both)
	m.enqueue()
	step(t, clk, 30*time.Second)
	if s := serving(t, m); s.CheckSignatureFrom(newCA) == nil {
		t.Fatal("the serving certificate switched less than CAPublishDelay after the CA ConfigMaps carried the new CA")
	}
	step(t, clk, 30*time.Second)
	eventually(t, "a serving certificate signed by the new CA", func() bool { return serving(t, m).CheckSignatureFrom(newCA) == nil })
}
