// Package build lists pipeline stages 2–5, the steps that build a TrainJob's plan after
// stage 1 resolved its runtime (merge patches, ML policy, gang scheduling, DRA claims), in
// pipeline order and with their backends. The controller (cmd/trainyard) wraps each in a
// step.Stage; the offline renderer (package render) calls them in a loop. Both get the
// list from here, so they run the same code in the same order.
package build

import (
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/gang"
	"github.com/trainyard/trainyard/pkg/stages/gang/coscheduling"
	"github.com/trainyard/trainyard/pkg/stages/gang/kai"
	"github.com/trainyard/trainyard/pkg/stages/gang/volcano"
	"github.com/trainyard/trainyard/pkg/stages/gang/workload"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

// Step is one plan-building stage.
type Step struct {
	// Name is the stage's name (its queue and metrics label); Index its 1-based position.
	Name  string
	Index int
	Func  step.Func
}

// ServedFunc reports whether the API server serves groupVersion's resources a backend
// creates (e.g. "scheduling.x-k8s.io/v1alpha1"). The controller answers from discovery
// (informers.ServedAPIs.Served), the renderer from its flags; nil means every API is
// served.
type ServedFunc func(groupVersion string) bool

// GangBackends returns the gang-scheduling backends in the order stage 4 tries them,
// each backend that creates objects asking served whether its API exists.
func GangBackends(served ServedFunc) []gang.Backend {
	return []gang.Backend{
		workload.Backend{Served: served},
		kai.Backend{},
		coscheduling.Backend{Served: served},
		volcano.Backend{Served: served},
	}
}

// Options are the settings of the plan-building steps that come from the controller's
// configuration. The controller and the renderer derive them from the same
// Configuration, so they build the same JobSet. The zero value turns every option off.
type Options struct {
	// ProgressURL gives the progress server's URL for a TrainJob's namespace and name
	// (progress.URLFunc). Non-nil turns on the injection of the server's URL, token and
	// CA into trainer containers (mlpolicy.TrainerStatus, KEP-2779); nil (feature gate
	// TrainJobStatus off, or statusServer.bindAddress "0") leaves them out.
	ProgressURL func(namespace, name string) string
	// SecretNames names the create-only Secrets of MPI and Flux (mlpolicy.SecretNames):
	// the controller's from the key it keeps in its namespace; the zero value (an empty
	// key, names anyone can compute) is for offline rendering and tests.
	SecretNames mlpolicy.SecretNames
}

// Plugins returns the ML policies the ML policy stage runs with opts, in order:
// mlpolicy.DefaultPlugins with opts.SecretNames, then mlpolicy.TrainerStatus when
// opts.ProgressURL is set.
// The admission webhook validates with the same list (admission.Deps.Plugins).
func Plugins(opts Options) []mlpolicy.Plugin {
	plugins := mlpolicy.DefaultPlugins(opts.SecretNames)
	if opts.ProgressURL != nil {
		plugins = append(plugins, mlpolicy.TrainerStatus(opts.ProgressURL))
	}
	return plugins
}

// Steps returns stages 2–5 in pipeline order: merge patches, the ML policy with
// Plugins(opts), gang scheduling over backends, and DRA claims.
func Steps(backends []gang.Backend, claims *dra.Claims, opts Options) []Step {
	return []Step{
		{Name: mergepatches.Name, Index: mergepatches.Index, Func: mergepatches.Step()},
		{Name: mlpolicy.Name, Index: mlpolicy.Index, Func: mlpolicy.Step(Plugins(opts))},
		{Name: gang.Name, Index: gang.Index, Func: gang.Step(backends)},
		{Name: dra.Name, Index: dra.Index, Func: claims.Step()},
	}
}
