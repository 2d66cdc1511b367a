package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	"github.com/trainyard/trainyard/pkg/stages/status"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

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
			w := &status.Writer{Client: client}

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
	wrote, err := (&status.Writer{Client: client}).Update(ctx, tj, func(st *trainer.TrainJobStatus) {
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
			wrote, err := (&status.Writer{Client: client}).Update(ctx, old, func(st *trainer.TrainJobStatus) {
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
