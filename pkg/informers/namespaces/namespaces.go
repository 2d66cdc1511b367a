// Package namespaces confines informers of namespaced resources to a set of namespaces
// (the Configuration's watchNamespaces): one informer per namespace, merged into a
// single cache.SharedIndexInformer whose indexer answers across them. Every consumer —
// generated listers (built on the merged indexer), indexers, event handlers — keeps
// reading one informer, and the API server sees only namespaced lists and watches, which
// namespaced Roles can grant. It is the standard construction: client-go's
// SharedInformerFactory takes a namespace (WithNamespace) and controller-runtime's
// multi-namespace cache keeps one cache per namespace the same way.
package namespaces

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
)

// Set is the namespaces a controller watches; empty means every namespace (one
// cluster-wide informer per resource, Trainyard's default).
type Set []string

// All reports whether s means every namespace.
func (s Set) All() bool { return len(s) == 0 }

// Contains reports whether namespace is watched.
func (s Set) Contains(namespace string) bool { return s.All() || slices.Contains(s, namespace) }

// Each returns the namespaces to build one informer (or informer factory) for:
// metav1.NamespaceAll alone when s means every namespace, else s.
func (s Set) Each() []string {
	if s.All() {
		return []string{metav1.NamespaceAll}
	}
	return s
}

// Informer returns one informer of a namespaced resource over the namespaces of s:
// newInformer(namespace) for each of s.Each(), merged when there are several (Merge).
func (s Set) Informer(newInformer func(namespace string) cache.SharedIndexInformer) cache.SharedIndexInformer {
	each := s.Each()
	informers := make([]cache.SharedIndexInformer, len(each))
	for i, ns := range each {
		informers[i] = newInformer(ns)
	}
	return Merge(each, informers)
}

// Merge returns one informer over informers[i], each of namespace namespaces[i] (the
// two slices have the same length, the namespaces are distinct): informers[0] itself
// when there is one. The merged informer:
//   - registers event handlers, transforms, watch-error handlers and indexers on each,
//     and runs each (Run, RunWithContext);
//   - has synced when each has, and so do its handler registrations;
//   - has an indexer (GetIndexer, GetStore) that reads keys ("namespace/name") from the
//     informer of their namespace and lists, indexes and index values across all of
//     them. Writes to it (which only tests make) go to the informer of the object's
//     namespace, and fail for an object of another namespace.
func Merge(namespaces []string, informers []cache.SharedIndexInformer) cache.SharedIndexInformer {
	if len(namespaces) != len(informers) {
		panic(fmt.Sprintf("namespaces: %d namespaces for %d informers", len(namespaces), len(informers)))
	}
	if len(informers) == 1 {
		return informers[0]
	}
	m := &informer{namespaces: namespaces, informers: informers, byNamespace: map[string]int{}}
	for i, ns := range namespaces {
		m.byNamespace[ns] = i
	}
	m.indexer = &indexer{m}
	return m
}

// informer is Merge's informer.
type informer struct {
	namespaces  []string
	informers   []cache.SharedIndexInformer
	byNamespace map[string]int
	indexer     *indexer
}

var (
	_ cache.SharedIndexInformer = &informer{}
	_ cache.Controller          = &informer{}
	_ cache.Indexer             = &indexer{}
)

// registration is the merged informer's handler registration: one per informer.
type registration struct {
	registrations []cache.ResourceEventHandlerRegistration
}

func (r *registration) HasSynced() bool {
	for _, reg := range r.registrations {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

func (r *registration) HasSyncedChecker() cache.DoneChecker {
	checkers := make([]cache.DoneChecker, len(r.registrations))
	for i, reg := range r.registrations {
		checkers[i] = reg.HasSyncedChecker()
	}
	return allDone(checkers)
}

func (m *informer) add(add func(cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error)) (cache.ResourceEventHandlerRegistration, error) {
	r := &registration{}
	for _, inf := range m.informers {
		reg, err := add(inf)
		if err != nil {
			for i, done := range r.registrations {
				_ = m.informers[i].RemoveEventHandler(done)
			}
			return nil, err
		}
		r.registrations = append(r.registrations, reg)
	}
	return r, nil
}

func (m *informer) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return m.add(func(inf cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandler(handler)
	})
}

func (m *informer) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, resyncPeriod time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return m.add(func(inf cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandlerWithResyncPeriod(handler, resyncPeriod)
	})
}

