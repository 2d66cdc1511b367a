package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetfake "sigs.k8s.io/jobset/client-go/clientset/versioned/fake"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	"github.com/trainyard/trainyard/pkg/trainjob"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

const (
	ns     = "team-a"
	tjName = "llm"
)

// statusIndex is the status stage's 1-based place in the pipeline, as the stage table
// sets it: the stage applies plans that reached statusIndex-1.
const statusIndex = 6

var (
	key = cache.ObjectName{Namespace: ns, Name: tjName}
	// t0 is every TrainJob's creation time.
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

// makeTrainJob returns the TrainJob the cases sync: created at t0, generation 1.
func makeTrainJob() *utiltesting.TrainJobWrapper {
	return utiltesting.MakeTrainJob(ns, tjName).RuntimeRef(trainer.TrainingRuntimeKind, plantest.RuntimeName).Created(t0)
}

// makeJobSet returns the TrainJob's JobSet as the informer cache holds it.
func makeJobSet(tj *trainer.TrainJob) *utiltesting.JobSetWrapper {
	return utiltesting.MakeJobSet(ns, tjName).ControlledBy(tj)
}

// desiredPlan is the plan stages 1-5 leave for tj: the skeleton runtime merged, at
// stage 5.
func desiredPlan(t *testing.T, tj *trainer.TrainJob) *plan.Plan {
	t.Helper()
	rt := plantest.SkeletonRuntime(nil)
	js, err := mergepatches.Merge(tj, rt)
	if err != nil {
		t.Fatal(err)
	}
	return &plan.Plan{Runtime: rt, JobSet: js, Stage: statusIndex - 1}
}

type fixture struct {
	stage    *status.Stage
	trainer  *trainerfake.Clientset
	jobsets  *jobsetfake.Clientset
	recorder *events.FakeRecorder
	plans    *engine.Plans[plan.Plan]
	clock    *testingclock.FakePassiveClock
	tjCache  cache.Indexer
	jsCache  cache.Indexer
}

// newFixture returns a status stage whose caches and fake clientsets hold tj and js
// (nil: absent), with the clock at t0+1s.
func newFixture(t *testing.T, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) *fixture {
	t.Helper()
	var tjs, jss []runtime.Object
	if tj != nil {
		tjs = append(tjs, tj.DeepCopy())
	}
	if js != nil {
		jss = append(jss, js.DeepCopy())
	}
	f := &fixture{
		trainer:  trainerfake.NewSimpleClientset(tjs...),
		jobsets:  jobsetfake.NewSimpleClientset(jss...),
		recorder: events.NewFakeRecorder(10),
		plans:    &engine.Plans[plan.Plan]{},
		clock:    testingclock.NewFakePassiveClock(t0.Add(time.Second)),
		tjCache:  utiltesting.Indexer(t, tjs...),
		jsCache:  utiltesting.Indexer(t, jss...),
	}
	// The fake's server-side apply knows no JobSet schema: answer applies with the
	// applied object (the stage reads JobSets from the cache only).
	f.jobsets.PrependReactor("patch", "jobsets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		js := &jobsetv1alpha2.JobSet{}
		return true, js, json.Unmarshal(p.GetPatch(), js)
	})
	f.stage = &status.Stage{
		Index:     statusIndex,
		TrainJobs: trainerlisters.NewTrainJobLister(f.tjCache),
		JobSets:   jobsetlisters.NewJobSetLister(f.jsCache),
		JobSetAPI: f.jobsets,
		Plans:     f.plans,
		Status:    &statuswriter.Writer{Client: f.trainer},
		Recorder:  f.recorder,
		Clock:     f.clock,
	}
	return f
}

