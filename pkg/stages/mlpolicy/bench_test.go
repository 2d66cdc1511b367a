package mlpolicy

import (
	"testing"

	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// BenchmarkPlugins measures one ML-policy stage sync's pure work per plugin on the
// upstream runtimes: the copy-on-write of the plan that step.Stage makes, then Apply.
// "copy" is that copy alone, to subtract. Skipped when shared/upstream is absent.
func BenchmarkPlugins(b *testing.B) {
	twoNodes := &trainer.Trainer{NumNodes: ptr.To[int32](2)}
	plainML := plantest.UpstreamRuntimeFile(b, "runtimes/torch_distributed.yaml")
	plainSpec := plainML.Spec.DeepCopy()
	plainSpec.MLPolicy = &trainer.MLPolicy{NumNodes: ptr.To[int32](1)}
	plainML.Spec = plainSpec
	cases := []struct {
		name    string
		rt      plan.Runtime
		trainer *trainer.Trainer
	}{
		{"Torch", plantest.UpstreamRuntimeFile(b, "runtimes/torch_distributed.yaml"), twoNodes},
		{"Torchtune", plantest.UpstreamRuntimeFile(b, "runtimes/torchtune/llama3_2/llama3_2_1B.yaml"), &trainer.Trainer{Command: []string{"tune", "run"}}},
		{"JAX", plantest.UpstreamRuntimeFile(b, "runtimes/jax_distributed.yaml"), twoNodes},
		{"XGBoost", plantest.UpstreamRuntimeFile(b, "runtimes/xgboost_distributed.yaml"), twoNodes},
		{"PlainML", plainML, twoNodes},
	}
	plugins := DefaultPlugins(SecretNames{})
	for _, c := range cases {
		tj := plantest.TrainJob(c.rt.Name, c.trainer)
		js, err := mergepatches.Merge(tj, c.rt)
		if err != nil {
			b.Fatal(err)
		}
		merged := &plan.Plan{Runtime: c.rt, JobSet: js, Stage: 2}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p := merged.DeepCopy()
				if err := Apply(tj, p, plugins); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/copy", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = merged.DeepCopy()
			}
		})
	}
}
