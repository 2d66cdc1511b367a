package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
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
	base := makeTrainJob().Condition(suspended).JobsStatus(utiltesting.JobStatus("node", 1, 0, 0, 1, 0)).TrainerStatus(progress)

	cases := map[string]struct {
		mutate    func(*trainer.TrainJobStatus)
		wantWrote bool
		// wantBody is the merge patch's JSON, when one is sent.
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
			wantBody: `{"status":{"conditions":[{"type":"Suspended","status":"False","lastTransitionTime":"2026-03-01T12:00:00Z","reason":"Resumed","message":"TrainJob is resumed"}],` +
				`"jobsStatus":[{"name":"node","ready":1,"succeeded":0,"failed":0,"active":1,"suspended":0}]}}`,
		},
		"jobsStatus cleared": {
			mutate:    func(st *trainer.TrainJobStatus) { st.JobsStatus = nil },
			wantWrote: true,
			wantBody: `{"status":{"conditions":[{"type":"Suspended","status":"True","lastTransitionTime":"2026-03-01T12:00:00Z","reason":"Suspended","message":"TrainJob is suspended"}],` +
				`"jobsStatus":null}}`,
		},
		"trainerStatus is not the writer's": {
			// A change only to trainerStatus still differs, but the patch leaves it alone.
			mutate:    func(st *trainer.TrainJobStatus) { st.TrainerStatus = nil },
			wantWrote: true,
			wantBody: `{"status":{"conditions":[{"type":"Suspended","status":"True","lastTransitionTime":"2026-03-01T12:00:00Z","reason":"Suspended","message":"TrainJob is suspended"}],` +
				`"jobsStatus":[{"name":"node","ready":1,"succeeded":0,"failed":0,"active":1,"suspended":0}]}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			tj := base.Clone().Obj()
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
			if p.GetPatchType() != types.MergePatchType {
				t.Errorf("patch type = %q, want merge", p.GetPatchType())
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
			if diff := cmp.Diff(progress, stored.Status.TrainerStatus); diff != "" {
				t.Errorf("trainerStatus after the write (-want +got):\n%s", diff)
			}
			// The caller's object is not modified.
			if diff := cmp.Diff(base.Obj().Status, tj.Status); diff != "" {
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