func (f *fixture) storedTrainJob(t *testing.T) *trainer.TrainJob {
	t.Helper()
	tj, err := f.trainer.TrainerV1alpha1().TrainJobs(ns).Get(context.Background(), tjName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tj
}

// jobSetApplies returns the server-side apply patches sent for JobSets.
func (f *fixture) jobSetApplies() []clienttesting.PatchActionImpl {
	var out []clienttesting.PatchActionImpl
	for _, a := range f.jobsets.Actions() {
		if p, ok := a.(clienttesting.PatchActionImpl); ok {
			out = append(out, p)
		}
	}
	return out
}

func (f *fixture) sync(t *testing.T) (engine.Result, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	return f.stage.Sync(ctx, key)
}

// appliedHash returns the hash annotation a JobSet apply carried.
func appliedHash(t *testing.T, p clienttesting.PatchActionImpl) string {
	t.Helper()
	var js jobsetv1alpha2.JobSet
	if err := json.Unmarshal(p.Patch, &js); err != nil {
		t.Fatalf("decoding apply body: %v", err)
	}
	return js.Annotations[status.AnnotationJobSetHash]
}

// hashOf returns the hash the stage stamps on the JobSet it applies for tj's plan.
func hashOf(t *testing.T, tj *trainer.TrainJob) string {
	t.Helper()
	f := newFixture(t, tj, nil)
	f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	applies := f.jobSetApplies()
	if len(applies) != 1 {
		t.Fatalf("got %d applies, want 1", len(applies))
	}
	return appliedHash(t, applies[0])
}

func TestName(t *testing.T) {
	if got := (&status.Stage{}).Name(); got != "status" {
		t.Errorf("Name() = %q, want status", got)
	}
}

// TestSyncCreatesJobSet: with a finished plan and no JobSet, the stage server-side applies
// the desired JobSet once, under the trainyard field manager with force, stamped with
// its hash, without status; records no event (upstream records only failures); and
// frees the plan.
func TestSyncCreatesJobSet(t *testing.T) {
	tj := makeTrainJob().Obj()
	f := newFixture(t, tj, nil)
	p := desiredPlan(t, tj)
	f.plans.Put(key, tj.UID, tj.Generation, p)

	got, err := f.sync(t)
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
		t.Errorf("Sync result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"patch jobsets"}, utiltesting.Writes(f.jobsets.Actions())); diff != "" {
		t.Fatalf("JobSet writes (-want +got):\n%s", diff)
	}
	apply := f.jobSetApplies()[0]
	if apply.GetPatchType() != types.ApplyPatchType {
		t.Errorf("patch type = %q, want %q", apply.GetPatchType(), types.ApplyPatchType)
	}
	if diff := cmp.Diff(metav1.PatchOptions{FieldManager: "trainyard", Force: ptr.To(true)}, apply.PatchOptions); diff != "" {
		t.Errorf("patch options (-want +got):\n%s", diff)
	}
	if apply.GetName() != tjName || apply.GetNamespace() != ns {
		t.Errorf("applied %s/%s, want %s/%s", apply.GetNamespace(), apply.GetName(), ns, tjName)
	}

	var body map[string]any
	if err := json.Unmarshal(apply.Patch, &body); err != nil {
		t.Fatal(err)
	}
	if _, ok := body["status"]; ok {
		t.Errorf("apply body carries status: %s", apply.Patch)
	}
	if _, ok := body["metadata"].(map[string]any)["creationTimestamp"]; ok {
		t.Errorf("apply body carries metadata.creationTimestamp: %s", apply.Patch)
	}
	if body["apiVersion"] != "jobset.x-k8s.io/v1alpha2" || body["kind"] != "JobSet" {
		t.Errorf("apply body apiVersion/kind = %v/%v", body["apiVersion"], body["kind"])
	}
	var applied jobsetv1alpha2.JobSet
	if err := json.Unmarshal(apply.Patch, &applied); err != nil {
		t.Fatal(err)
	}
	hash := applied.Annotations[status.AnnotationJobSetHash]
	if len(hash) != 32 {
		t.Errorf("hash annotation = %q, want 32 hex digits", hash)
	}
	want := p.JobSet.DeepCopy()
	want.Annotations[status.AnnotationJobSetHash] = hash
	if diff := cmp.Diff(want, &applied); diff != "" {
		t.Errorf("applied JobSet (-want +got):\n%s", diff)
	}
	wantOwner := []metav1.OwnerReference{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: tjName,
		UID: tj.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	if diff := cmp.Diff(wantOwner, applied.OwnerReferences); diff != "" {
		t.Errorf("owner references (-want +got):\n%s", diff)
	}
	if p.JobSet.Annotations[status.AnnotationJobSetHash] != "" {
		t.Error("the stage stamped the hash on the stored plan's JobSet")
	}

	if e := utiltesting.Events(f.recorder); len(e) != 0 {
		t.Errorf("events = %v, want none", e)
	}
	if _, ok := f.plans.Get(key, tj.UID, tj.Generation); ok {
		t.Error("plan still stored after the apply")
	}
	// Nothing to say in status yet: the JobSet is not in the cache.
	if w := utiltesting.Writes(f.trainer.Actions()); len(w) != 0 {
		t.Errorf("TrainJob writes = %v, want none", w)
	}
}

// TestSyncAppliesOnce: the same desired JobSet is not applied again, whether the stage
// remembers its own apply or the cached JobSet carries the same hash.
func TestSyncAppliesOnce(t *testing.T) {
	t.Run("remembered after apply", func(t *testing.T) {
		tj := makeTrainJob().Obj()
		f := newFixture(t, tj, nil)
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		if _, err := f.sync(t); err != nil {
			t.Fatal(err)
		}
		// The cache has not caught up; stages 1-5 rebuilt the same plan meanwhile.
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		got, err := f.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
			t.Errorf("second Sync (-want +got):\n%s", diff)
		}
		if n := len(f.jobSetApplies()); n != 1 {
			t.Errorf("%d applies, want 1", n)
		}
		if e := utiltesting.Events(f.recorder); len(e) != 0 {
			t.Errorf("events = %v, want none", e)
		}
	})
	t.Run("forgotten TrainJob applies again", func(t *testing.T) {
		tj := makeTrainJob().Obj()
		f := newFixture(t, tj, nil)
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		if _, err := f.sync(t); err != nil {
			t.Fatal(err)
		}
		f.stage.Forget(key)
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		if _, err := f.sync(t); err != nil {
			t.Fatal(err)
		}
		if n := len(f.jobSetApplies()); n != 2 {
			t.Errorf("%d applies, want 2", n)
		}
	})
	t.Run("same hash in the cache", func(t *testing.T) {
		tj := makeTrainJob().Suspend(true).Obj()
		js := makeJobSet(tj).Suspend(true).Annotation(status.AnnotationJobSetHash, hashOf(t, tj)).Obj()
		f := newFixture(t, tj, js)
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		if _, err := f.sync(t); err != nil {
			t.Fatal(err)
		}
		if n := len(f.jobSetApplies()); n != 0 {
			t.Errorf("%d applies, want 0", n)
		}
	})
}

// TestSyncGate: a running JobSet is never modified; a suspended TrainJob's JobSet follows
// the plan; the resume transition applies once more. The plan is freed either way.
func TestSyncGate(t *testing.T) {
	cases := map[string]struct {
		tjSuspend, jsSuspend bool
		wantApply            bool
	}{
		"running JobSet, plan changed: frozen":                {tjSuspend: false, jsSuspend: false, wantApply: false},
		"suspended TrainJob, plan changed: applied":           {tjSuspend: true, jsSuspend: true, wantApply: true},
		"suspending a running TrainJob: applied":              {tjSuspend: true, jsSuspend: false, wantApply: true},
		"resume: TrainJob running, JobSet suspended: applied": {tjSuspend: false, jsSuspend: true, wantApply: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := makeTrainJob().Suspend(tc.tjSuspend).Obj()
			js := makeJobSet(tj).Suspend(tc.jsSuspend).Annotation(status.AnnotationJobSetHash, "stale").Obj()
			f := newFixture(t, tj, js)
			f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))

			if _, err := f.sync(t); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			applies := f.jobSetApplies()
			if got := len(applies) == 1; got != tc.wantApply || len(applies) > 1 {
				t.Fatalf("%d applies, want apply: %v", len(applies), tc.wantApply)
			}
			if tc.wantApply {
				var applied jobsetv1alpha2.JobSet
				if err := json.Unmarshal(applies[0].Patch, &applied); err != nil {
					t.Fatal(err)
				}
				if got := ptr.Deref(applied.Spec.Suspend, !tc.tjSuspend); got != tc.tjSuspend {
					t.Errorf("applied spec.suspend = %v, want the TrainJob's %v", got, tc.tjSuspend)
				}
				if h := applied.Annotations[status.AnnotationJobSetHash]; h == "stale" || h == "" {
					t.Errorf("applied hash = %q, want a fresh one", h)
				}
			}
			// Updates of an existing JobSet are no creations.
			for _, e := range utiltesting.Events(f.recorder) {
				t.Errorf("unexpected event %q", e)
			}
			if _, ok := f.plans.Get(key, tj.UID, tj.Generation); ok {
				t.Error("plan still stored")
			}
		})
	}
}

