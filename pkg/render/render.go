// Package render builds, without a cluster, every object the controller would apply for
// a TrainJob: the side objects of the plan (PodGroups, Workloads, ConfigMaps, Secrets)
// and the JobSet, as the status stage sends them. It is `trainyard render`, the
// platform engineer's `helm template` for runtimes, and what the compatibility tests
// build JobSets with.
//
// It runs the controller's own code, not a copy: stage 1's resolveruntime.Resolve over
// listers filled from the inputs, the plan steps of the stage table (stages.Steps) in pipeline order (the
// DRA stage reads ResourceClaimTemplates, ResourceClaims and DeviceClasses from the
// inputs through the same listers the controller's informers feed), and
// status.DesiredOf for the objects the status stage applies (labels, owner references,
// the trainyard.dev/jobset-hash annotation). What discovery would tell the controller
// (which gang-scheduling and DRA APIs the cluster serves) and what its configuration
// says (stages.Options) come from Options.
//
// What it cannot know: the TrainJob's uid (owner references carry the uid of the input,
// usually empty), and the defaults the API server would apply from the CRD schemas
// (fields such as replicatedJobs[].replicas appear as written in the inputs).
package render

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/resolveruntime"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Options say what discovery would report about the cluster.
type Options struct {
	// APIVersions are the group versions the cluster serves, e.g.
	// "scheduling.x-k8s.io/v1alpha1", "resource.k8s.io/v1". Nil means every API is
	// served. Gang backends that create objects (workload, coscheduling, volcano) and the
	// DRA stage ask for theirs, as the controller asks discovery.
	APIVersions []string
	// Build are the plan-building options the controller derives from its
	// configuration (the progress server's URL, injected into trainer containers while
	// feature gate TrainJobStatus is on). The zero value turns them off.
	Build stages.Options
}

// served is the stages.ServedFunc of o: group versions only, as the controller checks.
func (o Options) served(groupVersion string) bool {
	return o.APIVersions == nil || slices.Contains(o.APIVersions, groupVersion)
}

// Result is what the controller would apply for one TrainJob.
type Result struct {
	TrainJob *trainer.TrainJob
	// Origin is where the TrainJob was read, e.g. "trainjob.yaml (document 2)".
	Origin string
	// Plan is the plan stages 1–5 built.
	Plan *plan.Plan
	// Desired is what the status stage applies for Plan, in order: Objects, then JobSet.
	Desired *status.Desired
	// Events are the events the stages recorded while building, as "<type> <reason>:
	// <note>", in order.
	Events []string
	// RunPolicy is the TrainJob's effective deadline and TTL, as the status stage
	// resolves them: its own fields, else its runtime's spec.runPolicy (KEP-2899,
	// docs/compatibility.md#ttl-and-run-policy).
	RunPolicy trainer.RunPolicy
}

// Error is a TrainJob that cannot be rendered: the controller would set a condition
// (JobSetReady=False, RuntimeResolved=False or Failed) or leave it alone.
type Error struct {
	// File is where the object at fault was read; Object names it ("TrainJob
	// default/llm", "ClusterTrainingRuntime torch-distributed").
	File, Object string
	// TrainJob names the TrainJob being rendered when the fault is in another object.
	TrainJob string
	// Err is the cause: a *plan.InvalidInputError or *plan.UnsupportedError from the
	// stages (naming the field), or render's own message.
	Err error
}

func (e *Error) Error() string {
	msg := e.File + ": " + e.Object + ": " + causeText(e.Err)
	if e.TrainJob != "" {
		msg += " (rendering " + e.TrainJob + ")"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// causeText is err's message without the object prefix Error already gives.
func causeText(err error) string {
	var invalid *plan.InvalidInputError
	if errors.As(err, &invalid) {
		return invalid.Field + ": " + invalid.Message
	}
	var unsupported *plan.UnsupportedError
	if errors.As(err, &unsupported) {
		return "not yet supported by Trainyard: " + unsupported.Feature
	}
	return err.Error()
}

// Render renders every TrainJob of in, in input order. It returns all results, or no
// result and every TrainJob's error joined (each an *Error): nothing is half rendered.
// It fails when in holds no TrainJob.
func Render(ctx context.Context, in *Inputs, opts Options) ([]*Result, error) {
	if len(in.TrainJobs) == 0 {
		return nil, errors.New("no TrainJob among the inputs: pass the TrainJob's file with -f")
	}
	r, err := newRenderer(in, opts)
	if err != nil {
		return nil, err
	}
	var (
		results []*Result
		errs    []error
	)
	for _, tj := range in.TrainJobs {
		res, err := r.render(ctx, tj)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		results = append(results, res)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return results, nil
}

// renderer holds the listers over the inputs and the stages built on them.
type renderer struct {
	in       *Inputs
	trs      trainerlisters.TrainingRuntimeLister
	ctrs     trainerlisters.ClusterTrainingRuntimeLister
	steps    []stages.Step
	recorder *noteRecorder
}

func newRenderer(in *Inputs, opts Options) (*renderer, error) {
	r := &renderer{in: in, recorder: &noteRecorder{}}
	trs, err := indexer(in.TrainingRuntimes)
	if err != nil {
		return nil, err
	}
	ctrs, err := indexer(in.ClusterTrainingRuntimes)
	if err != nil {
		return nil, err
	}
	r.trs, r.ctrs = trainerlisters.NewTrainingRuntimeLister(trs), trainerlisters.NewClusterTrainingRuntimeLister(ctrs)

	// As the controller: DRA listers only when resource.k8s.io/v1 is served.
	claims := &dra.Claims{Recorder: r.recorder}
	if opts.served(resourcev1.SchemeGroupVersion.String()) {
		templates, err := indexer(in.ResourceClaimTemplates)
		if err != nil {
			return nil, err
		}
		resourceClaims, err := indexer(in.ResourceClaims)
		if err != nil {
			return nil, err
		}
		classes, err := indexer(in.DeviceClasses)
		if err != nil {
			return nil, err
		}
		claims.SetListers(&dra.Listers{
			Templates:      resourcelisters.NewResourceClaimTemplateLister(templates),
			ResourceClaims: resourcelisters.NewResourceClaimLister(resourceClaims),
			DeviceClasses:  resourcelisters.NewDeviceClassLister(classes),
		})
	}
	r.steps = stages.Steps(stages.StepDeps{Options: opts.Build, GangBackends: stages.GangBackends(opts.served), Claims: claims})
	return r, nil
}

// indexer returns an informer-style indexer (namespace index) holding objs.
func indexer[T runtime.Object](objs []T) (cache.Indexer, error) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			return nil, err
		}
	}
	return idx, nil
}

