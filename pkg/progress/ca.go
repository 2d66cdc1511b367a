package progress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/trainyard/trainyard/pkg/informers/namespaces"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// CA ConfigMap ownership.
const (
	// CAFieldManager is the field manager of the CA ConfigMaps' server-side applies
	// (Trainyard's, as for JobSets).
	CAFieldManager = "trainyard"
	// LabelManagedBy and ManagedByValue mark a CA ConfigMap as Trainyard's.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "trainyard"
)

// Defaults of CAPublisherOptions.
const (
	DefaultCAWorkers       = 2
	DefaultCANotReadyRetry = 5 * time.Second
)

// TrainJobNamespaces tells which namespaces hold TrainJobs. NamespaceIndex implements
// it over the TrainJob informer's cache.
type TrainJobNamespaces interface {
	// Namespaces returns every namespace with at least one TrainJob.
	Namespaces() []string
	// Has reports whether namespace has at least one TrainJob.
	Has(namespace string) bool
}

// NamespaceIndex is TrainJobNamespaces over an informer cache with the
// cache.NamespaceIndex index (every generated informer has it, the TrainJob informer
// of package informers included). Both methods cost O(namespaces) or O(TrainJobs of
// the namespace), not O(all TrainJobs).
type NamespaceIndex struct{ Indexer cache.Indexer }

// Namespaces implements TrainJobNamespaces.
func (x NamespaceIndex) Namespaces() []string {
	return x.Indexer.ListIndexFuncValues(cache.NamespaceIndex)
}

// Has implements TrainJobNamespaces.
func (x NamespaceIndex) Has(namespace string) bool {
	keys, err := x.Indexer.IndexKeys(cache.NamespaceIndex, namespace)
	return err == nil && len(keys) > 0
}

// CAPublisherOptions configure a CAPublisher. Client, Bundle and TrainJobs are required.
type CAPublisherOptions struct {
	// Client writes the ConfigMaps and watches those named CAConfigMapName.
	Client kubeclient.Interface
	// Bundle returns the PEM CA bundle that verifies the progress server's certificate:
	// certs.Manager.CABundle with self-managed certificates, certs.ProvidedCABundle's with
	// provided ones (ca.crt, else tls.crt's issuers, else its self-signed leaf; never
	// empty: the controller refuses to start without one, issue 23). Empty means not known yet (certificates not ready): nothing
	// is written and the namespace is retried after NotReadyRetry. Call CAChanged when
	// it changes.
	Bundle func() []byte
	// TrainJobs tells which namespaces hold TrainJobs (NamespaceIndex over the TrainJob
	// informer).
	TrainJobs TrainJobNamespaces
	// Namespaces are the namespaces whose CA ConfigMaps are watched, one informer each
	// (empty: every namespace): the controller's watched namespaces, the only ones
	// holding TrainJobs it sees.
	Namespaces namespaces.Set
	// Workers is the number of namespaces synced at once. Defaults to DefaultCAWorkers.
	Workers int
	// NotReadyRetry is how long a namespace waits while Bundle is empty. Defaults to
	// DefaultCANotReadyRetry.
	NotReadyRetry time.Duration
	// RateLimiter paces the retries of failed syncs. Defaults to client-go's
	// DefaultTypedControllerRateLimiter (5 ms doubling to 1000 s per namespace, 10 qps
	// overall).
	RateLimiter workqueue.TypedRateLimiter[string]
	// MetricsProvider, when set, exports the queue's workqueue_* metrics under name
	// CAQueueName.
	MetricsProvider workqueue.MetricsProvider
}

// CAQueueName is the name of the CAPublisher's work queue.
const CAQueueName = "progress_ca"

// CAPublisher keeps ConfigMap CAConfigMapName, key CAConfigMapKey = the serving CA
// bundle, in every namespace with at least one TrainJob, for the projected volume
// mlpolicy.TrainerStatus puts in trainer pods (their KUBEFLOW_TRAINER_SERVER_CA_CERT).
// Upstream (v2.3) writes a "<name>-tls-config" ConfigMap per TrainJob instead; one per
// namespace puts the same file in the pod at one write per namespace.
//
// Run it on the leader only. It watches only ConfigMaps named CAConfigMapName (a field
// selector: other ConfigMaps are never cached) and works off a rate-limited queue of
// namespaces, fed by EnqueueNamespace (a TrainJob appeared), CAChanged (the bundle
// changed), and changes to the ConfigMaps themselves: one updated by someone else is
// restored, one deleted is re-created while its namespace has TrainJobs.
//
// Writes are server-side applies, field manager CAFieldManager, forced, of exactly the
// label LabelManagedBy=ManagedByValue and data[CAConfigMapKey]; none is sent when the
// cache already shows both, so a restart writes nothing. A ConfigMap of that name that
// someone else created is taken over: its ca.crt is replaced by the true bundle, so a
// squatter cannot make trainer pods trust another CA; one the apply cannot fix (immutable,
// or ca.crt in binaryData) is deleted and re-created. A ConfigMap in a namespace whose
// TrainJobs are all gone is kept (and kept current) but not re-created.
type CAPublisher struct {
	opts     CAPublisherOptions
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	started  atomic.Bool
	// running is true while Run keeps the ConfigMaps (Published).
	running   atomic.Bool
	published publishedBundle
}

