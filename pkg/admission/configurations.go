package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Webhook names, upstream's (docs/compatibility.md#admission-rules): clients and tools
// that look for a TrainJob's defaulter or validator by name find them.
const (
	WebhookDefaultTrainJob                = "defaulter.trainjob.trainer.kubeflow.org"
	WebhookValidateTrainJob               = "validator.trainjob.trainer.kubeflow.org"
	WebhookValidateTrainingRuntime        = "validator.trainingruntime.trainer.kubeflow.org"
	WebhookValidateClusterTrainingRuntime = "validator.clustertrainingruntime.trainer.kubeflow.org"
	// WebhookValidateOptimizationJob is Trainyard's, named by upstream's convention
	// (docs/compatibility.md#optimizationjob-validation).
	WebhookValidateOptimizationJob = "validator.optimizationjob.trainer.kubeflow.org"

	// TimeoutSeconds is how long the API server waits for a review; the rules read only
	// caches, so a review takes milliseconds — but for an OptimizationJob's CREATE, which
	// asks one SubjectAccessReview (bounded by trialAuthorizationTimeout).
	TimeoutSeconds = 10
)

// WebhookConfigurations returns the MutatingWebhookConfiguration mutatingName and the
// ValidatingWebhookConfiguration validatingName that send TrainJob, TrainingRuntime,
// ClusterTrainingRuntime and OptimizationJob creations and updates to the five
// endpoints of NewHandler, each endpoint reached at clientConfig(path) (a Service or a
// URL; its caBundle is the caller's). Every webhook fails closed (failurePolicy Fail, as
// upstream: an object that skipped validation could strand every TrainJob using it),
// has no side effects, matches equivalent API versions, and never sees kube-system; the
// runtime validators skip runtimes labelled LabelWebhookValidation=disabled. The Helm
// chart renders the same objects for a Service.
//
// The OptimizationJob webhook is registered whether or not the API server serves
// optimizationjobs, as the chart does (its CRDs ship together): the API server accepts
// a rule for a resource it does not serve and calls nothing for it, and an
// OptimizationJob CRD installed later is validated from its first object on. Its rules
// read only the runtime caches every replica keeps.
func WebhookConfigurations(mutatingName, validatingName string, clientConfig func(path string) admissionregistrationv1.WebhookClientConfig,
) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	notKubeSystem := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{metav1.NamespaceSystem},
	}}}
	validatedRuntimes := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: LabelWebhookValidation, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"disabled"},
	}}}
	rules := func(resource string, scope admissionregistrationv1.ScopeType) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{trainer.GroupName}, APIVersions: []string{trainer.SchemeGroupVersion.Version},
				Resources: []string{resource}, Scope: ptr.To(scope),
			},
		}}
	}
	validating := func(name, path, resource string, scope admissionregistrationv1.ScopeType, objects *metav1.LabelSelector) admissionregistrationv1.ValidatingWebhook {
		w := admissionregistrationv1.ValidatingWebhook{
			Name: name, ClientConfig: clientConfig(path), Rules: rules(resource, scope),
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			ObjectSelector: objects, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds: ptr.To[int32](TimeoutSeconds), AdmissionReviewVersions: []string{"v1"},
		}
		if scope == admissionregistrationv1.NamespacedScope {
			w.NamespaceSelector = notKubeSystem
		}
		return w
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: mutatingName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: WebhookDefaultTrainJob, ClientConfig: clientConfig(PathMutateTrainJob), Rules: rules("trainjobs", admissionregistrationv1.NamespacedScope),
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector: notKubeSystem, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds: ptr.To[int32](TimeoutSeconds), AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy: ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}},
	}
	validatingConfig := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: validatingName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			validating(WebhookValidateTrainJob, PathValidateTrainJob, "trainjobs", admissionregistrationv1.NamespacedScope, nil),
			validating(WebhookValidateTrainingRuntime, PathValidateTrainingRuntime, "trainingruntimes", admissionregistrationv1.NamespacedScope, validatedRuntimes),
			validating(WebhookValidateClusterTrainingRuntime, PathValidateClusterTrainingRuntime, "clustertrainingruntimes", admissionregistrationv1.ClusterScope, validatedRuntimes),
			validating(WebhookValidateOptimizationJob, PathValidateOptimizationJob, "optimizationjobs", admissionregistrationv1.NamespacedScope, nil),
		},
	}
	return mutating, validatingConfig
}
