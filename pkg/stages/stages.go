// Package stages is the pipeline's stage table: one ordered list that names each stage,
// selects its configuration and builds it. Everything that lists stages derives from it:
// their 1-based indices (the plan's progress marker), the names of their queues and
// metrics, the worker counts of the configuration file, the stages the controller runs
// and the plan steps `trainyard render` calls (docs/design/architecture.md#stage-table).
//
// Adding a stage is a row of table and the stage's package under pkg/stages/, plus its
// field in the configuration's StagesConfiguration; TestTableMatchesConfiguration fails
// until the three agree.
package stages

import (
	"reflect"
	"strings"

	"k8s.io/client-go/tools/cache"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	configv1alpha1 "github.com/trainyard/trainyard/pkg/apis/config/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/gang"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/resolveruntime"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

// The configuration's types, short for the table's rows.
type (
	stagesConfig = configv1alpha1.StagesConfiguration
	stageConfig  = configv1alpha1.StageConfiguration
)

// table is the pipeline, in order. A row has either Step (a stage that refines the
// plan, run by step.Stage) or New (a stage with a Sync of its own).
var table = []Stage{
	{Name: resolveruntime.Name, Config: func(c *stagesConfig) *stageConfig { return &c.ResolveRuntime },
		New: newResolveRuntime},
	{Name: mergepatches.Name, Config: func(c *stagesConfig) *stageConfig { return &c.MergePatches },
		Step: func(StepDeps) step.Func { return mergepatches.Step() }},
	{Name: mlpolicy.Name, Config: func(c *stagesConfig) *stageConfig { return &c.MLPolicy },
		Step: func(d StepDeps) step.Func { return mlpolicy.Step(Plugins(d.Options)) }},
	{Name: gang.Name, Config: func(c *stagesConfig) *stageConfig { return &c.Gang },
		Step: func(d StepDeps) step.Func { return gang.Step(d.GangBackends) }},
	{Name: dra.Name, Config: func(c *stagesConfig) *stageConfig { return &c.DRAClaims },
		Step: func(d StepDeps) step.Func { return d.Claims.Step() }},
	{Name: status.Name, Config: func(c *stagesConfig) *stageConfig { return &c.Status },
		New: newStatus},
}

// Stage is one row of the stage table.
type Stage struct {
	// Name names the stage's queue, is the "stage" label of its metrics and the key of
	// --stage-workers. It is the stage package's Name constant.
	Name string
	// Config selects the stage's settings in the configuration file's stages.
	Config func(*configv1alpha1.StagesConfiguration) *configv1alpha1.StageConfiguration
	// Step returns the plan step of a stage that refines the plan; nil otherwise.
	Step func(StepDeps) step.Func
	// New builds a stage with a Sync of its own, at its 1-based index; nil for a step.
	New func(deps Deps, index int) engine.Stage
}

// Names returns the stage names in pipeline order.
func Names() []string {
	names := make([]string, len(table))
	for i, s := range table {
		names[i] = s.Name
	}
	return names
}

// Lookup returns the stage named name, and whether there is one.
func Lookup(name string) (Stage, bool) {
	for _, s := range table {
		if s.Name == name {
			return s, true
		}
	}
	return Stage{}, false
}

// All returns the table's rows in pipeline order.
func All() []Stage { return append([]Stage(nil), table...) }

// ConfigField returns the name of s's field under stages in the configuration file,
// e.g. "mlPolicy", or "" when Config selects no field of StagesConfiguration (a bug the
// table's test catches).
func (s Stage) ConfigField() string {
	var cfg configv1alpha1.StagesConfiguration
	selected := s.Config(&cfg)
	v := reflect.ValueOf(&cfg).Elem()
	for i := range v.NumField() {
		if v.Field(i).Addr().Interface() == any(selected) {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return ""
}

// Workers returns each stage's worker count in cfg, for engine.WithWorkers; cfg is
// defaulted, so every count is set.
func Workers(cfg *configv1alpha1.StagesConfiguration) map[string]int {
	workers := make(map[string]int, len(table))
	for _, s := range table {
		workers[s.Name] = int(*s.Config(cfg).Workers)
	}
	return workers
}

// Build returns the table's stages built with deps, in pipeline order, for engine.New.
func Build(deps Deps) []engine.Stage {
	built := make([]engine.Stage, len(table))
	for i, s := range table {
		index := i + 1
		if s.New != nil {
			built[i] = s.New(deps, index)
			continue
		}
		built[i] = &step.Stage{StageName: s.Name, Index: index, Step: s.Step(deps.StepDeps),
			TrainJobs: deps.Informers.TrainJobLister, Plans: deps.Plans, Status: deps.Status, Recorder: deps.Recorder}
	}
	return built
}

// Step is a plan step of the table with its place in the pipeline.
type Step struct {
	// Name is the stage's name; Index its 1-based position.
	Name  string
	Index int
	Func  step.Func
}

// Steps returns the table's plan steps in pipeline order, built with deps: what
// `trainyard render` runs between resolving the runtime and preparing the apply.
func Steps(deps StepDeps) []Step {
	var steps []Step
	for i, s := range table {
		if s.Step != nil {
			steps = append(steps, Step{Name: s.Name, Index: i + 1, Func: s.Step(deps)})
		}
	}
	return steps
}

// Forgetter is a stage that remembers something about a TrainJob beyond its plan. The
// controller calls Forget when the TrainJob is deleted.
type Forgetter interface {
	Forget(key cache.ObjectName)
}

var _ Forgetter = (*status.Stage)(nil)

// JobSetDeleteObserver is a stage that keeps a record of its own JobSet applies until
// the cache shows them. The controller calls JobSetDeleted with every deleted JobSet a
// TrainJob controls, before the deletion is routed (informers.Hooks.JobSetDeleted).
type JobSetDeleteObserver interface {
	JobSetDeleted(js *jobsetv1alpha2.JobSet)
}

var _ JobSetDeleteObserver = (*status.Stage)(nil)
