package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// burstResult is what one burst of creates measured.
type burstResult struct {
	// Start is when the first create was sent, End when the last returned.
	Start, End time.Time
	// Done[i] is when create i returned successfully (zero when it failed).
	Done   []time.Time
	Errors int
	// FirstError is the first create error, for the report.
	FirstError error
}

// Seconds is the wall time of the burst.
func (b burstResult) Seconds() float64 { return b.End.Sub(b.Start).Seconds() }

// burst calls create(i) for i in [0, n) from parallelism goroutines, each
// taking the next index as soon as its previous call returns, which is how a
// client with that many connections in flight loads the API server. It stops
// early only when ctx ends.
func burst(ctx context.Context, n, parallelism int, create func(ctx context.Context, i int) error) burstResult {
	res := burstResult{Done: make([]time.Time, n)}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	res.Start = time.Now()
	for range parallelism {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				err := create(ctx, i)
				now := time.Now()
				mu.Lock()
				if err != nil {
					res.Errors++
					if res.FirstError == nil {
						res.FirstError = err
					}
				} else {
					res.Done[i] = now
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.End = time.Now()
	return res
}

// arrivals records, per object name, the first time a watch saw an object
// satisfy a predicate (e.g. "exists", "is Complete").
type arrivals struct {
	mu    sync.Mutex
	seen  map[string]time.Time
	count atomic.Int64
}

func newArrivals() *arrivals { return &arrivals{seen: map[string]time.Time{}} }

func (a *arrivals) record(name string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.seen[name]; ok {
		return
	}
	a.seen[name] = at
	a.count.Add(1)
}

// Len is how many names have arrived.
func (a *arrivals) Len() int { return int(a.count.Load()) }

// At returns when name arrived.
func (a *arrivals) At(name string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.seen[name]
	return t, ok
}

// watchArrivals runs a watch-backed informer on resource in namespace through
// client (a typed client's RESTClient), recording each object's name in the
// returned arrivals the first time pred(obj) holds; the receive time is the
// timestamp, so watch delivery delay (milliseconds on loopback) is included.
// The informer stops with ctx; watchArrivals returns once it has synced.
func watchArrivals(ctx context.Context, client rest.Interface, resource, namespace string, example runtime.Object, pred func(obj any) (name string, ok bool)) (*arrivals, error) {
	a := newArrivals()
	observe := func(obj any) {
		if name, ok := pred(obj); ok {
			a.record(name, time.Now())
		}
	}
	err := startInformer(ctx, client, resource, namespace, example, cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// startInformer runs a watch-backed informer on resource in namespace through client
// (a typed client's RESTClient), calling handler for each event as it is received,
// one at a time and in the watch's order; it stops with ctx. It returns once the
// informer has synced. Errors: ctx ended first.
func startInformer(ctx context.Context, client rest.Interface, resource, namespace string, example runtime.Object, handler cache.ResourceEventHandler) error {
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.NewListWatchFromClient(client, resource, namespace, fields.Everything()),
		ObjectType:    example,
		Handler:       handler,
	})
	go ctrl.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		return ctx.Err()
	}
	return nil
}
