package informers

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/trainyard/trainyard/pkg/informers/namespaces"
)

// PodGroups caches the status of the PodGroups TrainJobs control — Workload API,
// coscheduling, Volcano; one dynamic informer per served API — so the status stage can
// explain a gang that waits for the scheduler, and to check that an existing PodGroup
// is its TrainJob's before applying over it (Get). Each cached PodGroup keeps only its
// identity, owners, gang size and status (TrimPodGroup): a few hundred bytes, so 10,000
// TrainJobs cost a few MB. Every add or update is routed, batched like JobSet updates,
// to the status stage of the owning TrainJob; a delete to its build stage, which
// rebuilds the plan so that the status stage re-creates the PodGroup of a TrainJob
// that still needs it (or lets a TrainJob that waited for a foreign one proceed).
//
// Watch may be called before or after Start (for an API served later); informers added
// after Start start at once.
type PodGroups struct {
	Client dynamic.Interface
	// Router and Routes route events; set them with Route. A nil Router routes nothing
	// (a follower's informers stay warm without queueing).
	Router Router
	Routes Routes
	Logger klog.Logger
	// Namespaces are the namespaces watched, one informer each (empty: every namespace).
	Namespaces namespaces.Set

	mu        sync.Mutex
	ctx       context.Context // set by Start
	informers map[schema.GroupVersionResource]cache.SharedIndexInformer
	routed    map[schema.GroupVersionResource]bool
	running   sync.WaitGroup // the informers' goroutines
}

// Watch adds an informer for gvr's PodGroups (a no-op when one exists), starting it when
// Start was called.
func (p *PodGroups) Watch(gvr schema.GroupVersionResource) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.informers == nil {
		p.informers = map[schema.GroupVersionResource]cache.SharedIndexInformer{}
		p.routed = map[schema.GroupVersionResource]bool{}
	}
	if _, ok := p.informers[gvr]; ok {
		return nil
	}
	inf := p.Namespaces.Informer(func(namespace string) cache.SharedIndexInformer {
		return dynamicinformer.NewFilteredDynamicInformer(p.Client, gvr, namespace, 0,
			cache.Indexers{IndexOwnerTrainJob: indexByOwnerTrainJob}, nil).Informer()
	})
	if err := inf.SetTransform(TrimPodGroup); err != nil {
		return fmt.Errorf("informers: PodGroup transform for %s: %w", gvr, err)
	}
	p.informers[gvr] = inf
	if p.Router != nil {
		if err := p.route(gvr, inf); err != nil {
			return err
		}
	}
	if ctx := p.ctx; ctx != nil {
		p.running.Go(func() { inf.RunWithContext(ctx) })
	}
	return nil
}

// Route registers the routing on every informer (call on leadership); informers
// watched later are routed at once.
func (p *PodGroups) Route(r Router, routes Routes) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Router, p.Routes = r, routes
	for gvr, inf := range p.informers {
		if err := p.route(gvr, inf); err != nil {
			return err
		}
	}
	return nil
}

func (p *PodGroups) route(gvr schema.GroupVersionResource, inf cache.SharedIndexInformer) error {
	if p.routed[gvr] {
		return nil
	}
	router, routes := p.Router, p.Routes
	enqueue := func(obj any) {
		if key, ok := ownerKey(obj); ok {
			router.EnqueueAfter(routes.Status, key, StatusBatchPeriod)
		}
	}
	deleted := func(obj any) {
		if key, ok := ownerKey(obj); ok {
			router.Enqueue(routes.Build, key)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: deleted}
	logger := p.Logger
	if _, err := inf.AddEventHandlerWithOptions(handler, cache.HandlerOptions{Logger: &logger}); err != nil {
		return fmt.Errorf("informers: adding PodGroup event handler for %s: %w", gvr, err)
	}
	p.routed[gvr] = true
	return nil
}

// Start runs the informers watched so far, and those watched later, until ctx is done.
func (p *PodGroups) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx = ctx
	for _, inf := range p.informers {
		p.running.Go(func() { inf.RunWithContext(ctx) })
	}
}

// Shutdown waits for the informers' goroutines to end after Start's ctx was cancelled.
func (p *PodGroups) Shutdown() { p.running.Wait() }

// HasSynced reports whether every informer has synced.
func (p *PodGroups) HasSynced() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, inf := range p.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Get returns the cached PodGroup of gr (in any watched version) named namespace/name,
// nil when there is none; watched is false when no informer watches gr, so the cache
// knows nothing. The cache holds every PodGroup of a watched API, not only Trainyard's:
// a miss means no such PodGroup exists.
func (p *PodGroups) Get(gr schema.GroupResource, namespace, name string) (obj metav1.Object, watched bool) {
	p.mu.Lock()
	var informers []cache.SharedIndexInformer
	for gvr, inf := range p.informers {
		if gvr.GroupResource() == gr {
			informers = append(informers, inf)
		}
	}
	p.mu.Unlock()
	for _, inf := range informers {
		item, exists, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
		if err == nil && exists {
			if u, ok := item.(*unstructured.Unstructured); ok {
				return u, true
			}
		}
	}
	return nil, len(informers) > 0
}

// Controlled returns the cached PodGroups, of every watched API, that the TrainJob with
// uid controls in namespace under name.
func (p *PodGroups) Controlled(namespace, name string, uid types.UID) []*unstructured.Unstructured {
	p.mu.Lock()
	informers := make([]cache.SharedIndexInformer, 0, len(p.informers))
	for _, inf := range p.informers {
		informers = append(informers, inf)
	}
	p.mu.Unlock()
	var out []*unstructured.Unstructured
	seen := map[types.UID]bool{} // one PodGroup watched through two versions counts once
	for _, inf := range informers {
		objs, err := inf.GetIndexer().ByIndex(IndexOwnerTrainJob, namespace+"/"+name)
		if err != nil {
			continue
		}
		for _, obj := range objs {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok || seen[u.GetUID()] {
				continue
			}
			if ref := metav1.GetControllerOf(u); ref != nil && ref.UID == uid {
				seen[u.GetUID()] = true
				out = append(out, u)
			}
		}
	}
	return out
}

// TrimPodGroup is the PodGroup cache transform: it keeps apiVersion, kind, the metadata
// the informer and the owner index need (name, namespace, uid, resourceVersion,
// ownerReferences), the gang size (spec.minMember; spec.schedulingPolicy.gang.minCount)
// and status. Anything else passes unchanged.
func TrimPodGroup(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	trimmed := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
	trimmed.SetName(u.GetName())
	trimmed.SetNamespace(u.GetNamespace())
	trimmed.SetUID(u.GetUID())
	trimmed.SetResourceVersion(u.GetResourceVersion())
	trimmed.SetOwnerReferences(u.GetOwnerReferences())
	for _, path := range [][]string{{"spec", "minMember"}, {"spec", "schedulingPolicy", "gang", "minCount"}} {
		if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, path...); found {
			_ = unstructured.SetNestedField(trimmed.Object, v, path...)
		}
	}
	if status, ok := u.Object["status"]; ok {
		trimmed.Object["status"] = status
	}
	return trimmed, nil
}

var _ cache.TransformFunc = TrimPodGroup
