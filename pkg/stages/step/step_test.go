package step_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	"github.com/trainyard/trainyard/pkg/stages/step"
	"github.com/trainyard/trainyard/pkg/trainjob"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

const (
	stageName  = "ml_policy"
	stageIndex = 3
	// marker is the annotation the test step sets on the JobSet.
	marker = "test.trainyard.dev/step"
)

var key = cache.ObjectName{Namespace: plantest.TrainJobNamespace, Name: plantest.TrainJobName}

// trainJob is the TrainJob every case syncs, at generation 2.
func trainJob() *trainer.TrainJob {
	tj := plantest.TrainJob(plantest.RuntimeName, nil)
	tj.Generation = 2
	return tj
}

// previousPlan is what stage 2 left for trainJob: the merged skeleton runtime.
func previousPlan(t *testing.T) *plan.Plan {
	t.Helper()
	rt := plantest.SkeletonRuntime(nil)
	js, err := mergepatches.Merge(trainJob(), rt)
	if err != nil {
		t.Fatal(err)
	}
	return &plan.Plan{Runtime: rt, JobSet: js, Stage: stageIndex - 1}
}

type fixture struct {
	stage    *step.Stage
	client   *trainerfake.Clientset
	recorder *events.FakeRecorder
	plans    *engine.Plans[plan.Plan]
	cache    cache.Indexer
	calls    int
}

// newFixture builds the stage around fn over a cache and a fake clientset holding tj
// (none when nil).
func newFixture(t *testing.T, tj *trainer.TrainJob, fn step.Func) *fixture {
	t.Helper()
	var objs []runtime.Object
	if tj != nil {
		objs = append(objs, tj)
	}
	f := &fixture{
		client:   trainerfake.NewSimpleClientset(objs...),
		recorder: events.NewFakeRecorder(10),
		plans:    &engine.Plans[plan.Plan]{},
		cache:    utiltesting.Indexer(t, objs...),
	}
	f.stage = &step.Stage{
		StageName: stageName,
		Index:     stageIndex,
		Step: func(ctx context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
			f.calls++
			return fn(ctx, tj, p)
		},
		TrainJobs: trainerlisters.NewTrainJobLister(f.cache),
		Plans:     f.plans,
		Status:    &statuswriter.Writer{Client: f.client},
		Recorder:  f.recorder,
	}
	return f
}

func (f *fixture) conditions(t *testing.T) []metav1.Condition {
	t.Helper()
	tj, err := f.client.TrainerV1alpha1().TrainJobs(key.Namespace).Get(context.Background(), key.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tj.Status.Conditions
}

// annotate is a successful step: it marks the JobSet.
func annotate(_ context.Context, _ *trainer.TrainJob, p *plan.Plan) error {
	if p.JobSet.Annotations == nil {
		p.JobSet.Annotations = map[string]string{}
	}
	p.JobSet.Annotations[marker] = "done"
	return nil
}

// failWith is a step that fails after scribbling on its copy of the plan.
func failWith(err error) step.Func {
	return func(ctx context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
		_ = annotate(ctx, tj, p)
		return err
	}
}

func TestName(t *testing.T) {
	f := newFixture(t, nil, annotate)
	if got := f.stage.Name(); got != stageName {
		t.Errorf("Name() = %q, want %q", got, stageName)
	}
}

// TestSyncStalePlan: a plan that is missing, for another TrainJob generation or UID, or
// not finished by the previous stage sends the key back to stage 1 without running the
// step or writing anything.
func TestSyncStalePlan(t *testing.T) {
	tj := trainJob()
	cases := map[string]struct {
		uid        types.UID
		generation int64
		stage      int // of the stored plan; 0 stores none
	}{
		"no plan":                {},
		"older generation":       {uid: tj.UID, generation: tj.Generation - 1, stage: stageIndex - 1},
		"newer generation":       {uid: tj.UID, generation: tj.Generation + 1, stage: stageIndex - 1},
		"other UID":              {uid: "other", generation: tj.Generation, stage: stageIndex - 1},
		"previous stage not run": {uid: tj.UID, generation: tj.Generation, stage: stageIndex - 2},
		"this stage already ran": {uid: tj.UID, generation: tj.Generation, stage: stageIndex},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t, tj, annotate)
			if tc.stage != 0 {
				p := previousPlan(t)
				p.Stage = tc.stage
				f.plans.Put(key, tc.uid, tc.generation, p)
			}
			got, err := f.stage.Sync(ctx, key)
			if err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if diff := cmp.Diff(engine.Restart(), got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			if f.calls != 0 {
				t.Errorf("step ran %d times on a stale plan", f.calls)
			}
			if w := utiltesting.Writes(f.client.Actions()); len(w) != 0 {
				t.Errorf("writes = %v, want none", w)
			}
		})
	}
}

