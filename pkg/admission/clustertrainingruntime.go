package admission

import (
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// validateClusterTrainingRuntime answers the ClusterTrainingRuntime validating webhook.
func (d *Deps) validateClusterTrainingRuntime(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	obj, old, resp := decodeRequest[trainer.ClusterTrainingRuntime](req)
	if resp != nil {
		return resp
	}
	return verdict(d.ValidateClusterTrainingRuntime(old, obj))
}

// ValidateClusterTrainingRuntime checks a ClusterTrainingRuntime on CREATE (old nil)
// and UPDATE with ValidateRuntime's rules and warnings. On CREATE, one labelled
// trainer.kubeflow.org/support=deprecated also gets upstream's warning
// `ClusterTrainingRuntime "<name>" is deprecated and will be removed in a future
// release of Kubeflow Trainer. See runtime deprecation policy: <URL>`
// (docs/compatibility.md#runtime-validation), even when labelled
// trainer.kubeflow.org/webhook-validation=disabled.
func (d *Deps) ValidateClusterTrainingRuntime(old, obj *trainer.ClusterTrainingRuntime) (warnings []string, errs field.ErrorList) {
	if old == nil && obj.Labels[trainer.LabelSupport] == trainer.SupportDeprecated {
		warnings = append(warnings, fmt.Sprintf("ClusterTrainingRuntime %q is deprecated and will be removed in a future release "+
			"of Kubeflow Trainer. See runtime deprecation policy: %s", obj.Name, deprecationPolicyURL))
	}
	var oldSpec *trainer.TrainingRuntimeSpec
	if old != nil {
		oldSpec = &old.Spec
	}
	more, errs := d.ValidateRuntime(trainer.ClusterTrainingRuntimeKind, &obj.ObjectMeta, oldSpec, &obj.Spec)
	return append(warnings, more...), errs
}
