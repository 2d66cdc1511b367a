package admission

import (
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	admissionv1 "k8s.io/api/admission/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	resourcelisters "k8s.io/client-go/listers/resource/v1"

	"github.com/trainyard/trainyard/pkg/admission/admissiontest"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/gang/volcano"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// TestRuleTable runs every case of the shared rule table (package admissiontest, which
// the e2e tests send with kubectl) through the webhook of its kind, with caches holding
// the case's Existing objects: the answer's violations (type and field), message and
// warnings are the case's.
func TestRuleTable(t *testing.T) {
	cases := admissiontest.Cases("default")
	if problems := admissiontest.Check(cases, func(a, b admissiontest.Object) bool { return equality.Semantic.DeepEqual(a, b) }); len(problems) > 0 {
		t.Fatalf("the table is inconsistent:\n%s", strings.Join(problems, "\n"))
	}
	if admissiontest.LabelWebhookValidation != LabelWebhookValidation {
		t.Fatalf("admissiontest.LabelWebhookValidation = %q, want %q", admissiontest.LabelWebhookValidation, LabelWebhookValidation)
	}
	if admissiontest.VolcanoQueueAnnotation != volcano.AnnotationQueueName {
		t.Fatalf("admissiontest.VolcanoQueueAnnotation = %q, want %q", admissiontest.VolcanoQueueAnnotation, volcano.AnnotationQueueName)
	}
	paths := map[string]string{
		trainer.TrainJobKind:               PathValidateTrainJob,
		trainer.TrainingRuntimeKind:        PathValidateTrainingRuntime,
		trainer.ClusterTrainingRuntimeKind: PathValidateClusterTrainingRuntime,
		trainer.OptimizationJobKind:        PathValidateOptimizationJob,
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			srv := httptest.NewServer(NewHandler(tableDeps(t, c.Existing)))
			defer srv.Close()
			kind := c.Object.GetObjectKind().GroupVersionKind().Kind
			resp := post(t, srv, paths[kind], review(t, kind, admissionv1.Create, c.Object, nil))

			if resp.Allowed != (len(c.Errors) == 0) {
				t.Errorf("allowed = %v, want %v; result: %+v", resp.Allowed, len(c.Errors) == 0, resp.Result)
			}
			var got []string
			if resp.Result != nil && resp.Result.Details != nil {
				for _, cause := range resp.Result.Details.Causes {
					got = append(got, string(cause.Type)+": "+cause.Field)
				}
			}
			sort.Strings(got)
			if diff := cmp.Diff(admissiontest.Strings(c.Errors), got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
			if c.Message != "" && (resp.Result == nil || !strings.Contains(resp.Result.Message, c.Message)) {
				t.Errorf("result %+v: the message does not contain %q", resp.Result, c.Message)
			}
			for _, v := range c.Errors {
				if !strings.Contains(resp.Result.Message, v.InMessage()) {
					t.Errorf("message %q does not name %q", resp.Result.Message, v.InMessage())
				}
			}
			if len(resp.Warnings) != len(c.Warnings) {
				t.Fatalf("warnings = %q, want %d containing %q", resp.Warnings, len(c.Warnings), c.Warnings)
			}
			for i, w := range c.Warnings {
				if !strings.Contains(resp.Warnings[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, resp.Warnings[i], w)
				}
			}
		})
	}
}

// tableDeps are Deps whose caches hold existing: runtimes, PriorityClasses and
// ResourceClaims, with the DRA stage's caches (as when resource.k8s.io/v1 is served).
func tableDeps(t *testing.T, existing []admissiontest.Object) *Deps {
	t.Helper()
	var f fixture
	var claims []runtime.Object
	for _, obj := range existing {
		switch o := obj.(type) {
		case *trainer.TrainingRuntime, *trainer.ClusterTrainingRuntime:
			f.runtimes = append(f.runtimes, o)
		case *schedulingv1.PriorityClass:
			f.priorityClasses = append(f.priorityClasses, o.Name)
		case *resourcev1.ResourceClaim:
			claims = append(claims, o)
		default:
			t.Fatalf("the table's object %T has no cache here", obj)
		}
	}
	deps := f.deps(t)
	deps.Claims = &dra.Claims{}
	deps.Claims.SetListers(&dra.Listers{
		Templates:      resourcelisters.NewResourceClaimTemplateLister(utiltesting.Indexer(t)),
		ResourceClaims: resourcelisters.NewResourceClaimLister(utiltesting.Indexer(t, claims...)),
		DeviceClasses:  resourcelisters.NewDeviceClassLister(utiltesting.Indexer(t)),
	})
	return deps
}

// The table's own consistency check finds an object sent twice, an object two cases
// need with different contents, and an object sent that another case needs to exist.
func TestRuleTableCheck(t *testing.T) {
	cases := admissiontest.TrainJobCases("default")
	first, second := cases[0], cases[0]
	second.Name = "TrainJob: the first case again"
	other := cases[0].Existing[0].DeepCopyObject().(admissiontest.Object)
	other.SetLabels(map[string]string{"changed": "yes"})
	third := admissiontest.Case{Name: "TrainJob: its runtime changed", Existing: []admissiontest.Object{other}, Object: cases[1].Object}
	fourth := admissiontest.Case{Name: "TrainingRuntime: sends what the first case needs", Object: cases[0].Existing[0]}

	problems := admissiontest.Check([]admissiontest.Case{first, second, third, fourth},
		func(a, b admissiontest.Object) bool { return equality.Semantic.DeepEqual(a, b) })

	if len(problems) != 3 {
		t.Errorf("problems = %q, want 3: the TrainJob sent twice, the runtime's other contents, the runtime sent", problems)
	}
}