// TestSyncGateBeforeTheCacheCatchesUp: a TrainJob suspended and resumed in quick
// succession (Kueue preempting, then admitting again): the stage applies the suspended
// JobSet, then syncs the resume while the cache still shows the JobSet running as it was
// before. The JobSet is suspended (this process just applied it), so the resume is
// applied; judged by the stale cache, it was dropped and the JobSet stayed suspended
// (issue 18).
func TestSyncGateBeforeTheCacheCatchesUp(t *testing.T) {
	running := makeTrainJob().Generation(1).Suspend(false).Obj()
	cached := makeJobSet(running).Suspend(false).Annotation(status.AnnotationJobSetHash, hashOf(t, running)).Obj()
	suspended := makeTrainJob().Generation(2).Suspend(true).Obj()
	f := newFixture(t, suspended, cached)
	f.plans.Put(key, suspended.UID, suspended.Generation, desiredPlan(t, suspended))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if n := len(f.jobSetApplies()); n != 1 {
		t.Fatalf("suspending: %d applies, want 1", n)
	}

	resumed := makeTrainJob().Generation(3).Suspend(false).Obj()
	if err := f.tjCache.Update(resumed); err != nil {
		t.Fatal(err)
	}
	f.plans.Put(key, resumed.UID, resumed.Generation, desiredPlan(t, resumed))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	applies := f.jobSetApplies()
	if len(applies) != 2 {
		t.Fatalf("resuming with the cache still showing the JobSet running: %d applies in all, want 2", len(applies))
	}
	var applied jobsetv1alpha2.JobSet
	if err := json.Unmarshal(applies[1].Patch, &applied); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(applied.Spec.Suspend, true) {
		t.Error("the resume applied a suspended JobSet")
	}

	// Once the cache shows this process's last apply, the cache decides again: a
	// running JobSet is not modified.
	last := cached.DeepCopy()
	last.Annotations[status.AnnotationJobSetHash] = appliedHash(t, applies[1])
	if err := f.jsCache.Update(last); err != nil {
		t.Fatal(err)
	}
	edited := makeTrainJob().Generation(4).Suspend(false).Obj()
	if err := f.tjCache.Update(edited); err != nil {
		t.Fatal(err)
	}
	p := desiredPlan(t, edited)
	p.JobSet.Labels = map[string]string{"edited": "true"}
	f.plans.Put(key, edited.UID, edited.Generation, p)
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if n := len(f.jobSetApplies()); n != 2 {
		t.Errorf("editing a running JobSet: %d applies in all, want still 2", n)
	}
}

// TestSyncStatusOfTheTrainJobAfterTheApply: Kueue writes its runtime patch (generation
// 2) and unsuspends (generation 3) milliseconds apart, while the pass of generation 2
// applies the JobSet. That pass writes the status of the TrainJob the cache holds after
// the apply — resumed — and generation 3's pass, which resumes the JobSet, writes no
// status: one status patch for Kueue's two writes, not one each (the first would only
// move the Suspended condition's observedGeneration to 2).
func TestSyncStatusOfTheTrainJobAfterTheApply(t *testing.T) {
	queued := makeTrainJob().Generation(1).Suspend(true).Obj()
	suspended := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, trainer.TrainJobSuspendedMessage)
	suspended.ObservedGeneration = 1
	patched := makeTrainJob().Generation(2).Suspend(true).Condition(suspended).Obj()
	unsuspended := makeTrainJob().Generation(3).Suspend(false).Condition(suspended).Obj()
	js := makeJobSet(queued).Suspend(true).Annotation(status.AnnotationJobSetHash, hashOf(t, queued)).Obj()
	f := newFixture(t, patched, js)
	f.plans.Put(key, patched.UID, patched.Generation, desiredPlan(t, patched))
	// Kueue's unsuspend lands, and reaches the cache, while generation 2's JobSet is
	// being applied.
	landed := false
	f.jobsets.PrependReactor("patch", "jobsets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if landed {
			return false, nil, nil
		}
		landed = true
		if err := f.trainer.Tracker().Update(trainer.SchemeGroupVersion.WithResource("trainjobs"), unsuspended.DeepCopy(), ns); err != nil {
			t.Error(err)
		}
		if err := f.tjCache.Update(unsuspended.DeepCopy()); err != nil {
			t.Error(err)
		}
		return false, nil, nil
	})
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if got := findCondition(f.storedTrainJob(t).Status.Conditions, trainer.TrainJobSuspended); got != nil {
		t.Fatalf("after generation 2's apply, Suspended = %+v; want none (the TrainJob the cache holds, generation 3, is resumed)", got)
	}

	// Generation 3's pass: the cache shows the status write; the JobSet is resumed.
	if err := f.tjCache.Update(f.storedTrainJob(t)); err != nil {
		t.Fatal(err)
	}
	f.plans.Put(key, unsuspended.UID, unsuspended.Generation, desiredPlan(t, unsuspended))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if n := len(f.jobSetApplies()); n != 2 {
		t.Errorf("%d JobSet applies, want 2 (Kueue's patch, the resume)", n)
	}
	if diff := cmp.Diff([]string{"patch trainjobs/status"}, utiltesting.Writes(f.trainer.Actions())); diff != "" {
		t.Errorf("TrainJob writes (-want +got):\n%s", diff)
	}
}

