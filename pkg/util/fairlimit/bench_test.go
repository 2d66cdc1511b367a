package fairlimit

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/client-go/util/flowcontrol"
)

// benchFlows returns the contexts of 100 flows.
func benchFlows() []context.Context {
	flows := make([]context.Context, 100)
	for i := range flows {
		flows[i] = WithFlow(context.Background(), fmt.Sprint("flow-", i))
	}
	return flows
}

// benchLimiters are the limiters the benchmarks compare: client-go's token bucket and
// this package's, of qps and burst.
func benchLimiters(qps float32, burst int) []struct {
	name string
	new  func() flowcontrol.RateLimiter
} {
	return []struct {
		name string
		new  func() flowcontrol.RateLimiter
	}{
		{"client-go", func() flowcontrol.RateLimiter { return flowcontrol.NewTokenBucketRateLimiter(qps, burst) }},
		{"fairlimit", func() flowcontrol.RateLimiter { return New(qps, burst) }},
	}
}

// waitInParallel makes b.N requests of the flows in turn on lim from RunParallel's
// goroutines.
func waitInParallel(b *testing.B, lim flowcontrol.RateLimiter, flows []context.Context) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if err := lim.Wait(flows[i%len(flows)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkWaitWithTokensFree is a request's cost when the bucket has tokens and
// nobody waits, the limiter's common case, against client-go's token bucket: ns/op
// per request, one flow, and many goroutines of 100 flows (-cpu sets how many run at
// once).
func BenchmarkWaitWithTokensFree(b *testing.B) {
	flows := benchFlows()
	for _, l := range benchLimiters(1e9, 1<<30) { // never empty within a benchmark
		b.Run(l.name+"/one-flow", func(b *testing.B) {
			lim := l.new()
			b.ReportAllocs()
			for b.Loop() {
				if err := lim.Wait(flows[0]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(l.name+"/100-flows-parallel", func(b *testing.B) { waitInParallel(b, l.new(), flows) })
	}
}

// BenchmarkWaitSaturated is a request's cost when the bucket is empty and requests of
// 100 flows wait (64 goroutines on 2 CPUs): ns/op is bound by the rate (100,000 per
// second: 10,000 ns), so read the CPU and allocations per request against client-go's
// token bucket, which makes each request sleep its own reservation.
func BenchmarkWaitSaturated(b *testing.B) {
	flows := benchFlows()
	for _, l := range benchLimiters(100_000, 1) {
		b.Run(l.name, func(b *testing.B) {
			b.SetParallelism(32)
			waitInParallel(b, l.new(), flows)
		})
	}
}