// NewCAPublisher returns a CAPublisher; Run starts it. It makes no API call.
func NewCAPublisher(opts CAPublisherOptions) (*CAPublisher, error) {
	if opts.Client == nil || opts.Bundle == nil || opts.TrainJobs == nil {
		return nil, errors.New("progress: CAPublisherOptions needs Client, Bundle and TrainJobs")
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultCAWorkers
	}
	if opts.NotReadyRetry <= 0 {
		opts.NotReadyRetry = DefaultCANotReadyRetry
	}
	if opts.RateLimiter == nil {
		opts.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[string]()
	}
	p := &CAPublisher{opts: opts}
	p.queue = workqueue.NewTypedRateLimitingQueueWithConfig(opts.RateLimiter,
		workqueue.TypedRateLimitingQueueConfig[string]{Name: CAQueueName, MetricsProvider: opts.MetricsProvider})
	p.informer = opts.Namespaces.Informer(func(namespace string) cache.SharedIndexInformer {
		return kubeclient.NewInformer(opts.Client, opts.Client.CoreV1().ConfigMaps(namespace), &corev1.ConfigMap{}, 0, cache.Indexers{},
			func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", wire.CAConfigMapName).String()
			})
	})
	if err := p.informer.SetTransform(stripManagedFields); err != nil {
		return nil, fmt.Errorf("progress: setting the CA ConfigMap transform: %w", err)
	}
	_, err := p.informer.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: isCAConfigMap,
		Handler: cache.ResourceEventHandlerFuncs{
			// No resync: every update is a real change.
			AddFunc:    p.enqueueObject,
			UpdateFunc: func(_, cur any) { p.enqueueObject(cur) },
			DeleteFunc: p.enqueueObject,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("progress: adding the CA ConfigMap event handler: %w", err)
	}
	return p, nil
}

// EnqueueNamespace asks for the CA ConfigMap of namespace to be checked, e.g. from the
// TrainJob informer's add handler. It does not block; before Run it is remembered, after
// Run returned it is ignored.
func (p *CAPublisher) EnqueueNamespace(namespace string) {
	p.queue.Add(namespace)
}

// CAChanged asks for every CA ConfigMap to be checked against a new bundle: in every
// namespace holding one and every namespace with TrainJobs.
func (p *CAPublisher) CAChanged() {
	for _, key := range p.informer.GetStore().ListKeys() {
		if ns, name, err := cache.SplitMetaNamespaceKey(key); err == nil && name == wire.CAConfigMapName {
			p.queue.Add(ns)
		}
	}
	for _, ns := range p.opts.TrainJobs.Namespaces() {
		p.queue.Add(ns)
	}
}

// HasSynced reports whether the ConfigMap cache has synced.
func (p *CAPublisher) HasSynced() bool { return p.informer.HasSynced() }

// Run watches the CA ConfigMaps, waits for the cache to sync, queues every namespace
// (CAChanged) and keeps the ConfigMaps until ctx is done; then it shuts the queue down
// and returns nil once the workers stopped. Failed syncs are logged and retried with
// RateLimiter's backoff. Calling Run twice is an error.
func (p *CAPublisher) Run(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return errors.New("progress: CAPublisher.Run called twice")
	}
	defer utilruntime.HandleCrashWithContext(ctx)
	defer p.queue.ShutDown()
	logger := klog.LoggerWithName(klog.FromContext(ctx), "ca-publisher")
	ctx = klog.NewContext(ctx, logger)

	go p.informer.RunWithContext(ctx)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, p.informer.HasSynced) {
		return nil // cancelled
	}
	p.CAChanged()
	p.running.Store(true)
	defer p.running.Store(false)
	var wg sync.WaitGroup
	for range p.opts.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, p.work, time.Second) })
	}
	<-ctx.Done()
	p.queue.ShutDown()
	wg.Wait()
	return nil
}

func (p *CAPublisher) work(ctx context.Context) {
	for p.processNext(ctx) {
	}
}

