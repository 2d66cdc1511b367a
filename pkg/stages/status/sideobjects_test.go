package status_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/trainjob"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// existing returns the metadata of an object holding a side object's name, labelled for
// the TrainJob label ("" for none) and controlled by controller (nil for none).
func existing(name, label string, controller *metav1.OwnerReference) metav1.Object {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid")}}
	if label != "" {
		m.Labels = map[string]string{objectkeys.LabelTrainJobName: label}
	}
	if controller != nil {
		m.OwnerReferences = []metav1.OwnerReference{*controller}
	}
	return m
}

func trainJobController(uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind,
		Name: tjName, UID: uid, Controller: new(true), BlockOwnerDeletion: new(true)}
}

// refreshCache puts the stored TrainJob into the informer cache, as its watch would.
func (f *fixture) refreshCache(t *testing.T) {
	t.Helper()
	if err := f.tjCache.Update(f.storedTrainJob(t)); err != nil {
		t.Fatal(err)
	}
}

// TestSideObjectConflict: an applied side object's name held by an object the TrainJob
// does not control — nobody's, someone else's — is never used or overwritten: no side
// object is written (not even the create-only Secret), no JobSet applied, the TrainJob gets
// JobSetReady=False naming the object, its controller and the fix, with a Warning
// event, and the plan stays. A holder whose deletion the informers route to the
// TrainJob is waited for; any other is looked at again after ConflictRecheck.
func TestSideObjectConflict(t *testing.T) {
	deployment := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d", Controller: new(true)}
	for name, c := range map[string]struct {
		key      string // "Kind name" of the holder
		holder   metav1.Object
		uncached bool
		result   engine.Result
		message  []string
	}{
		"a ConfigMap controlled by a Deployment": {
			key: "ConfigMap llm-config", holder: existing("llm-config", "", deployment), uncached: true,
			result:  engine.RequeueAfter(status.DefaultConflictRecheck),
			message: []string{`ConfigMap "llm-config" already exists and is controlled by Deployment "web", not this TrainJob`},
		},
		"a ConfigMap with the TrainJob's label and no controller": {
			key: "ConfigMap llm-config", holder: existing("llm-config", tjName, nil),
			result:  engine.WaitForEvent(),
			message: []string{`ConfigMap "llm-config" already exists and has no controller`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tj := makeTrainJob().Obj()
			f := newFixture(t, tj, nil)
			var log []string
			applier := &recordingApplier{log: &log, objects: map[string]metav1.Object{c.key: c.holder}, uncached: map[string]bool{c.key: c.uncached}}
			f.stage.Objects = applier
			f.plans.Put(key, tj.UID, tj.Generation, planWithSideObjects(t, "x"))

			got, err := f.sync(t)
			if err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if diff := cmp.Diff(c.result, got); diff != "" {
				t.Errorf("Sync result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string(nil), log); diff != "" {
				t.Errorf("side-object writes (-want +got):\n%s", diff)
			}
			if n := len(f.jobSetApplies()); n != 0 {
				t.Errorf("JobSet applies = %d, want none: its pods would mount the foreign object", n)
			}
			cond := findCondition(f.storedTrainJob(t).Status.Conditions, trainjob.ConditionJobSetReady)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != trainjob.ReasonSideObjectConflict {
				t.Fatalf("JobSetReady = %+v, want False, reason SideObjectConflict", cond)
			}
			for _, m := range c.message {
				if !strings.Contains(cond.Message, m) {
					t.Errorf("message %q does not say %q", cond.Message, m)
				}
			}
			if diff := cmp.Diff([]string{"Warning SideObjectConflict " + cond.Message}, utiltesting.Events(f.recorder)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if _, ok := f.plans.Get(key, tj.UID, tj.Generation); !ok {
				t.Error("plan dropped: the pass after the holder is gone needs it")
			}

			// Nothing changed: the next pass writes nothing, not even the condition.
			f.refreshCache(t)
			patches := len(utiltesting.Writes(f.trainer.Actions()))
			if _, err := f.sync(t); err != nil {
				t.Fatal(err)
			}
			if n := len(utiltesting.Writes(f.trainer.Actions())); n != patches {
				t.Errorf("a second pass wrote status %d times, want 0", n-patches)
			}

			// The holder is deleted: the next pass creates the TrainJob's own objects,
			// applies the JobSet and turns JobSetReady True.
			delete(applier.objects, c.key)
			log = nil
			if _, err := f.sync(t); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"create Secret llm-secret", "apply ConfigMap llm-config"}, log); diff != "" {
				t.Errorf("writes once the holder is gone (-want +got):\n%s", diff)
			}
			if n := len(f.jobSetApplies()); n != 1 {
				t.Errorf("JobSet applies = %d, want 1", n)
			}
			cond = findCondition(f.storedTrainJob(t).Status.Conditions, trainjob.ConditionJobSetReady)
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != trainjob.ReasonJobSetBuilt {
				t.Errorf("JobSetReady = %+v, want True, reason JobSetBuilt", cond)
			}
			if _, ok := f.plans.Get(key, tj.UID, tj.Generation); ok {
				t.Error("plan kept after the JobSet was applied")
			}
		})
	}
}

