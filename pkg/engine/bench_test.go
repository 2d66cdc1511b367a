package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"

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
