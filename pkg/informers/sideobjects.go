package informers

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/trainyard/trainyard/pkg/informers/namespaces"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// SideObjectResources are the always-served resources the pipeline applies side objects
// of: ConfigMaps (MPI hostfile, Flux scripts). Workload API Workloads are watched too
// once that API is served. Secrets (MPI SSH key, Flux CURVE certificate) are not: they
// are create-only under names no one else can know (mlpolicy.SecretNames), so nothing
// needs to be known about an existing one, and the controller holds no verb that
// reads Secrets (RBAC cannot limit list and watch to metadata). Their repair follows
// JobSet restarts instead (Informers.Route).
var SideObjectResources = []schema.GroupVersionResource{
	{Version: "v1", Resource: "configmaps"},
}

// SideObjects caches the metadata of the side objects the pipeline creates for
// TrainJobs, through metadata-only informers (k8s.io/client-go/metadata), one per
// resource, that list and watch only objects labelled objectkeys.LabelTrainJobName. The cache
// holds Trainyard's side objects, not every ConfigMap of the cluster: the API server
// sends PartialObjectMetadata, trimmed further to identity, labels and owner references
// (TrimSideObject), so 10,000 TrainJobs cost a few MB. Never Secrets (see
// SideObjectResources).
//
// The status stage reads it (through SideObjectCache) to check that an existing side
// object is its TrainJob's before it counts as done. The deletion of a cached object —
// or its label's removal, which the informer sees as one — is routed to the first stage
// of the TrainJobs it names (SideObjectKeys): the plan is rebuilt and the status stage
// re-creates what is missing, or, when the TrainJob waited for that foreign object to
// go, proceeds. Adds and updates route nothing.
//
// Watch may be called before or after Start (for an API served later); informers
// added after Start start at once.
type SideObjects struct {
	Client metadata.Interface
	Logger klog.Logger
	// Namespaces are the namespaces watched, one informer each (empty: every namespace).
	Namespaces namespaces.Set

	mu        sync.Mutex
	ctx       context.Context // set by Start
	informers map[schema.GroupResource]cache.SharedIndexInformer
	router    Router
	build     string
	routed    map[schema.GroupResource]bool
	running   sync.WaitGroup // the informers' goroutines
}

// Watch adds an informer for gvr's side objects (a no-op when gvr's resource is watched
// already, in whatever version), starting it when Start was called. Secrets are
// refused: list and watch would return their data (see SideObjectResources).
func (s *SideObjects) Watch(gvr schema.GroupVersionResource) error {
	if gvr.Group == "" && gvr.Resource == "secrets" {
		return fmt.Errorf("informers: Secrets are create-only side objects and never watched")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.informers == nil {
		s.informers = map[schema.GroupResource]cache.SharedIndexInformer{}
		s.routed = map[schema.GroupResource]bool{}
	}
	gr := gvr.GroupResource()
	if _, ok := s.informers[gr]; ok {
		return nil
	}
	inf := s.Namespaces.Informer(func(namespace string) cache.SharedIndexInformer {
		return metadatainformer.NewFilteredMetadataInformer(s.Client, gvr, namespace, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = objectkeys.LabelTrainJobName }).Informer()
	})
	if err := inf.SetTransform(TrimSideObject); err != nil {
		return fmt.Errorf("informers: side-object transform for %s: %w", gvr, err)
	}
	s.informers[gr] = inf
	if s.router != nil {
		if err := s.route(gr, inf); err != nil {
			return err
		}
	}
	if ctx := s.ctx; ctx != nil {
		s.running.Go(func() { inf.RunWithContext(ctx) })
	}
	return nil
}

// Route sends deletions to r's stage build (call on leadership); informers watched
// later are routed at once.
func (s *SideObjects) Route(r Router, build string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.router, s.build = r, build
	for gr, inf := range s.informers {
		if err := s.route(gr, inf); err != nil {
			return err
		}
	}
	return nil
}

