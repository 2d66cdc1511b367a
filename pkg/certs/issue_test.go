package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trainyard/trainyard/pkg/metrics"
)

// renewed applies renew to data at now and returns the resulting data (data
// itself when renew changes nothing) with the rotations.
func renewed(t *testing.T, o Options, data map[string][]byte, now time.Time, published bool) (map[string][]byte, []string) {
	t.Helper()
	o, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	out, rotated, err := renew(&o, now, parseState(data), published)
	if err != nil {
		t.Fatal(err)
	}
	if out == nil {
		return data, nil
	}
	return out, rotated
}

func TestRenew(t *testing.T) {
	t0 := time.Now()
	o := testOptions(clocktesting.NewFakeClock(t0), nil)
	fresh, rotated := renewed(t, o, nil, t0, true)
	if len(rotated) != 0 {
		t.Errorf("first issue counted as rotation %v", rotated)
	}
	st := parseState(fresh)
	if st.ca == nil || st.serving == nil || len(st.bundle) != 1 {
		t.Fatalf("first issue: CA %v, serving %v, bundle of %d", st.ca != nil, st.serving != nil, len(st.bundle))
	}
	ca0 := st.ca.Leaf
	if life := ca0.NotAfter.Sub(t0); !ca0.IsCA || life > o.CAValidity || life <= o.CAValidity-time.Second {
		t.Errorf("CA: IsCA %v, valid for %v after issue; want a CA valid for %v", ca0.IsCA, life, o.CAValidity)
	}

	// The CA after its renewal point, with the serving certificate renewed at
	// 16h so that it is still valid.
	at16h, _ := renewed(t, o, fresh, t0.Add(16*time.Hour), true)
	at20h, rotated := renewed(t, o, at16h, t0.Add(20*time.Hour), true)
	if !slices.Equal(rotated, []string{metrics.CertificateCA}) {
		t.Errorf("at 20h rotated %v, want the CA only", rotated)
	}

	corrupt := func(key string) map[string][]byte {
		d := maps.Clone(fresh)
		d[key] = []byte("garbage")
		return d
	}
	for name, tc := range map[string]struct {
		opts      func(*Options)
		data      map[string][]byte
		at        time.Duration // after t0
		published bool

		wantRotated []string
		wantSameCA  bool
		wantBundle  int  // certificates in the bundle
		wantSameTLS bool // serving pair unchanged
		wantIssuer  int  // index in the bundle of the serving certificate's issuer
	}{
		"valid: nothing to do": {
			data: fresh, at: time.Hour, published: true,
			wantSameCA: true, wantBundle: 1, wantSameTLS: true,
		},
		"a SAN added to the options": {
			opts: func(o *Options) { o.DNSNames = []string{"localhost"} },
			data: fresh, at: time.Hour, published: true,
			wantRotated: []string{metrics.CertificateServing}, wantSameCA: true, wantBundle: 1,
		},
		"serving certificate past 2/3": {
			data: fresh, at: 8 * time.Hour, published: true,
			wantRotated: []string{metrics.CertificateServing}, wantSameCA: true, wantBundle: 1,
		},
		"serving certificate unparsable": {
			data: corrupt(TLSCertKey), at: time.Hour, published: true,
			wantRotated: []string{metrics.CertificateServing}, wantSameCA: true, wantBundle: 1,
		},
		"CA key unparsable: new CA, old one kept in the bundle, serving kept": {
			data: corrupt(CAKeyKey), at: time.Hour, published: true,
			wantRotated: []string{metrics.CertificateCA}, wantBundle: 2, wantSameTLS: true, wantIssuer: 1,
		},
		"new CA not yet published: serving signed by the old CA kept": {
			data: at20h, at: 21 * time.Hour, published: false,
			wantSameCA: true, wantBundle: 2, wantSameTLS: true, wantIssuer: 1,
		},
		"new CA published, delay not over: serving kept": {
			data: at20h, at: 20*time.Hour + 30*time.Second, published: true,
			wantSameCA: true, wantBundle: 2, wantSameTLS: true, wantIssuer: 1,
		},
		"new CA published for the delay: serving switched": {
			data: at20h, at: 21 * time.Hour, published: true,
			wantRotated: []string{metrics.CertificateServing}, wantSameCA: true, wantBundle: 2,
		},
		// issue 41: the pass that creates a new CA must not sign with it, whatever
		// falls due in the same pass.
		"CA and serving due together: new CA, serving still valid kept": {
			data: at16h, at: 25 * time.Hour, published: true, // serving valid until 28h, due at 24h
			wantRotated: []string{metrics.CertificateCA}, wantBundle: 2, wantSameTLS: true, wantIssuer: 1,
		},
		"CA due, serving expired: new CA, serving signed by the outgoing CA": {
			data: fresh, at: 20 * time.Hour, published: true, // serving expired at 12h
			wantRotated: []string{metrics.CertificateCA, metrics.CertificateServing}, wantBundle: 2, wantIssuer: 1,
		},
		"CA due, a SAN added: new CA, serving signed by the outgoing CA": {
			opts: func(o *Options) { o.DNSNames = []string{"localhost"} },
			data: at16h, at: 21 * time.Hour, published: true,
			wantRotated: []string{metrics.CertificateCA, metrics.CertificateServing}, wantBundle: 2, wantIssuer: 1,
		},
		"old CA expired: dropped, its serving certificate replaced": {
			data: at20h, at: 30*time.Hour + time.Minute, published: false,
			wantRotated: []string{metrics.CertificateServing}, wantSameCA: true, wantBundle: 1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			o := o
			if tc.opts != nil {
				tc.opts(&o)
			}
			out, rotated := renewed(t, o, tc.data, t0.Add(tc.at), tc.published)
			if !slices.Equal(rotated, tc.wantRotated) {
				t.Errorf("rotated %v, want %v", rotated, tc.wantRotated)
			}
			before, after := parseState(tc.data), parseState(out)
			if after.ca == nil || after.serving == nil {
				t.Fatal("result lacks a CA or a serving pair")
			}
			if same := before.ca != nil && after.ca.Leaf.Equal(before.ca.Leaf); same != tc.wantSameCA {
				t.Errorf("same CA: %v, want %v", same, tc.wantSameCA)
			}
			if len(after.bundle) != tc.wantBundle || !after.bundle[0].Equal(after.ca.Leaf) {
				t.Errorf("bundle of %d with the active CA first: %v; want %d", len(after.bundle), after.bundle[0].Equal(after.ca.Leaf), tc.wantBundle)
			}
			if same := bytes.Equal(out[TLSCertKey], tc.data[TLSCertKey]) && bytes.Equal(out[TLSKeyKey], tc.data[TLSKeyKey]); same != tc.wantSameTLS {
				t.Errorf("same serving pair: %v, want %v", same, tc.wantSameTLS)
			}
			if err := after.serving.Leaf.CheckSignatureFrom(after.bundle[tc.wantIssuer]); err != nil {
				t.Errorf("serving certificate not signed by bundle[%d]: %v", tc.wantIssuer, err)
			}
			if !servingValid(after.serving.Leaf, after.bundle, o.altNames(), t0.Add(tc.at), 1-1e-9) {
				t.Error("serving certificate not valid for the options' names under the bundle")
			}
			if again, rotated := renewed(t, o, out, t0.Add(tc.at), tc.published); len(rotated) != 0 || !maps.EqualFunc(again, out, bytes.Equal) {
				t.Errorf("renew is not idempotent: a second pass rotated %v", rotated)
			}
		})
	}
}

