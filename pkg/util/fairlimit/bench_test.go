package fairlimit

import (
	"context"
	"testing"

	"k8s.io/client-go/util/flowcontrol"
)

// BenchmarkWaitWithTokensFree is a request's cost when the bucket has tokens and
// nobody waits, the limiter's common case, against client-go's token bucket: ns/op
// per request, one flow, and many goroutines of 100 flows (-cpu sets how many run at
// once).
func BenchmarkWaitWithTokensFree(b *testing.B) {
	const qps, burst = 1e9, 1 << 30 // never empty within a benchmark
	flows := make([]context.Context, 100)
	for i := range flows {
		flows[i] = WithFlow(context.Background(), string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	for _, l := range []struct {
		name string
		new  func() flowcontrol.RateLimiter
	}{
		{"client-go", func() flowcontrol.RateLimiter { return flowcontrol.NewTokenBucketRateLimiter(qps, burst) }},
		{"fairlimit", func() flowcontrol.RateLimiter { return New(qps, burst) }},
	} {
		b.Run(l.name+"/one-flow", func(b *testing.B) {
			lim, ctx := l.new(), flows[0]
			b.ReportAllocs()
			for b.Loop() {
				if err := lim.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(l.name+"/100-flows-parallel", func(b *testing.B) {
			lim := l.new()
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
		})
	}
}

// BenchmarkWaitSaturated is a request's cost when the bucket is empty and requests of
// 100 flows wait (64 goroutines on 2 CPUs): ns/op is bound by the rate (100,000 per
// second: 10,000 ns), so read the CPU and allocations per request against client-go's
// token bucket, which makes each request sleep its own reservation.
func BenchmarkWaitSaturated(b *testing.B) {
	const qps, burst = 100_000, 1
	flows := make([]context.Context, 100)
	for i := range flows {
		flows[i] = WithFlow(context.Background(), string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	for _, l := range []struct {
		name string
		new  func() flowcontrol.RateLimiter
	}{
		{"client-go", func() flowcontrol.RateLimiter { return flowcontrol.NewTokenBucketRateLimiter(qps, burst) }},
		{"fairlimit", func() flowcontrol.RateLimiter { return New(qps, burst) }},
	} {
		b.Run(l.name, func(b *testing.B) {
			lim := l.new()
			b.ReportAllocs()
			b.SetParallelism(32)
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
		})
	}
}
