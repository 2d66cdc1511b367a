/*
Copyright The Trainyard Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Configuration is the Trainyard controller's configuration file, read with --config.
// Command-line flags of the same meaning (e.g. --kube-api-qps) override the file.
type Configuration struct {
	metav1.TypeMeta `json:",inline"`

	// clientConnection configures the Kubernetes API client: qps defaults to 500, burst to
	// 1000 (upstream Trainer's 50 and 100 left the status stage's applies queuing on an
	// idle CPU in a burst: docs/scale.md). kubeconfig, when empty, means in-cluster config
	// or $KUBECONFIG.
	// +optional
	ClientConnection componentbaseconfigv1alpha1.ClientConnectionConfiguration `json:"clientConnection"`

	// leaderElection configures Lease-based leader election. Off by default (one
	// replica); the Helm chart turns it on. Lease name defaults to "trainyard-controller",
	// durations to 15s lease / 10s renew deadline / 2s retry.
	// +optional
	LeaderElection componentbaseconfigv1alpha1.LeaderElectionConfiguration `json:"leaderElection"`

	// metrics configures the Prometheus /metrics endpoint.
	// +optional
	Metrics MetricsConfiguration `json:"metrics"`

	// health configures the /healthz and /readyz endpoints.
	// +optional
	Health HealthConfiguration `json:"health"`

	// stages configures each pipeline stage's worker pool.
	// +optional
	Stages StagesConfiguration `json:"stages"`

	// rateLimit configures every stage queue's retry backoff and retry rate per namespace.
	// +optional
	RateLimit RateLimitConfiguration `json:"rateLimit"`

	// webhook configures the admission server (validating and defaulting webhooks for
	// TrainJob, TrainingRuntime and ClusterTrainingRuntime), served by every replica.
	// +optional
	Webhook WebhookConfiguration `json:"webhook"`
	// consistency configures the backstop that finds TrainJobs whose JobSet lags their
	// spec.
	// +optional
	Consistency ConsistencyConfiguration `json:"consistency"`
	// statusServer configures the training-progress server (KEP-2779, upstream's "status
	// server"): trainer pods POST their progress and Trainyard writes it to
	// TrainJob.status.trainerStatus. It is on while feature gate TrainJobStatus is (the
	// default in Trainyard).
	// +optional
	StatusServer StatusServerConfiguration `json:"statusServer"`
	// sideObjects configures the objects Trainyard creates next to a TrainJob's JobSet.
	// +optional
	SideObjects SideObjectsConfiguration `json:"sideObjects"`
	// watchNamespaces confines the controller to these namespaces: it lists and watches
	// TrainJobs, TrainingRuntimes, JobSets and every other namespaced object it reads
	// (side objects, PodGroups, DRA claims and templates, the progress server's CA
	// ConfigMaps) in each of them only, one watch per namespace, and never sees —
	// so never writes for — a TrainJob elsewhere. Cluster-scoped objects
	// (ClusterTrainingRuntimes, DeviceClasses, ResourceSlices, PriorityClasses) are still
	// watched whole. Empty (the default) means every namespace. Entries are namespace
	// names (DNS-1123 labels), without duplicates. The Helm chart's watchNamespaces
	// sets it and grants namespaced permissions through a Role in each of these
	// namespaces instead of a ClusterRole; upstream Trainer has no such setting.
	// +optional
	WatchNamespaces []string `json:"watchNamespaces,omitempty"`
	// featureGates turns Trainyard features on or off by name. Known gates:
	// TrainJobStatus (default true; upstream's default is false), the progress server
	// and the injection of its URL, token and CA into trainer containers. Other names
	// are accepted and ignored.
	// +optional
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// shutdownDelay is how long a replica keeps serving admission reviews and progress
	// reports after SIGTERM, with /readyz failing, before it closes its servers: the time
	// for every client of its Service (kube-proxy, the API server's webhook client) to
	// stop sending it new connections, so that a rolling update refuses no webhook call
	// (failurePolicy Fail) and loses no report. The leader's pipeline drains and its
	// Lease is released meanwhile. Default 0s (make run: one process, nothing routes to
	// it through a Service); the Helm chart sets 5s. It must fit, with the progress
	// server's drain (up to 15 s), in the pod's terminationGracePeriodSeconds.
	// +optional
	ShutdownDelay *metav1.Duration `json:"shutdownDelay,omitempty"`
}

// SideObjectsConfiguration configures the side objects of TrainJobs
// (docs/design/side-objects.md).
type SideObjectsConfiguration struct {
	// secretNameKeySecret is the Secret, in the controller's namespace, whose data key
	// "key" (32 random bytes) makes the names of create-only Secrets (MPI's SSH key,
	// Flux's CURVE certificate) unguessable: "<trainjob>-mpi-ssh-auth-<suffix>", the
	// suffix an HMAC of the TrainJob's uid under that key. The controller reads it by
	// name at start and, when it is absent or has no key, generates the key and stores
	// it (every replica ends with the same one). Changing or deleting the key renames the
	// Secrets of TrainJobs built afterwards; running pods keep theirs. Defaults to
	// "trainyard-secret-name-key".
	// +optional
	SecretNameKeySecret string `json:"secretNameKeySecret,omitempty"`
}

// StatusServerConfiguration configures the training-progress server (KEP-2779).
//
// Trainer containers are told the server's URL in KUBEFLOW_TRAINER_SERVER_URL, upstream's
// form: https://<webhook.serviceName>.<controller namespace>.svc:<port of bindAddress>
// followed by the TrainJob's path. The Service named webhook.serviceName must therefore
// expose the port of bindAddress and forward it to the same container port (the Helm
// chart does); there is no separate service port setting.
type StatusServerConfiguration struct {
	// bindAddress is the host:port of the HTTPS progress server, served by every
	// replica with the admission server's certificate; its port is also the port of the
	// URL injected into trainer containers. "0" turns the server off, and with it the
	// injection into trainer containers and the CA ConfigMaps. Defaults to ":10443"
	// (upstream's statusServer.port).
	// +optional
	BindAddress string `json:"bindAddress,omitempty"`
	// writePeriod is the shortest time between two trainerStatus writes of one
	// TrainJob: reports arriving faster are coalesced and the latest one is written. At
	// least 1s. Defaults to 10s.
	// +optional
	WritePeriod *metav1.Duration `json:"writePeriod,omitempty"`
	// qps and burst bound the trainerStatus writes of all TrainJobs together, in writes
	// per second and token-bucket size. Default to 50 and 100.
	// +optional
	QPS *float32 `json:"qps,omitempty"`
	// +optional
	Burst *int32 `json:"burst,omitempty"`
	// namespaceQPS and namespaceBurst bound the trainerStatus writes of the TrainJobs of
	// one namespace, so one namespace's many jobs cannot use up qps. Default to 10 and
	// 20.
	// +optional
	NamespaceQPS *float32 `json:"namespaceQPS,omitempty"`
	// +optional
	NamespaceBurst *int32 `json:"namespaceBurst,omitempty"`
	// maxConnections is how many connections a replica's progress server has open at
	// once (~40 KiB each); more wait in the kernel's accept queue. It bounds the
	// server's memory. At least 2. Defaults to 5120.
	// +optional
	MaxConnections *int32 `json:"maxConnections,omitempty"`
	// maxKeepAliveConnections is how many of them are kept open between reports; a
	// connection answered while more are open is closed after its answer, and its
	// trainer dials again (a TLS handshake) for its next report. At least 1, below
	// maxConnections. Defaults to 4096, for 4,096 trainers reporting through one replica
	// without dialling again.
	// +optional
	MaxKeepAliveConnections *int32 `json:"maxKeepAliveConnections,omitempty"`
	// maxReportsInFlight is how many reports a replica handles at once; more are
	// answered 429 Too Many Requests with Retry-After: 1 before their token is reviewed.
	// At least 1. Defaults to 256.
	// +optional
	MaxReportsInFlight *int32 `json:"maxReportsInFlight,omitempty"`
	// maxPendingReportBytes bounds, in bytes, the memory the reports a replica has
	// accepted and not yet written hold together (each measured as the decoded report
	// retains it: ~42 KiB for the largest, 256 metrics of 64-character names and
	// values; ~930 bytes for ten short metrics). At the bound a report that does not
	// fit is answered 429 Too Many Requests with Retry-After: 1 and not kept, while a
	// newer report of a TrainJob still replaces its pending one when it fits; no report
	// answered 200 is dropped to make room. At least 1048576 (1 MiB). Defaults to
	// 33554432 (32 MiB): more of the largest reports than the default write limits
	// write in a period, and tens of thousands of typical ones.
	// +optional
	MaxPendingReportBytes *int64 `json:"maxPendingReportBytes,omitempty"`
}

// MetricsConfiguration configures the metrics endpoint (and /debug/pprof with
// --profiling, served on the same address behind the same filter).
type MetricsConfiguration struct {
	// bindAddress is the host:port of the /metrics endpoint; "0" disables it.
	// Defaults to ":8080".
	// +optional
	BindAddress string `json:"bindAddress,omitempty"`

	// secureServing serves the endpoint over HTTPS, with the controller's serving
	// certificate when the admission or progress server runs and with a self-signed
	// certificate generated at start otherwise. false serves plain HTTP (then
	// auth.enabled must be false: a bearer token must not travel in clear text).
	// Defaults to true, as upstream's metrics.secureServing.
	// +optional
	SecureServing *bool `json:"secureServing,omitempty"`

	// auth configures authentication and authorization of the endpoint's requests.
	// +optional
	Auth MetricsAuthConfiguration `json:"auth"`
}

// MetricsAuthConfiguration configures the filter in front of the metrics endpoint.
type MetricsAuthConfiguration struct {
	// enabled requires every request to carry a bearer token that a TokenReview
	// (authentication.k8s.io/v1) authenticates and a SubjectAccessReview
	// (authorization.k8s.io/v1) authorizes for verb "get" on the request's
	// non-resource URL (/metrics, /debug/pprof/...), as Kubernetes components do: 401
	// without a valid token, 403 when not authorized. Needs secureServing. Defaults
	// to secureServing (upstream defaults it to false).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// HealthConfiguration configures the probe endpoints.
type HealthConfiguration struct {
	// healthProbeBindAddress is the host:port serving /healthz and /readyz. Defaults to
	// ":8081".
	// +optional
	HealthProbeBindAddress string `json:"healthProbeBindAddress,omitempty"`
}

// StagesConfiguration configures each pipeline stage: one StageConfiguration field per
// row of the stage table (package stages), in pipeline order, which the table's test
// checks. Fields default to DefaultStageWorkers workers, status to DefaultStatusWorkers.
type StagesConfiguration struct {
	// resolveRuntime finds the TrainJob's runtime. Defaults to 4 workers.
	// +optional
	ResolveRuntime StageConfiguration `json:"resolveRuntime"`
	// mergePatches merges the runtime template, spec.trainer and runtimePatches. Defaults
	// to 4 workers.
	// +optional
	MergePatches StageConfiguration `json:"mergePatches"`
	// mlPolicy applies the framework policy (Torch, MPI, JAX...). Defaults to 4 workers.
	// +optional
	MLPolicy StageConfiguration `json:"mlPolicy"`
	// gang applies the podGroupPolicy (Workload API, KAI, coscheduling, Volcano).
	// Defaults to 4 workers.
	// +optional
	Gang StageConfiguration `json:"gang"`
	// draClaims wires DRA resource claims. Defaults to 4 workers.
	// +optional
	DRAClaims StageConfiguration `json:"draClaims"`
	// status applies the JobSet and writes TrainJob status; it sees the most traffic,
	// and each sync that writes waits on the API server, so its worker count bounds how
	// many applies are in flight. Defaults to 32 workers (issue 9: with 8, a burst of
	// 2,000 TrainJobs queued 4 s for this stage while the API server had idle CPU).
	// +optional
	Status StageConfiguration `json:"status"`
}

// WebhookConfiguration configures the admission server and its certificates.
type WebhookConfiguration struct {
	// bindAddress is the host:port of the HTTPS admission server; "0" disables admission.
	// Defaults to ":9443" (upstream's container port).
	// +optional
	BindAddress string `json:"bindAddress,omitempty"`
	// certificates says where the serving certificate comes from.
	// +optional
	Certificates WebhookCertificates `json:"certificates"`
	// serviceName is the Service in front of the admission port, in the controller's
	// namespace: self-managed certificates are issued for its DNS names. Defaults to
	// "trainyard-webhook".
	// +optional
	ServiceName string `json:"serviceName,omitempty"`
	// validatingWebhookConfigurationName and mutatingWebhookConfigurationName name the
	// webhook configurations whose caBundle self-managed certificates keep current (and
	// that registerURL creates). Default to "trainyard-validator" and
	// "trainyard-defaulter".
	// +optional
	ValidatingWebhookConfigurationName string `json:"validatingWebhookConfigurationName,omitempty"`
	// +optional
	MutatingWebhookConfigurationName string `json:"mutatingWebhookConfigurationName,omitempty"`
	// registerURL, when set, makes the controller create or update the two webhook
	// configurations itself, with clientConfig.url = registerURL + each webhook's path,
	// for a controller running outside the cluster (make run, the e2e tests: e.g.
	// "https://127.0.0.1:9443"). Self-managed certificates then also cover the URL's
	// host. Empty (the default) leaves the configurations to the Helm chart.
	// +optional
	RegisterURL string `json:"registerURL,omitempty"`
}

// WebhookCertificates says where the admission server's certificate comes from.
type WebhookCertificates struct {
	// mode is "SelfManaged" (the default: the controller creates a CA and a serving
	// certificate in secretName, rotates them before expiry and writes the CA bundle
	// into the webhook configurations) or "Provided" (tls.crt and tls.key in certDir,
	// e.g. a cert-manager or user Secret mounted there, reloaded when the files change;
	// the controller writes nothing).
	// +optional
	Mode string `json:"mode,omitempty"`
	// secretName is the Secret in the controller's namespace holding self-managed
	// certificates. Defaults to "trainyard-webhook-certs".
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// certDir holds tls.crt and tls.key in mode Provided, and ca.crt, the CA that
	// signed tls.crt, which the progress server publishes to trainer pods. Without
	// ca.crt that CA is taken from tls.crt (the certificates after the leaf, or a
	// self-signed leaf); with the progress server on, the controller refuses to start
	// when there is none. Defaults to "/tmp/k8s-webhook-server/serving-certs".
	// +optional
	CertDir string `json:"certDir,omitempty"`
	// caValidity and servingValidity are the lifetimes of a new self-managed CA and
	// serving certificate; each is renewed once two thirds of it have passed (a new CA
	// is published beside the old one before it signs anything). Default to 3 years
	// (26280h) and 90 days (2160h); servingValidity must not exceed caValidity.
	// +optional
	CAValidity *metav1.Duration `json:"caValidity,omitempty"`
	// +optional
	ServingValidity *metav1.Duration `json:"servingValidity,omitempty"`
	// caPublishDelay is how long a new CA must have been published to the servers'
	// clients before a serving certificate it signed is served: self-managed, in the
	// webhook configurations and the progress server's CA ConfigMaps; provided, a
	// renewed pair whose certificate the published bundle does not verify yet is held
	// back until that bundle has been in every CA ConfigMap this long. It covers the
	// time an API server takes to see a new caBundle and a kubelet to refresh the
	// ca.crt a trainer pod mounts (up to its syncFrequency, 1m by default, plus
	// jitter). Defaults to 5m; must be positive (docs/design/certificates.md).
	// +optional
	CAPublishDelay *metav1.Duration `json:"caPublishDelay,omitempty"`
}

// Webhook certificate modes.
const (
	CertificatesSelfManaged = "SelfManaged"
	CertificatesProvided    = "Provided"
)

// ConsistencyConfiguration configures the consistency sweep: a periodic pass over the
// informer caches (no API reads) that finds TrainJobs whose JobSet was built from an
// older generation while it may still change, or is missing with no condition saying
// why. The pipeline never loses an update by design; the sweep is a backstop that makes
// a lost one visible (trainyard_trainjobs_jobset_lagging,
// trainyard_consistency_sweep_requeues_total) and never permanent.
type ConsistencyConfiguration struct {
	// sweepPeriod is the time between sweeps. A TrainJob found lagging on two sweeps in a
	// row while the pipeline is not working on it is sent back to the first stage. "0s"
	// turns the sweep off. Defaults to 1m.
	// +optional
	SweepPeriod *metav1.Duration `json:"sweepPeriod,omitempty"`
	// lagThreshold is how long a TrainJob's JobSet may lag before the TrainJob counts in
	// trainyard_trainjobs_jobset_lagging. Defaults to 5m.
	// +optional
	LagThreshold *metav1.Duration `json:"lagThreshold,omitempty"`
}

// StageConfiguration configures one stage.
type StageConfiguration struct {
	// workers is the number of goroutines processing the stage's queue, at least 1.
	// +optional
	Workers *int32 `json:"workers,omitempty"`
}

// RateLimitConfiguration configures the stage queues' rate limiters: the larger of a
// per-item exponential backoff (baseDelay doubling up to maxDelay) and a token bucket
// per namespace (qps, burst), so one namespace's failing TrainJobs do not delay the
// retries of another's.
type RateLimitConfiguration struct {
	// baseDelay is the first retry delay of an item. Defaults to 5ms.
	// +optional
	BaseDelay *metav1.Duration `json:"baseDelay,omitempty"`
	// maxDelay caps an item's retry delay. Defaults to 5m.
	// +optional
	MaxDelay *metav1.Duration `json:"maxDelay,omitempty"`
	// qps is the rate, in items per second, at which retried items of one namespace
	// re-enter a stage. Defaults to 10.
	// +optional
	QPS *float32 `json:"qps,omitempty"`
	// burst is the token bucket size of that rate, per namespace. Defaults to 100.
	// +optional
	Burst *int32 `json:"burst,omitempty"`
	// refusalThreshold is how many times in a row the API server may refuse to write a
	// TrainJob's JobSet or side object with an error retrying does not fix (403
	// Forbidden, 422 Invalid, 400 BadRequest, 413 RequestEntityTooLarge, 405
	// MethodNotAllowed; e.g. a policy denying JobSets in the namespace) before the
	// TrainJob gets JobSetReady=False, reason Write<reason>, naming the object and
	// quoting the server, and is tried again every refusalDelay instead of with the
	// backoff above. At least 1. Defaults to 5.
	// +optional
	RefusalThreshold *int32 `json:"refusalThreshold,omitempty"`
	// refusalDelay is the wait between two write attempts of a TrainJob past
	// refusalThreshold; a change to the TrainJob's spec brings it back at once. Positive.
	// Defaults to 10m.
	// +optional
	RefusalDelay *metav1.Duration `json:"refusalDelay,omitempty"`
}
