package kubeclient

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Resource is what a typed client offers for one resource, in one namespace or all:
// its List (returning L, the resource's list type) and its Watch.
type Resource[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// NewInformer returns a shared index informer of example's kind that lists and watches
// through resource, a typed client of client's, with tweak (when not nil) applied to
// every list and watch's options: what client-go's generated
// informers/<group>/<version>.NewFiltered<Kind>Informer builds, without the
// kubernetes.Interface those take, which would link every API group's client. A
// client that cannot list with watch-list semantics (the fake clientset) is told apart
// as there (cache.ToListWatcherWithWatchListSemantics). resync is the periodic resync
// (0: none); indexers, the cache's indexes (client-go's all-groups factory gave its
// informers the namespace index, cache.NamespaceIndex).
func NewInformer[L runtime.Object](client Interface, resource Resource[L], example runtime.Object,
	resync time.Duration, indexers cache.Indexers, tweak func(*metav1.ListOptions),
) cache.SharedIndexInformer {
	options := func(opts metav1.ListOptions) metav1.ListOptions {
		if tweak != nil {
			tweak(&opts)
		}
		return opts
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return resource.List(ctx, options(opts))
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return resource.Watch(ctx, options(opts))
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), example,
		cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: indexers})
}
