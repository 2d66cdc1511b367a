package admission

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// The registered webhooks send each kind to the endpoint NewHandler serves for it, fail
// closed, never review kube-system, and skip runtimes opted out of validation.
func TestWebhookConfigurations(t *testing.T) {
	url := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443" + path), CABundle: []byte("ca")}
	}
	mutating, validating := WebhookConfigurations("d", "v", url)
	if mutating.Name != "d" || validating.Name != "v" {
		t.Errorf("names = %q, %q; want d, v", mutating.Name, validating.Name)
	}
	type webhook struct {
		name, path, resource string
		failurePolicy        *admissionregistrationv1.FailurePolicyType
		namespaces, objects  *metav1.LabelSelector
		rules                []admissionregistrationv1.RuleWithOperations
	}
	var got []webhook
	for _, w := range mutating.Webhooks {
		got = append(got, webhook{w.Name, *w.ClientConfig.URL, w.Rules[0].Resources[0], w.FailurePolicy, w.NamespaceSelector, w.ObjectSelector, w.Rules})
	}
	for _, w := range validating.Webhooks {
		got = append(got, webhook{w.Name, *w.ClientConfig.URL, w.Rules[0].Resources[0], w.FailurePolicy, w.NamespaceSelector, w.ObjectSelector, w.Rules})
	}
	want := map[string]struct{ path, resource string }{
		WebhookDefaultTrainJob:                {PathMutateTrainJob, "trainjobs"},
		WebhookValidateTrainJob:               {PathValidateTrainJob, "trainjobs"},
		WebhookValidateTrainingRuntime:        {PathValidateTrainingRuntime, "trainingruntimes"},
		WebhookValidateClusterTrainingRuntime: {PathValidateClusterTrainingRuntime, "clustertrainingruntimes"},
		WebhookValidateOptimizationJob:        {PathValidateOptimizationJob, "optimizationjobs"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d webhooks, want %d", len(got), len(want))
	}
	kubeSystem := labels.Set{"kubernetes.io/metadata.name": "kube-system"}
	optedOut := labels.Set{LabelWebhookValidation: "disabled"}
	for _, w := range got {
		exp, ok := want[w.name]
		if !ok {
			t.Errorf("unexpected webhook %q", w.name)
			continue
		}
		if w.path != "https://127.0.0.1:9443"+exp.path || w.resource != exp.resource {
			t.Errorf("%s: %s for %s, want %s for %s", w.name, w.path, w.resource, exp.path, exp.resource)
		}
		if ptr.Deref(w.failurePolicy, "") != admissionregistrationv1.Fail {
			t.Errorf("%s: failurePolicy %v, want Fail", w.name, w.failurePolicy)
		}
		if ops := w.rules[0].Operations; len(ops) != 2 || ops[0] != admissionregistrationv1.Create || ops[1] != admissionregistrationv1.Update {
			t.Errorf("%s: operations %v, want CREATE, UPDATE", w.name, ops)
		}
		if w.resource != "clustertrainingruntimes" {
			sel, err := metav1.LabelSelectorAsSelector(w.namespaces)
			if err != nil || sel.Matches(kubeSystem) || !sel.Matches(labels.Set{"kubernetes.io/metadata.name": "team-a"}) {
				t.Errorf("%s: namespaceSelector %v must exclude kube-system only", w.name, w.namespaces)
			}
		}
		isRuntime := w.resource == "trainingruntimes" || w.resource == "clustertrainingruntimes"
		if sel, err := metav1.LabelSelectorAsSelector(w.objects); err != nil || (isRuntime && sel.Matches(optedOut)) || (!isRuntime && w.objects != nil) {
			t.Errorf("%s: objectSelector %v; want runtimes labelled %s=disabled skipped, TrainJobs and OptimizationJobs all reviewed", w.name, w.objects, LabelWebhookValidation)
		}
	}
}