func (m *informer) AddEventHandlerWithOptions(handler cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return m.add(func(inf cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandlerWithOptions(handler, options)
	})
}

func (m *informer) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*registration)
	if !ok || len(r.registrations) != len(m.informers) {
		return fmt.Errorf("namespaces: registration %v is not of this informer", handle)
	}
	var errs []error
	for i, inf := range m.informers {
		if err := inf.RemoveEventHandler(r.registrations[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *informer) GetStore() cache.Store           { return m.indexer }
func (m *informer) GetIndexer() cache.Indexer       { return m.indexer }
func (m *informer) GetController() cache.Controller { return m }

func (m *informer) Run(stopCh <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	m.RunWithContext(ctx)
}

// RunWithContext runs every informer until ctx is done, and returns when all have
// stopped.
func (m *informer) RunWithContext(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range m.informers {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
}

func (m *informer) HasSynced() bool {
	for _, inf := range m.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (m *informer) HasSyncedChecker() cache.DoneChecker {
	checkers := make([]cache.DoneChecker, len(m.informers))
	for i, inf := range m.informers {
		checkers[i] = inf.HasSyncedChecker()
	}
	return allDone(checkers)
}

// LastSyncResourceVersion joins the informers' versions in namespace order: each
// namespace's list has its own, and none stands for all.
func (m *informer) LastSyncResourceVersion() string {
	versions := make([]string, len(m.informers))
	for i, inf := range m.informers {
		versions[i] = inf.LastSyncResourceVersion()
	}
	return strings.Join(versions, ",")
}

func (m *informer) SetWatchErrorHandler(handler cache.WatchErrorHandler) error {
	return m.each(func(inf cache.SharedIndexInformer) error { return inf.SetWatchErrorHandler(handler) })
}

func (m *informer) SetWatchErrorHandlerWithContext(handler cache.WatchErrorHandlerWithContext) error {
	return m.each(func(inf cache.SharedIndexInformer) error { return inf.SetWatchErrorHandlerWithContext(handler) })
}

func (m *informer) SetTransform(handler cache.TransformFunc) error {
	return m.each(func(inf cache.SharedIndexInformer) error { return inf.SetTransform(handler) })
}

func (m *informer) AddIndexers(indexers cache.Indexers) error {
	return m.each(func(inf cache.SharedIndexInformer) error { return inf.AddIndexers(indexers) })
}

// IsStopped reports whether every informer has stopped.
func (m *informer) IsStopped() bool {
	for _, inf := range m.informers {
		if !inf.IsStopped() {
			return false
		}
	}
	return true
}

func (m *informer) each(f func(cache.SharedIndexInformer) error) error {
	for i, inf := range m.informers {
		if err := f(inf); err != nil {
			return fmt.Errorf("namespaces: informer of namespace %q: %w", m.namespaces[i], err)
		}
	}
	return nil
}

// indexer is the merged informer's indexer.
type indexer struct{ m *informer }

// of returns the indexer of namespace, nil when it is not watched.
func (x *indexer) of(namespace string) cache.Indexer {
	i, ok := x.m.byNamespace[namespace]
	if !ok {
		return nil
	}
	return x.m.informers[i].GetIndexer()
}

func (x *indexer) ofObject(obj any) (cache.Indexer, error) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, err
	}
	ns, _, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	idx := x.of(ns)
	if idx == nil {
		return nil, fmt.Errorf("namespaces: %s is in no watched namespace", key)
	}
	return idx, nil
}

func (x *indexer) Add(obj any) error {
	idx, err := x.ofObject(obj)
	if err != nil {
		return err
	}
	return idx.Add(obj)
}

func (x *indexer) Update(obj any) error {
	idx, err := x.ofObject(obj)
	if err != nil {
		return err
	}
	return idx.Update(obj)
}

func (x *indexer) Delete(obj any) error {
	idx, err := x.ofObject(obj)
	if err != nil {
		return err
	}
	return idx.Delete(obj)
}

// Replace is refused: each informer replaces its own namespace's objects.
func (x *indexer) Replace([]any, string) error {
	return fmt.Errorf("namespaces: Replace on a merged indexer")
}

func (x *indexer) Resync() error {
	return x.m.each(func(inf cache.SharedIndexInformer) error { return inf.GetIndexer().Resync() })
}

func (x *indexer) Bookmark(string) {}

func (x *indexer) LastStoreSyncResourceVersion() string { return x.m.LastSyncResourceVersion() }

func (x *indexer) List() []any {
	var all []any
	for _, inf := range x.m.informers {
		all = append(all, inf.GetIndexer().List()...)
	}
	return all
}

func (x *indexer) ListKeys() []string {
	var all []string
	for _, inf := range x.m.informers {
		all = append(all, inf.GetIndexer().ListKeys()...)
	}
	return all
}

func (x *indexer) Get(obj any) (any, bool, error) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, err
	}
	return x.GetByKey(key)
}

