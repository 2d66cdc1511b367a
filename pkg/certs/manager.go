// Package certs keeps the controller's own TLS serving certificate without
// cert-manager: a self-signed CA and a serving certificate signed by it, stored
// together in one Secret in the controller's namespace, renewed before they
// expire, served to any number of TLS servers (the admission webhooks, the
// progress server) through GetCertificate, and published as the CA bundle of
// the controller's webhook configurations. Files and ProvidedCABundle serve a
// certificate provided as files instead (cert-manager's, or a user's Secret) and the CA
// bundle that verifies it.
//
// Every replica runs a Manager. They share the Secret: the first to find it
// absent creates it; every write carries the resourceVersion it was decided
// from, and a replica that loses a race (AlreadyExists, Conflict) reads the
// winner's Secret and decides again, so all replicas converge on one CA.
//
// The Secret (type kubernetes.io/tls):
//
//	tls.crt, tls.key  the serving certificate and its key (PEM)
//	ca.crt            the CA bundle (PEM): the active CA, then earlier CAs until they expire
//	ca.key            the active CA's key (PEM)
//
// Rotation: a certificate is replaced once RenewFraction of its lifetime has
// passed. A new CA is published next to the previous one (both in ca.crt and
// in the webhook configurations) and serving certificates switch to it only
// CAPublishDelay later, so no API server ever sees a serving certificate
// whose CA it does not trust yet; the previous CA leaves the bundle when it
// expires.
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/metrics"
)

// Retry bounds.
const (
	// mutationTTL is how long a Secret this process wrote or read overrides
	// an older copy in the informer cache, the time the informer has to catch
	// up.
	mutationTTL = time.Minute
	// maxWriteAttempts bounds the writes of one sync that lose a race to
	// another replica before the sync fails and is retried with backoff.
	maxWriteAttempts = 5
	// minErrorBackoff and maxErrorBackoff bound the wait after a failed sync.
	minErrorBackoff = time.Second
	maxErrorBackoff = 2 * time.Minute
)

// Manager keeps the CA and serving certificate of Options in their Secret and
// the webhook configurations, and serves the current pair. Create it with New
// and start it with Run. All methods are safe for concurrent use.
type Manager struct {
	client kubeclient.Interface
	opts   Options

	secrets  cache.SharedIndexInformer
	newer    cache.MutationCache // the Secret store, overlaid with this process's newer writes and reads
	webhooks []*webhookConfig
	trigger  chan struct{}
	started  atomic.Bool

	mu   sync.Mutex        // serializes refresh
	last map[string][]byte // data of the last complete state seen, to re-create a deleted Secret unchanged

	served    atomic.Pointer[served]
	ready     chan struct{}
	readyOnce sync.Once
}

// served is what the Manager currently serves.
type served struct {
	cert   *tls.Certificate
	bundle []byte
}

// New returns a Manager for opts, using client for the Secret (namespaced,
// opts.Namespace) and the webhook configurations. It makes no API call; Run
// does. It fails when opts is invalid (see Options).
func New(client kubeclient.Interface, opts Options) (*Manager, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Manager{
		client:  client,
		opts:    o,
		trigger: make(chan struct{}, 1),
		ready:   make(chan struct{}),
	}
	m.secrets = kubeclient.NewInformer(client, client.CoreV1().Secrets(o.Namespace), &corev1.Secret{}, 0, cache.Indexers{}, byName(o.SecretName))
	m.newer = cache.NewIntegerResourceVersionMutationCache(klog.Background(), m.secrets.GetStore(), nil, mutationTTL, false)
	changed := func() {
		m.refresh(nil)
		m.enqueue()
	}
	_, err = m.secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	if err != nil {
		return nil, fmt.Errorf("certs: adding the Secret event handler: %w", err)
	}
	if m.webhooks, err = newWebhookConfigs(client, &m.opts, m.enqueue); err != nil {
		return nil, err
	}
	return m, nil
}

// byName restricts a list or watch to the object called name. The API server
// authorizes such a request against RBAC resourceNames.
func byName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

// enqueue asks Run for a sync, without blocking.
func (m *Manager) enqueue() {
	select {
	case m.trigger <- struct{}{}:
	default:
	}
}

