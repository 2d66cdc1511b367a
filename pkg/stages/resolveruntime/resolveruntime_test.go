package resolveruntime_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetfake "sigs.k8s.io/jobset/client-go/clientset/versioned/fake"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/resolveruntime"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	"github.com/trainyard/trainyard/pkg/trainjob"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

const (
	ns     = "team-a"
	tjName = "llm"
)

var key = cache.ObjectName{Namespace: ns, Name: tjName}

// fixture is a resolve-runtime stage over directly seeded listers and a fake clientset
// that holds the same TrainJob, so status patches land.
type fixture struct {
	stage     *resolveruntime.Stage
	client    *trainerfake.Clientset
	recorder  *events.FakeRecorder
	trainJobs cache.Indexer
	// trainingRuntimes is the TrainingRuntime cache, for runtimes that appear later.
	trainingRuntimes cache.Indexer
	plans            *engine.Plans[plan.Plan]
	// jobSetAPI holds the JobSets the fixture was given.
	jobSetAPI *jobsetfake.Clientset
}

func newFixture(t *testing.T, tj *trainer.TrainJob, runtimes ...runtime.Object) *fixture {
	return newFixtureWithJobSets(t, tj, nil, runtimes...)
}

// newFixtureWithJobSets also holds jobSets, in the cache trimmed as the informer trims
// them (no snapshot annotation) and whole in the API.
func newFixtureWithJobSets(t *testing.T, tj *trainer.TrainJob, jobSets []*jobsetv1alpha2.JobSet, runtimes ...runtime.Object) *fixture {
	t.Helper()
	var clientObjs, tjObjs, trObjs, ctrObjs []runtime.Object
	if tj != nil {
		clientObjs = append(clientObjs, tj.DeepCopy())
		tjObjs = append(tjObjs, tj.DeepCopy())
	}
	for _, rt := range runtimes {
		switch rt.(type) {
		case *trainer.TrainingRuntime:
			trObjs = append(trObjs, rt)
		case *trainer.ClusterTrainingRuntime:
			ctrObjs = append(ctrObjs, rt)
		default:
			t.Fatalf("not a runtime: %T", rt)
		}
	}
	client := trainerfake.NewSimpleClientset(clientObjs...)
	trainJobs := utiltesting.Indexer(t, tjObjs...)
	trainingRuntimes := utiltesting.Indexer(t, trObjs...)
	recorder := events.NewFakeRecorder(10)
	plans := &engine.Plans[plan.Plan]{}
	var cached, stored []runtime.Object
	for _, js := range jobSets {
		stored = append(stored, js.DeepCopy())
		trimmed, err := informers.TrimJobSet(js.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		cached = append(cached, trimmed.(runtime.Object))
	}
	jobSetAPI := jobsetfake.NewSimpleClientset(stored...)
	return &fixture{
		jobSetAPI: jobSetAPI,
		stage: &resolveruntime.Stage{
			Index:                   1,
			TrainJobs:               trainerlisters.NewTrainJobLister(trainJobs),
			TrainingRuntimes:        trainerlisters.NewTrainingRuntimeLister(trainingRuntimes),
			ClusterTrainingRuntimes: trainerlisters.NewClusterTrainingRuntimeLister(utiltesting.Indexer(t, ctrObjs...)),
			JobSets:                 jobsetlisters.NewJobSetLister(utiltesting.Indexer(t, cached...)),
			JobSetAPI:               jobSetAPI,
			Plans:                   plans,
			Status:                  &statuswriter.Writer{Client: client},
			Recorder:                recorder,
		},
		client:           client,
		recorder:         recorder,
		trainJobs:        trainJobs,
		trainingRuntimes: trainingRuntimes,
		plans:            plans,
	}
}

// storedTrainJob returns the TrainJob as the API (the fake clientset) holds it.
func (f *fixture) storedTrainJob(t *testing.T) *trainer.TrainJob {
	t.Helper()
	tj, err := f.client.TrainerV1alpha1().TrainJobs(ns).Get(context.Background(), tjName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting TrainJob: %v", err)
	}
	return tj
}

// resync makes the informer cache catch up with what the stage wrote.
func (f *fixture) resync(t *testing.T) {
	t.Helper()
	if err := f.trainJobs.Update(f.storedTrainJob(t)); err != nil {
		t.Fatal(err)
	}
}

func TestSync(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := utiltesting.MakeTrainJob(ns, tjName).Generation(3)
	ctr := utiltesting.MakeClusterTrainingRuntime("torch")
	tr := utiltesting.MakeTrainingRuntime(ns, "torch")
	trElsewhere := utiltesting.MakeTrainingRuntime("team-b", "torch")
	stalePlan := &plan.Plan{Runtime: plan.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "old"}, Stage: 5}

	notFoundCTR := `ClusterTrainingRuntime "torch" referenced by spec.runtimeRef not found: create it and the TrainJob proceeds by itself (spec.runtimeRef is immutable: to use another runtime, recreate the TrainJob)`
	notFoundTR := `TrainingRuntime "torch" referenced by spec.runtimeRef not found in namespace "team-a": create it and the TrainJob proceeds by itself (spec.runtimeRef is immutable: to use another runtime, recreate the TrainJob)`
	unsupportedHint := `: spec.runtimeRef must name a TrainingRuntime or ClusterTrainingRuntime of apiGroup trainer.kubeflow.org; runtimeRef is immutable, so recreate the TrainJob`
	completed := utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully")

	// The runtime as a TrainJob first built it, then edited (image) after that build.
	ctrV1 := utiltesting.MakeClusterTrainingRuntime("torch")
	ctrV1.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers = []corev1.Container{{Name: "node", Image: "torch:v1"}}
	ctrV2 := ctrV1.DeepCopy()
	ctrV2.Generation = 2
	ctrV2.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image = "torch:v2"
	snapV1, snapV2 := snapshotOf(t, ctrV1.Kind, ctrV1.ObjectMeta, &ctrV1.Spec), snapshotOf(t, ctrV2.Kind, ctrV2.ObjectMeta, &ctrV2.Spec)
	owner := base.Clone().RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj()
	jobSet := func(snapshot string) *jobsetv1alpha2.JobSet {
		w := utiltesting.MakeJobSet(ns, tjName).ControlledBy(owner).Suspend(true)
		if snapshot != "" {
			w.Annotation(objectkeys.AnnotationRuntimeSnapshot, snapshot)
		}
		return w.Obj()
	}
	// jobSetWithDigest is a JobSet as this version builds it: the snapshot and its digest,
	// which the cache keeps.
	jobSetWithDigest := func(snapshot string) *jobsetv1alpha2.JobSet {
		js := jobSet(snapshot)
		js.Annotations[objectkeys.AnnotationRuntimeSnapshotHash] = plan.SnapshotHash(snapshot)
		return js
	}
	badSnapshot := func(message string) []metav1.Condition {
		return []metav1.Condition{{Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionFalse,
			Reason: trainjob.ReasonInvalidSpec, ObservedGeneration: 3,
			Message: "JobSet/llm metadata.annotations[trainyard.dev/runtime-snapshot]: " + message}}
	}
	waiting := utiltesting.Condition(trainjob.ConditionRuntimeResolved, metav1.ConditionFalse, trainjob.ReasonRuntimeNotFound, notFoundCTR)

	cases := map[string]struct {
		trainJob  *trainer.TrainJob // nil: not in the cache
		runtimes  []runtime.Object
		jobSets   []*jobsetv1alpha2.JobSet
		plan      *plan.Plan // stored for key before Sync
		patchErr  error
		want      engine.Result
		wantErr   bool
		wantWrite []string
		// wantConditions is the TrainJob's status.conditions in the API after Sync.
		wantConditions []metav1.Condition
		wantEvents     []string
		wantPlan       *plan.Plan
		// wantJobSetGets is how many times the stage reads the JobSet from the API (for
		// its snapshot, which the cache does not hold).
		wantJobSetGets int
	}{
		"TrainJob not found: plan dropped": {
			plan: stalePlan,
			want: engine.WaitForEvent(),
		},
		"managed by MultiKueue: untouched": {
			trainJob: base.Clone().ManagedBy(trainer.ManagedByMultiKueue).RuntimeRef("Foo", "torch").Obj(),
			want:     engine.WaitForEvent(),
		},
		"finished: untouched, handed on to the status stage": {
			trainJob:       base.Clone().Condition(completed).Obj(),
			want:           engine.Continue(),
			wantConditions: []metav1.Condition{completed},
		},
		"being deleted: untouched": {
			trainJob: base.Clone().Deleting(now).Obj(),
			want:     engine.WaitForEvent(),
		},
		"unsupported kind: Failed, terminal": {
			trainJob:  base.Clone().RuntimeRef("Foo", "torch").Obj(),
			runtimes:  []runtime.Object{ctr, tr},
			want:      engine.Terminal(),
			wantWrite: []string{"patch trainjobs/status"},
			wantConditions: []metav1.Condition{utiltesting.Condition(trainer.TrainJobFailed, metav1.ConditionTrue,
				trainer.TrainJobRuntimeNotSupportedReason, "unsupported runtime: Foo.trainer.kubeflow.org"+unsupportedHint)},
			wantEvents: []string{"Warning TrainingRuntimeNotSupported unsupported runtime: Foo.trainer.kubeflow.org"},
		},
		"unsupported apiGroup: Failed, terminal": {
			trainJob:  base.Clone().RuntimeRef(trainer.TrainingRuntimeKind, "torch").RuntimeRefGroup("example.com").Obj(),
			runtimes:  []runtime.Object{ctr, tr},
			want:      engine.Terminal(),
			wantWrite: []string{"patch trainjobs/status"},
			wantConditions: []metav1.Condition{utiltesting.Condition(trainer.TrainJobFailed, metav1.ConditionTrue,
				trainer.TrainJobRuntimeNotSupportedReason, "unsupported runtime: TrainingRuntime.example.com"+unsupportedHint)},
			wantEvents: []string{"Warning TrainingRuntimeNotSupported unsupported runtime: TrainingRuntime.example.com"},
		},
		"unsupported status write fails: retried, no event": {
			trainJob: base.Clone().RuntimeRef("Foo", "torch").Obj(),
			patchErr: errors.New("etcd on fire"),
			want:     engine.Retry(),
			wantErr:  true,
			// The fake records the attempt; the reactor fails it.
			wantWrite: []string{"patch trainjobs/status"},
		},
		"ClusterTrainingRuntime missing: RuntimeResolved=False, waits": {
			trainJob:       base.Clone().RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj(),
			runtimes:       []runtime.Object{tr}, // a TrainingRuntime of that name does not count
			want:           engine.WaitForEvent(),
			wantWrite:      []string{"patch trainjobs/status"},
			wantConditions: []metav1.Condition{waiting},
			wantEvents:     []string{"Warning TrainingRuntimeNotFound " + notFoundCTR},
		},
		"TrainingRuntime missing in the TrainJob's namespace: RuntimeResolved=False, waits": {
			trainJob:  base.Clone().RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj(),
			runtimes:  []runtime.Object{trElsewhere, ctr},
			want:      engine.WaitForEvent(),
			wantWrite: []string{"patch trainjobs/status"},
			wantConditions: []metav1.Condition{utiltesting.Condition(trainjob.ConditionRuntimeResolved, metav1.ConditionFalse,
				trainjob.ReasonRuntimeNotFound, notFoundTR)},
			wantEvents: []string{"Warning TrainingRuntimeNotFound " + notFoundTR},
		},
		"missing runtime, status write fails: retried, no event": {
			trainJob:  base.Clone().RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj(),
			patchErr:  errors.New("etcd on fire"),
			want:      engine.Retry(),
			wantErr:   true,
			wantWrite: []string{"patch trainjobs/status"},
		},
		"ClusterTrainingRuntime found (kind and apiGroup defaulted): plan stored, no write": {
			trainJob: base.Clone().RuntimeRef("", "torch").Obj(),
			runtimes: []runtime.Object{ctr, tr},
			want:     engine.Continue(),
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &ctr.Spec,
					Snapshot: snapshotOf(t, ctr.Kind, ctr.ObjectMeta, &ctr.Spec)},
				Stage: 1,
			},
		},
		"JobSet records the runtime: built from the snapshot, not the edited runtime": {
			trainJob: owner,
			runtimes: []runtime.Object{ctrV2},
			jobSets:  []*jobsetv1alpha2.JobSet{jobSet(snapV1)},
			want:     engine.Continue(),
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &ctrV1.Spec, Snapshot: snapV1},
				Stage:   1,
			},
			wantJobSetGets: 1,
		},
		"JobSet records the runtime, runtime deleted since: built from the snapshot, no waiting": {
			trainJob: owner,
			jobSets:  []*jobsetv1alpha2.JobSet{jobSet(snapV1)},
			want:     engine.Continue(),
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &ctrV1.Spec, Snapshot: snapV1},
				Stage:   1,
			},
			wantJobSetGets: 1,
		},
		"snapshot digest is the live runtime's: the live runtime, no read from the API": {
			trainJob: owner,
			runtimes: []runtime.Object{ctrV1},
			jobSets:  []*jobsetv1alpha2.JobSet{jobSetWithDigest(snapV1)},
			want:     engine.Continue(),
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &ctrV1.Spec, Snapshot: snapV1},
				Stage:   1,
			},
		},
		"runtime edited since the snapshot its digest names: the snapshot, read from the API": {
			trainJob: owner,
			runtimes: []runtime.Object{ctrV2},
			jobSets:  []*jobsetv1alpha2.JobSet{jobSetWithDigest(snapV1)},
			want:     engine.Continue(),
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &ctrV1.Spec, Snapshot: snapV1},
				Stage:   1,
			},
			wantJobSetGets: 1,
		},
		"runtime deleted since the snapshot its digest names: the snapshot, read from the API": {
			trainJob: owner,
			jobSets:  []*jobsetv1alpha2.JobSet{jobSetWithDigest(snapV1)},
			want:     engine.Continue(),
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &ctrV1.Spec, Snapshot: snapV1},
				Stage:   1,
			},
			wantJobSetGets: 1,
		},
		"JobSet from before snapshots: the live runtime, recorded from now on": {
			trainJob: owner,
			runtimes: []runtime.Object{ctrV2},
			jobSets:  []*jobsetv1alpha2.JobSet{jobSet("")},
			want:     engine.Continue(),
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &ctrV2.Spec, Snapshot: snapV2},
				Stage:   1,
			},
			wantJobSetGets: 1,
		},
		"someone else's JobSet: its annotation is ignored, the live runtime": {
			trainJob: owner,
			runtimes: []runtime.Object{ctrV2},
			jobSets:  []*jobsetv1alpha2.JobSet{utiltesting.MakeJobSet(ns, tjName).Annotation(objectkeys.AnnotationRuntimeSnapshot, snapV1).Obj()},
			want:     engine.Continue(),
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &ctrV2.Spec, Snapshot: snapV2},
				Stage:   1,
			},
		},
		"corrupt snapshot: JobSetReady=False naming the annotation, terminal": {
			plan:           stalePlan,
			wantPlan:       &plan.Plan{}, // the build of the rejected generation is dropped
			trainJob:       owner,
			runtimes:       []runtime.Object{ctrV2},
			jobSets:        []*jobsetv1alpha2.JobSet{jobSet("{")},
			want:           engine.Terminal(),
			wantWrite:      []string{"patch trainjobs/status"},
			wantConditions: badSnapshot("not a runtime snapshot: unexpected end of JSON input; restore the annotation's value"),
			wantEvents:     []string{"Warning " + trainjob.ReasonInvalidSpec + " JobSet/llm metadata.annotations[trainyard.dev/runtime-snapshot]: not a runtime snapshot: unexpected end of JSON input; restore the annotation's value"},
			wantJobSetGets: 1,
		},
		"snapshot of another runtime: JobSetReady=False, terminal": {
			wantPlan:  &plan.Plan{}, // the rejected generation keeps no build
			trainJob:  owner,
			runtimes:  []runtime.Object{ctrV2},
			jobSets:   []*jobsetv1alpha2.JobSet{jobSet(snapshotOf(t, trainer.TrainingRuntimeKind, tr.ObjectMeta, &tr.Spec))},
			want:      engine.Terminal(),
			wantWrite: []string{"patch trainjobs/status"},
			wantConditions: badSnapshot("the snapshot records trainer.kubeflow.org/v1alpha1 TrainingRuntime/torch but spec.runtimeRef names " +
				"ClusterTrainingRuntime/torch; restore the annotation's value"),
			wantEvents: []string{"Warning " + trainjob.ReasonInvalidSpec + " JobSet/llm metadata.annotations[trainyard.dev/runtime-snapshot]: the snapshot records trainer.kubeflow.org/v1alpha1 TrainingRuntime/torch but spec.runtimeRef names " +
				"ClusterTrainingRuntime/torch; restore the annotation's value"},
			wantJobSetGets: 1,
		},
		"TrainingRuntime found: plan stored, replacing a stale one": {
			trainJob: base.Clone().RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj(),
			runtimes: []runtime.Object{ctr, tr},
			plan:     stalePlan,
			want:     engine.Continue(),
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "torch", Spec: &tr.Spec,
					Snapshot: snapshotOf(t, tr.Kind, tr.ObjectMeta, &tr.Spec)},
				Stage: 1,
			},
		},
		"runtime appeared: RuntimeResolved flipped to True, plan stored": {
			trainJob:  base.Clone().RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Condition(waiting).Obj(),
			runtimes:  []runtime.Object{ctr},
			want:      engine.Continue(),
			wantWrite: []string{"patch trainjobs/status"},
			wantConditions: []metav1.Condition{utiltesting.Condition(trainjob.ConditionRuntimeResolved, metav1.ConditionTrue,
				trainjob.ReasonRuntimeFound, `ClusterTrainingRuntime "torch" found`)},
			wantPlan: &plan.Plan{
				Runtime: plan.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &ctr.Spec,
					Snapshot: snapshotOf(t, ctr.Kind, ctr.ObjectMeta, &ctr.Spec)},
				Stage: 1,
			},
		},
		"runtime appeared but the status write fails: retried, no plan": {
			trainJob:  base.Clone().RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Condition(waiting).Obj(),
			runtimes:  []runtime.Object{ctr},
			patchErr:  errors.New("etcd on fire"),
			want:      engine.Retry(),
			wantErr:   true,
			wantWrite: []string{"patch trainjobs/status"},
			// Unchanged in the API.
			wantConditions: []metav1.Condition{waiting},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixtureWithJobSets(t, tc.trainJob, tc.jobSets, tc.runtimes...)
			uid, gen := base.Obj().UID, base.Obj().Generation
			if tc.plan != nil {
				f.plans.Put(key, uid, gen, tc.plan)
			}
			if tc.patchErr != nil {
				f.client.PrependReactor("patch", "trainjobs", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.patchErr
				})
			}

			got, err := f.stage.Sync(ctx, key)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Sync error = %v, want error: %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWrite, utiltesting.Writes(f.client.Actions())); diff != "" {
				t.Errorf("API writes (-want +got):\n%s", diff)
			}
			if w := utiltesting.Writes(f.jobSetAPI.Actions()); len(w) != 0 {
				t.Errorf("JobSet writes %v, want none (the stage only reads)", w)
			}
			gets := 0
			for _, a := range f.jobSetAPI.Actions() {
				if a.GetVerb() == "get" {
					gets++
				}
			}
			if gets != tc.wantJobSetGets {
				t.Errorf("JobSet reads from the API = %d, want %d", gets, tc.wantJobSetGets)
			}
			if diff := cmp.Diff(tc.wantEvents, utiltesting.Events(f.recorder)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tc.trainJob != nil {
				if diff := utiltesting.ConditionsDiff(tc.wantConditions, f.storedTrainJob(t).Status.Conditions); diff != "" {
					t.Errorf("TrainJob conditions (-want +got):\n%s", diff)
				}
			}
			gotPlan, _ := f.plans.Get(key, uid, gen)
			if diff := cmp.Diff(tc.wantPlan, gotPlan, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("stored plan (-want +got):\n%s", diff)
			}
			if tc.trainJob == nil && f.plans.Len() != 0 {
				t.Errorf("plans left for a deleted TrainJob: %d", f.plans.Len())
			}
		})
	}
}

