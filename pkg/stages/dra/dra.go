// Package dra is pipeline stage 5: Dynamic Resource Allocation claims (KEP-2782,
// KEP-4381). Pod-level resourceClaims and container-level resources.claims already reach
// the JobSet from the runtime template and from runtimePatches (merged by name in stage
// 2); the Kubernetes resourceclaim controller then creates one ResourceClaim per pod
// from each ResourceClaimTemplate. This stage is the hook where claim validation and
// DRA-aware GPU counting plug in; today it passes the plan through.
package dra

import (
	"context"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

const (
	// Name is the stage name: its queue name and its metrics' stage label.
	Name = "dra_claims"
	// Index is the stage's 1-based position in the pipeline.
	Index = 5
)

// Step returns the stage's step function.
func Step() step.Func {
	return func(context.Context, *trainer.TrainJob, *plan.Plan) error { return nil }
}
