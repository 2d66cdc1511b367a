package trainjob

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// batchJobTemplate is the trainer replicatedJob template of the tests' own runtimes:
// the shape of upstream torch-distributed, with pod annotations for kwok and no Job
// retries, so a failing pod fails its Job at once.
func batchJobTemplate(podAnnotations map[string]string) batchv1.JobTemplateSpec {
	return batchv1.JobTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{trainer.LabelTrainJobAncestor: trainer.AncestorTrainer}},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: podAnnotations},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: trainer.ContainerNode, Image: "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
				}}},
			},
		},
	}
}
