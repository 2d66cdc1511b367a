// Package gang is pipeline stage 4: it applies the runtime's podGroupPolicy so the
// TrainJob's pods are scheduled all-or-nothing. Each gang-scheduling system is a
// Backend; the stage picks the one the policy selects (the CRD allows at most one).
//
// Backends plug in here: Kubernetes Workload API (podGroupPolicy.workload), KAI
// Scheduler (kaiScheduler), scheduler-plugins coscheduling and Volcano. A runtime
// without podGroupPolicy passes through unchanged.
package gang

import (
	"context"
	"fmt"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

// Name is the stage name: its queue name and its metrics' stage label; the stage
// table (package stages) places the stage in the pipeline.
const Name = "gang_scheduling"

// Backend is one gang-scheduling system.
type Backend interface {
	// Name is the podGroupPolicy member the backend serves, e.g. "workload".
	Name() string
	// Enabled reports whether policy selects this backend.
	Enabled(policy *trainer.PodGroupPolicy) bool
	// Apply labels or annotates the JobSet's pod templates and adds the side objects
	// (PodGroup, Workload) the backend needs to p. It returns a *plan.InvalidInputError
	// or *plan.UnsupportedError for input the backend cannot serve.
	Apply(ctx context.Context, tj *trainer.TrainJob, p *plan.Plan) error
}

// Step returns the stage's step function over backends, tried in order.
func Step(backends []Backend) step.Func {
	return func(ctx context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
		policy := p.Runtime.Spec.PodGroupPolicy
		if policy == nil {
			return nil
		}
		for _, b := range backends {
			if b.Enabled(policy) {
				return b.Apply(ctx, tj, p)
			}
		}
		return &plan.UnsupportedError{Object: p.Runtime.Ref(),
			Feature: fmt.Sprintf("spec.podGroupPolicy %s (served: %v); remove podGroupPolicy from the runtime or use a served backend", member(policy), names(backends))}
	}
}

func names(backends []Backend) []string {
	out := make([]string, 0, len(backends))
	for _, b := range backends {
		out = append(out, b.Name())
	}
	return out
}

// member names the podGroupPolicy member that is set.
func member(policy *trainer.PodGroupPolicy) string {
	switch {
	case policy.Coscheduling != nil:
		return "coscheduling"
	case policy.Volcano != nil:
		return "volcano"
	case policy.KAIScheduler != nil:
		return "kaiScheduler"
	case policy.Workload != nil:
		return "workload"
	}
	return "{}"
}
