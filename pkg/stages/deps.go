package stages

import (
	"k8s.io/client-go/tools/events"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/gang"
	"github.com/trainyard/trainyard/pkg/stages/gang/coscheduling"
	"github.com/trainyard/trainyard/pkg/stages/gang/kai"
	"github.com/trainyard/trainyard/pkg/stages/gang/volcano"
	"github.com/trainyard/trainyard/pkg/stages/gang/workload"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/resolveruntime"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
)

// Deps are what the controller's stages are built with. Fields are required unless
// noted.
type Deps struct {
	StepDeps
	// Config is the controller's defaulted configuration (the status stage's refusal
	// settings).
	Config    *configv1alpha1.Configuration
	Informers *informers.Informers
	// JobSetAPI reads what the JobSet cache drops (runtime snapshots) and applies JobSets
	// when ApplyJobSet is nil.
	JobSetAPI   jobsetclient.Interface
	ApplyJobSet status.JobSetApplyFunc
	Objects     status.ObjectApplier
	Plans       *engine.Plans[plan.Plan]
	Status      *statuswriter.Writer
	Recorder    events.EventRecorder
	// Metrics records JobSet creation latency; optional.
	Metrics *metrics.Metrics
	// GangWaiting explains a TrainJob's waiting gang for the status stage; nil reads no
	// gang state.
	GangWaiting func(*trainer.TrainJob) string
}

// StepDeps are what the plan steps are built with: the controller's and the renderer's
// alike, so both build the same JobSet.
type StepDeps struct {
	Options Options
	// GangBackends are the gang-scheduling backends in the order the gang stage tries
	// them (GangBackends).
	GangBackends []gang.Backend
	// Claims is the DRA claims stage; its listers are set once resource.k8s.io/v1 is
	// served.
	Claims *dra.Claims
}

func newResolveRuntime(d Deps, index int) engine.Stage {
	inf := d.Informers
	return &resolveruntime.Stage{Index: index,
		TrainJobs: inf.TrainJobLister, TrainingRuntimes: inf.TrainingRuntimeLister,
		ClusterTrainingRuntimes: inf.ClusterTrainingRuntimeLister,
		JobSets:                 inf.JobSetLister, JobSetAPI: d.JobSetAPI,
		Plans: d.Plans, Status: d.Status, Recorder: d.Recorder,
	}
}

func newStatus(d Deps, index int) engine.Stage {
	rl := d.Config.RateLimit
	return &status.Stage{Index: index,
		TrainJobs: d.Informers.TrainJobLister, JobSets: d.Informers.JobSetLister, JobSetAPI: d.JobSetAPI,
		ApplyJobSet: d.ApplyJobSet, Objects: d.Objects,
		Plans: d.Plans, Status: d.Status, Recorder: d.Recorder, Metrics: d.Metrics,
		Gang:             d.GangWaiting,
		RunPolicy:        resolveruntime.RunPolicyLookup(d.Informers.TrainingRuntimeLister, d.Informers.ClusterTrainingRuntimeLister),
		RefusalThreshold: int(*rl.RefusalThreshold),
		RefusalDelay:     rl.RefusalDelay.Duration,
		Settle:           informers.StatusBatchPeriod,
		SuspendedHold:    status.DefaultSuspendedHold,
	}
}

// ServedFunc reports whether the API server serves groupVersion's resources a backend
// creates (e.g. "scheduling.x-k8s.io/v1alpha1"). The controller answers from discovery
// (informers.ServedAPIs.Served), the renderer from its flags; nil means every API is
// served.
type ServedFunc func(groupVersion string) bool

// GangBackends returns the gang-scheduling backends in the order the gang stage tries
// them, each backend that creates objects asking served whether its API exists.
func GangBackends(served ServedFunc) []gang.Backend {
	return []gang.Backend{
		workload.Backend{Served: served},
		kai.Backend{},
		coscheduling.Backend{Served: served},
		volcano.Backend{Served: served},
	}
}

// Options are the settings of the plan steps that come from the controller's
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
