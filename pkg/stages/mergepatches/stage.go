package mergepatches

import (
	"context"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

// Name is the stage name: its queue name and its metrics' stage label; the stage
// table (package stages) places the stage in the pipeline.
const Name = "merge_patches"

// Step returns the stage's step function: it builds the desired JobSet with Merge.
func Step() step.Func {
	return func(_ context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
		js, err := Merge(tj, p.Runtime)
		if err != nil {
			return err
		}
		p.JobSet = js
		return nil
	}
}
