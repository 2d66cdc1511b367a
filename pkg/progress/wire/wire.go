// Package wire is the progress endpoint's contract with trainer pods: the endpoint
// path, the token audience, the request body, the environment variables and the
// projected volume layout injected into trainer containers. It must stay exactly
// upstream's, so the same training images and SDK helpers work unchanged
// (docs/compatibility.md#training-progress-kep-2779-trainerstatus,
// docs/compatibility.md).
//
// It is a leaf: the ML policy stage, which injects the variables and volume, and the
// progress server, which serves the endpoint, both import it, and neither imports the
// other.
package wire

import (
	"fmt"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// FeatureGate is the Configuration.featureGates name that turns the progress server and
// the injection into trainer containers on or off (upstream's name; on by default in
// Trainyard, off upstream).
const FeatureGate = "TrainJobStatus"

// Environment variables injected into every container of the trainer replicatedJob
// (upstream's names).
const (
	// EnvServerURL is the full URL a trainer POSTs its progress to.
	EnvServerURL = "KUBEFLOW_TRAINER_SERVER_URL"
	// EnvCACert is the path of the CA certificate that signs the server's certificate.
	EnvCACert = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
	// EnvToken is the path of the service-account token to send as a bearer token.
	EnvToken = "KUBEFLOW_TRAINER_SERVER_TOKEN"
)

// The projected volume injected into the trainer replicatedJob's pods (upstream's
// layout): a service-account token with the TrainJob's Audience and the CA
// certificate, mounted read-only at MountPath.
const (
	VolumeName = "kubeflow-trainer-token"
	MountPath  = "/var/run/secrets/kubeflow/trainer"
	// TokenFile and CACertFile are the file names under MountPath.
	TokenFile  = "token"
	CACertFile = "ca.crt"
	// TokenExpirationSeconds is the projected token's lifetime; the kubelet refreshes it.
	TokenExpirationSeconds = 3600
	// CAConfigMapKey is the key of the CA bundle (PEM) in the CA ConfigMap.
	CAConfigMapKey = "ca.crt"
)

// CAConfigMapName is the ConfigMap, one per namespace with TrainJobs, holding the CA
// bundle (CAConfigMapKey) that the projected volume mounts. Upstream writes one
// "<name>-tls-config" ConfigMap per TrainJob; one per namespace carries the same bytes at
// one write per namespace instead of one per TrainJob (the file layout in the pod is the
// same).
const CAConfigMapName = "trainyard-status-server-ca"

// FieldManager is the field manager of trainerStatus writes: upstream's, so a cluster
// switching from upstream's controller keeps one owner of the field.
const FieldManager = "trainer-status"

// MaxBodyBytes is the largest request body accepted (upstream's 64 KiB).
const MaxBodyBytes = 64 << 10

// Path returns the URL path of the TrainJob's progress endpoint:
// /apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status.
func Path(namespace, name string) string {
	return fmt.Sprintf("/apis/trainer.kubeflow.org/v1alpha1/namespaces/%s/trainjobs/%s/status", namespace, name)
}

// Audience returns the audience a trainer's projected token carries, and the only one
// the server accepts for the TrainJob's endpoint:
// trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status.
func Audience(namespace, name string) string {
	return fmt.Sprintf("trainer.kubeflow.org/v1alpha1/namespaces/%s/trainjobs/%s/status", namespace, name)
}

// UpdateTrainJobStatusRequest is the request body of the progress endpoint, and the
// body of its 200 response (the request, echoed): upstream's
// {"trainerStatus": {...}}. A nil TrainerStatus is accepted and writes nothing.
type UpdateTrainJobStatusRequest struct {
	TrainerStatus *trainer.TrainerStatus `json:"trainerStatus,omitempty"`
}
