package informers

import (
	"context"
	"fmt"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/informers/namespaces"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// DRAInformers holds the resource.k8s.io/v1 informers the DRA claims stage reads
// (KEP-4381 structured parameters): ResourceClaimTemplates and ResourceClaims, to check
// that the claims a TrainJob's pods reference exist, and DeviceClasses, to check the
// classes those templates request; and ResourceSlices, to tell a gang that can never get
// its devices (the DRA stage's capacity check). Create it with NewDRA, register handlers with Route,
// then Start and WaitForCacheSync, like Informers.
//
// Only the additions matter: a TrainJob waiting for a missing object proceeds when it
// appears. Template and claim specs are immutable, so updates route nowhere, and a
// deletion affects only pods not created yet, which the Job controller reports.
type DRAInformers struct {
	// informers are those Start runs: one ResourceClaimTemplate and one ResourceClaim
	// informer per watched namespace, and the cluster-scoped ones.
	informers []cache.SharedIndexInformer
	running   sync.WaitGroup // the informers' goroutines

	ResourceClaimTemplates cache.SharedIndexInformer
	ResourceClaims         cache.SharedIndexInformer
	DeviceClasses          cache.SharedIndexInformer
	ResourceSlices         cache.SharedIndexInformer

	ResourceClaimTemplateLister resourcelisters.ResourceClaimTemplateLister
	ResourceClaimLister         resourcelisters.ResourceClaimLister
	DeviceClassLister           resourcelisters.DeviceClassLister
	ResourceSliceLister         resourcelisters.ResourceSliceLister
}

// NewDRA creates the DRA informers, with managedFields stripped from the cache. resync
// is the periodic resync interval (0 disables it). ResourceClaimTemplates and
// ResourceClaims are watched in the watched namespaces (empty: every namespace),
// DeviceClasses and ResourceSlices, cluster-scoped, whole. The caller must know that the
// API server serves resource.k8s.io/v1 (Kubernetes 1.34+): against one that does not,
// the informers never sync.
func NewDRA(kube kubeclient.Interface, resync time.Duration, watched namespaces.Set) *DRAInformers {
	d := &DRAInformers{}
	api := kube.ResourceV1()
	var templates, claims []cache.SharedIndexInformer
	for _, ns := range watched.Each() {
		templates = append(templates, d.informer(kubeclient.NewInformer(kube, api.ResourceClaimTemplates(ns), &resourcev1.ResourceClaimTemplate{},
			resync, namespaceIndex(), nil)))
		claims = append(claims, d.informer(kubeclient.NewInformer(kube, api.ResourceClaims(ns), &resourcev1.ResourceClaim{},
			resync, namespaceIndex(), nil)))
	}
	d.DeviceClasses = d.informer(kubeclient.NewInformer(kube, api.DeviceClasses(), &resourcev1.DeviceClass{}, resync, namespaceIndex(), nil))
	d.ResourceSlices = d.informer(kubeclient.NewInformer(kube, api.ResourceSlices(), &resourcev1.ResourceSlice{}, resync, namespaceIndex(), nil))
	d.ResourceClaimTemplates = namespaces.Merge(watched.Each(), templates)
	d.ResourceClaims = namespaces.Merge(watched.Each(), claims)
	d.DeviceClassLister = resourcelisters.NewDeviceClassLister(d.DeviceClasses.GetIndexer())
	d.ResourceSliceLister = resourcelisters.NewResourceSliceLister(d.ResourceSlices.GetIndexer())
	d.ResourceClaimTemplateLister = resourcelisters.NewResourceClaimTemplateLister(d.ResourceClaimTemplates.GetIndexer())
	d.ResourceClaimLister = resourcelisters.NewResourceClaimLister(d.ResourceClaims.GetIndexer())
	return d
}

// informer keeps inf, with managedFields stripped from its cache, for Start to run.
func (d *DRAInformers) informer(inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	// Only a started informer refuses a transform, and none is started yet.
	_ = inf.SetTransform(StripManagedFields)
	d.informers = append(d.informers, inf)
	return inf
}

// namespaceIndex is the index client-go's informer factory gave every informer it made,
// which the listers' per-namespace lists use.
func namespaceIndex() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
}