// render runs stages 1–5 and the status stage's apply preparation for tj.
func (r *renderer) render(ctx context.Context, tj *trainer.TrainJob) (*Result, error) {
	origin := r.in.origin(trainer.TrainJobKind, tj.Namespace, tj.Name)
	self := "TrainJob " + objectName(tj.Namespace, tj.Name)
	fail := func(err error) error { return &Error{File: origin, Object: self, Err: err} }

	// What step.Buildable skips: the controller builds nothing for these.
	switch {
	case !trainjob.IsManaged(tj):
		return nil, fail(fmt.Errorf("spec.managedBy: %s manages this TrainJob, so Trainyard builds nothing for it", *tj.Spec.ManagedBy))
	case trainjob.IsFinished(tj):
		return nil, fail(errors.New("status.conditions: the TrainJob has finished, so Trainyard builds nothing for it"))
	case trainjob.IsSystemNamespace(tj.Namespace): // stage 1 refuses it
		return nil, fail(errors.New("metadata.namespace: " + trainjob.SystemNamespaceMessage(tj.Namespace)))
	}

	rt, err := resolveruntime.Resolve(tj, r.trs, r.ctrs)
	var unsupported *resolveruntime.UnsupportedKindError
	switch {
	case errors.As(err, &unsupported):
		return nil, fail(fmt.Errorf("spec.runtimeRef: %s: name a TrainingRuntime or ClusterTrainingRuntime of apiGroup %s", unsupported.Message, trainer.GroupName))
	case apierrors.IsNotFound(err):
		where := ""
		if rt.Kind == trainer.TrainingRuntimeKind {
			where = fmt.Sprintf(" in namespace %q", tj.Namespace)
		}
		return nil, fail(fmt.Errorf("spec.runtimeRef: %s %q not found among the inputs%s: pass its file with -f", rt.Kind, rt.Name, where))
	case err != nil:
		return nil, fail(err)
	}

	r.recorder.notes = nil
	// The plan as stage 1 leaves it: the runtime resolved, at the stage before the first step.
	p := &plan.Plan{Runtime: rt, Stage: r.steps[0].Index - 1}
	for _, s := range r.steps {
		if err := s.Func(ctx, tj, p); err != nil {
			if !plan.IsInputError(err) {
				return nil, fail(fmt.Errorf("stage %s: %w", s.Name, err))
			}
			return nil, r.blame(tj, origin, self, rt, err)
		}
		p.Stage = s.Index
	}
	desired, err := status.DesiredOf(p)
	if err != nil {
		return nil, fail(err)
	}
	return &Result{TrainJob: tj, Origin: origin, Plan: p, Desired: desired, Events: r.recorder.notes,
		RunPolicy: trainjob.RunPolicy(tj, rt.Spec.RunPolicy)}, nil
}

// blame returns the stages' input error err as an *Error naming the object at fault
// and the file it was read from.
func (r *renderer) blame(tj *trainer.TrainJob, origin, self string, rt plan.Runtime, err error) error {
	object := ""
	var invalid *plan.InvalidInputError
	var unsupported *plan.UnsupportedError
	switch {
	case errors.As(err, &invalid):
		object = invalid.Object
	case errors.As(err, &unsupported):
		object = unsupported.Object
	}
	if object == "" {
		return &Error{File: origin, Object: self, Err: err}
	}
	// "<Kind>/<name>": the runtime, or a DRA object in the TrainJob's namespace.
	kind, name, _ := strings.Cut(object, "/")
	namespace := tj.Namespace
	if kind == trainer.ClusterTrainingRuntimeKind || kind == "DeviceClass" {
		namespace = ""
	}
	file := r.in.origin(kind, namespace, name)
	if file == "" && object == rt.Ref() {
		file = "(runtime)"
	}
	return &Error{File: file, Object: kind + " " + objectName(namespace, name), TrainJob: self + " from " + origin, Err: err}
}

// noteRecorder keeps the events the stages record, for the render output.
type noteRecorder struct{ notes []string }

func (n *noteRecorder) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	n.notes = append(n.notes, eventtype+" "+reason+": "+fmt.Sprintf(note, args...))
}
