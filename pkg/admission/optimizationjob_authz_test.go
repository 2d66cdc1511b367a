package admission

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// TestOptimizationJobCreatorMayCreateTrainJobs (issue 41, finding 8): the controller
// creates an OptimizationJob's trials with its own identity, so the webhook admits an
// OptimizationJob only from a user the API server allows to create TrainJobs in its
// namespace (a SubjectAccessReview with the request's user, groups, uid and extra);
// denied, the create is refused naming the user, the namespace and the fix; a review
// that fails refuses it too (500). An UPDATE asks nothing (the spec cannot change).
func TestOptimizationJobCreatorMayCreateTrainJobs(t *testing.T) {
	user := authenticationv1.UserInfo{Username: "alice", UID: "alice-uid", Groups: []string{"team-a", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{"scopes": {"x"}}}
	request := func(t *testing.T, op admissionv1.Operation) *admissionv1.AdmissionRequest {
		raw, err := json.Marshal(optJob())
		if err != nil {
			t.Fatal(err)
		}
		req := &admissionv1.AdmissionRequest{UID: "req-1", Operation: op, Namespace: "default", UserInfo: user,
			Kind: metav1.GroupVersionKind{Group: trainer.GroupName, Version: "v1alpha1", Kind: trainer.OptimizationJobKind}, Object: runtime.RawExtension{Raw: raw}}
		if op == admissionv1.Update {
			req.OldObject = runtime.RawExtension{Raw: raw}
		}
		return req
	}
	for name, tc := range map[string]struct {
		op        admissionv1.Operation
		allowed   bool
		reviewErr error
		wantCode  int32 // 0: admitted
		inMessage []string
		reviews   int
	}{
		"allowed":           {op: admissionv1.Create, allowed: true, reviews: 1},
		"denied":            {op: admissionv1.Create, wantCode: 403, reviews: 1, inMessage: []string{`"alice" may not create trainjobs.trainer.kubeflow.org in namespace "default" (no RoleBinding)`, "spec.trainJobTemplate", "ask for a Role granting create on trainjobs"}},
		"review fails":      {op: admissionv1.Create, reviewErr: errors.New("connection refused"), wantCode: 500, reviews: 1, inMessage: []string{"connection refused", "create subjectaccessreviews"}},
		"update: no review": {op: admissionv1.Update, reviews: 0},
	} {
		t.Run(name, func(t *testing.T) {
			kube := kubefake.NewClientset()
			var got []*authorizationv1.SubjectAccessReview
			kube.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
				sar := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
				got = append(got, sar)
				if tc.reviewErr != nil {
					return true, nil, tc.reviewErr
				}
				out := sar.DeepCopy()
				out.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: tc.allowed}
				if !tc.allowed {
					out.Status.Reason = "no RoleBinding"
				}
				return true, out, nil
			})
			deps := optJobDeps(t)
			deps.SubjectAccessReviews = kube.AuthorizationV1().SubjectAccessReviews()
			resp := deps.validateOptimizationJob(request(t, tc.op))
			if len(got) != tc.reviews {
				t.Fatalf("%d SubjectAccessReviews, want %d", len(got), tc.reviews)
			}
			if tc.reviews > 0 {
				want := authorizationv1.SubjectAccessReviewSpec{User: "alice", UID: "alice-uid", Groups: user.Groups,
					Extra: map[string]authorizationv1.ExtraValue{"scopes": {"x"}},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create",
						Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}}
				if diff := cmp.Diff(want, got[0].Spec); diff != "" {
					t.Errorf("SubjectAccessReview (-want +got):\n%s", diff)
				}
			}
			if tc.wantCode == 0 {
				if !resp.Allowed {
					t.Fatalf("response %+v: want admitted", resp.Result)
				}
				return
			}
			if resp.Allowed || resp.Result == nil || resp.Result.Code != tc.wantCode {
				t.Fatalf("response %+v: want refused with %d", resp, tc.wantCode)
			}
			for _, s := range tc.inMessage {
				if !strings.Contains(resp.Result.Message, s) {
					t.Errorf("message %q lacks %q", resp.Result.Message, s)
				}
			}
		})
	}
}