// Route registers the DRA event handlers: a ResourceClaimTemplate or ResourceClaim
// added to a namespace sends that namespace's unfinished TrainJobs to the build stage,
// a DeviceClass added sends every unfinished TrainJob there. TrainJobs are listed from
// trainJobs (the TrainJob lister, by its namespace index), so routing costs no API call.
//
// A ResourceSlice added, or changing its device count, sends the TrainJobs rejected for
// insufficient devices (JobSetReady=False, InsufficientDevices) there.
//
// Objects in the informers' initial list route nowhere: at start every TrainJob is
// built anyway (the TrainJob informer's own initial adds). Neither do ResourceClaims
// the resourceclaim controller generates for pods from a template (controlled by a
// Pod): there is one per pod, and no TrainJob waits for them.
func (d *DRAInformers) Route(logger klog.Logger, r Router, build string, trainJobs trainerlisters.TrainJobLister) error {
	if build == "" || trainJobs == nil {
		return fmt.Errorf("informers: DRA routes need a build stage and a TrainJob lister")
	}
	h := &draHandlers{router: r, build: build, trainJobs: trainJobs, logger: logger}
	for name, reg := range map[string]struct {
		informer cache.SharedIndexInformer
		add      func(obj any, isInInitialList bool)
	}{
		"ResourceClaimTemplate": {d.ResourceClaimTemplates, h.addNamespaced},
		"ResourceClaim":         {d.ResourceClaims, h.addClaim},
		"DeviceClass":           {d.DeviceClasses, h.addDeviceClass},
	} {
		handler := cache.ResourceEventHandlerDetailedFuncs{AddFunc: reg.add}
		if _, err := reg.informer.AddEventHandlerWithOptions(handler, cache.HandlerOptions{Logger: &logger}); err != nil {
			return fmt.Errorf("informers: adding %s event handler: %w", name, err)
		}
	}
	slices := cache.ResourceEventHandlerDetailedFuncs{AddFunc: h.addSlice, UpdateFunc: h.updateSlice}
	if _, err := d.ResourceSlices.AddEventHandlerWithOptions(slices, cache.HandlerOptions{Logger: &logger}); err != nil {
		return fmt.Errorf("informers: adding ResourceSlice event handler: %w", err)
	}
	return nil
}

// Start starts the informers; they stop when ctx is done. Call it once.
func (d *DRAInformers) Start(ctx context.Context) {
	for _, inf := range d.informers {
		d.running.Go(func() { inf.RunWithContext(ctx) })
	}
}

// WaitForCacheSync blocks until every DRA informer has synced, and reports false if
// ctx ended first.
func (d *DRAInformers) WaitForCacheSync(ctx context.Context) bool {
	return cache.WaitForNamedCacheSyncWithContext(ctx,
		d.ResourceClaimTemplates.HasSynced, d.ResourceClaims.HasSynced, d.DeviceClasses.HasSynced, d.ResourceSlices.HasSynced)
}

// HasSynced reports whether every DRA informer has synced (for /readyz).
func (d *DRAInformers) HasSynced() bool {
	return d.ResourceClaimTemplates.HasSynced() && d.ResourceClaims.HasSynced() && d.DeviceClasses.HasSynced() &&
		d.ResourceSlices.HasSynced()
}

// Shutdown waits for the informers' goroutines to end after ctx was cancelled.
func (d *DRAInformers) Shutdown() {
	d.running.Wait()
}

type draHandlers struct {
	router    Router
	build     string
	trainJobs trainerlisters.TrainJobLister
	logger    klog.Logger
}

func (h *draHandlers) addNamespaced(obj any, isInInitialList bool) {
	if m := metaOf(obj); m != nil && !isInInitialList {
		h.enqueueUnfinished(m.GetNamespace())
	}
}

func (h *draHandlers) addClaim(obj any, isInInitialList bool) {
	claim, ok := obj.(*resourcev1.ResourceClaim)
	if !ok || isInInitialList {
		return
	}
	if ref := metav1.GetControllerOf(claim); ref != nil && ref.Kind == "Pod" && ref.APIVersion == "v1" {
		return
	}
	h.enqueueUnfinished(claim.Namespace)
}

func (h *draHandlers) addDeviceClass(obj any, isInInitialList bool) {
	if !isInInitialList {
		h.enqueueUnfinished(metav1.NamespaceAll)
	}
}

func (h *draHandlers) addSlice(_ any, isInInitialList bool) {
	if !isInInitialList {
		h.resumeInsufficient()
	}
}

// updateSlice reacts only to a slice whose device count or driver changed: drivers
// rewrite slices for attribute and generation changes that add no capacity.
func (h *draHandlers) updateSlice(oldObj, newObj any) {
	o, ok1 := oldObj.(*resourcev1.ResourceSlice)
	n, ok2 := newObj.(*resourcev1.ResourceSlice)
	if ok1 && ok2 && (len(o.Spec.Devices) != len(n.Spec.Devices) || o.Spec.Driver != n.Spec.Driver) {
		h.resumeInsufficient()
	}
}

func (h *draHandlers) resumeInsufficient() {
	if err := EnqueueRejected(h.trainJobs, h.router, h.build, trainjob.ReasonInsufficientDevices); err != nil {
		h.logger.Error(err, "Resuming TrainJobs that wait for devices")
	}
}

// enqueueUnfinished sends the TrainJobs of namespace (all namespaces for "") that are
// not finished to the build stage.
func (h *draHandlers) enqueueUnfinished(namespace string) {
	var jobs []*trainer.TrainJob
	var err error
	if namespace == metav1.NamespaceAll {
		jobs, err = h.trainJobs.List(labels.Everything())
	} else {
		jobs, err = h.trainJobs.TrainJobs(namespace).List(labels.Everything())
	}
	if err != nil {
		h.logger.Error(err, "Listing TrainJobs for a DRA object", "namespace", namespace)
		return
	}
	for _, tj := range jobs {
		if tj.DeletionTimestamp == nil && !trainjob.IsFinished(tj) {
			h.router.Enqueue(h.build, cache.MetaObjectToName(tj))
		}
	}
}
