package mergepatches

import (
	"context"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

const (
	// Name is the stage name: its queue name and its metrics' stage label.
	Name = "merge_patches"
	// Index is the stage's 1-based position in the pipeline.
	Index = 2
)

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
