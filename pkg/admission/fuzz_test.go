package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mergepatches"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// fuzzWebhooks are the webhooks the fuzz targets pick from (by index modulo 4), with the
// kind each admits.
var fuzzWebhooks = []struct{ path, kind string }{
	{PathValidateTrainJob, trainer.TrainJobKind},
	{PathMutateTrainJob, trainer.TrainJobKind},
	{PathValidateTrainingRuntime, trainer.TrainingRuntimeKind},
	{PathValidateClusterTrainingRuntime, trainer.ClusterTrainingRuntimeKind},
}

// fuzzOperations are the admission operations FuzzAdmissionObjects picks from.
var fuzzOperations = []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect}

// fuzzUID is the uid of the reviews the fuzz targets build.
const fuzzUID = "fuzz-request-uid"

// serveReview posts body to the webhook at path of h, as the API server does (POST,
// application/json), and checks what any review must get, whatever the body:
//
//   - no panic (the test fails on one) and never a 5xx;
//   - when body decodes as an admission.k8s.io/v1 AdmissionReview with a request (what
//     the handler requires), 200 with a well-formed AdmissionReview: the request's
//     apiVersion and kind, a response answering the request's uid, refused only with a
//     Result of code 400 (cannot be reviewed) or 403 (denied), never 500 (the fake
//     caches never fail), and a mutation only as a JSON patch of
//     spec.runtimePatches[].time;
//   - otherwise a 4xx.
//
// It returns the request and the response when the body was reviewed.
func serveReview(t *testing.T, h http.Handler, path string, body []byte) (*admissionv1.AdmissionRequest, *admissionv1.AdmissionResponse) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body.Bytes())
	}
	var in admissionv1.AdmissionReview
	reviewable := json.Unmarshal(body, &in) == nil && in.Request != nil &&
		in.APIVersion == admissionv1.SchemeGroupVersion.String() && in.Kind == "AdmissionReview"
	if !reviewable {
		if rec.Code < 400 {
			t.Fatalf("HTTP %d for a body that is not an AdmissionReview with a request: %s", rec.Code, rec.Body.Bytes())
		}
		return nil, nil
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d for an AdmissionReview with a request: %s", rec.Code, rec.Body.Bytes())
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("the answer is not an AdmissionReview: %v: %s", err, rec.Body.Bytes())
	}
	resp := out.Response
	switch {
	case out.APIVersion != in.APIVersion || out.Kind != in.Kind:
		t.Fatalf("answered apiVersion %q kind %q, want the request's", out.APIVersion, out.Kind)
	case out.Request != nil || resp == nil:
		t.Fatalf("answer without a response, or with a request: %s", rec.Body.Bytes())
	case resp.UID != in.Request.UID:
		t.Fatalf("response uid %q, want the request's %q", resp.UID, in.Request.UID)
	case !resp.Allowed && (resp.Result == nil || (resp.Result.Code != http.StatusBadRequest && resp.Result.Code != http.StatusForbidden)):
		t.Fatalf("refused without a Result of code 400 or 403: %+v", resp.Result)
	case resp.Allowed && resp.Result != nil:
		t.Fatalf("allowed with a Result: %+v", resp.Result)
	case (resp.Patch != nil) != (resp.PatchType != nil) || (resp.Patch != nil && (!resp.Allowed || path != PathMutateTrainJob)):
		t.Fatalf("patch %s of type %v: only the mutating webhook patches, as it allows", resp.Patch, resp.PatchType)
	}
	if resp.Patch != nil {
		var ops []PatchOperation
		if err := json.Unmarshal(resp.Patch, &ops); err != nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch || len(ops) == 0 {
			t.Fatalf("patch %s of type %s: want a non-empty JSON patch (%v)", resp.Patch, *resp.PatchType, err)
		}
		for _, op := range ops {
			if !strings.HasPrefix(op.Path, "/spec/runtimePatches/") || !strings.HasSuffix(op.Path, "/time") || (op.Op != "add" && op.Op != "remove") {
				t.Fatalf("patch operation %+v: want add or remove of /spec/runtimePatches/<i>/time", op)
			}
		}
	}
	return in.Request, resp
}

