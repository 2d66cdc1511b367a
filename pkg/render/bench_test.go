package render_test

import (
	"context"
	"testing"

	"github.com/trainyard/trainyard/pkg/render"
)

// BenchmarkRender measures building one TrainJob's objects through stages 1–5 and
// DesiredOf, as the controller does once per TrainJob generation, without the engine:
// the upstream runtime-patches example on torch-distributed. Loading (YAML decoding) is
// outside the loop.
func BenchmarkRender(b *testing.B) {
	for _, c := range upstreamCases(b) {
		if c.ID() != "torch-distributed/02-runtime-patches" {
			continue
		}
		in, err := render.Load(c.Sources, "default")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := render.Render(context.Background(), in, render.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