// TestSyncSettlesAfterAnApply: the status of a pass that applied the JobSet waits
// Settle for the JobSet controller's answer, and is written with it in one patch: a
// TrainJob Kueue resumed loses its Suspended condition and gets its Job's first pods in
// one status write instead of the resume (with the Job still counted suspended), then
// the counts. A status
// carrying what only the applying pass knows (the plan's conditions) is written at once.
func TestSyncSettlesAfterAnApply(t *testing.T) {
	suspendedCond := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, trainer.TrainJobSuspendedMessage)
	suspendedCond.ObservedGeneration = 2
	queued := makeTrainJob().Generation(2).Suspend(true).Condition(suspendedCond).Obj()
	queued.Status.JobsStatus = []trainer.JobStatus{{Name: "node", Ready: ptr.To[int32](0), Succeeded: ptr.To[int32](0),
		Failed: ptr.To[int32](0), Active: ptr.To[int32](0), Suspended: ptr.To[int32](1)}}
	resumed := queued.DeepCopy()
	resumed.Generation, resumed.Spec.Suspend = 3, ptr.To(false)
	js := makeJobSet(queued).Suspend(true).Annotation(status.AnnotationJobSetHash, hashOf(t, queued)).
		ReplicatedJobStatus("node", 0, 0, 0, 0, 1).Obj()
	f := newFixture(t, resumed, js)
	f.stage.Settle = time.Second
	f.plans.Put(key, resumed.UID, resumed.Generation, desiredPlan(t, resumed))
	got, err := f.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(engine.RequeueAfter(time.Second), got); diff != "" {
		t.Errorf("the resuming pass (-want +got):\n%s", diff)
	}
	if n := len(f.jobSetApplies()); n != 1 {
		t.Fatalf("%d JobSet applies, want 1", n)
	}
	if w := utiltesting.Writes(f.trainer.Actions()); len(w) != 0 {
		t.Fatalf("the resuming pass wrote %v, want nothing yet", w)
	}

	// The JobSet controller answered: the Job resumed, its pods created.
	running := makeJobSet(resumed).Suspend(false).Annotation(status.AnnotationJobSetHash, appliedHash(t, f.jobSetApplies()[0])).
		ReplicatedJobStatus("node", 0, 0, 0, 1, 0).Obj()
	if err := f.jsCache.Update(running); err != nil {
		t.Fatal(err)
	}
	if got, err = f.sync(t); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
		t.Errorf("the settled sync (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"patch trainjobs/status"}, utiltesting.Writes(f.trainer.Actions())); diff != "" {
		t.Errorf("TrainJob writes (-want +got):\n%s", diff)
	}
	stored := f.storedTrainJob(t)
	if c := findCondition(stored.Status.Conditions, trainer.TrainJobSuspended); c != nil {
		t.Errorf("Suspended = %+v, want none: a resume removes it", c)
	}
	if len(stored.Status.JobsStatus) != 1 || ptr.Deref(stored.Status.JobsStatus[0].Active, 0) != 1 {
		t.Errorf("jobsStatus = %+v, want the Job active", stored.Status.JobsStatus)
	}

	t.Run("plan conditions are written at once", func(t *testing.T) {
		f := newFixture(t, queued, nil)
		f.stage.Settle = time.Second
		p := desiredPlan(t, queued)
		p.Conditions = []metav1.Condition{utiltesting.Condition("ProcsPerNodeDerived", metav1.ConditionTrue, "Derived", "from the GPU count")}
		f.plans.Put(key, queued.UID, queued.Generation, p)
		if got, err := f.sync(t); err != nil || got != engine.WaitForEvent() {
			t.Fatalf("Sync = %v, %v; want WaitForEvent", got, err)
		}
		if diff := cmp.Diff([]string{"patch trainjobs/status"}, utiltesting.Writes(f.trainer.Actions())); diff != "" {
			t.Errorf("TrainJob writes (-want +got):\n%s", diff)
		}
		if c := findCondition(f.storedTrainJob(t).Status.Conditions, "ProcsPerNodeDerived"); c == nil {
			t.Error("the plan's condition was not written")
		}
	})
}

// TestSyncForeignJobSet: a JobSet of the TrainJob's name that the TrainJob does not
// control is never applied over; the TrainJob says why.
func TestSyncForeignJobSet(t *testing.T) {
	tj := makeTrainJob().Obj()
	other := makeTrainJob().UID("other-uid").Obj()
	cases := map[string]*jobsetv1alpha2.JobSet{
		"no owner":                        utiltesting.MakeJobSet(ns, tjName).Obj(),
		"controlled by an older TrainJob": makeJobSet(other).Obj(),
		"owned but not controlled":        utiltesting.MakeJobSet(ns, tjName).OwnerReference(metav1.OwnerReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: tjName, UID: tj.UID}).Obj(),
	}
	message := `a JobSet named "llm" already exists in namespace "team-a" and is not controlled by this TrainJob: delete or rename that JobSet, or recreate the TrainJob under another name`
	for name, js := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tj, js)
			f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))

			got, err := f.sync(t)
			if err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			if w := utiltesting.Writes(f.jobsets.Actions()); len(w) != 0 {
				t.Errorf("JobSet writes = %v, want none", w)
			}
			want := []metav1.Condition{{Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionFalse,
				Reason: "JobSetConflict", Message: message, ObservedGeneration: 1}}
			if diff := utiltesting.ConditionsDiff(want, f.storedTrainJob(t).Status.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"Warning JobSetConflict " + message}, utiltesting.Events(f.recorder)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSyncApplyError: a failed apply is retried with the error and a Warning event, and
// the plan is kept for the retry.
func TestSyncApplyError(t *testing.T) {
	tj := makeTrainJob().Obj()
	f := newFixture(t, tj, nil)
	f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
	boom := errors.New("admission webhook denied")
	f.jobsets.PrependReactor("patch", "jobsets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, boom
	})

	got, err := f.sync(t)
	if !errors.Is(err, boom) {
		t.Errorf("Sync error = %v, want %v", err, boom)
	}
	if diff := cmp.Diff(engine.Retry(), got); diff != "" {
		t.Errorf("Sync result (-want +got):\n%s", diff)
	}
	want := []string{"Warning TrainJobResourcesCreationFailed TrainJob resources reconciliation failed: applying JobSet team-a/llm: admission webhook denied"}
	if diff := cmp.Diff(want, utiltesting.Events(f.recorder)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if _, ok := f.plans.Get(key, tj.UID, tj.Generation); !ok {
		t.Error("plan dropped after a failed apply")
	}
	// Not remembered as applied: the retry applies again.
	f.jobsets.ReactionChain = f.jobsets.ReactionChain[1:]
	if _, err := f.sync(t); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := len(f.jobSetApplies()); n != 2 {
		t.Errorf("%d apply attempts, want 2", n)
	}
}

// TestSyncHealsRejection: a TrainJob rejected earlier (JobSetReady=False) gets
// JobSetReady=True once a JobSet is applied.
func TestSyncHealsRejection(t *testing.T) {
	tj := makeTrainJob().Condition(utiltesting.Condition(trainjob.ConditionJobSetReady, metav1.ConditionFalse,
		trainjob.ReasonInvalidSpec, "bad")).Obj()
	f := newFixture(t, tj, nil)
	f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	want := []metav1.Condition{{Type: trainjob.ConditionJobSetReady, Status: metav1.ConditionTrue,
		Reason: trainjob.ReasonJobSetBuilt, Message: "JobSet built from the TrainJob and its runtime", ObservedGeneration: 1}}
	if diff := utiltesting.ConditionsDiff(want, f.storedTrainJob(t).Status.Conditions); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
}

