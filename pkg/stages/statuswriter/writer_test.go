package statuswriter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

const (
	ns     = "team-a"
	tjName = "llm"
)

// t0 is every TrainJob's creation time.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// makeTrainJob returns the TrainJob the cases write: created at t0, generation 1.
func makeTrainJob() *utiltesting.TrainJobWrapper {
	return utiltesting.MakeTrainJob(ns, tjName).RuntimeRef(trainer.TrainingRuntimeKind, "test-runtime").Created(t0)
}

func TestWriterUpdate(t *testing.T) {
	suspended := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, "Suspended", "TrainJob is suspended")
	suspended.LastTransitionTime = metav1.NewTime(t0)
	progress := &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](42)}
	base := makeTrainJob().UID("uid-1").Condition(suspended).JobsStatus(utiltesting.JobStatus("node", 1, 0, 0, 1, 0)).TrainerStatus(progress)
	const testUID = `{"op":"test","path":"/metadata/uid","value":"uid-1"}`

	cases := map[string]struct {
		base      *trainer.TrainJob // default: base
		mutate    func(*trainer.TrainJobStatus)
		wantWrote bool
		// wantType and wantBody are the patch's, when one is sent.
		wantType types.PatchType
		wantBody string
	}{
		"no change": {
			mutate: func(*trainer.TrainJobStatus) {},
		},
		"semantically equal (same time, fresh pointers)": {
			mutate: func(st *trainer.TrainJobStatus) {
				st.Conditions = []metav1.Condition{suspended}
				st.JobsStatus = []trainer.JobStatus{utiltesting.JobStatus("node", 1, 0, 0, 1, 0)}
			},
		},
		"condition changed": {
			mutate: func(st *trainer.TrainJobStatus) {
				st.Conditions[0].Status, st.Conditions[0].Reason, st.Conditions[0].Message = metav1.ConditionFalse, "Resumed", "TrainJob is resumed"
			},
			wantWrote: true,
			wantType:  types.JSONPatchType,
			wantBody: `[` + testUID + `,{"op":"add","path":"/status/conditions","value":[{"type":"Suspended","status":"False","lastTransitionTime":"2026-03-01T12:00:00Z","reason":"Resumed","message":"TrainJob is resumed"}]},` +
				`{"op":"add","path":"/status/jobsStatus","value":[{"name":"node","ready":1,"succeeded":0,"failed":0,"active":1,"suspended":0}]}]`,
		},
		"jobsStatus cleared": {
			mutate:    func(st *trainer.TrainJobStatus) { st.JobsStatus = nil },
			wantWrote: true,
			wantType:  types.JSONPatchType,
			wantBody: `[` + testUID + `,{"op":"add","path":"/status/conditions","value":[{"type":"Suspended","status":"True","lastTransitionTime":"2026-03-01T12:00:00Z","reason":"Suspended","message":"TrainJob is suspended"}]},` +
				`{"op":"add","path":"/status/jobsStatus","value":null}]`,
		},
		"trainerStatus is not the writer's": {
			// A change only to trainerStatus still differs, but the patch leaves it alone.
			mutate:    func(st *trainer.TrainJobStatus) { st.TrainerStatus = nil },
			wantWrote: true,
			wantType:  types.JSONPatchType,
			wantBody: `[` + testUID + `,{"op":"add","path":"/status/conditions","value":[{"type":"Suspended","status":"True","lastTransitionTime":"2026-03-01T12:00:00Z","reason":"Suspended","message":"TrainJob is suspended"}]},` +
				`{"op":"add","path":"/status/jobsStatus","value":[{"name":"node","ready":1,"succeeded":0,"failed":0,"active":1,"suspended":0}]}]`,
		},
		"the resourceVersion read is tested": {
			base: func() *trainer.TrainJob {
				tj := base.Clone().Obj()
				tj.ResourceVersion = "7"
				return tj
			}(),
			mutate:    func(st *trainer.TrainJobStatus) { st.JobsStatus = nil },
			wantWrote: true,
			wantType:  types.JSONPatchType,
			wantBody: `[` + testUID + `,{"op":"test","path":"/metadata/resourceVersion","value":"7"},` +
				`{"op":"add","path":"/status/conditions","value":[{"type":"Suspended","status":"True","lastTransitionTime":"2026-03-01T12:00:00Z","reason":"Suspended","message":"TrainJob is suspended"}]},` +
				`{"op":"add","path":"/status/jobsStatus","value":null}]`,
		},
		"first write: merge patch on the resourceVersion": {
			base: func() *trainer.TrainJob {
				tj := makeTrainJob().UID("uid-1").Obj()
				tj.ResourceVersion = "7"
				return tj
			}(),
			mutate:    func(st *trainer.TrainJobStatus) { st.Conditions = []metav1.Condition{suspended} },
			wantWrote: true,
			wantType:  types.MergePatchType,
			wantBody: `{"metadata":{"resourceVersion":"7"},"status":{"conditions":[{"type":"Suspended","status":"True","lastTransitionTime":"2026-03-01T12:00:00Z","reason":"Suspended","message":"TrainJob is suspended"}],` +
				`"jobsStatus":null}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			tj := base.Clone().Obj()
			if tc.base != nil {
				tj = tc.base.DeepCopy()
			}
			initial := tj.DeepCopy()
			client := trainerfake.NewSimpleClientset(tj.DeepCopy())
			w := &statuswriter.Writer{Client: client}

			wrote, err := w.Update(ctx, tj, tc.mutate)
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			if wrote != tc.wantWrote {
				t.Errorf("Update wrote = %v, want %v", wrote, tc.wantWrote)
			}
			patches := utiltesting.Patches(client.Actions())
			if !tc.wantWrote {
				if w := utiltesting.Writes(client.Actions()); len(w) != 0 {
					t.Errorf("writes = %v, want none", w)
				}
				return
			}
			if diff := cmp.Diff([]string{"patch trainjobs/status"}, utiltesting.Writes(client.Actions())); diff != "" {
				t.Fatalf("writes (-want +got):\n%s", diff)
			}
			p := patches[0].(clienttesting.PatchActionImpl)
			if p.GetPatchType() != tc.wantType {
				t.Errorf("patch type = %q, want %q", p.GetPatchType(), tc.wantType)
			}
			if p.PatchOptions.FieldManager != "trainyard" {
				t.Errorf("field manager = %q, want trainyard", p.PatchOptions.FieldManager)
			}
			var got, want any
			if err := json.Unmarshal(p.GetPatch(), &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.wantBody), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("patch body (-want +got):\n%s", diff)
			}
			// The trainer pods' progress survives the write.
			stored, err := client.TrainerV1alpha1().TrainJobs(ns).Get(context.Background(), tjName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(initial.Status.TrainerStatus, stored.Status.TrainerStatus); diff != "" {
				t.Errorf("trainerStatus after the write (-want +got):\n%s", diff)
			}
			// The caller's object is not modified.
			if diff := cmp.Diff(initial.Status, tj.Status); diff != "" {
				t.Errorf("Update mutated the TrainJob (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriterUpdateError(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tj := makeTrainJob().Obj()
	client := trainerfake.NewSimpleClientset(tj.DeepCopy())
	boom := errors.New("conflict")
	client.PrependReactor("patch", "trainjobs", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, boom
	})
	wrote, err := (&statuswriter.Writer{Client: client}).Update(ctx, tj, func(st *trainer.TrainJobStatus) {
		st.JobsStatus = []trainer.JobStatus{utiltesting.JobStatus("node", 0, 0, 0, 0, 0)}
	})
	if wrote || !errors.Is(err, boom) {
		t.Errorf("Update = %v, %v; want false, %v", wrote, err, boom)
	}
}

// A sync that read the TrainJob before it was deleted and re-created under the same
// name writes nothing to the new one: the JSON patch's uid test fails (the API server
// answers 422), and so does the first write's resourceVersion precondition.
func TestWriterNeverWritesAReCreatedTrainJob(t *testing.T) {
	for name, old := range map[string]*trainer.TrainJob{
		"with status": makeTrainJob().UID("old").Condition(utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, "Suspended", "TrainJob is suspended")).Obj(),
		"first write": makeTrainJob().UID("old").Obj(),
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			old.ResourceVersion = "3"
			recreated := makeTrainJob().UID("new").Obj()
			client := trainerfake.NewSimpleClientset(recreated)
			// The fake does not check a merge patch's resourceVersion; the API server does.
			client.PrependReactor("patch", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
				p := a.(clienttesting.PatchAction)
				if p.GetPatchType() == types.MergePatchType && strings.Contains(string(p.GetPatch()), `"resourceVersion":"3"`) {
					return true, nil, apierrors.NewConflict(trainer.Resource("trainjobs"), p.GetName(), errors.New("the object has been modified"))
				}
				return false, nil, nil
			})
			wrote, err := (&statuswriter.Writer{Client: client}).Update(ctx, old, func(st *trainer.TrainJobStatus) {
				st.Conditions = []metav1.Condition{utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "JobSetCompleted", "done")}
			})
			if wrote || err == nil {
				t.Fatalf("Update = %v, %v; want an error", wrote, err)
			}
			stored, err := client.TrainerV1alpha1().TrainJobs(ns).Get(ctx, tjName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(stored.Status.Conditions) != 0 {
				t.Errorf("the re-created TrainJob got conditions %v", stored.Status.Conditions)
			}
		})
	}
}

// A status computed from a TrainJob older than the stored one is not written: a new
// leader whose cache has not shown the old leader's last write (Failed=True, at the
// active deadline) computes Complete=True from its JobSet and would replace the whole
// conditions list (issue 41). The JSON patch tests the resourceVersion the status was
// read at; the API server refuses it with 422, and the retry reads the newer TrainJob.
func TestWriterNeverWritesOverANewerStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	created := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionFalse, "Resumed", "TrainJob is resumed")
	failed := utiltesting.Condition(trainer.TrainJobFailed, metav1.ConditionTrue, "DeadlineExceeded", "past its active deadline")
	stored := makeTrainJob().UID("uid-1").Condition(created).Condition(failed).Obj()
	stored.ResourceVersion = "5"
	cached := makeTrainJob().UID("uid-1").Condition(created).Obj()
	cached.ResourceVersion = "4"
	client := trainerfake.NewSimpleClientset(stored)

	wrote, err := (&statuswriter.Writer{Client: client}).Update(ctx, cached, func(st *trainer.TrainJobStatus) {
		st.Conditions = append(st.Conditions, utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "JobSetCompleted", "done"))
	})
	if wrote || err == nil {
		t.Fatalf("Update from resourceVersion 4 over 5 = %v, %v; want an error", wrote, err)
	}
	got, err := client.TrainerV1alpha1().TrainJobs(ns).Get(ctx, tjName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := utiltesting.ConditionsDiff([]metav1.Condition{created, failed}, got.Status.Conditions); diff != "" {
		t.Errorf("stored conditions after the refused write (-want +got):\n%s", diff)
	}

	// Read at the stored version, the same change is written.
	if wrote, err := (&statuswriter.Writer{Client: client}).Update(ctx, got, func(st *trainer.TrainJobStatus) {
		st.Conditions = append(st.Conditions, utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionFalse, "Failed", "failed"))
	}); !wrote || err != nil {
		t.Fatalf("Update from the stored version = %v, %v; want a write", wrote, err)
	}
}

// Two syncs of one TrainJob in quick succession (its add event and its JobSet's, after a
// restart) compute the same status from a cache that has not shown the first write yet:
// the second sends nothing. A different status, a cache that caught up, a re-created
// TrainJob or a resourceVersion that is not an integer is written as usual.
func TestWriterSkipsAWriteTheCacheHasNotShownYet(t *testing.T) {
	suspended := func(at time.Time) func(*trainer.TrainJobStatus) {
		return func(st *trainer.TrainJobStatus) {
			c := utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, "Suspended", "TrainJob is suspended")
			c.LastTransitionTime = metav1.NewTime(at)
			st.Conditions = []metav1.Condition{c}
		}
	}
	resumed := func(st *trainer.TrainJobStatus) {
		st.Conditions = []metav1.Condition{utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionFalse, "Resumed", "TrainJob is resumed")}
	}
	cached := func(uid types.UID, rv string) *trainer.TrainJob {
		tj := makeTrainJob().UID(uid).JobsStatus(utiltesting.JobStatus("node", 0, 0, 0, 0, 1)).Obj()
		tj.ResourceVersion = rv
		return tj
	}
	cases := map[string]struct {
		second     *trainer.TrainJob // the cache's TrainJob at the second sync
		mutate     func(*trainer.TrainJobStatus)
		wantWrites int
	}{
		"same status, stale cache":                     {second: cached("uid-1", "10"), mutate: suspended(t0), wantWrites: 1},
		"same status a second later, stale cache":      {second: cached("uid-1", "10"), mutate: suspended(t0.Add(time.Second)), wantWrites: 1},
		"other status, stale cache":                    {second: cached("uid-1", "10"), mutate: resumed, wantWrites: 2},
		"same status, cache caught up (another write)": {second: cached("uid-1", "12"), mutate: suspended(t0), wantWrites: 2},
		"same status, re-created TrainJob":             {second: cached("uid-2", "10"), mutate: suspended(t0), wantWrites: 2},
		"same status, resourceVersion not an integer":  {second: cached("uid-1", "abc"), mutate: suspended(t0), wantWrites: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := trainerfake.NewSimpleClientset()
			// The API server returns the TrainJob at its new resourceVersion.
			client.PrependReactor("patch", "trainjobs", func(clienttesting.Action) (bool, runtime.Object, error) {
				tj := cached("uid-1", "12")
				return true, tj, nil
			})
			w := &statuswriter.Writer{Client: client}
			if wrote, err := w.Update(ctx, cached("uid-1", "10"), suspended(t0)); !wrote || err != nil {
				t.Fatalf("first Update = %v, %v; want a write", wrote, err)
			}
			if _, err := w.Update(ctx, tc.second, tc.mutate); err != nil {
				t.Fatalf("second Update: %v", err)
			}
			if got := len(utiltesting.Writes(client.Actions())); got != tc.wantWrites {
				t.Errorf("writes = %d, want %d", got, tc.wantWrites)
			}
		})
	}
}

// Forget (the TrainJob was deleted) drops the record: a TrainJob re-created under the
// name with the same status is written even when the cache is older than the last write.
func TestWriterForget(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := trainerfake.NewSimpleClientset()
	client.PrependReactor("patch", "trainjobs", func(clienttesting.Action) (bool, runtime.Object, error) {
		tj := makeTrainJob().Obj()
		tj.ResourceVersion = "12"
		return true, tj, nil
	})
	tj := makeTrainJob().Obj()
	tj.ResourceVersion = "10"
	mutate := func(st *trainer.TrainJobStatus) {
		st.JobsStatus = []trainer.JobStatus{utiltesting.JobStatus("node", 0, 0, 0, 0, 1)}
	}
	w := &statuswriter.Writer{Client: client}
	for range 2 {
		if _, err := w.Update(ctx, tj, mutate); err != nil {
			t.Fatal(err)
		}
		w.Forget(cache.MetaObjectToName(tj))
	}
	if got := len(utiltesting.Writes(client.Actions())); got != 2 {
		t.Errorf("writes = %d, want 2 (one per Update after Forget)", got)
	}
}

// A record lives until the cache shows the write: Observed, called with each TrainJob
// the cache stores, keeps it while the cache is behind and drops it once the cache has
// the write, a later version or another TrainJob of the name; records do not pile up,
// one per TrainJob ever written, for as long as the TrainJobs live.
func TestWriterObserved(t *testing.T) {
	cached := func(uid types.UID, rv string) *trainer.TrainJob {
		tj := makeTrainJob().UID(uid).Obj()
		tj.ResourceVersion = rv
		return tj
	}
	cases := map[string]struct {
		observed    *trainer.TrainJob
		wantRecords int
	}{
		"cache behind the write":      {observed: cached("uid-1", "11"), wantRecords: 1},
		"cache shows the write":       {observed: cached("uid-1", "12"), wantRecords: 0},
		"cache past the write":        {observed: cached("uid-1", "15"), wantRecords: 0},
		"re-created TrainJob":         {observed: cached("uid-2", "11"), wantRecords: 0},
		"resourceVersion not integer": {observed: cached("uid-1", "abc"), wantRecords: 0},
		"another TrainJob's update":   {observed: utiltesting.MakeTrainJob(ns, "other").UID("uid-9").Obj(), wantRecords: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := trainerfake.NewSimpleClientset()
			client.PrependReactor("patch", "trainjobs", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, cached("uid-1", "12"), nil
			})
			w := &statuswriter.Writer{Client: client}
			wrote, err := w.Update(ctx, cached("uid-1", "10"), func(st *trainer.TrainJobStatus) {
				st.JobsStatus = []trainer.JobStatus{utiltesting.JobStatus("node", 0, 0, 0, 0, 1)}
			})
			if !wrote || err != nil {
				t.Fatalf("Update = %v, %v; want a write", wrote, err)
			}
			w.Observed(tc.observed)
			if got := w.Records(); got != tc.wantRecords {
				t.Errorf("records after Observed = %d, want %d", got, tc.wantRecords)
			}
		})
	}
}

// A status write never takes back a condition an earlier write of this process set while
// the cache lags that write: stage 1 writes RuntimeResolved=True, then stage 6 of the
// same pass, reading the TrainJob before that write reached the cache, adds its own
// condition to the list it writes — over RuntimeResolved=True, not the cache's False.
func TestWriterBuildsOnItsWriteTheCacheHasNotShownYet(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	unresolved := utiltesting.Condition("RuntimeResolved", metav1.ConditionFalse, "TrainingRuntimeNotFound", "not found")
	resolved := utiltesting.Condition("RuntimeResolved", metav1.ConditionTrue, "Resolved", "found")
	ready := utiltesting.Condition("JobSetReady", metav1.ConditionTrue, "Applied", "applied")
	cached := makeTrainJob().Condition(unresolved).Obj() // the cache: before either write
	cached.ResourceVersion = "10"

	client := trainerfake.NewSimpleClientset()
	var patches [][]byte
	rv := 10
	client.PrependReactor("patch", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		patches = append(patches, a.(clienttesting.PatchAction).GetPatch())
		rv++
		tj := cached.DeepCopy()
		tj.ResourceVersion = fmt.Sprint(rv)
		return true, tj, nil
	})
	set := func(c metav1.Condition) func(*trainer.TrainJobStatus) {
		return func(st *trainer.TrainJobStatus) { meta.SetStatusCondition(&st.Conditions, c) }
	}
	w := &statuswriter.Writer{Client: client}
	if wrote, err := w.Update(ctx, cached, set(resolved)); !wrote || err != nil {
		t.Fatalf("stage 1's Update = %v, %v; want a write", wrote, err)
	}
	if wrote, err := w.Update(ctx, cached, set(ready)); !wrote || err != nil {
		t.Fatalf("stage 6's Update = %v, %v; want a write", wrote, err)
	}
	// Stage 6 again, the cache still behind: RuntimeResolved=True is no news.
	if wrote, err := w.Update(ctx, cached, set(resolved)); wrote || err != nil {
		t.Fatalf("a third Update setting what was written = %v, %v; want no write", wrote, err)
	}
	if len(patches) != 2 {
		t.Fatalf("patches = %d, want 2", len(patches))
	}
	var ops []struct {
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patches[1], &ops); err != nil {
		t.Fatalf("second patch %s: %v", patches[1], err)
	}
	var written []metav1.Condition
	for _, op := range ops {
		if op.Path == "/status/conditions" {
			if err := json.Unmarshal(op.Value, &written); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c := meta.FindStatusCondition(written, "RuntimeResolved"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("stage 6 wrote RuntimeResolved %+v, want the True stage 1 wrote (conditions %+v)", c, written)
	}
	if c := meta.FindStatusCondition(written, "JobSetReady"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("stage 6 wrote JobSetReady %+v, want True", c)
	}
}