// GetByKey reads key ("namespace/name") from its namespace's informer; a key of
// another namespace does not exist.
func (x *indexer) GetByKey(key string) (any, bool, error) {
	ns, _, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, false, err
	}
	idx := x.of(ns)
	if idx == nil {
		return nil, false, nil
	}
	return idx.GetByKey(key)
}

func (x *indexer) Index(indexName string, obj any) ([]any, error) {
	var all []any
	for _, inf := range x.m.informers {
		items, err := inf.GetIndexer().Index(indexName, obj)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
	}
	return all, nil
}

func (x *indexer) IndexKeys(indexName, indexedValue string) ([]string, error) {
	var all []string
	for _, inf := range x.m.informers {
		keys, err := inf.GetIndexer().IndexKeys(indexName, indexedValue)
		if err != nil {
			return nil, err
		}
		all = append(all, keys...)
	}
	return all, nil
}

func (x *indexer) ListIndexFuncValues(indexName string) []string {
	values := sets.New[string]()
	for _, inf := range x.m.informers {
		values.Insert(inf.GetIndexer().ListIndexFuncValues(indexName)...)
	}
	return sets.List(values)
}

func (x *indexer) ByIndex(indexName, indexedValue string) ([]any, error) {
	var all []any
	for _, inf := range x.m.informers {
		items, err := inf.GetIndexer().ByIndex(indexName, indexedValue)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
	}
	return all, nil
}

// GetIndexers returns the indexers, the same on every informer (AddIndexers adds to
// each).
func (x *indexer) GetIndexers() cache.Indexers { return x.m.informers[0].GetIndexer().GetIndexers() }

func (x *indexer) AddIndexers(indexers cache.Indexers) error { return x.m.AddIndexers(indexers) }

// allDone is a DoneChecker done when each of checkers is.
func allDone(checkers []cache.DoneChecker) cache.DoneChecker {
	names := make([]string, len(checkers))
	for i, c := range checkers {
		names[i] = c.Name()
	}
	d := &doneAll{name: strings.Join(names, ","), checkers: checkers}
	return d
}

type doneAll struct {
	name     string
	checkers []cache.DoneChecker
	once     sync.Once
	done     chan struct{}
}

func (d *doneAll) Name() string { return d.name }

// Done returns a channel closed once each checker's is; the first call starts the
// goroutine that waits for them.
func (d *doneAll) Done() <-chan struct{} {
	d.once.Do(func() {
		d.done = make(chan struct{})
		go func() {
			for _, c := range d.checkers {
				<-c.Done()
			}
			close(d.done)
		}()
	})
	return d.done
}
