package mlpolicy

import (
	"context"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

// Name is the stage name: its queue name and its metrics' stage label; the stage
// table (package stages) places the stage in the pipeline.
const Name = "ml_policy"

// Step returns the stage's step function: Apply with plugins.
func Step(plugins []Plugin) step.Func {
	return func(_ context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
		return Apply(tj, p, plugins)
	}
}
