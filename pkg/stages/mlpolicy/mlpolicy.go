// Package mlpolicy applies a runtime's ML policy (trainer-compat §3) to the desired
// JobSet built by package mergepatches: it sizes the trainer replicatedJob from
// spec.trainer.numNodes and injects the framework's rendezvous environment and port
// into the trainer "node" container. It is pure logic: no API calls, no listers.
//
// Each framework is a Plugin. The registry is an explicit list (DefaultPlugins), run
// in that fixed order; upstream runs its plugins in Go map order, which only affects
// the order of appended env vars.
//
// Deliberate decisions on upstream quirks (trainer-compat §11), each also documented
// where it is implemented:
//
//   - §11.1: the framework env (PET_*, JAX_*, DMLC_*) and port 29500 are injected even
//     when the TrainJob has no spec.trainer. Upstream skips them, which breaks a
//     TrainJob that only names a runtime (torchrun in the image needs PET_*). Env and
//     ports do not change pod counts, so Kueue's model is unaffected.
//   - §11.3: spec.trainer.numNodes 0 yields parallelism and completions 0, as upstream:
//     the CRD accepts 0 and Kueue computes the same count.
//   - §11.4: coordinator addresses (PET_MASTER_ADDR, JAX_COORDINATOR_ADDRESS,
//     DMLC_TRACKER_URI, the torchtune rendezvous endpoint) name pod 0 of the actual
//     trainer replicatedJob under the JobSet's actual subdomain. Upstream hard-codes
//     replicatedJob "node" and subdomain <name>; both agree for every shipped runtime,
//     and upstream's address does not resolve otherwise.
//   - §11.16: adding port 29500 never replaces another unnamed port (plan.UpsertPort).
package mlpolicy

import (
	"errors"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// Plugin is one ML framework policy.
type Plugin interface {
	// Name is the plugin's name, e.g. "Torch" (upstream's plugin names).
	Name() string
	// Enabled reports whether the plugin acts on a runtime with this mlPolicy (nil when
	// the runtime has none).
	Enabled(policy *trainer.MLPolicy) bool
	// Apply refines p.JobSet, built from p.Runtime for tj, and may append side objects
	// to p.Objects. It must not modify tj or p.Runtime.Spec. Errors:
	// *plan.InvalidInputError or *plan.UnsupportedError for inputs it cannot handle,
	// anything else for bugs.
	Apply(tj *trainer.TrainJob, p *plan.Plan) error
}

// DefaultPlugins returns Trainyard's ML policies in the order Apply runs them.
//
// TODO(mpi, flux): mlPolicy.mpi (trainer-compat §3.4: SSH Secret and hostfile ConfigMap
// in plan.Objects, OMPI_MCA_* env, launcher/node counts) and mlPolicy.flux (§3.6) are
// placeholders that fail with *plan.UnsupportedError. They come first so a runtime
// selecting them fails before any other plugin does work.
func DefaultPlugins() []Plugin {
	return []Plugin{MPI(), Flux(), Torch(), JAX(), XGBoost(), PlainML()}
}

// Apply runs the plugins enabled for p.Runtime's mlPolicy, in list order, on
// p.JobSet, then sets completions = parallelism on every replicatedJob so the counts
// the plugins changed stay in sync (trainer-compat §2.4 PreBuildSync).
//
// On error p is partially modified and must be discarded; the error is the plugin's
// (see Plugin.Apply).
func Apply(tj *trainer.TrainJob, p *plan.Plan, plugins []Plugin) error {
	if tj == nil || p == nil || p.JobSet == nil || p.Runtime.Spec == nil {
		return errors.New("mlpolicy: nil TrainJob, plan, JobSet or runtime spec")
	}
	policy := p.Runtime.Spec.MLPolicy
	for _, pl := range plugins {
		if !pl.Enabled(policy) {
			continue
		}
		if err := pl.Apply(tj, p); err != nil {
			return err
		}
	}
	for i := range p.JobSet.Spec.ReplicatedJobs {
		rj := &p.JobSet.Spec.ReplicatedJobs[i]
		plan.SetCount(rj, plan.Count(rj))
	}
	return nil
}

// unsupported is a placeholder for a framework Trainyard does not implement yet.
type unsupported struct {
	name, feature string
	enabled       func(*trainer.MLPolicy) bool
}

// MPI returns the placeholder for mlPolicy.mpi: it fails with *plan.UnsupportedError.
func MPI() Plugin {
	return unsupported{name: "MPI", feature: "mlPolicy.mpi", enabled: func(p *trainer.MLPolicy) bool {
		return p != nil && p.MPI != nil
	}}
}

// Flux returns the placeholder for mlPolicy.flux: it fails with *plan.UnsupportedError.
func Flux() Plugin {
	return unsupported{name: "Flux", feature: "mlPolicy.flux", enabled: func(p *trainer.MLPolicy) bool {
		return p != nil && p.Flux != nil
	}}
}

func (u unsupported) Name() string                     { return u.name }
func (u unsupported) Enabled(p *trainer.MLPolicy) bool { return u.enabled(p) }
func (u unsupported) Apply(_ *trainer.TrainJob, p *plan.Plan) error {
	return &plan.UnsupportedError{Object: p.Runtime.Ref(), Feature: u.feature}
}