// TestSyncSkips: a TrainJob that is gone, being deleted or managed elsewhere is dropped,
// and a finished one handed on (to reach the status stage, which keeps its Suspended
// condition current), without running the step or writing; a gone TrainJob's plan is
// freed.
func TestSyncSkips(t *testing.T) {
	finished := trainJob()
	finished.Status.Conditions = []metav1.Condition{utiltesting.Condition(trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs", "boom")}
	deleting := trainJob()
	deleting.DeletionTimestamp = &metav1.Time{}
	multiKueue := trainJob()
	multiKueue.Spec.ManagedBy = ptr.To(trainer.ManagedByMultiKueue)

	cases := map[string]struct {
		trainJob     *trainer.TrainJob
		want         engine.Result
		wantPlanKept bool
	}{
		"not found":        {want: engine.WaitForEvent()},
		"finished":         {trainJob: finished, want: engine.Continue(), wantPlanKept: true},
		"being deleted":    {trainJob: deleting, want: engine.WaitForEvent(), wantPlanKept: true},
		"MultiKueue-owned": {trainJob: multiKueue, want: engine.WaitForEvent(), wantPlanKept: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t, tc.trainJob, annotate)
			tj := trainJob()
			f.plans.Put(key, tj.UID, tj.Generation, previousPlan(t))

			got, err := f.stage.Sync(ctx, key)
			if err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			if f.calls != 0 {
				t.Errorf("step ran %d times", f.calls)
			}
			if w := utiltesting.Writes(f.client.Actions()); len(w) != 0 {
				t.Errorf("writes = %v, want none", w)
			}
			if _, kept := f.plans.Get(key, tj.UID, tj.Generation); kept != tc.wantPlanKept {
				t.Errorf("plan kept = %v, want %v", kept, tc.wantPlanKept)
			}
		})
	}
}