// TestSyncStatus maps the cached JobSet onto TrainJob status
// (docs/compatibility.md#status-from-the-jobset) with one status patch when something
// changed and none otherwise.
func TestSyncStatus(t *testing.T) {
	base := makeTrainJob()
	tj := base.Obj()
	completedJS := utiltesting.Condition(string(jobsetv1alpha2.JobSetCompleted), metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully")
	failedJS := utiltesting.Condition(string(jobsetv1alpha2.JobSetFailed), metav1.ConditionTrue, "FailedJobs", "jobset failed")
	complete := utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully")
	failed := utiltesting.Condition(trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs", "jobset failed")
	deadline := utiltesting.Condition(trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobDeadlineExceededReason, trainer.TrainJobDeadlineExceededMessage)
	suspended := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, "Suspended", "TrainJob is suspended")
	resumed := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionFalse, "Resumed", "TrainJob is resumed")
	gen := func(c metav1.Condition) metav1.Condition { c.ObservedGeneration = 1; return c }

	cases := map[string]struct {
		trainJob       *trainer.TrainJob
		jobSet         *jobsetv1alpha2.JobSet
		wantConditions []metav1.Condition
		wantJobs       []trainer.JobStatus
		wantWrite      bool
	}{
		"JobSet completed: Complete=True with its reason and message": {
			trainJob:       tj,
			jobSet:         makeJobSet(tj).Condition(completedJS).Obj(),
			wantConditions: []metav1.Condition{gen(complete)},
			wantWrite:      true,
		},
		"JobSet failed: Failed=True with its reason and message": {
			trainJob:       tj,
			jobSet:         makeJobSet(tj).Condition(failedJS).Obj(),
			wantConditions: []metav1.Condition{gen(failed)},
			wantWrite:      true,
		},
		"JobSet condition not True: not mirrored": {
			trainJob: tj,
			jobSet: makeJobSet(tj).Condition(utiltesting.Condition(string(jobsetv1alpha2.JobSetCompleted), metav1.ConditionFalse, "Running", "")).
				Condition(utiltesting.Condition(string(jobsetv1alpha2.JobSetSuspended), metav1.ConditionTrue, "Suspended", "")).Obj(),
		},
		"replicatedJobsStatus mapped 1:1 in order, zeros kept": {
			trainJob: tj,
			jobSet:   makeJobSet(tj).ReplicatedJobStatus("node", 2, 0, 1, 3, 0).ReplicatedJobStatus("dataset-initializer", 0, 1, 0, 0, 0).Obj(),
			wantJobs: []trainer.JobStatus{
				utiltesting.JobStatus("node", 2, 0, 1, 3, 0),
				utiltesting.JobStatus("dataset-initializer", 0, 1, 0, 0, 0),
			},
			wantWrite: true,
		},
		"replicatedJobsStatus all zero (Jobs created, no pod yet): nothing to write": {
			trainJob: tj,
			jobSet:   makeJobSet(tj).ReplicatedJobStatus("node", 0, 0, 0, 0, 0).ReplicatedJobStatus("dataset-initializer", 0, 0, 0, 0, 0).Obj(),
		},
		"suspended: Suspended=True": {
			trainJob:       base.Clone().Suspend(true).Obj(),
			jobSet:         makeJobSet(tj).Suspend(true).Obj(),
			wantConditions: []metav1.Condition{gen(suspended)},
			wantWrite:      true,
		},
		// Not upstream's Suspended=False/Resumed: the SDK reports Running only without
		// conditions (kubeflow/sdk #803).
		"resumed: the Suspended condition goes": {
			trainJob:  base.Clone().Suspend(false).Condition(suspended).Obj(),
			jobSet:    makeJobSet(tj).Suspend(false).Obj(),
			wantWrite: true,
		},
		"running with upstream's Suspended=False: it goes": {
			trainJob:  base.Clone().Suspend(false).Condition(resumed).Obj(),
			jobSet:    makeJobSet(tj).Suspend(false).Obj(),
			wantWrite: true,
		},
		"finished with upstream's Suspended=False: kept, nothing to write": {
			trainJob:       base.Clone().Suspend(false).Condition(resumed).Condition(complete).Obj(),
			wantConditions: []metav1.Condition{resumed, complete},
		},
		"resumed after it finished: the Suspended condition goes": {
			trainJob:       base.Clone().Suspend(false).Condition(suspended).Condition(complete).Obj(),
			wantConditions: []metav1.Condition{complete},
			wantWrite:      true,
		},
		"never suspended: no Suspended condition, nothing to write": {
			trainJob: base.Clone().Suspend(false).Obj(),
			jobSet:   makeJobSet(tj).Obj(),
		},
		"already up to date: no write": {
			trainJob:       base.Clone().Condition(gen(complete)).JobsStatus(utiltesting.JobStatus("node", 0, 1, 0, 0, 0)).Obj(),
			jobSet:         makeJobSet(tj).Condition(completedJS).ReplicatedJobStatus("node", 0, 1, 0, 0, 0).Obj(),
			wantConditions: []metav1.Condition{gen(complete)},
			wantJobs:       []trainer.JobStatus{utiltesting.JobStatus("node", 0, 1, 0, 0, 0)},
		},
		"Complete never cleared by a JobSet that lost it": {
			trainJob:       base.Clone().Condition(complete).Obj(),
			jobSet:         makeJobSet(tj).Obj(),
			wantConditions: []metav1.Condition{complete},
		},
		"DeadlineExceeded never overwritten by the JobSet's failure": {
			trainJob:       base.Clone().Condition(deadline).Obj(),
			jobSet:         makeJobSet(tj).Condition(failedJS).Obj(),
			wantConditions: []metav1.Condition{deadline},
		},
		"finished TrainJob keeps its status when the JobSet is gone": {
			trainJob:       base.Clone().Condition(complete).JobsStatus(utiltesting.JobStatus("node", 0, 1, 0, 0, 0)).Obj(),
			wantConditions: []metav1.Condition{complete},
			wantJobs:       []trainer.JobStatus{utiltesting.JobStatus("node", 0, 1, 0, 0, 0)},
		},
		"suspended finished TrainJob still reports Suspended": {
			trainJob:       base.Clone().Suspend(true).Condition(failed).Obj(),
			wantConditions: []metav1.Condition{failed, gen(suspended)},
			wantWrite:      true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.trainJob, tc.jobSet)
			got, err := f.sync(t)
			if err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			var wantWrites []string
			if tc.wantWrite {
				wantWrites = []string{"patch trainjobs/status"}
			}
			if diff := cmp.Diff(wantWrites, utiltesting.Writes(f.trainer.Actions())); diff != "" {
				t.Errorf("TrainJob writes (-want +got):\n%s", diff)
			}
			if w := utiltesting.Writes(f.jobsets.Actions()); len(w) != 0 {
				t.Errorf("JobSet writes = %v, want none", w)
			}
			stored := f.storedTrainJob(t)
			if diff := utiltesting.ConditionsDiff(tc.wantConditions, stored.Status.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantJobs, stored.Status.JobsStatus); diff != "" {
				t.Errorf("jobsStatus (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSyncMirrorsTransitionTime: a mirrored terminal condition carries the JobSet's
// lastTransitionTime, not the sync time.
func TestSyncMirrorsTransitionTime(t *testing.T) {
	tj := makeTrainJob().Obj()
	finishedAt := metav1.NewTime(t0.Add(time.Hour).Truncate(time.Second))
	c := utiltesting.Condition(string(jobsetv1alpha2.JobSetCompleted), metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully")
	c.LastTransitionTime = finishedAt
	f := newFixture(t, tj, makeJobSet(tj).Condition(c).Obj())
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	got := f.storedTrainJob(t).Status.Conditions
	if len(got) != 1 || !got[0].LastTransitionTime.Equal(&finishedAt) {
		t.Errorf("conditions = %v, want Complete at %v", got, finishedAt)
	}
}

// TestSyncDeadline covers activeDeadlineSeconds (docs/compatibility.md#active-deadline)
// on the stage's clock.
func TestSyncDeadline(t *testing.T) {
	base := makeTrainJob().ActiveDeadlineSeconds(60)
	resumedAt := t0.Add(100 * time.Second)
	resumed := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionFalse, "Resumed", "TrainJob is resumed")
	resumed.LastTransitionTime = metav1.NewTime(resumedAt)
	resumed.ObservedGeneration = 1
	queued := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, trainer.TrainJobSuspendedMessage)
	queued.LastTransitionTime = metav1.NewTime(t0)

	cases := map[string]struct {
		trainJob      *trainer.TrainJob
		now           time.Time
		want          engine.Result
		wantExceeded  bool
		wantJobSetDel bool
	}{
		"elapsed: Failed=DeadlineExceeded and the JobSet deleted": {
			trainJob:      base.Clone().Obj(),
			now:           t0.Add(61 * time.Second),
			want:          engine.WaitForEvent(),
			wantExceeded:  true,
			wantJobSetDel: true,
		},
		"not yet: requeued at the deadline": {
			trainJob: base.Clone().Obj(),
			now:      t0.Add(20 * time.Second),
			want:     engine.RequeueAfter(40 * time.Second),
		},
		"almost: requeued after at least a second": {
			trainJob: base.Clone().Obj(),
			now:      t0.Add(59*time.Second + 500*time.Millisecond),
			want:     engine.RequeueAfter(time.Second),
		},
		"suspended: no deadline": {
			trainJob: base.Clone().Suspend(true).Obj(),
			now:      t0.Add(time.Hour),
			want:     engine.WaitForEvent(),
		},
		"resumed: the clock restarts at the resume": {
			trainJob: base.Clone().Suspend(false).Condition(resumed).Obj(),
			now:      resumedAt.Add(30 * time.Second),
			want:     engine.RequeueAfter(30 * time.Second),
		},
		"resumed by this pass after a queue longer than the deadline: the clock starts now": {
			trainJob: base.Clone().Suspend(false).Condition(queued).Obj(),
			now:      t0.Add(time.Hour),
			want:     engine.RequeueAfter(60 * time.Second),
		},
		"resumed long ago: elapsed": {
			trainJob:      base.Clone().Suspend(false).Condition(resumed).Obj(),
			now:           resumedAt.Add(61 * time.Second),
			want:          engine.WaitForEvent(),
			wantExceeded:  true,
			wantJobSetDel: true,
		},
		"no activeDeadlineSeconds": {
			trainJob: makeTrainJob().Obj(),
			now:      t0.Add(24 * time.Hour),
			want:     engine.WaitForEvent(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.trainJob, makeJobSet(tc.trainJob).Suspend(false).Obj())
			f.clock.SetTime(tc.now)

			got, err := f.sync(t)
			if err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			var wantJobSetWrites []string
			if tc.wantJobSetDel {
				wantJobSetWrites = []string{"delete jobsets"}
			}
			if diff := cmp.Diff(wantJobSetWrites, utiltesting.Writes(f.jobsets.Actions())); diff != "" {
				t.Errorf("JobSet writes (-want +got):\n%s", diff)
			}
			failed := findCondition(f.storedTrainJob(t).Status.Conditions, trainer.TrainJobFailed)
			if !tc.wantExceeded {
				if failed != nil {
					t.Errorf("unexpected Failed condition %+v", failed)
				}
				return
			}
			want := &metav1.Condition{Type: trainer.TrainJobFailed, Status: metav1.ConditionTrue,
				Reason: "DeadlineExceeded", Message: "TrainJob exceeded its active deadline",
				ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(tc.now)}
			if diff := cmp.Diff(want, failed); diff != "" {
				t.Errorf("Failed condition (-want +got):\n%s", diff)
			}
		})
	}
}

func findCondition(conds []metav1.Condition, condType string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == condType {
			return &conds[i]
		}
	}
	return nil
}

// TestSyncWithoutJobSet: an unfinished TrainJob with neither JobSet nor plan restarts
// from stage 1; a deleted TrainJob's plan is dropped. Neither writes.
func TestSyncWithoutJobSet(t *testing.T) {
	t.Run("unfinished, no JobSet, no plan: restart", func(t *testing.T) {
		tj := makeTrainJob().Obj()
		f := newFixture(t, tj, nil)
		got, err := f.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(engine.Restart(), got); diff != "" {
			t.Errorf("Sync result (-want +got):\n%s", diff)
		}
		if w := append(utiltesting.Writes(f.trainer.Actions()), utiltesting.Writes(f.jobsets.Actions())...); len(w) != 0 {
			t.Errorf("writes = %v, want none", w)
		}
	})
	t.Run("unfinished, plan of an older generation: restart", func(t *testing.T) {
		tj := makeTrainJob().Generation(2).Obj()
		f := newFixture(t, tj, nil)
		f.plans.Put(key, tj.UID, 1, desiredPlan(t, tj))
		got, err := f.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(engine.Restart(), got); diff != "" {
			t.Errorf("Sync result (-want +got):\n%s", diff)
		}
		if n := len(f.jobSetApplies()); n != 0 {
			t.Errorf("%d applies of a stale plan", n)
		}
	})
	t.Run("JobSet deleted before the cache ever showed it: re-created once the record expires", func(t *testing.T) {
		tj := makeTrainJob().Obj()
		f := newFixture(t, tj, nil)
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		if _, err := f.sync(t); err != nil {
			t.Fatal(err)
		}
		// The cache still shows no JobSet: within the record's lifetime that is the
		// cache lagging, and a rebuilt plan applies nothing.
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		if _, err := f.sync(t); err != nil {
			t.Fatal(err)
		}
		if n := len(f.jobSetApplies()); n != 1 {
			t.Fatalf("%d applies while the cache may lag, want 1", n)
		}
		// Minutes later it is not: the JobSet is gone, and the next build re-creates it.
		f.clock.SetTime(f.clock.Now().Add(3 * time.Minute))
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		if _, err := f.sync(t); err != nil {
			t.Fatal(err)
		}
		if n := len(f.jobSetApplies()); n != 2 {
			t.Errorf("%d applies after the record expired, want 2 (re-created)", n)
		}
	})
	t.Run("TrainJob deleted: plan dropped", func(t *testing.T) {
		tj := makeTrainJob().Obj()
		f := newFixture(t, nil, nil)
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		got, err := f.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
			t.Errorf("Sync result (-want +got):\n%s", diff)
		}
		if f.plans.Len() != 0 {
			t.Error("plan kept for a deleted TrainJob")
		}
	})
	t.Run("finished TrainJob is never re-applied", func(t *testing.T) {
		tj := makeTrainJob().Condition(utiltesting.Condition(trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs", "x")).Obj()
		f := newFixture(t, tj, nil)
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		got, err := f.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
			t.Errorf("Sync result (-want +got):\n%s", diff)
		}
		if w := append(utiltesting.Writes(f.trainer.Actions()), utiltesting.Writes(f.jobsets.Actions())...); len(w) != 0 {
			t.Errorf("writes = %v, want none", w)
		}
	})
	t.Run("MultiKueue-managed: untouched", func(t *testing.T) {
		tj := makeTrainJob().ManagedBy(trainer.ManagedByMultiKueue).Suspend(true).Obj()
		f := newFixture(t, tj, nil)
		f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
		if _, err := f.sync(t); err != nil {
			t.Fatal(err)
		}
		if w := append(utiltesting.Writes(f.trainer.Actions()), utiltesting.Writes(f.jobsets.Actions())...); len(w) != 0 {
			t.Errorf("writes = %v, want none", w)
		}
	})
}

// TestSyncRecreatesDeletedJobSet: once the cache has shown the applied JobSet, a JobSet
// deleted behind the controller's back (the TrainJob unfinished) is applied again after
// the restart rebuilds the plan, as upstream re-creates it on its next reconcile.
func TestSyncRecreatesDeletedJobSet(t *testing.T) {
	tj := makeTrainJob().Obj()
	f := newFixture(t, tj, nil)
	f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	applies := f.jobSetApplies()
	if len(applies) != 1 {
		t.Fatalf("%d applies, want 1", len(applies))
	}

	// The cache catches up with the apply; the JobSet's add event syncs status.
	js := makeJobSet(tj).Suspend(false).Annotation(status.AnnotationJobSetHash, appliedHash(t, applies[0])).Obj()
	if err := f.jsCache.Add(js); err != nil {
		t.Fatal(err)
	}
	if got, err := f.sync(t); err != nil || got != engine.WaitForEvent() {
		t.Fatalf("Sync with the JobSet cached = %v, %v; want wait_for_event", got, err)
	}

	// Someone deletes the JobSet: its delete event syncs status, which restarts.
	if err := f.jsCache.Delete(js); err != nil {
		t.Fatal(err)
	}
	got, err := f.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(engine.Restart(), got); diff != "" {
		t.Fatalf("Sync after the deletion (-want +got):\n%s", diff)
	}
	// Stages 1-5 rebuild the same plan.
	f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if n := len(f.jobSetApplies()); n != 2 {
		t.Errorf("%d applies, want 2: the deleted JobSet was not re-created", n)
	}
}

// TestSyncRecreatesAJobSetDeletedBeforeAnySyncSawIt: a JobSet created and deleted
// (by a user, or the garbage collector) before any sync of its TrainJob found it in the
// cache is re-created. Its add and delete events both reached the cache before the
// status worker ran, so no sync dropped the record of the apply, and the gate took the
// record for a running JobSet (TestConvergence caught it: a TrainJob left without a
// JobSet until the record expired).
func TestSyncRecreatesAJobSetDeletedBeforeAnySyncSawIt(t *testing.T) {
	for _, tc := range []struct {
		name        string
		deletedHash func(applied string) string
		wantApplies int
	}{
		// The deleted JobSet carries the apply's hash: the cache showed the apply.
		{name: "the deleted JobSet is the apply", deletedHash: func(h string) string { return h }, wantApplies: 2},
		// A deleted JobSet with another hash is older than the apply (which came after
		// the deletion and created a JobSet whose add event is still to come): the
		// record holds, and nothing is applied twice.
		{name: "the deleted JobSet predates the apply", deletedHash: func(string) string { return "older" }, wantApplies: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := makeTrainJob().Suspend(false).Obj()
			f := newFixture(t, tj, nil)
			f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
			if _, err := f.sync(t); err != nil {
				t.Fatal(err)
			}
			applies := f.jobSetApplies()
			if len(applies) != 1 {
				t.Fatalf("%d applies, want 1", len(applies))
			}

			// The JobSet's add and delete events reach the cache (which ends without
			// it) before the next sync; the delete handler reports the JobSet as the
			// cache last held it.
			deleted := makeJobSet(tj).Suspend(false).Annotation(status.AnnotationJobSetHash, tc.deletedHash(appliedHash(t, applies[0]))).Obj()
			f.stage.JobSetDeleted(deleted)
			if got, err := f.sync(t); err != nil || got != engine.Restart() {
				t.Fatalf("Sync after the deletion = %v, %v; want restart (no JobSet, no plan)", got, err)
			}
			f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
			if _, err := f.sync(t); err != nil {
				t.Fatal(err)
			}
			if n := len(f.jobSetApplies()); n != tc.wantApplies {
				t.Errorf("%d applies, want %d", n, tc.wantApplies)
			}
		})
	}
}