func (p *CAPublisher) processNext(ctx context.Context) bool {
	ns, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(ns)
	if err := p.sync(ctx, ns); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Publishing the progress server's CA failed",
			"configMap", klog.KRef(ns, wire.CAConfigMapName), "attempt", p.queue.NumRequeues(ns)+1)
		p.queue.AddRateLimited(ns)
		return true
	}
	p.queue.Forget(ns)
	return true
}

// sync brings the CA ConfigMap of namespace in order. It writes nothing in a system
// namespace (trainjob.SystemNamespaces): no TrainJob runs there (stage 1 refuses it),
// so no pod mounts the ConfigMap.
func (p *CAPublisher) sync(ctx context.Context, namespace string) error {
	logger := klog.FromContext(ctx)
	if trainjob.IsSystemNamespace(namespace) {
		logger.V(4).Info("Not publishing the progress server's CA in a system namespace", "namespace", namespace)
		return nil
	}
	cached, err := p.cached(namespace)
	if err != nil {
		return err
	}
	if cached == nil && !p.opts.TrainJobs.Has(namespace) {
		return nil // no TrainJob needs it
	}
	bundle := p.opts.Bundle()
	if len(bundle) == 0 {
		logger.V(4).Info("CA bundle not ready; retrying later", "configMap", klog.KRef(namespace, wire.CAConfigMapName), "in", p.opts.NotReadyRetry)
		p.queue.AddAfter(namespace, p.opts.NotReadyRetry)
		return nil
	}
	if cached != nil && upToDate(cached, bundle) {
		return nil
	}
	err = p.apply(ctx, namespace, bundle)
	if apierrors.IsInvalid(err) && cached != nil {
		// E.g. immutable, or ca.crt in binaryData: no apply can fix that object, so it
		// goes (only that very object: a newer one is looked at again first).
		logger.V(2).Info("Deleting a CA ConfigMap that cannot be corrected", "configMap", klog.KObj(cached), "err", err)
		uid := cached.UID
		if err := p.opts.Client.CoreV1().ConfigMaps(namespace).Delete(ctx, wire.CAConfigMapName,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ConfigMap %s/%s, which the apply cannot correct: %w", namespace, wire.CAConfigMapName, err)
		}
		err = p.apply(ctx, namespace, bundle)
	}
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// Its TrainJobs go with it; retrying would only fill the log until they have.
		// A namespace re-created under the name brings its TrainJobs' events back.
		logger.V(2).Info("Not publishing the progress server's CA: the namespace is terminating", "configMap", klog.KRef(namespace, wire.CAConfigMapName))
		return nil
	}
	if err != nil {
		return fmt.Errorf("applying ConfigMap %s/%s: %w", namespace, wire.CAConfigMapName, err)
	}
	logger.V(2).Info("Published the progress server's CA", "configMap", klog.KRef(namespace, wire.CAConfigMapName), "replaced", cached != nil)
	return nil
}

func (p *CAPublisher) apply(ctx context.Context, namespace string, bundle []byte) error {
	cm := corev1ac.ConfigMap(wire.CAConfigMapName, namespace).
		WithLabels(map[string]string{LabelManagedBy: ManagedByValue}).
		WithData(map[string]string{wire.CAConfigMapKey: string(bundle)})
	_, err := p.opts.Client.CoreV1().ConfigMaps(namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: CAFieldManager, Force: true})
	return err
}

// cached returns the cached CA ConfigMap of namespace, or nil.
func (p *CAPublisher) cached(namespace string) (*corev1.ConfigMap, error) {
	obj, exists, err := p.informer.GetStore().GetByKey(namespace + "/" + wire.CAConfigMapName)
	if err != nil || !exists {
		return nil, err
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil, fmt.Errorf("cached %s/%s is a %T", namespace, wire.CAConfigMapName, obj)
	}
	return cm, nil
}

// upToDate reports whether cm carries exactly what the publisher applies: its label and
// ca.crt = bundle in data (and not also in binaryData, which the API server forbids and
// the apply could not remove). Other keys, someone else's, do not matter: pods mount
// ca.crt only.
func upToDate(cm *corev1.ConfigMap, bundle []byte) bool {
	ca, ok := cm.Data[wire.CAConfigMapKey]
	_, binary := cm.BinaryData[wire.CAConfigMapKey]
	return ok && !binary && ca == string(bundle) && cm.Labels[LabelManagedBy] == ManagedByValue
}

func (p *CAPublisher) enqueueObject(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if m, err := meta.Accessor(obj); err == nil {
		p.queue.Add(m.GetNamespace())
	}
}

// isCAConfigMap keeps events of ConfigMaps named CAConfigMapName (the field selector
// already does, except in fakes).
func isCAConfigMap(obj any) bool {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	return err == nil && m.GetName() == wire.CAConfigMapName
}

func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