// Run starts the informers, waits for their caches, then keeps the Secret and
// the webhook configurations in order until ctx is cancelled: at once, on
// every change of the watched objects, when the next certificate falls due,
// and at least every CheckInterval. Failed syncs are logged and retried with
// backoff (1 s doubling to 2 min). Run returns nil when ctx is cancelled, and
// an error only when called a second time.
func (m *Manager) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("certs: Run called twice")
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "secret", klog.KRef(m.opts.Namespace, m.opts.SecretName))
	ctx = klog.NewContext(ctx, logger)

	synced := []cache.InformerSynced{m.secrets.HasSynced}
	go m.secrets.RunWithContext(ctx)
	for _, w := range m.webhooks {
		go w.informer.RunWithContext(ctx)
		synced = append(synced, w.informer.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // cancelled
	}

	backoff := minErrorBackoff
	for {
		next, err := m.sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := next.Sub(m.opts.Clock.Now()) // the clock may have moved during the sync
		if err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "Syncing certificates failed", "retryIn", backoff)
			wait, backoff = backoff, min(2*backoff, maxErrorBackoff)
		} else {
			backoff = minErrorBackoff
		}
		if wait <= 0 {
			continue
		}
		logger.V(4).Info("Next certificate check", "in", wait)
		timer := m.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-m.trigger:
			timer.Stop()
		case <-timer.C():
		}
	}
}

// sync brings the Secret and the webhook configurations in order and returns
// the time of the next check.
func (m *Manager) sync(ctx context.Context) (time.Time, error) {
	now := m.opts.Clock.Now()
	st, err := m.ensureSecret(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if err := m.syncWebhooks(ctx, st); err != nil {
		return time.Time{}, err
	}
	return m.nextCheck(now, st), nil
}

// ensureSecret renews what is due in the Secret (creating it when absent) and
// returns its state.
func (m *Manager) ensureSecret(ctx context.Context) (*state, error) {
	logger := klog.FromContext(ctx)
	cur, last := m.current()
	for attempt := 1; ; attempt++ {
		data := last // a deleted Secret is re-created as it was
		if cur != nil {
			data = cur.Data
		}
		st := parseState(data)
		next, rotated, err := renew(&m.opts, m.opts.Clock.Now(), st, m.published(st, m.opts.Clock.Now()))
		if err != nil {
			return nil, err
		}
		if next == nil && cur != nil {
			return st, nil
		}
		if next == nil {
			next = st.data
		}
		written, err := m.write(ctx, cur, next)
		if err == nil {
			m.record(written)
			for _, c := range rotated {
				if m.opts.Metrics != nil {
					m.opts.Metrics.CertificateRotated(c)
				}
			}
			logger.Info("Stored certificates", "created", cur == nil, "rotated", strings.Join(rotated, ","))
			return parseState(written.Data), nil
		}
		if !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("certs: writing Secret %s/%s: %w", m.opts.Namespace, m.opts.SecretName, err)
		}
		if attempt == maxWriteAttempts {
			return nil, fmt.Errorf("certs: writing Secret %s/%s: %d attempts lost a race: %w", m.opts.Namespace, m.opts.SecretName, attempt, err)
		}
		// Another replica wrote first: decide again from what it wrote.
		logger.V(2).Info("Secret changed under a write; reading it again", "err", err)
		if cur, err = m.readSecret(ctx); err != nil {
			return nil, err
		}
	}
}

// readSecret reads the Secret from the API server and records it; nil when
// it does not exist.
func (m *Manager) readSecret(ctx context.Context) (*corev1.Secret, error) {
	s, err := m.client.CoreV1().Secrets(m.opts.Namespace).Get(ctx, m.opts.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("certs: reading Secret %s/%s: %w", m.opts.Namespace, m.opts.SecretName, err)
	}
	m.record(s)
	return s, nil
}

// write creates the Secret with data when cur is nil, else updates cur (with
// its resourceVersion as precondition) to carry data, keeping other keys.
func (m *Manager) write(ctx context.Context, cur *corev1.Secret, data map[string][]byte) (*corev1.Secret, error) {
	secrets := m.client.CoreV1().Secrets(m.opts.Namespace)
	if cur == nil {
		return secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      m.opts.SecretName,
				Namespace: m.opts.Namespace,
				Labels:    map[string]string{"app.kubernetes.io/managed-by": m.opts.FieldManager},
			},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}, metav1.CreateOptions{FieldManager: m.opts.FieldManager})
	}
	s := cur.DeepCopy()
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range data {
		s.Data[k] = v
	}
	return secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: m.opts.FieldManager})
}