// TestSyncNeverAppliesAnOlderGeneration: a JobSet built from a newer TrainJob
// generation than the cache's TrainJob (a new leader's TrainJob cache behind the old
// leader's last apply) is not overwritten with the older spec, even while the gate
// allows an apply (suspended); once the cache shows the newer generation, its plan is
// applied.
func TestSyncNeverAppliesAnOlderGeneration(t *testing.T) {
	stale := makeTrainJob().Generation(2).Suspend(true).Obj()
	js := makeJobSet(stale).Suspend(true).Annotation(objectkeys.AnnotationTrainJobGeneration, "3").
		Annotation(status.AnnotationJobSetHash, "built-from-3").Obj()
	f := newFixture(t, stale, js)
	f.plans.Put(key, stale.UID, stale.Generation, desiredPlan(t, stale))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if n := len(f.jobSetApplies()); n != 0 {
		t.Fatalf("%d applies of generation 2 over a JobSet built from 3, want 0", n)
	}

	fresh := stale.DeepCopy()
	fresh.Generation = 4
	if err := f.tjCache.Update(fresh); err != nil {
		t.Fatal(err)
	}
	f.plans.Put(key, fresh.UID, fresh.Generation, desiredPlan(t, fresh))
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if n := len(f.jobSetApplies()); n != 1 {
		t.Errorf("%d applies of generation 4, want 1", n)
	}
}

