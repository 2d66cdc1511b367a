package status_test

import (
	"encoding/json"
	"testing"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
	"github.com/trainyard/trainyard/pkg/stages/status"
)

// upstreamPlan is the finished plan (stages 1–5) of the upstream runtime-patches example
// on the upstream torch-distributed runtime.
func upstreamPlan(b *testing.B) (*trainer.TrainJob, *plan.Plan) {
	rt := plantest.UpstreamRuntimeFile(b, "runtimes/torch_distributed.yaml")
	tj := plantest.UpstreamTrainJob(b, "examples/yaml/02-runtime-patches.yaml")
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		b.Fatal(err)
	}
	p := &plan.Plan{Runtime: rt, JobSet: js, Stage: statusIndex - 1}
	if err := mlpolicy.Apply(tj, p, mlpolicy.DefaultPlugins(mlpolicy.SecretNames{})); err != nil {
		b.Fatal(err)
	}
	return tj, p
}

// BenchmarkDesired measures what the status stage does with a plan to decide "apply or
// not" (DesiredOf: copy, hash, annotate) and, when it applies, the request body
// (JobSetObject and JSON). Skipped when shared/upstream is absent.
func BenchmarkDesired(b *testing.B) {
	_, p := upstreamPlan(b)
	b.Run("DesiredOf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := status.DesiredOf(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	d, err := status.DesiredOf(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ApplyBody", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obj, err := d.JobSetObject()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
}