// nextCheck returns when the next check is due: the earliest renewal, CA
// switch or expiry of st after now, at the latest now + CheckInterval.
func (m *Manager) nextCheck(now time.Time, st *state) time.Time {
	next := now.Add(m.opts.CheckInterval)
	consider := func(t time.Time) {
		if t.After(now) && t.Before(next) {
			next = t
		}
	}
	for _, c := range st.bundle {
		consider(c.NotAfter)
	}
	if st.ca != nil {
		consider(renewAt(st.ca.Leaf, m.opts.RenewFraction))
	}
	if st.serving != nil {
		consider(renewAt(st.serving.Leaf, m.opts.RenewFraction))
		if st.ca != nil && st.serving.Leaf.CheckSignatureFrom(st.ca.Leaf) != nil {
			consider(st.ca.Leaf.NotBefore.Add(backdate + m.opts.CAPublishDelay))
			if m.opts.CAPublished != nil {
				if since, ok := m.opts.CAPublished(st.data[CACertKey]); ok {
					consider(since.Add(m.opts.CAPublishDelay))
				}
			}
		}
	}
	return next
}

// current returns the newest Secret known (nil when the informer has none)
// and the data of the last complete one seen.
func (m *Manager) current() (*corev1.Secret, map[string][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.newest(), m.last
}

// newest returns the informer's copy of the Secret or, when this process
// has since written or read a newer one, that one; nil when the informer has
// none (it may not have seen a create yet, or the Secret was deleted).
func (m *Manager) newest() *corev1.Secret {
	obj, ok, _ := m.newer.GetByKey(m.opts.Namespace + "/" + m.opts.SecretName)
	if !ok {
		return nil
	}
	s, _ := obj.(*corev1.Secret)
	return s
}

// record notes s, just written or read by this process, as newer than the
// informer's copy until the informer catches up, and serves it.
func (m *Manager) record(s *corev1.Secret) {
	m.newer.Mutation(s)
	m.refresh(s)
}

// refresh serves the pair of the newest Secret known, or of fallback when
// the informer has none. A Secret without a usable pair leaves the previous
// one served.
func (m *Manager) refresh(fallback *corev1.Secret) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.newest()
	if s == nil {
		s = fallback
	}
	if s == nil {
		return
	}
	st := parseState(s.Data)
	if st.ca != nil && st.serving != nil {
		m.last = st.data
	}
	if st.serving == nil {
		return
	}
	bundle := st.data[CACertKey]
	prev := m.served.Load()
	if prev != nil && bytes.Equal(prev.cert.Certificate[0], st.serving.Certificate[0]) && bytes.Equal(prev.bundle, bundle) {
		return
	}
	m.served.Store(&served{cert: st.serving, bundle: bundle})
	if m.opts.OnCABundleChange != nil && (prev == nil || !bytes.Equal(prev.bundle, bundle)) {
		m.opts.OnCABundleChange()
	}
	if m.opts.Metrics != nil {
		m.opts.Metrics.SetCertificateExpiry(metrics.CertificateServing, st.serving.Leaf.NotAfter)
		if len(st.bundle) > 0 {
			m.opts.Metrics.SetCertificateExpiry(metrics.CertificateCA, st.bundle[0].NotAfter)
		}
	}
	klog.Background().V(2).Info("Serving certificate loaded", "secret", klog.KObj(s),
		"serial", st.serving.Leaf.SerialNumber.Text(16), "notAfter", st.serving.Leaf.NotAfter, "caCertificates", len(st.bundle))
	m.readyOnce.Do(func() { close(m.ready) })
}

// Ready reports whether a serving certificate is loaded, i.e. whether
// GetCertificate succeeds. It stays true once it is.
func (m *Manager) Ready() bool {
	return m.served.Load() != nil
}

// WaitReady blocks until a serving certificate is loaded (nil) or ctx ends
// (ctx.Err()).
func (m *Manager) WaitReady(ctx context.Context) error {
	select {
	case <-m.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// GetCertificate returns the current serving certificate, for
// tls.Config.GetCertificate: the pair in the Secret as last seen, so a
// rotation takes effect on the next TLS handshake without a restart. It fails
// until the Manager is Ready.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s := m.served.Load()
	if s == nil {
		return nil, errors.New("certs: no serving certificate loaded yet")
	}
	return s.cert, nil
}

// TLSConfig returns a new server tls.Config (TLS 1.2 or later) that serves the
// Manager's current certificate. Each call returns a new Config, which the
// caller may adjust (NextProtos, ClientAuth, ...); every one follows
// rotations.
func (m *Manager) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: m.GetCertificate,
	}
}

// CABundle returns the PEM CA bundle that verifies the served certificate
// (the Secret's ca.crt: the active CA, then earlier CAs until they expire), or
// nil before the Manager is Ready. The caller must not modify it.
func (m *Manager) CABundle() []byte {
	if s := m.served.Load(); s != nil {
		return s.bundle
	}
	return nil
}