// TestSyncGivesNoJobSetPastTheDeadline: a TrainJob past its active deadline gets no
// JobSet, even with a plan and no JobSet: after a pass deleted the JobSet at the
// deadline and its status write failed, the retry writes Failed and does not create
// the JobSet again (seen on a real node: its pods ran on after the TrainJob failed).
func TestSyncGivesNoJobSetPastTheDeadline(t *testing.T) {
	tj := makeTrainJob().ActiveDeadlineSeconds(60).Obj()
	f := newFixture(t, tj, nil)
	f.clock.SetTime(t0.Add(61 * time.Second))
	f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
	got, err := f.sync(t)
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
		t.Errorf("Sync result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"delete jobsets"}, utiltesting.Writes(f.jobsets.Actions())); diff != "" {
		t.Errorf("JobSet writes (-want +got):\n%s", diff)
	}
	if c := findCondition(f.storedTrainJob(t).Status.Conditions, trainer.TrainJobFailed); c == nil || c.Reason != trainer.TrainJobDeadlineExceededReason {
		t.Errorf("Failed condition %+v, want reason %s", c, trainer.TrainJobDeadlineExceededReason)
	}
}

// TestSyncTakesItsOwnFinishedWriteOverALaggingCache: this process wrote Failed (the
// deadline) and deleted the JobSet; the JobSet's delete event comes before the
// TrainJob's update, so the next sync reads the TrainJob from a cache without Failed.
// It must neither re-create the JobSet nor write again: it waits for the update event.
func TestSyncTakesItsOwnFinishedWriteOverALaggingCache(t *testing.T) {
	tj := makeTrainJob().ActiveDeadlineSeconds(60).Obj()
	tj.ResourceVersion = "5"
	f := newFixture(t, tj, makeJobSet(tj).Suspend(false).Obj())
	// The API server's answer to the status write: a newer resourceVersion.
	f.trainer.PrependReactor("patch", "trainjobs", func(clienttesting.Action) (bool, runtime.Object, error) {
		written := tj.DeepCopy()
		written.ResourceVersion = "6"
		return true, written, nil
	})
	f.clock.SetTime(t0.Add(61 * time.Second))
	if _, err := f.sync(t); err != nil {
		t.Fatalf("first Sync: %v", err)
	}
	// The JobSet is gone from the cache; the TrainJob there is still version 5; the
	// pipeline, restarted by the delete event, left a plan.
	if err := f.jsCache.Delete(makeJobSet(tj).Obj()); err != nil {
		t.Fatal(err)
	}
	f.plans.Put(key, tj.UID, tj.Generation, desiredPlan(t, tj))
	f.trainer.ClearActions()
	f.jobsets.ClearActions()

	got, err := f.sync(t)
	if err != nil {
		t.Fatalf("second Sync: %v", err)
	}
	if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
		t.Errorf("Sync result (-want +got):\n%s", diff)
	}
	if writes := append(utiltesting.Writes(f.jobsets.Actions()), utiltesting.Writes(f.trainer.Actions())...); len(writes) != 0 {
		t.Errorf("writes %v after the TrainJob's own Failed write, want none", writes)
	}
}

