package mergepatches

import (
	"testing"

	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// BenchmarkMerge measures building the desired JobSet (stage 2) from the upstream
// torch-distributed runtime, for the upstream multi-node example (no patches) and the
// runtime-patches example (JobSet metadata and a pod spec patch: service account, node
// selector, tolerations). Skipped when shared/upstream is absent.
func BenchmarkMerge(b *testing.B) {
	rt := plantest.UpstreamRuntimeFile(b, "runtimes/torch_distributed.yaml")
	for _, c := range []struct{ name, file string }{
		{"NoPatches", "examples/yaml/01-multi-node.yaml"},
		{"RuntimePatches", "examples/yaml/02-runtime-patches.yaml"},
	} {
		tj := plantest.UpstreamTrainJob(b, c.file)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Merge(tj, rt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