// TestSyncSuccess: the step works on a copy; the copy is stored with Stage = Index and
// the previous stage's plan is left exactly as it was.
func TestSyncSuccess(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tj := trainJob()
	f := newFixture(t, tj, annotate)
	previous := previousPlan(t)
	pristine := previous.DeepCopy()
	f.plans.Put(key, tj.UID, tj.Generation, previous)

	got, err := f.stage.Sync(ctx, key)
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if diff := cmp.Diff(engine.Continue(), got); diff != "" {
		t.Errorf("Sync result (-want +got):\n%s", diff)
	}
	stored, ok := f.plans.Get(key, tj.UID, tj.Generation)
	if !ok {
		t.Fatal("no plan stored")
	}
	if stored == previous {
		t.Error("the stored plan is the previous stage's plan, not a copy")
	}
	want := pristine.DeepCopy()
	want.Stage = stageIndex
	want.JobSet.Annotations[marker] = "done"
	if diff := cmp.Diff(want, stored); diff != "" {
		t.Errorf("stored plan (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(pristine, previous); diff != "" {
		t.Errorf("previous plan was mutated (-want +got):\n%s", diff)
	}
	if w := utiltesting.Writes(f.client.Actions()); len(w) != 0 {
		t.Errorf("writes = %v, want none", w)
	}
	if e := utiltesting.Events(f.recorder); len(e) != 0 {
		t.Errorf("events = %v, want none", e)
	}
}

// TestSyncStepError: bad input becomes JobSetReady=False with an event and is terminal;
// anything else is retried with the error, writing nothing. Either way the stored plan
// stays the previous stage's.
func TestSyncStepError(t *testing.T) {
	invalid := &plan.InvalidInputError{
		Object:  "TrainingRuntime/test-runtime",
		Field:   "spec.template.spec.replicatedJobs[name=node]",
		Message: "container node not found: add it",
	}
	unsupported := &plan.UnsupportedError{Object: "TrainingRuntime/test-runtime", Feature: "mlPolicy.mpi"}
	transient := errors.New("connection refused")
	long := &plan.InvalidInputError{Field: "spec.trainer", Message: strings.Repeat("x", 2000)}
	longTruncated := long.Error()[:950] + " ..."

	cases := map[string]struct {
		err            error
		want           engine.Result
		wantErr        error
		wantConditions []metav1.Condition
		wantEvents     []string
	}{
		"invalid input": {
			err:  invalid,
			want: engine.Terminal(),
			wantConditions: []metav1.Condition{{Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionFalse,
				Reason: trainjob.ReasonInvalidSpec, Message: invalid.Error(), ObservedGeneration: 2}},
			wantEvents: []string{"Warning InvalidTrainJobSpec " + invalid.Error()},
		},
		"wrapped invalid input": {
			err:  fmt.Errorf("building: %w", invalid),
			want: engine.Terminal(),
			wantConditions: []metav1.Condition{{Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionFalse,
				Reason: trainjob.ReasonInvalidSpec, Message: "building: " + invalid.Error(), ObservedGeneration: 2}},
			wantEvents: []string{"Warning InvalidTrainJobSpec building: " + invalid.Error()},
		},
		"unsupported": {
			err:  unsupported,
			want: engine.Terminal(),
			wantConditions: []metav1.Condition{{Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionFalse,
				Reason: trainjob.ReasonUnsupported, Message: "not yet supported by Trainyard: mlPolicy.mpi (runtime TrainingRuntime/test-runtime)", ObservedGeneration: 2}},
			wantEvents: []string{"Warning NotSupported not yet supported by Trainyard: mlPolicy.mpi (runtime TrainingRuntime/test-runtime)"},
		},
		"long message truncated": {
			err:  long,
			want: engine.Terminal(),
			wantConditions: []metav1.Condition{{Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionFalse,
				Reason: trainjob.ReasonInvalidSpec, Message: longTruncated, ObservedGeneration: 2}},
			wantEvents: []string{"Warning InvalidTrainJobSpec " + longTruncated},
		},
		"other error": {
			err:     transient,
			want:    engine.Retry(),
			wantErr: transient,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			tj := trainJob()
			f := newFixture(t, tj, failWith(tc.err))
			previous := previousPlan(t)
			pristine := previous.DeepCopy()
			f.plans.Put(key, tj.UID, tj.Generation, previous)

			got, err := f.stage.Sync(ctx, key)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("Sync error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			var wantWrites []string
			if tc.wantConditions != nil {
				wantWrites = []string{"patch trainjobs/status"}
			}
			if diff := cmp.Diff(wantWrites, utiltesting.Writes(f.client.Actions())); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if diff := utiltesting.ConditionsDiff(tc.wantConditions, f.conditions(t)); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, utiltesting.Events(f.recorder)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			stored, _ := f.plans.Get(key, tj.UID, tj.Generation)
			switch {
			case tc.wantConditions == nil && stored != previous:
				t.Error("a step that will be retried replaced the stored plan")
			case tc.wantConditions != nil && (stored == nil || stored.JobSet != nil || stored.Stage != 0):
				// A rejected generation keeps no partial build in memory, only an empty plan.
				t.Errorf("after a rejection the stored plan is %+v, want an empty plan (stage 0)", stored)
			}
			if diff := cmp.Diff(pristine, previous); diff != "" {
				t.Errorf("a failed step mutated the previous plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSyncRejectOnce: syncing a rejected TrainJob again, once its condition is in the
// cache, neither writes nor repeats the event.
func TestSyncRejectOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tj := trainJob()
	f := newFixture(t, tj, failWith(&plan.InvalidInputError{Field: "spec.trainer", Message: "bad"}))
	f.plans.Put(key, tj.UID, tj.Generation, previousPlan(t))
	if _, err := f.stage.Sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	stored, err := f.client.TrainerV1alpha1().TrainJobs(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cache.Update(stored); err != nil {
		t.Fatal(err)
	}
	utiltesting.Events(f.recorder)
	f.client.ClearActions()

	// The rejection left an empty plan, from which this stage restarts the TrainJob;
	// stage 1 then builds the plan again.
	if got, err := f.stage.Sync(ctx, key); err != nil || got != engine.Restart() {
		t.Errorf("Sync of the plan a rejection left = %v, %v; want restart", got, err)
	}
	f.plans.Put(key, tj.UID, tj.Generation, previousPlan(t))
	got, err := f.stage.Sync(ctx, key)
	if err != nil || got != engine.Terminal() {
		t.Errorf("second Sync = %v, %v; want terminal", got, err)
	}
	if w := utiltesting.Writes(f.client.Actions()); len(w) != 0 {
		t.Errorf("second Sync wrote %v", w)
	}
	if e := utiltesting.Events(f.recorder); len(e) != 0 {
		t.Errorf("second Sync recorded %v", e)
	}
}