// TestSyncJobSetFinishedBeforeDeadline: a JobSet that completed or failed is mirrored
// first and the deadline no longer applies (upstream checks the deadline on the status
// it just derived from the JobSet), even when the sync runs after the deadline.
func TestSyncJobSetFinishedBeforeDeadline(t *testing.T) {
	tj := makeTrainJob().ActiveDeadlineSeconds(60).Obj()
	cases := map[string]struct {
		jobSetCondition metav1.Condition
		want            metav1.Condition
	}{
		"completed": {
			jobSetCondition: utiltesting.Condition(string(jobsetv1alpha2.JobSetCompleted), metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully"),
			want:            utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully"),
		},
		"failed": {
			jobSetCondition: utiltesting.Condition(string(jobsetv1alpha2.JobSetFailed), metav1.ConditionTrue, "FailedJobs", "jobset failed"),
			want:            utiltesting.Condition(trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs", "jobset failed"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tj, makeJobSet(tj).Suspend(false).Condition(tc.jobSetCondition).Obj())
			f.clock.SetTime(t0.Add(61 * time.Second))
			got, err := f.sync(t)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(engine.WaitForEvent(), got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			want := tc.want
			want.ObservedGeneration = 1
			if diff := utiltesting.ConditionsDiff([]metav1.Condition{want}, f.storedTrainJob(t).Status.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if w := utiltesting.Writes(f.jobsets.Actions()); len(w) != 0 {
				t.Errorf("JobSet writes = %v, want none (a finished JobSet is left to its TTL)", w)
			}
		})
	}
}