func (s *SideObjects) route(gr schema.GroupResource, inf cache.SharedIndexInformer) error {
	if s.routed[gr] {
		return nil
	}
	router, build := s.router, s.build
	handler := cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if m := metaOf(obj); m != nil {
			for _, key := range SideObjectKeys(m) {
				router.Enqueue(build, key)
			}
		}
	}}
	logger := s.Logger
	if _, err := inf.AddEventHandlerWithOptions(handler, cache.HandlerOptions{Logger: &logger}); err != nil {
		return fmt.Errorf("informers: adding side-object event handler for %s: %w", gr, err)
	}
	s.routed[gr] = true
	return nil
}

// Start runs the informers watched so far, and those watched later, until ctx is done.
func (s *SideObjects) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx = ctx
	for _, inf := range s.informers {
		s.running.Go(func() { inf.RunWithContext(ctx) })
	}
}

// Shutdown waits for the informers' goroutines to end after Start's ctx was cancelled.
func (s *SideObjects) Shutdown() { s.running.Wait() }

// HasSynced reports whether every informer has synced.
func (s *SideObjects) HasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inf := range s.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Get returns the cached metadata of gr's object namespace/name, nil when the cache
// does not hold it — because none exists, or because it lacks the label (created by
// someone else, or by a Trainyard older than the label).
func (s *SideObjects) Get(gr schema.GroupResource, namespace, name string) metav1.Object {
	s.mu.Lock()
	inf := s.informers[gr]
	s.mu.Unlock()
	if inf == nil {
		return nil
	}
	obj, exists, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil
	}
	m, _ := obj.(metav1.Object)
	return m
}

// SideObjectKeys returns the keys of the TrainJobs obj's deletion concerns: the one its
// objectkeys.LabelTrainJobName names and the one controlling it, in obj's namespace — the same
// TrainJob for Trainyard's own objects; an object labelled for one TrainJob and
// controlled by something else concerns the labelled TrainJob only.
func SideObjectKeys(obj metav1.Object) []cache.ObjectName {
	var keys []cache.ObjectName
	if name := obj.GetLabels()[objectkeys.LabelTrainJobName]; name != "" {
		keys = append(keys, cache.ObjectName{Namespace: obj.GetNamespace(), Name: name})
	}
	if name := trainjob.ControllerName(obj); name != "" && (len(keys) == 0 || keys[0].Name != name) {
		keys = append(keys, cache.ObjectName{Namespace: obj.GetNamespace(), Name: name})
	}
	return keys
}

// TrimSideObject is the side-object cache transform: a PartialObjectMetadata keeps
// apiVersion, kind, name, namespace, UID, resourceVersion, deletionTimestamp, labels and
// owner references (what the informer, the ownership check and the routing need), and
// drops annotations (a kubectl last-applied-configuration can be most of an object) and
// managedFields; the strings that repeat are interned (internObjectMeta). Anything
// else passes unchanged.
func TrimSideObject(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	trimmed := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: intern(m.APIVersion), Kind: intern(m.Kind)},
		ObjectMeta: metav1.ObjectMeta{
			Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
			DeletionTimestamp: m.DeletionTimestamp, Labels: m.Labels, OwnerReferences: m.OwnerReferences,
		},
	}
	internObjectMeta(&trimmed.ObjectMeta)
	return trimmed, nil
}

// SideObjectCache answers the status stage's side-object lookups from the informer
// caches: PodGroups (every PodGroup of a watched API, so a miss is final) and
// SideObjects (Trainyard's labelled objects only, so a miss is not).
type SideObjectCache struct {
	Objects   *SideObjects
	PodGroups *PodGroups
}

// Lookup returns the cached metadata of gr's object namespace/name, nil when no cache
// holds it. complete reports whether a miss is final: gr is cached whole (PodGroups),
// so no object of that name exists; otherwise the caller must ask the API server.
func (c SideObjectCache) Lookup(gr schema.GroupResource, namespace, name string) (obj metav1.Object, complete bool) {
	if c.PodGroups != nil {
		if obj, watched := c.PodGroups.Get(gr, namespace, name); watched {
			return obj, true
		}
	}
	if c.Objects != nil {
		return c.Objects.Get(gr, namespace, name), false
	}
	return nil, false
}

var _ cache.TransformFunc = TrimSideObject