// fuzzReviewBody returns an AdmissionReview of a request for kind with op, uid fuzzUID
// and the documents object and old (YAML or JSON; empty for none) converted to JSON, and
// false when a document is not YAML.
func fuzzReviewBody(kind string, op admissionv1.Operation, object, old []byte) ([]byte, bool) {
	raw := func(doc []byte) (runtime.RawExtension, bool) {
		if len(doc) == 0 {
			return runtime.RawExtension{}, true
		}
		js, err := yaml.YAMLToJSON(doc)
		return runtime.RawExtension{Raw: js}, err == nil
	}
	obj, ok1 := raw(object)
	oldObj, ok2 := raw(old)
	if !ok1 || !ok2 {
		return nil, false
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(fuzzUID),
			Kind:      metav1.GroupVersionKind{Group: trainer.GroupName, Version: "v1alpha1", Kind: kind},
			Resource:  metav1.GroupVersionResource{Group: trainer.GroupName, Version: "v1alpha1", Resource: strings.ToLower(kind) + "s"},
			Operation: op,
			Object:    obj,
			OldObject: oldObj,
		},
	})
	return body, err == nil
}

// FuzzAdmissionReview sends arbitrary bodies to the four webhooks (path picks one) of a
// handler whose caches hold the skeleton runtime (as TrainingRuntime default/
// test-runtime and ClusterTrainingRuntime test-runtime) and a JobSet for TrainJob
// default/test-job: the AdmissionReview decoding, then the review. Seeds: a review of
// every plantest.FuzzInputs pair at each webhook, and hand-written malformed and edge
// cases (not JSON, null, another apiVersion or kind, no request, another object kind,
// DELETE, UPDATE without an old object, unknown and duplicated fields, trailing data,
// huge numbers). serveReview's checks apply: a malformed review never panics the server
// nor gets a 5xx, and a well-formed one is always answered with its uid.
func FuzzAdmissionReview(f *testing.F) {
	for i, in := range plantest.FuzzInputs(f) {
		w := fuzzWebhooks[i%len(fuzzWebhooks)]
		object := in.TrainJob
		if w.kind != trainer.TrainJobKind {
			object = in.Runtime
		}
		body, ok := fuzzReviewBody(w.kind, admissionv1.Create, object, nil)
		if !ok {
			f.Fatalf("%s: not YAML", in.Name)
		}
		f.Add(uint8(i%len(fuzzWebhooks)), body)
	}
	valid, _ := fuzzReviewBody(trainer.TrainJobKind, admissionv1.Update,
		[]byte(`{"metadata":{"name":"test-job","namespace":"default"},"spec":{"runtimeRef":{"name":"test-runtime","kind":"TrainingRuntime"},"suspend":true}}`),
		[]byte(`{"metadata":{"name":"test-job","namespace":"default"},"spec":{"runtimeRef":{"name":"test-runtime","kind":"TrainingRuntime"}}}`))
	f.Add(uint8(0), valid)
	for _, body := range []string{
		``, `null`, `[]`, `"x"`, `{}`, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`,
		`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"trainer.kubeflow.org","kind":"TrainJob"},"operation":"CREATE"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"trainer.kubeflow.org","kind":"TrainJob"},"operation":"UPDATE","object":{}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"trainer.kubeflow.org","kind":"TrainJob"},"operation":"DELETE","oldObject":{"spec":1}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"batch","kind":"Job"},"operation":"CREATE","object":{}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"trainer.kubeflow.org","kind":"TrainJob"},"operation":"CREATE","object":{"spec":{"runtimeRef":{"name":"x"},"bogus":1}}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"trainer.kubeflow.org","kind":"TrainJob"},"operation":"CREATE","object":{"spec":{"runtimeRef":{"name":"a","name":"b"}}}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"trainer.kubeflow.org","kind":"TrainJob"},"operation":"CREATE","object":{"spec":{"trainer":{"numNodes":99999999999}}}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"trainer.kubeflow.org","kind":"TrainJob"},"operation":"CREATE","object":{"spec":{"runtimeRef":{"name":"test-runtime"}}} {}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"trainer.kubeflow.org","kind":"TrainingRuntime"},"operation":"CREATE","object":{"spec":{"template":{"spec":{"replicatedJobs":[{"name":"node"}]}}}}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"},"operation":"UPDATE","object":{"spec":{"mlPolicy":{"mpi":{}}}},"oldObject":{}}}`,
	} {
		for path := range fuzzWebhooks {
			f.Add(uint8(path), []byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, path uint8, body []byte) {
		rt := plantest.SkeletonRuntime(&trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}})
		tr := utiltesting.MakeTrainingRuntime(plantest.TrainJobNamespace, rt.Name)
		tr.Spec = *rt.Spec
		tj := trainJob(rt.Name, nil)
		deps := fixture{
			runtimes: []runtime.Object{tr, ctr(rt.Name, rt.Spec, nil)},
			jobSets:  []*jobsetv1alpha2.JobSet{utiltesting.MakeJobSet(tj.Namespace, tj.Name).ControlledBy(tj).Obj()},
		}.deps(t)
		serveReview(t, NewHandler(deps), fuzzWebhooks[int(path)%len(fuzzWebhooks)].path, body)
	})
}