func TestServingNeverOutlivesItsCA(t *testing.T) {
	t0 := time.Now()
	o := testOptions(clocktesting.NewFakeClock(t0), nil)
	o.CAValidity, o.ServingValidity = 12*time.Hour, 12*time.Hour
	data, _ := renewed(t, o, nil, t0, true)
	// At 6h a new name makes a new serving certificate: 12h of validity would
	// outlive the CA (valid until 12h, renewed at 8h).
	o.DNSNames = []string{"localhost"}
	data, _ = renewed(t, o, data, t0.Add(6*time.Hour), true)
	st := parseState(data)
	if !st.serving.Leaf.NotAfter.Equal(st.ca.Leaf.NotAfter) {
		t.Errorf("serving certificate expires %v, want its CA's expiry %v", st.serving.Leaf.NotAfter, st.ca.Leaf.NotAfter)
	}
}

func TestNextCheck(t *testing.T) {
	t0 := time.Now()
	clk := clocktesting.NewFakeClock(t0)
	o := testOptions(clk, nil)
	m, err := New(newAPIClient(), o)
	if err != nil {
		t.Fatal(err)
	}
	st := parseState(must(renewed(t, o, nil, t0, true)))
	if got, want := m.nextCheck(t0, st), t0.Add(o.CheckInterval); !got.Equal(want) {
		t.Errorf("fresh: next check %v, want CheckInterval later (%v)", got, want)
	}
	if got, want := m.nextCheck(t0.Add(7*time.Hour+30*time.Minute), st), renewAt(st.serving.Leaf, o.RenewFraction); !got.Equal(want) {
		t.Errorf("near renewal: next check %v, want the renewal time %v", got, want)
	}

	st = parseState(must(renewed(t, o, must(renewed(t, o, st.data, t0.Add(16*time.Hour), true)), t0.Add(20*time.Hour), true)))
	if got, want := m.nextCheck(t0.Add(20*time.Hour), st), st.ca.Leaf.NotBefore.Add(backdate+o.CAPublishDelay); !got.Equal(want) {
		t.Errorf("after a CA rotation: next check %v, want the serving switch at %v", got, want)
	}
}