// TestSideObjectsRepaired: a TrainJob whose JobSet runs (the gate is closed, the hash is
// current) and whose plan was rebuilt after a side object's deletion gets the missing
// objects re-created — a new Secret, the ConfigMap re-applied — without a JobSet write;
// with every object in place a pass writes nothing; a ConfigMap only the API server
// shows (created before side objects were labelled) is applied once, which labels it.
func TestSideObjectsRepaired(t *testing.T) {
	tj := makeTrainJob().Obj()
	hash := hashOf(t, tj)
	js := makeJobSet(tj).Suspend(false).Annotation(status.AnnotationJobSetHash, hash).ReplicatedJobStatus("node", 2, 0, 0, 2, 0).Obj()
	f := newFixture(t, tj, js)
	var log []string
	applier := &recordingApplier{log: &log}
	f.stage.Objects = applier
	syncRebuilt := func(t *testing.T) []string {
		t.Helper()
		log = nil
		f.plans.Put(key, tj.UID, tj.Generation, planWithSideObjects(t, "new"))
		got, err := f.sync(t)
		if err != nil {
			t.Fatal(err)
		}
		if got != engine.WaitForEvent() {
			t.Errorf("Sync = %v, want wait_for_event", got)
		}
		if n := len(f.jobSetApplies()); n != 0 {
			t.Errorf("JobSet applies = %d, want none: a running JobSet is never modified", n)
		}
		if _, ok := f.plans.Get(key, tj.UID, tj.Generation); ok {
			t.Error("plan kept")
		}
		return log
	}

	if diff := cmp.Diff([]string{"create Secret llm-secret", "apply ConfigMap llm-config"}, syncRebuilt(t)); diff != "" {
		t.Errorf("writes with both side objects deleted (-want +got):\n%s", diff)
	}
	if len(applier.created) != 1 || applier.created[0].Object["data"].(map[string]any)["key"] != "new" {
		t.Errorf("created %v, want the Secret with newly generated content", applier.created)
	}
	// The Secret is created on every pass (AlreadyExists now), never looked up.
	if diff := cmp.Diff([]string{"create Secret llm-secret"}, syncRebuilt(t)); diff != "" {
		t.Errorf("writes with every side object in place (-want +got):\n%s", diff)
	}

	applier.objects["ConfigMap llm-config"] = existing("llm-config", "", trainJobController(tj.UID))
	applier.uncached = map[string]bool{"ConfigMap llm-config": true}
	if diff := cmp.Diff([]string{"create Secret llm-secret", "apply ConfigMap llm-config"}, syncRebuilt(t)); diff != "" {
		t.Errorf("writes with an unlabelled ConfigMap of the TrainJob (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"create Secret llm-secret"}, syncRebuilt(t)); diff != "" {
		t.Errorf("writes once it is labelled (-want +got):\n%s", diff)
	}
	if len(applier.created) != 1 || applier.secretLookups != 0 {
		t.Errorf("created %d Secrets and looked Secrets up %d times, want 1 and 0", len(applier.created), applier.secretLookups)
	}
}

// TestCreateOnlyAlreadyExists: a create-only Secret that exists is the TrainJob's own —
// its name is unknowable to anyone else (mlpolicy.SecretNames) — so AlreadyExists is
// success, whoever the store says holds it: no lookup (the controller cannot read
// Secrets), no conflict, no second Secret, and the JobSet is applied. This is the retry
// after a crash between the Secret's creation and the JobSet's apply.
func TestCreateOnlyAlreadyExists(t *testing.T) {
	for name, holder := range map[string]metav1.Object{
		"created by an earlier pass": existing("llm-secret", tjName, trainJobController(makeTrainJob().Obj().UID)),
		"unlabelled":                 existing("llm-secret", "", nil),
	} {
		t.Run(name, func(t *testing.T) {
			tj := makeTrainJob().Obj()
			f := newFixture(t, tj, nil)
			var log []string
			applier := &recordingApplier{log: &log, objects: map[string]metav1.Object{"Secret llm-secret": holder}}
			f.stage.Objects = applier
			f.plans.Put(key, tj.UID, tj.Generation, planWithSideObjects(t, "x"))
			got, err := f.sync(t)
			if err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if got != engine.WaitForEvent() {
				t.Errorf("Sync = %v, want wait_for_event", got)
			}
			if diff := cmp.Diff([]string{"create Secret llm-secret", "apply ConfigMap llm-config"}, log); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if len(applier.created) != 0 || applier.secretLookups != 0 {
				t.Errorf("created %d Secrets and looked Secrets up %d times, want 0 and 0", len(applier.created), applier.secretLookups)
			}
			if n := len(f.jobSetApplies()); n != 1 {
				t.Errorf("JobSet applies = %d, want 1", n)
			}
			if c := findCondition(f.storedTrainJob(t).Status.Conditions, trainjob.ConditionJobSetReady); c != nil {
				t.Errorf("JobSetReady = %+v, want none: no conflict", c)
			}
		})
	}
}

// TestSideObjectConflictOfARunningTrainJob: a running TrainJob whose deleted ConfigMap
// was replaced by someone else's keeps its status mirrored from the JobSet, gets the
// conflict, and JobSetReady turns True again once its own ConfigMap is back (the
// running JobSet is not re-applied, so the stage heals the condition itself).
func TestSideObjectConflictOfARunningTrainJob(t *testing.T) {
	tj := makeTrainJob().Obj()
	hash := hashOf(t, tj)
	js := makeJobSet(tj).Suspend(false).Annotation(status.AnnotationJobSetHash, hash).ReplicatedJobStatus("node", 2, 0, 0, 2, 0).Obj()
	f := newFixture(t, tj, js)
	var log []string
	applier := &recordingApplier{log: &log, objects: map[string]metav1.Object{
		"Secret llm-secret":    existing("llm-secret", tjName, trainJobController(tj.UID)),
		"ConfigMap llm-config": existing("llm-config", "", nil),
	}, uncached: map[string]bool{"ConfigMap llm-config": true}}
	f.stage.Objects = applier
	f.plans.Put(key, tj.UID, tj.Generation, planWithSideObjects(t, "x"))
	f.stage.ConflictRecheck = 10 * time.Second

	got, err := f.sync(t)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(engine.RequeueAfter(10*time.Second), got); diff != "" {
		t.Errorf("Sync result (-want +got):\n%s", diff)
	}
	if len(log) != 0 || len(f.jobSetApplies()) != 0 {
		t.Errorf("writes %v and %d JobSet applies, want none", log, len(f.jobSetApplies()))
	}
	stored := f.storedTrainJob(t)
	if len(stored.Status.JobsStatus) != 1 || *stored.Status.JobsStatus[0].Active != 2 {
		t.Errorf("jobsStatus = %+v, want the JobSet's", stored.Status.JobsStatus)
	}
	if c := findCondition(stored.Status.Conditions, trainjob.ConditionJobSetReady); c == nil || c.Reason != trainjob.ReasonSideObjectConflict {
		t.Fatalf("JobSetReady = %+v, want SideObjectConflict", c)
	}

	f.refreshCache(t)
	delete(applier.objects, "ConfigMap llm-config")
	if _, err := f.sync(t); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"create Secret llm-secret", "apply ConfigMap llm-config"}, log); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if c := findCondition(f.storedTrainJob(t).Status.Conditions, trainjob.ConditionJobSetReady); c == nil ||
		c.Status != metav1.ConditionTrue || c.Reason != trainjob.ReasonJobSetBuilt {
		t.Errorf("JobSetReady = %+v, want True, reason JobSetBuilt", c)
	}
}