// snapshotOf is the snapshot annotation value for a runtime.
func snapshotOf(t *testing.T, kind string, meta metav1.ObjectMeta, spec *trainer.TrainingRuntimeSpec) string {
	t.Helper()
	s, err := plan.EncodeSnapshot(plan.Runtime{Kind: kind, Name: meta.Name, Spec: spec}, meta)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSyncWritesConditionOnce: a TrainJob synced again after its condition reached the
// cache costs no API write and repeats no event.
func TestSyncWritesConditionOnce(t *testing.T) {
	base := utiltesting.MakeTrainJob(ns, tjName)
	cases := map[string]struct {
		trainJob   *trainer.TrainJob
		wantFirst  engine.Result
		wantSecond engine.Result
	}{
		"unsupported runtime": {
			trainJob:  base.Clone().RuntimeRef("Foo", "torch").Obj(),
			wantFirst: engine.Terminal(),
			// Failed=True now: finished TrainJobs are left alone, handed on to the
			// status stage only.
			wantSecond: engine.Continue(),
		},
		"missing ClusterTrainingRuntime": {
			trainJob:   base.Clone().RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj(),
			wantFirst:  engine.WaitForEvent(),
			wantSecond: engine.WaitForEvent(),
		},
		"missing TrainingRuntime": {
			trainJob:   base.Clone().RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj(),
			wantFirst:  engine.WaitForEvent(),
			wantSecond: engine.WaitForEvent(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(t, tc.trainJob)

			got, err := f.stage.Sync(ctx, key)
			if err != nil {
				t.Fatalf("first Sync: %v", err)
			}
			if diff := cmp.Diff(tc.wantFirst, got); diff != "" {
				t.Errorf("first Sync result (-want +got):\n%s", diff)
			}
			if n := len(utiltesting.Writes(f.client.Actions())); n != 1 {
				t.Fatalf("first Sync made %d writes, want 1", n)
			}
			if n := len(utiltesting.Events(f.recorder)); n != 1 {
				t.Fatalf("first Sync recorded %d events, want 1", n)
			}

			f.resync(t)
			f.client.ClearActions()
			got, err = f.stage.Sync(ctx, key)
			if err != nil {
				t.Fatalf("second Sync: %v", err)
			}
			if diff := cmp.Diff(tc.wantSecond, got); diff != "" {
				t.Errorf("second Sync result (-want +got):\n%s", diff)
			}
			if w := utiltesting.Writes(f.client.Actions()); len(w) != 0 {
				t.Errorf("second Sync wrote %v, want nothing", w)
			}
			if e := utiltesting.Events(f.recorder); len(e) != 0 {
				t.Errorf("second Sync recorded %v, want nothing", e)
			}
		})
	}
}

// TestSyncRuntimeAppears walks a waiting TrainJob through its runtime's creation:
// RuntimeResolved=False and WaitForEvent, then True with a plan and Continue.
func TestSyncRuntimeAppears(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tj := utiltesting.MakeTrainJob(ns, tjName).RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj()
	f := newFixture(t, tj)

	if got, err := f.stage.Sync(ctx, key); err != nil || got != engine.WaitForEvent() {
		t.Fatalf("Sync without runtime = %v, %v; want wait_for_event", got, err)
	}
	if c := f.storedTrainJob(t).Status.Conditions; len(c) != 1 || c[0].Status != metav1.ConditionFalse {
		t.Fatalf("conditions while waiting = %v, want RuntimeResolved=False", c)
	}
	f.resync(t)
	rt := utiltesting.MakeTrainingRuntime(ns, "torch")
	if err := f.trainingRuntimes.Add(rt); err != nil {
		t.Fatal(err)
	}

	got, err := f.stage.Sync(ctx, key)
	if err != nil || got != engine.Continue() {
		t.Fatalf("Sync with runtime = %v, %v; want continue", got, err)
	}
	want := []metav1.Condition{utiltesting.Condition(trainjob.ConditionRuntimeResolved, metav1.ConditionTrue,
		trainjob.ReasonRuntimeFound, `TrainingRuntime "torch" found`)}
	if diff := utiltesting.ConditionsDiff(want, f.storedTrainJob(t).Status.Conditions); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	p, ok := f.plans.Get(key, tj.UID, tj.Generation)
	if !ok || p.Stage != 1 || p.Runtime.Spec != &rt.Spec {
		t.Errorf("plan = %+v, %v; want stage 1 holding the cached runtime's spec", p, ok)
	}
	if w := utiltesting.Writes(f.client.Actions()); len(w) != 2 {
		t.Errorf("writes = %v, want two status patches (False, then True)", w)
	}
}

// TestSyncRefusesSystemNamespaces: a TrainJob in kube-system, kube-public or
// kube-node-lease, whose runtime exists, gets JobSetReady=False naming the namespace
// and the fix, one event, and no plan: nothing is built, so the status stage writes no
// JobSet, ConfigMap or Secret there. A TrainJob of the same spec elsewhere goes on.
func TestSyncRefusesSystemNamespaces(t *testing.T) {
	ctr := utiltesting.MakeClusterTrainingRuntime("torch")
	for _, namespace := range []string{"kube-system", "kube-public", "kube-node-lease"} {
		t.Run(namespace, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			tj := utiltesting.MakeTrainJob(namespace, tjName).Generation(2).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj()
			f := newFixture(t, tj, ctr)
			k := cache.ObjectName{Namespace: namespace, Name: tjName}
			got, err := f.stage.Sync(ctx, k)
			if err != nil || got != engine.Terminal() {
				t.Fatalf("Sync = %+v, %v; want Terminal, nil", got, err)
			}
			stored, err := f.client.TrainerV1alpha1().TrainJobs(namespace).Get(ctx, tjName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := []metav1.Condition{{Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionFalse, Reason: trainjob.ReasonInvalidSpec, ObservedGeneration: 2,
				Message: `metadata.namespace: the TrainJob is in namespace "` + namespace + `", one of the cluster's system namespaces (kube-system, kube-public, kube-node-lease), ` +
					`where Trainyard creates no JobSet, ConfigMap or Secret: delete it and create it in another namespace`}}
			if diff := cmp.Diff(want, stored.Status.Conditions, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if e := utiltesting.Events(f.recorder); len(e) != 1 || !strings.Contains(e[0], namespace) {
				t.Errorf("events %v, want one naming %s", e, namespace)
			}
			if p, ok := f.plans.Get(k, tj.UID, tj.Generation); ok && p.Stage != 0 {
				t.Errorf("a plan that reached stage %d, want none built", p.Stage)
			}
		})
	}
	// The same TrainJob in an ordinary namespace is built.
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(t, utiltesting.MakeTrainJob(ns, tjName).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj(), ctr)
	if got, err := f.stage.Sync(ctx, key); err != nil || got != engine.Continue() {
		t.Errorf("Sync in %s = %+v, %v; want Continue", ns, got, err)
	}
}

// TestSyncResolvesAWaitTheCacheHasNotShownYet: the runtime appears before the cache
// shows the TrainJob's RuntimeResolved=False (its creation event can outrun the status
// write's). The stage must still turn the condition True: deciding from the cache's
// TrainJob, which has no RuntimeResolved yet, it wrote nothing, and the False stayed on
// the TrainJob for good — every later status write builds on it.
func TestSyncResolvesAWaitTheCacheHasNotShownYet(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tj := utiltesting.MakeTrainJob(ns, tjName).RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj()
	tj.ResourceVersion = "10"
	f := newFixture(t, tj)
	// The API server's resourceVersions: each status write makes a newer one.
	rv := 10
	f.client.PrependReactor("patch", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := clienttesting.ObjectReaction(f.client.Tracker())(a)
		if err != nil || obj == nil {
			return handled, obj, err
		}
		rv++
		written := obj.(*trainer.TrainJob).DeepCopy()
		written.ResourceVersion = strconv.Itoa(rv)
		return handled, written, f.client.Tracker().Update(trainer.Resource("trainjobs").WithVersion("v1alpha1"), written, ns)
	})

	if got, err := f.stage.Sync(ctx, key); err != nil || got != engine.WaitForEvent() {
		t.Fatalf("Sync without runtime = %v, %v; want wait_for_event", got, err)
	}
	// No resync: the cache still holds the TrainJob without conditions.
	if err := f.trainingRuntimes.Add(utiltesting.MakeTrainingRuntime(ns, "torch")); err != nil {
		t.Fatal(err)
	}
	if got, err := f.stage.Sync(ctx, key); err != nil || got != engine.Continue() {
		t.Fatalf("Sync with runtime = %v, %v; want continue", got, err)
	}
	want := []metav1.Condition{utiltesting.Condition(trainjob.ConditionRuntimeResolved, metav1.ConditionTrue,
		trainjob.ReasonRuntimeFound, `TrainingRuntime "torch" found`)}
	if diff := utiltesting.ConditionsDiff(want, f.storedTrainJob(t).Status.Conditions); diff != "" {
		t.Errorf("conditions once the runtime appeared (-want +got):\n%s", diff)
	}
}