// A replica whose Secret view is older than the CA another replica already
// published reads the Secret again instead of taking the newer CA away; a
// newer-looking CA that is not in the Secret is overwritten.
func TestStaleReplicaDoesNotRevertNewerBundle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	t0 := time.Now()
	clk := clocktesting.NewFakeClock(t0.Add(20 * time.Hour))
	o := testOptions(clk, nil)
	old := must(renewed(t, o, must(renewed(t, o, nil, t0, true)), t0.Add(16*time.Hour), true))
	newer := must(renewed(t, o, old, t0.Add(20*time.Hour), true))

	objs := webhookConfigs()
	for _, obj := range objs {
		for _, b := range caBundles(obj) {
			*b = newer[CACertKey]
		}
	}
	stored := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: testSecret, Namespace: testNamespace, ResourceVersion: "5"}, Data: newer}
	client := newAPIClient(append(objs, stored)...)
	m, err := New(client, o)
	if err != nil {
		t.Fatal(err)
	}
	runWebhookInformers(t, m)

	// The replica's Secret informer lags: it still has the old Secret.
	if err := m.secrets.GetStore().Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: testSecret, Namespace: testNamespace, ResourceVersion: "4"}, Data: old}); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	if err := m.syncWebhooks(ctx, parseState(old)); err != nil {
		t.Fatal(err)
	}
	if got := nonWatchActions(client.Actions()); !slices.Equal(got, []string{"get secrets"}) {
		t.Errorf("stale replica: API calls %v, want only the Secret read", got)
	}
	if cur, _ := m.current(); !bytes.Equal(cur.Data[CACertKey], newer[CACertKey]) {
		t.Error("stale replica did not take the Secret it read")
	}

	// The Secret really holds the old bundle: the webhooks get it back.
	stored.Data = old
	if _, err := client.CoreV1().Secrets(testNamespace).Update(ctx, stored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.syncWebhooks(ctx, parseState(old)); err != nil {
		t.Fatal(err)
	}
	for i, b := range client.caBundles(t) {
		if !bytes.Equal(b, old[CACertKey]) {
			t.Errorf("webhook %d not restored to the Secret's bundle", i)
		}
	}
}

func runWebhookInformers(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, w := range m.webhooks {
		go w.informer.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
			t.Fatal("webhook informer did not sync")
		}
	}
}

func must[T any](v T, _ []string) T { return v }

// A short-lived certificate is due two thirds of the way from its issue, not from its
// backdated NotBefore: measured from NotBefore, a 30-second certificate was due when
// issued and the Manager renewed it in a loop (found by the e2e rotation test).
func TestRenewAtShortLivedCertificates(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		notBefore, notAfter time.Time
		want                time.Time
	}{
		"the Manager's 30 s certificate (backdated)": {now.Add(-backdate), now.Add(30 * time.Second), now.Add(20 * time.Second)},
		"the Manager's 90-day certificate":           {now.Add(-backdate), now.Add(90 * 24 * time.Hour), now.Add(60 * 24 * time.Hour)},
		"a foreign 1 min certificate, not backdated": {now, now.Add(time.Minute), now.Add(40 * time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			c := &x509.Certificate{NotBefore: tc.notBefore, NotAfter: tc.notAfter}
			if got := renewAt(c, DefaultRenewFraction); !got.Equal(tc.want) {
				t.Errorf("renewAt = %v, want %v", got, tc.want)
			}
			if due(c, now, DefaultRenewFraction) {
				t.Error("due when issued")
			}
		})
	}
}
