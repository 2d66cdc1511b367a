package engine

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/trainyard/trainyard/pkg/metrics"
)

// BenchmarkPipelineThroughput measures keys per second through six no-op
// stages, with metrics recorded as in production. Each iteration is one
// distinct key going through every stage, so the engine's own overhead
// (queues, handoffs, metrics, logging calls) is what is measured.
func BenchmarkPipelineThroughput(b *testing.B) {
	names := []string{"resolve_runtime", "merge_patches", "ml_policy", "gang", "dra", "status"}
	for name, workers := range map[string]map[string]int{
		"workers=1":         nil,
		"workers=realistic": {"resolve_runtime": 4, "merge_patches": 4, "ml_policy": 4, "gang": 2, "dra": 2, "status": 8},
	} {
		b.Run(name, func(b *testing.B) {
			keys := make([]cache.ObjectName, b.N)
			for i := range keys {
				keys[i] = cache.NewObjectName("bench", fmt.Sprint("tj-", i))
			}
			var finished atomic.Int64
			allDone := make(chan struct{})
			var stages []Stage
			for i, n := range names {
				last := i == len(names)-1
				stages = append(stages, &fakeStage{name: n, sync: func(context.Context, cache.ObjectName) (Result, error) {
					if last && finished.Add(1) == int64(b.N) {
						close(allDone)
					}
					return Continue(), nil
				}})
			}
			p, err := New(stages, WithWorkers(workers), WithMetrics(metrics.New(prometheus.NewRegistry())))
			if err != nil {
				b.Fatal(err)
			}
			// The global klog logger at its default verbosity: per-sync V(4)
			// logs are disabled, as in production.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()

			b.ResetTimer()
			start := time.Now()
			for _, k := range keys {
				p.EnqueueFirst(k)
			}
			<-allDone
			elapsed := time.Since(start)
			b.StopTimer()

			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "keys/s")
			b.ReportMetric(float64(b.N*len(names))/elapsed.Seconds(), "syncs/s")
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// withFlowKey sets the stage queues' flow key; nil gives client-go's FIFO, the
// baseline the fair queue is measured against.
func withFlowKey(f flowKeyFunc) Option {
	return func(c *config) { c.flowKey = f }
}

// benchQueueKinds are the stage queue storages compared, in a fixed order.
var benchQueueKinds = []struct {
	name    string
	flowKey flowKeyFunc
}{{"fifo", nil}, {"fair", namespaceFlow}}

// BenchmarkStageQueue measures one stage queue as a worker pool uses it: b.N distinct
// keys, spread over 1 or 100 namespaces, added by one goroutine and taken by 4 workers
// (Get, Forget, Done), over client-go's FIFO and over the fair queue. ns/op is per key;
// allocs/op counts the queue's allocations per key.
func BenchmarkStageQueue(b *testing.B) {
	for _, kind := range benchQueueKinds {
		for _, namespaces := range []int{1, 100} {
			b.Run(fmt.Sprintf("queue=%s/namespaces=%d", kind.name, namespaces), func(b *testing.B) {
				keys := benchKeys(b.N, namespaces)
				q := newStageQueue("bench", config{rateLimit: DefaultRateLimit().withDefaults(), clock: clock.RealClock{},
					metrics: metrics.New(prometheus.NewRegistry()), flowKey: kind.flowKey})
				var wg sync.WaitGroup
				b.ReportAllocs()
				b.ResetTimer()
				for range 4 {
					wg.Go(func() {
						for {
							k, shutdown := q.Get()
							if shutdown {
								return
							}
							q.Forget(k)
							q.Done(k)
						}
					})
				}
				for _, k := range keys {
					q.Add(k)
				}
				q.ShutDownWithDrain()
				wg.Wait()
				b.StopTimer()
				q.ShutDown()
			})
		}
	}
}

// BenchmarkQueueStorage measures the storage alone, without the workqueue's lock, sets
// and metrics: batches of 500 keys (the in-flight bound) over 1 or 100 namespaces pushed
// then popped, client-go's FIFO (workqueue.DefaultQueue) against fairQueue. ns/op,
// allocs/op and cpu-ns/op (the thread's CPU time, which a loaded machine's waits for a
// CPU do not inflate) are per key pushed and popped: what the fair order costs by itself.
func BenchmarkQueueStorage(b *testing.B) {
	const batch = 500
	for _, kind := range benchQueueKinds {
		for _, namespaces := range []int{1, 100} {
			b.Run(fmt.Sprintf("queue=%s/namespaces=%d", kind.name, namespaces), func(b *testing.B) {
				keys := benchKeys(batch, namespaces)
				q := workqueue.DefaultQueue[cache.ObjectName]()
				if kind.flowKey != nil {
					q = newFairQueue(kind.flowKey)
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := threadCPU()
				for i := 0; i < b.N; {
					n := min(batch, b.N-i)
					for _, k := range keys[:n] {
						q.Push(k)
					}
					for range n {
						q.Pop()
					}
					i += n
				}
				if cpu := threadCPU() - cpu0; cpu > 0 {
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}

// BenchmarkAdmission measures admission-like throughput: b.N new TrainJobs' keys, spread
// round-robin over 1 or 100 namespaces, enter six no-op stages with the production
// worker counts and the default in-flight bound (the gate parks what exceeds it), over
// client-go's FIFO and over the fair queue. It reports keys/s and the process's CPU time
// per 1,000 keys (cpu-ms/1000keys: user and system, every goroutine), alongside ns/op
// (wall time per key) and allocs/op.
func BenchmarkAdmission(b *testing.B) {
	names := []string{"resolve_runtime", "merge_patches", "ml_policy", "gang", "dra", "status"}
	workers := map[string]int{"resolve_runtime": 4, "merge_patches": 4, "ml_policy": 4, "gang": 2, "dra": 2, "status": 8}
	for _, kind := range benchQueueKinds {
		for _, namespaces := range []int{1, 100} {
			b.Run(fmt.Sprintf("queue=%s/namespaces=%d", kind.name, namespaces), func(b *testing.B) {
				keys := benchKeys(b.N, namespaces)
				var finished atomic.Int64
				allDone := make(chan struct{})
				var stages []Stage
				for i, n := range names {
					last := i == len(names)-1
					stages = append(stages, &fakeStage{name: n, sync: func(context.Context, cache.ObjectName) (Result, error) {
						if last && finished.Add(1) == int64(b.N) {
							close(allDone)
						}
						return Continue(), nil
					}})
				}
				p, err := New(stages, WithWorkers(workers), WithMetrics(metrics.New(prometheus.NewRegistry())), withFlowKey(kind.flowKey))
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- p.Run(ctx) }()

				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				start := time.Now()
				for _, k := range keys {
					p.EnqueueFirst(k)
				}
				<-allDone
				elapsed := time.Since(start)
				cpu := processCPU() - cpu0
				b.StopTimer()

				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "keys/s")
				if cpu > 0 {
					b.ReportMetric(float64(cpu.Milliseconds())*1000/float64(b.N), "cpu-ms/1000keys")
				}
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// benchKeys returns n distinct keys, the i-th in namespace i mod namespaces.
func benchKeys(n, namespaces int) []cache.ObjectName {
	keys := make([]cache.ObjectName, n)
	for i := range keys {
		keys[i] = cache.NewObjectName(fmt.Sprint("ns-", i%namespaces), fmt.Sprint("tj-", i))
	}
	return keys
}

// BenchmarkQuietNamespaceDuringBurst is issue 43's scenario in-process: each iteration
// queues a burst of 2,000 TrainJobs' keys in one namespace, then one key of another, and
// measures that one key's time through six stages whose last takes 2 ms a sync (an API
// server's apply; 8 workers, so 4,000 keys/s) with the production worker counts and the
// default in-flight bound. It reports the quiet key's median time during the burst
// (quiet-ms) and alone, before any burst (alone-ms), over client-go's FIFO and over the
// fair queue. Run it with a small -benchtime, e.g. 5x: an iteration lasts the burst.
func BenchmarkQuietNamespaceDuringBurst(b *testing.B) {
	const burstSize, apply = 2000, 2 * time.Millisecond
	names := []string{"resolve_runtime", "merge_patches", "ml_policy", "gang", "dra", "status"}
	workers := map[string]int{"resolve_runtime": 4, "merge_patches": 4, "ml_policy": 4, "gang": 2, "dra": 2, "status": 8}
	for _, kind := range benchQueueKinds {
		b.Run("queue="+kind.name, func(b *testing.B) {
			var mu sync.Mutex
			doneAt := map[cache.ObjectName]chan struct{}{}
			burstDone := make(chan struct{}, burstSize)
			var stages []Stage
			for i, n := range names {
				last := i == len(names)-1
				stages = append(stages, &fakeStage{name: n, sync: func(_ context.Context, k cache.ObjectName) (Result, error) {
					if !last {
						return Continue(), nil
					}
					time.Sleep(apply)
					if k.Namespace == "busy" {
						burstDone <- struct{}{}
						return Continue(), nil
					}
					mu.Lock()
					close(doneAt[k])
					mu.Unlock()
					return Continue(), nil
				}})
			}
			p, err := New(stages, WithWorkers(workers), WithMetrics(metrics.New(prometheus.NewRegistry())), withFlowKey(kind.flowKey))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = p.Run(ctx) }()
			through := func(k cache.ObjectName) time.Duration {
				ch := make(chan struct{})
				mu.Lock()
				doneAt[k] = ch
				mu.Unlock()
				start := time.Now()
				p.EnqueueFirst(k)
				<-ch
				return time.Since(start)
			}
			var alone, quiet []time.Duration
			for i := range 5 {
				alone = append(alone, through(cache.NewObjectName("quiet", fmt.Sprint("alone-", i))))
			}
			b.ResetTimer()
			for i := range b.N {
				for j := range burstSize {
					p.EnqueueFirst(cache.NewObjectName("busy", fmt.Sprintf("tj-%d-%d", i, j)))
				}
				quiet = append(quiet, through(cache.NewObjectName("quiet", fmt.Sprint("tj-", i))))
				for range burstSize {
					<-burstDone
				}
			}
			b.StopTimer()
			median := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Microseconds()) / 1000
			}
			b.ReportMetric(median(quiet), "quiet-ms")
			b.ReportMetric(median(alone), "alone-ms")
		})
	}
}
