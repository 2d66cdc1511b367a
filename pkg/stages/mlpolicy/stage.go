package mlpolicy

import (
	"context"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

const (
	// Name is the stage name: its queue name and its metrics' stage label.
	Name = "ml_policy"
	// Index is the stage's 1-based position in the pipeline.
	Index = 3
)

// Step returns the stage's step function: Apply with plugins.
func Step(plugins []Plugin) step.Func {
	return func(_ context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
		return Apply(tj, p, plugins)
	}
}