// FuzzAdmissionObjects reviews arbitrary objects at the four webhooks (webhook picks one,
// op the operation): object and old (YAML or JSON) become the request's object and old
// object in a well-formed AdmissionReview, and the handler's caches hold runtime
// (decoded as plantest.DecodeFuzzInput does) as a ClusterTrainingRuntime and as a
// TrainingRuntime of its namespace. Seeds: every plantest.FuzzInputs pair at the
// TrainJob validating webhook and each distinct object at the others, with CREATE, and
// for some with UPDATE from an older version (olderVersion). Besides
// serveReview's checks (answered 200 with the request's uid, never 500), admission must
// agree with the stages it shares rules with
// (both only for objects the CRDs accept, plantest.CRDRefuses: the API server checks
// them before the validating webhooks):
//
//   - a TrainJob admitted on CREATE whose runtime is the cached one is built by stages
//     2 and 3 (mergepatches.Merge, mlpolicy.Apply) without an *plan.InvalidInputError:
//     what admission lets in, the controller does not refuse later with a condition;
//   - a runtime admitted on CREATE (and not opted out of validation) builds a JobSet
//     for a TrainJob that names only it.
func FuzzAdmissionObjects(f *testing.F) {
	seen := map[string]bool{} // each object once at each webhook but the TrainJob validation
	for i, in := range plantest.FuzzInputs(f) {
		for w := range fuzzWebhooks {
			object := in.TrainJob
			if fuzzWebhooks[w].kind != trainer.TrainJobKind {
				object = in.Runtime
			}
			if id := fuzzWebhooks[w].path + string(object); fuzzWebhooks[w].path != PathValidateTrainJob {
				if seen[id] {
					continue
				}
				seen[id] = true
			}
			f.Add(uint8(w), uint8(0), in.Runtime, object, []byte(nil))
			if i%8 == 0 { // UPDATE of a few, from an older version of the object
				f.Add(uint8(w), uint8(1), in.Runtime, object, olderVersion(f, object))
			}
		}
	}
	f.Fuzz(func(t *testing.T, webhook, op uint8, runtimeDoc, object, old []byte) {
		w := fuzzWebhooks[int(webhook)%len(fuzzWebhooks)]
		operation := fuzzOperations[int(op)%len(fuzzOperations)]
		body, ok := fuzzReviewBody(w.kind, operation, object, old)
		if !ok {
			return
		}
		var cached []runtime.Object // empty when the runtime does not decode or the CRD refuses it
		_, rt, ok := plantest.DecodeFuzzInput(runtimeDoc, nil)
		var rtMeta metav1.ObjectMeta
		if ok {
			if err := yaml.Unmarshal(runtimeDoc, &struct {
				Metadata *metav1.ObjectMeta `json:"metadata"`
			}{&rtMeta}); err != nil {
				ok = false
			}
		}
		if ok && rtMeta.Name != "" {
			tr := &trainer.TrainingRuntime{ObjectMeta: *rtMeta.DeepCopy(), Spec: *rt.Spec.DeepCopy()}
			if tr.Namespace == "" {
				tr.Namespace = plantest.TrainJobNamespace
			}
			c := &trainer.ClusterTrainingRuntime{ObjectMeta: *rtMeta.DeepCopy(), Spec: *rt.Spec.DeepCopy()}
			c.Namespace = ""
			cached = append(cached, tr, c)
		}
		deps := fixture{runtimes: cached}.deps(t)
		req, resp := serveReview(t, NewHandler(deps), w.path, body)
		if req == nil {
			t.Fatalf("a review built from the documents was not reviewed")
		}
		if !resp.Allowed || operation != admissionv1.Create || len(cached) == 0 {
			return
		}
		switch w.path {
		case PathValidateTrainJob:
			var tj trainer.TrainJob
			if err := json.Unmarshal(req.Object.Raw, &tj); err != nil {
				t.Fatalf("admitted a TrainJob that does not decode: %v", err)
			}
			if plantest.CRDRefuses(&tj, nil) {
				return
			}
			kind := ptr.Deref(tj.Spec.RuntimeRef.Kind, trainer.ClusterTrainingRuntimeKind)
			var spec *trainer.TrainingRuntimeSpec
			switch {
			case tj.Spec.RuntimeRef.Name != rtMeta.Name || (tj.Spec.RuntimeRef.APIGroup != nil && *tj.Spec.RuntimeRef.APIGroup != trainer.GroupName):
				return
			case kind == trainer.ClusterTrainingRuntimeKind:
				spec = &cached[1].(*trainer.ClusterTrainingRuntime).Spec
			case kind == trainer.TrainingRuntimeKind && tj.Namespace == cached[0].(*trainer.TrainingRuntime).Namespace:
				spec = &cached[0].(*trainer.TrainingRuntime).Spec
			default:
				return
			}
			checkBuilds(t, "an admitted TrainJob", &tj, plan.Runtime{Kind: kind, Name: rtMeta.Name, Spec: spec}, deps.plugins())
		case PathValidateTrainingRuntime, PathValidateClusterTrainingRuntime:
			var obj trainer.ClusterTrainingRuntime // both kinds share the spec
			if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
				t.Fatalf("admitted a runtime that does not decode: %v", err)
			}
			if obj.Labels[LabelWebhookValidation] == "disabled" || plantest.CRDRefuses(nil, &obj.Spec) {
				return
			}
			tj := trainJob(obj.Name, nil)
			checkBuilds(t, "a TrainJob naming only an admitted runtime", tj, plan.Runtime{Kind: w.kind, Name: obj.Name, Spec: &obj.Spec}, deps.plugins())
		}
	})
}

