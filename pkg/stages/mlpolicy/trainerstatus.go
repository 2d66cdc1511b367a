package mlpolicy

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

type trainerStatus struct {
	url func(namespace, name string) string
}

// TrainerStatus returns the plugin that tells trainer containers where and how to
// report their progress to the progress server (KEP-2779; upstream v2.3's
// TrainJobStatus plugin,
// docs/compatibility.md#training-progress-kep-2779-trainerstatus). url gives the
// server's full URL for a TrainJob's namespace and name (progress.URLFunc); the plugin
// must only be in the list while the server runs (progress.Serving), which
// stages.Plugins ensures.
//
// It acts on every runtime, after the framework plugins (list it last). In the trainer
// replicatedJob (the first with the trainer ancestor label, upstream's trainer PodSet:
// "node" for Torch, JAX, XGBoost and PlainML runtimes, "launcher" for MPI, where mpirun
// and so rank 0's reports run) it:
//
//   - sets, in every regular container (init containers are not the trainer), env
//     KUBEFLOW_TRAINER_SERVER_URL = url(namespace, name), KUBEFLOW_TRAINER_SERVER_CA_CERT
//     = /var/run/secrets/kubeflow/trainer/ca.crt and KUBEFLOW_TRAINER_SERVER_TOKEN =
//     /var/run/secrets/kubeflow/trainer/token, replacing variables of the same names
//     (from the runtime or spec.trainer.env, as upstream), and a read-only mount of
//     volume kubeflow-trainer-token at /var/run/secrets/kubeflow/trainer (replacing a
//     mount at that path);
//   - sets the pod volume kubeflow-trainer-token (replacing one of that name): a
//     projected service-account token with audience wire.Audience(namespace, name),
//     expiring after 3600 s (the kubelet refreshes it), at "token", and key ca.crt of
//     ConfigMap wire.CAConfigMapName at "ca.crt".
//
// Difference from upstream, same files in the pod: the CA comes from one ConfigMap per
// namespace (trainyard-status-server-ca, kept by progress.CAPublisher) instead of a
// "<name>-tls-config" ConfigMap per TrainJob, so the plan has no side object for it.
//
// A runtime without a trainer replicatedJob gets nothing, as upstream. The plugin never
// rejects a runtime or a TrainJob, so admission is unchanged by it, and applying it
// twice gives the same JobSet.
func TrainerStatus(url func(namespace, name string) string) Plugin { return trainerStatus{url: url} }

// Name is upstream's plugin name, which is also the feature gate's.
func (trainerStatus) Name() string { return wire.FeatureGate }

// Enabled implements Plugin: every runtime, whatever its mlPolicy.
func (trainerStatus) Enabled(*trainer.MLPolicy) bool { return true }

// ValidateRuntime implements Plugin: nothing is required of the runtime.
func (trainerStatus) ValidateRuntime(*trainer.TrainingRuntimeSpec) field.ErrorList { return nil }

// ValidateTrainJob implements Plugin: every TrainJob is accepted; its env of the same
// names is replaced, as upstream.
func (trainerStatus) ValidateTrainJob(*trainer.TrainJob, *plan.Plan) field.ErrorList { return nil }

// Apply implements Plugin. It does not fail.
func (s trainerStatus) Apply(tj *trainer.TrainJob, p *plan.Plan) error {
	rj := plan.TrainerJob(p.JobSet)
	if rj == nil {
		return nil
	}
	env := []corev1.EnvVar{
		{Name: wire.EnvServerURL, Value: s.url(tj.Namespace, tj.Name)},
		{Name: wire.EnvCACert, Value: wire.MountPath + "/" + wire.CACertFile},
		{Name: wire.EnvToken, Value: wire.MountPath + "/" + wire.TokenFile},
	}
	mount := corev1.VolumeMount{Name: wire.VolumeName, MountPath: wire.MountPath, ReadOnly: true}
	pod := plan.PodSpec(rj)
	for i := range pod.Containers {
		c := &pod.Containers[i]
		c.Env = plan.UpsertEnv(c.Env, env...)
		c.VolumeMounts = upsertVolumeMount(c.VolumeMounts, mount)
	}
	pod.Volumes = upsertVolume(pod.Volumes, progressVolume(tj))
	return nil
}

// progressVolume is the projected volume of tj's token and the server's CA.
func progressVolume(tj *trainer.TrainJob) corev1.Volume {
	return corev1.Volume{
		Name: wire.VolumeName,
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience:          wire.Audience(tj.Namespace, tj.Name),
					ExpirationSeconds: ptr.To[int64](wire.TokenExpirationSeconds),
					Path:              wire.TokenFile,
				}},
				{ConfigMap: &corev1.ConfigMapProjection{
					LocalObjectReference: corev1.LocalObjectReference{Name: wire.CAConfigMapName},
					Items:                []corev1.KeyToPath{{Key: wire.CAConfigMapKey, Path: wire.CACertFile}},
				}},
			},
		}},
	}
}