// checkBuilds fails t when stages 2 and 3 refuse tj with runtime rt as invalid input.
// Features Trainyard does not implement (*plan.UnsupportedError) are not admission's
// to refuse.
func checkBuilds(t *testing.T, what string, tj *trainer.TrainJob, rt plan.Runtime, plugins []mlpolicy.Plugin) {
	t.Helper()
	js, err := mergepatches.Merge(tj, rt)
	if err == nil {
		err = mlpolicy.Apply(tj, &plan.Plan{Runtime: rt, JobSet: js}, plugins)
	}
	var unsupported *plan.UnsupportedError
	if err != nil && !errors.As(err, &unsupported) {
		t.Fatalf("%s is not built: %v", what, err)
	}
}

// olderVersion returns doc, a TrainJob or a runtime as YAML, as it could have been before
// an UPDATE: a TrainJob suspended without runtimePatches, a runtime with another numNodes.
func olderVersion(tb testing.TB, doc []byte) []byte {
	tb.Helper()
	var obj any
	var tj trainer.TrainJob
	if err := yaml.Unmarshal(doc, &tj); err == nil && tj.Kind == trainer.TrainJobKind {
		tj.Spec.Suspend = ptr.To(!ptr.Deref(tj.Spec.Suspend, false))
		tj.Spec.RuntimePatches = nil
		obj = &tj
	} else {
		var rt trainer.ClusterTrainingRuntime
		if err := yaml.Unmarshal(doc, &rt); err != nil {
			tb.Fatal(err)
		}
		if rt.Spec.MLPolicy == nil {
			rt.Spec.MLPolicy = &trainer.MLPolicy{}
		}
		rt.Spec.MLPolicy.NumNodes = ptr.To(ptr.Deref(rt.Spec.MLPolicy.NumNodes, 1) + 1)
		obj = &rt
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
