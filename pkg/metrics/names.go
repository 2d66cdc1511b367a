package metrics

// Metric names: every series Trainyard exports is named in this file.
//
// Trainyard's own metrics carry the "trainyard_" prefix. The workqueue metrics
// keep client-go's standard names (no prefix, label "name") so that stock
// controller dashboards and alerts work unchanged.
const (
	// WorkqueueDepth is a gauge (items): keys waiting in a stage queue, not
	// counting keys being processed or waiting out an AddAfter delay.
	// Labels: name (stage).
	WorkqueueDepth = "workqueue_depth"

	// WorkqueueAddsTotal is a counter (adds): keys added to a stage queue.
	// Adds of a key that is already queued are coalesced and not counted.
	// Labels: name (stage).
	WorkqueueAddsTotal = "workqueue_adds_total"

	// WorkqueueQueueDurationSeconds is a histogram (seconds): time a key waits
	// in a stage queue before a worker picks it up. Buckets: 1 ms … 600 s.
	// Labels: name (stage).
	WorkqueueQueueDurationSeconds = "workqueue_queue_duration_seconds"

	// WorkqueueWorkDurationSeconds is a histogram (seconds): time from a
	// worker picking a key up to marking it done. Buckets: 1 ms … 600 s.
	// Labels: name (stage).
	WorkqueueWorkDurationSeconds = "workqueue_work_duration_seconds"

	// WorkqueueUnfinishedWorkSeconds is a gauge (seconds): summed age of the
	// keys being processed, refreshed every 500 ms. A steady rise means a
	// stuck worker; graph it with deriv(), not rate(). Labels: name (stage).
	WorkqueueUnfinishedWorkSeconds = "workqueue_unfinished_work_seconds"

	// WorkqueueLongestRunningProcessorSeconds is a gauge (seconds): age of the
	// oldest key being processed, refreshed every 500 ms. Labels: name (stage).
	WorkqueueLongestRunningProcessorSeconds = "workqueue_longest_running_processor_seconds"

	// WorkqueueRetriesTotal is a counter (delayed adds): client-go counts
	// every AddAfter, so this includes both rate-limited retries and
	// requeue-after results. Labels: name (stage).
	WorkqueueRetriesTotal = "workqueue_retries_total"

	// StageDurationSeconds is a histogram (seconds): time spent in one
	// Stage.Sync call, API calls included. Buckets: 1 ms … 60 s.
	// Labels: stage, result (Result* values).
	StageDurationSeconds = "trainyard_stage_duration_seconds"

	// StageSyncsTotal is a counter (syncs): Stage.Sync calls by outcome.
	// Labels: stage, result (Result* values).
	StageSyncsTotal = "trainyard_stage_syncs_total"

	// StageRetriesTotal is a counter (retries): keys a stage put back on its
	// queue with rate-limited backoff, because Sync failed, panicked or
	// asked to be retried. Labels: stage.
	StageRetriesTotal = "trainyard_stage_retries_total"

	// StageErrorsTotal is a counter (errors): failed Stage.Sync calls by
	// cause. Labels: stage, reason (Reason* values).
	StageErrorsTotal = "trainyard_stage_errors_total"

	// StagePanicsTotal is a counter (panics): Stage.Sync calls that panicked.
	// Each is also counted as an error with reason "internal" and retried.
	// Labels: stage.
	StagePanicsTotal = "trainyard_stage_panics_total"

	// StageInflight is a gauge (workers): workers of a stage currently inside
	// Stage.Sync. Labels: stage.
	StageInflight = "trainyard_stage_inflight"

	// StageWorkers is a gauge (workers): configured worker pool size of a
	// stage; inflight/workers is the pool's utilisation. Labels: stage.
	StageWorkers = "trainyard_stage_workers"

	// PipelineKeysInFlight is a gauge (TrainJobs): keys past the first stage
	// and not yet out of the pipeline, each with a plan in memory; a key waiting
	// out a retry backoff gives its slot up. At PipelineMaxKeysInFlight the
	// first stage admits no new key until one leaves: a burst then waits in the
	// first queue.
	PipelineKeysInFlight = "trainyard_pipeline_keys_in_flight"

	// PipelineMaxKeysInFlight is a gauge (TrainJobs): the bound on
	// PipelineKeysInFlight; 0 means unbounded.
	PipelineMaxKeysInFlight = "trainyard_pipeline_max_keys_in_flight"

	// WritesRefusedTotal is a counter (writes): writes of a TrainJob's JobSet
	// or side objects by the status stage that the API server refused with an
	// error retrying does not fix, each attempt counted. A TrainJob refused
	// several times in a row gets JobSetReady=False, reason Write<reason>, and
	// is then tried again every refusal delay (10 min by default), so a
	// steadily increasing series means TrainJobs held by such a refusal.
	// Labels: reason (Refused* values: the API server's metav1.StatusReason).
	WritesRefusedTotal = "trainyard_writes_refused_total"

	// TrainJobsJobSetLagging is a gauge (TrainJobs): TrainJobs whose JobSet has
	// lagged their spec for longer than the consistency sweep's lag threshold:
	// built from an older TrainJob generation while it may still change (the
	// TrainJob or the JobSet is suspended), or missing, with no condition saying
	// why. Set by each sweep of the leader; a TrainJob stuck in retries counts.
	TrainJobsJobSetLagging = "trainyard_trainjobs_jobset_lagging"

	// ConsistencySweepRequeuesTotal is a counter (TrainJobs): TrainJobs the
	// consistency sweep found lagging on two sweeps in a row while the pipeline
	// was not working on them, and sent back to the first stage. The pipeline
	// never loses an update by design, so any increase is a bug to report.
	ConsistencySweepRequeuesTotal = "trainyard_consistency_sweep_requeues_total"

	// ConsistencySweepsTotal is a counter (sweeps): consistency sweeps over the
	// informer caches, each reading only the caches.
	ConsistencySweepsTotal = "trainyard_consistency_sweeps_total"

	// JobSetCreationLatencySeconds is a histogram (seconds): end-to-end time
	// from a TrainJob's creationTimestamp to this process creating its
	// JobSet, observed once per TrainJob UID. Buckets: 0.1 s … 2 h.
	// Labels: runtime_kind (RuntimeKind* values).
	JobSetCreationLatencySeconds = "trainyard_jobset_creation_latency_seconds"

	// TrainJobs is a gauge (TrainJobs): TrainJobs in the informer cache by
	// phase, computed at scrape time. Labels: phase (Phase* values).
	TrainJobs = "trainyard_trainjobs"

	// TrainJobsByRuntime is a gauge (TrainJobs): TrainJobs in the informer cache
	// by phase and by the runtime they reference, computed at scrape time: the
	// failed or suspended TrainJobs of one runtime, say. Bounded: only runtimes
	// that exist in the cache are named, the first MaxRuntimeSeries (50) by kind
	// and name; TrainJobs of a missing runtime, of a runtime past the cap or of
	// another kind count under runtime="<other>". A TrainingRuntime's namespace
	// is not a label: copies of one runtime in many namespaces share a series. A
	// deleted runtime's series are gone at the next scrape. Series: 5 per named
	// runtime, plus 15. Labels: phase (Phase* values), runtime_kind (RuntimeKind*
	// values), runtime (a cached runtime's name, or RuntimeOther).
	TrainJobsByRuntime = "trainyard_trainjobs_by_runtime"

	// CertificateExpiryTimestampSeconds is a gauge (Unix seconds): the NotAfter
	// of the self-managed serving certificate this process serves, and of the
	// active CA that signs it. Rotation replaces them once RenewFraction of
	// their lifetime has passed, so time() approaching this value means
	// rotation is failing. Absent when the controller does not manage its
	// certificates. Labels: certificate (Certificate* values).
	CertificateExpiryTimestampSeconds = "trainyard_certificate_expiry_timestamp_seconds"

	// CertificateRotationsTotal is a counter (rotations): certificates this
	// process renewed and stored in the certificate Secret, not counting the
	// first ones it created. Summed over replicas it counts every rotation.
	// Labels: certificate (Certificate* values).
	CertificateRotationsTotal = "trainyard_certificate_rotations_total"

	// AdmissionRequestsTotal is a counter (reviews): AdmissionReviews the
	// admission webhooks answered, on every replica, by outcome; a denial is
	// result "denied". The webhooks are validate and mutate for TrainJob and
	// validate for TrainingRuntime, ClusterTrainingRuntime and OptimizationJob; the CREATE and
	// UPDATE series exist from start-up. Requests refused at the HTTP level
	// (not a POSTed AdmissionReview) are not counted. Labels: webhook
	// (Webhook* values), kind (AdmissionKind* values), operation (Operation*
	// values), result (Admission* values).
	AdmissionRequestsTotal = "trainyard_admission_requests_total"

	// AdmissionDurationSeconds is a histogram (seconds): time from receiving an
	// AdmissionReview to writing the answer, TLS and network excluded; the API
	// server's timeoutSeconds bounds the whole call. Buckets: 1 ms … 10 s.
	// Labels: webhook, kind, operation.
	AdmissionDurationSeconds = "trainyard_admission_duration_seconds"

	// AdmissionWarningsTotal is a counter (warnings): warning messages the
	// admission webhooks returned (kubectl prints each), whether the object
	// was admitted or not. Labels: webhook, kind, operation.
	AdmissionWarningsTotal = "trainyard_admission_warnings_total"

	// AdmissionRequestsRejectedTotal is a counter (requests): requests the
	// admission server refused before reviewing them, for its bounds (package
	// admission's Limits): reason too_many_requests (429 with Retry-After, which
	// the API server retries within the webhook's timeout, then applies its
	// failurePolicy) or too_large (413, a body over admission.MaxRequestBytes).
	// Rising with TrainJob writes refused, a flood is holding the server: see
	// the runbook. Labels: reason (ReasonTooManyRequests, ReasonTooLarge).
	AdmissionRequestsRejectedTotal = "trainyard_admission_requests_rejected_total"

	// ProgressReportsTotal is a counter (requests): progress reports trainer
	// pods POSTed to the progress endpoint of this replica (package progress,
	// KEP-2779), accepted or not; other paths and methods are not counted.
	ProgressReportsTotal = "trainyard_progress_reports_total"

	// ProgressReportsRejectedTotal is a counter (requests): progress reports
	// answered with an error, by reason: too_large (413, body over 64 KiB),
	// unauthenticated (403, no bearer token, or the API server does not
	// authenticate it for the TrainJob's audience), forbidden (403, the token
	// is not a pod's of the TrainJob), not_found (404, no such TrainJob),
	// invalid (422, a body that does not decode or fails validation), internal
	// (500, a TokenReview or pod read failed, or a panic), too_many_requests
	// (429, more reports in flight than the server handles at once), pending_bytes
	// (429, the reports waiting to be written hold statusServer.maxPendingReportBytes;
	// see ProgressPendingReportBytes). Accepted reports
	// are trainyard_progress_reports_total minus these. Labels: reason
	// (Reason* values).
	ProgressReportsRejectedTotal = "trainyard_progress_reports_rejected_total"

	// ProgressReportDurationSeconds is a histogram (seconds): time from
	// receiving a progress report to writing the answer, TLS excluded;
	// includes the TokenReview and pod read when the review is not cached,
	// never the status write, which happens later in the progress stage.
	// Buckets: 0.1 ms … 10 s.
	ProgressReportDurationSeconds = "trainyard_progress_report_duration_seconds"

	// ProgressTokenReviewsTotal is a counter (decisions): authorization
	// decisions on the bearer tokens of progress reports, by result (allowed,
	// unauthenticated, forbidden, not_found, error) and whether the decision
	// came from the review cache (cached "true") or cost a TokenReview and a
	// pod read (cached "false"). Errors are never cached. Labels: result,
	// cached.
	ProgressTokenReviewsTotal = "trainyard_progress_token_reviews_total"

	// ProgressReportsCoalescedTotal is a counter (reports): accepted progress
	// reports replaced by a newer report of the same TrainJob before being
	// written (at most one write per TrainJob per period).
	ProgressReportsCoalescedTotal = "trainyard_progress_reports_coalesced_total"

	// ProgressReportsDroppedTotal is a counter (reports): accepted progress
	// reports the progress stage did not write, by reason: unchanged (the
	// TrainJob already has this trainerStatus), stale (its lastUpdatedTime is
	// not newer than the stored one, e.g. another replica wrote a later
	// report, or than the pending one: a report that arrived late), gone (the
	// TrainJob was deleted, or re-created under the same name, before the
	// write). Labels: reason (Reason* values).
	ProgressReportsDroppedTotal = "trainyard_progress_reports_dropped_total"

	// ProgressPendingReportBytes is a gauge (bytes): what the progress reports
	// this replica accepted and has not written yet hold in memory, the reports
	// being written included, as package progress measures a decoded report
	// (progress.ReportBytes). At ProgressMaxPendingReportBytes a report that
	// would not fit is answered 429 (rejected, reason pending_bytes).
	ProgressPendingReportBytes = "trainyard_progress_pending_report_bytes"

	// ProgressMaxPendingReportBytes is a gauge (bytes): the bound on
	// ProgressPendingReportBytes (statusServer.maxPendingReportBytes); 0 means
	// unbounded.
	ProgressMaxPendingReportBytes = "trainyard_progress_max_pending_report_bytes"

	// ProgressWritesTotal is a counter (writes): server-side applies of
	// status.trainerStatus by the progress stage, by result (success, error).
	// A failed write is retried with backoff unless the API server rejected
	// it as invalid or the TrainJob is gone. Labels: result.
	ProgressWritesTotal = "trainyard_progress_writes_total"

	// AuthTokenReviewsTotal is a counter (reviews): the TokenReviews the
	// authenticated endpoints wanted to send for tokens missing from their
	// caches, by endpoint (progress, metrics) and by what their limiter
	// (pkg/util/authlimit) did: sent (to the API server), source_limited
	// (refused: the client address had spent its per-source budget; answered
	// 429), concurrency_limited (refused: the endpoint's reviews in flight were
	// at their bound; answered 429). A rise of the refused results is a flood
	// of unknown bearer tokens, or a restart's empty caches from clients that
	// share one address. Labels: endpoint, result.
	AuthTokenReviewsTotal = "trainyard_auth_token_reviews_total"

	// BuildInfo is a gauge, always 1, whose labels describe the running
	// binary. Labels: version, git_commit, go_version.
	BuildInfo = "trainyard_build_info"
)

// Label names.
const (
	LabelName        = "name" // workqueue metrics: the stage name
	LabelStage       = "stage"
	LabelResult      = "result"
	LabelReason      = "reason"
	LabelRuntimeKind = "runtime_kind"
	LabelRuntime     = "runtime"
	LabelVerb        = "verb"
	LabelPhase       = "phase"
	LabelVersion     = "version"
	LabelGitCommit   = "git_commit"
	LabelGoVersion   = "go_version"
	LabelCertificate = "certificate"
	LabelWebhook     = "webhook"
	LabelKind        = "kind"
	LabelOperation   = "operation"
	LabelCached      = "cached"
	LabelEndpoint    = "endpoint"
)

// Values of the "result" label: the outcome of one Stage.Sync call. They match
// the result codes of package engine one to one.
const (
	ResultContinue     = "continue"
	ResultRequeueAfter = "requeue_after"
	ResultWaitForEvent = "wait_for_event"
	ResultRetry        = "retry"
	ResultTerminal     = "terminal"
	ResultRestart      = "restart"
)

// Values of the "reason" label, see ErrorReason.
const (
	ReasonConflict  = "conflict"
	ReasonNotFound  = "not_found"
	ReasonInvalid   = "invalid"
	ReasonForbidden = "forbidden"
	ReasonThrottled = "throttled"
	ReasonTimeout   = "timeout"
	ReasonInternal  = "internal"
)

// Values of the "reason" label of trainyard_writes_refused_total: the API
// server's metav1.StatusReason of a refusal retrying does not fix. Any other
// value is recorded as ReasonInternal (no such write is counted today).
const (
	RefusedForbidden             = "Forbidden"
	RefusedInvalid               = "Invalid"
	RefusedBadRequest            = "BadRequest"
	RefusedRequestEntityTooLarge = "RequestEntityTooLarge"
	RefusedMethodNotAllowed      = "MethodNotAllowed"
)

// Further values of the "reason" label of the progress metrics
// (trainyard_progress_reports_rejected_total also uses ReasonNotFound,
// ReasonInvalid, ReasonForbidden and ReasonInternal; see its doc).
const (
	ReasonTooLarge        = "too_large"
	ReasonTooManyRequests = "too_many_requests"
	ReasonPendingBytes    = "pending_bytes"
	ReasonUnauthenticated = "unauthenticated"
	ReasonUnchanged       = "unchanged"
	ReasonStale           = "stale"
	ReasonGone            = "gone"
)

// Values of the "result" label of trainyard_progress_token_reviews_total (and
// ProgressWriteSuccess, ProgressWriteError of trainyard_progress_writes_total).
const (
	TokenReviewAllowed         = "allowed"
	TokenReviewUnauthenticated = "unauthenticated"
	TokenReviewForbidden       = "forbidden"
	TokenReviewNotFound        = "not_found"
	TokenReviewError           = "error"

	ProgressWriteSuccess = "success"
	ProgressWriteError   = "error"
)

// Values of the "runtime_kind" label. Any other kind is recorded as
// RuntimeKindOther so that user input can never add series.
const (
	RuntimeKindTrainingRuntime        = "TrainingRuntime"
	RuntimeKindClusterTrainingRuntime = "ClusterTrainingRuntime"
	RuntimeKindOther                  = "other"

	RuntimeOther = "<other>" // "runtime" of TrainJobs whose runtime has no series of its own; no object name can take it
)

// Values of the "phase" label of TrainJobs: Pending until the JobSet reports jobs,
// Running while it does, Suspended, Complete and Failed from the TrainJob's conditions.
const (
	PhasePending   = "Pending"
	PhaseSuspended = "Suspended"
	PhaseRunning   = "Running"
	PhaseComplete  = "Complete"
	PhaseFailed    = "Failed"
)

// Values of the "certificate" label: the self-managed serving certificate and
// the CA that signs it (package certs).
const (
	CertificateServing = "serving"
	CertificateCA      = "ca"
)

// Values of the "webhook" label of the admission metrics. Any other value is
// recorded as WebhookOther.
const (
	WebhookValidate = "validate"
	WebhookMutate   = "mutate"
	WebhookOther    = "other"
)

// Values of the "kind" label of the admission metrics: the kind a webhook
// admits. Any other value is recorded as AdmissionKindOther.
const (
	AdmissionKindTrainJob               = "TrainJob"
	AdmissionKindTrainingRuntime        = "TrainingRuntime"
	AdmissionKindClusterTrainingRuntime = "ClusterTrainingRuntime"
	AdmissionKindOptimizationJob        = "OptimizationJob"
	AdmissionKindOther                  = "other"
)

// Values of the "operation" label of the admission metrics: the admission
// operations of admission.k8s.io/v1. Any other value is recorded as
// OperationOther, so that a client cannot add series.
const (
	OperationCreate  = "CREATE"
	OperationUpdate  = "UPDATE"
	OperationDelete  = "DELETE"
	OperationConnect = "CONNECT"
	OperationOther   = "other"
)

// Values of the "result" label of trainyard_admission_requests_total:
// allowed, the object was admitted (a mutation may have been returned; its
// warnings are counted by trainyard_admission_warnings_total); denied, a rule
// refused it (code 403) and the user must fix the object; error, the webhook
// could not review it and refused it, code 400 (another kind than the
// webhook's, an object that does not decode strictly: the CRD is newer than
// Trainyard) or 5xx (an informer cache read failed), and the operator must
// fix it. See AdmissionResult.
const (
	AdmissionAllowed = "allowed"
	AdmissionDenied  = "denied"
	AdmissionError   = "error"
)

var (
	certificates = []string{CertificateServing, CertificateCA}
	results      = []string{ResultContinue, ResultRequeueAfter, ResultWaitForEvent, ResultRetry, ResultTerminal, ResultRestart}
	reasons      = []string{ReasonConflict, ReasonNotFound, ReasonInvalid, ReasonForbidden, ReasonThrottled, ReasonTimeout, ReasonInternal}
	refusals     = []string{RefusedForbidden, RefusedInvalid, RefusedBadRequest, RefusedRequestEntityTooLarge, RefusedMethodNotAllowed}
	runtimeKinds = []string{RuntimeKindTrainingRuntime, RuntimeKindClusterTrainingRuntime, RuntimeKindOther}
	phases       = []string{PhasePending, PhaseSuspended, PhaseRunning, PhaseComplete, PhaseFailed}

	webhooks            = []string{WebhookValidate, WebhookMutate, WebhookOther}
	admissionKinds      = []string{AdmissionKindTrainJob, AdmissionKindTrainingRuntime, AdmissionKindClusterTrainingRuntime, AdmissionKindOptimizationJob, AdmissionKindOther}
	admissionOperations = []string{OperationCreate, OperationUpdate, OperationDelete, OperationConnect, OperationOther}
	admissionResults    = []string{AdmissionAllowed, AdmissionDenied, AdmissionError}

	progressRejectReasons = []string{ReasonTooLarge, ReasonTooManyRequests, ReasonPendingBytes, ReasonUnauthenticated, ReasonForbidden, ReasonNotFound, ReasonInvalid, ReasonInternal}
	progressDropReasons   = []string{ReasonUnchanged, ReasonStale, ReasonGone}
	tokenReviewResults    = []string{TokenReviewAllowed, TokenReviewUnauthenticated, TokenReviewForbidden, TokenReviewNotFound, TokenReviewError}
	progressWriteResults  = []string{ProgressWriteSuccess, ProgressWriteError}
)

// Histogram buckets, in seconds. Each ladder includes the usual SLO thresholds
// (10, 30, 60 s) so that percentiles and "within N s" ratios are exact there.
var (
	// queueBuckets spans 1 ms … 10 min: queue waits grow large under backlog.
	queueBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// stageBuckets spans 1 ms … 60 s: one Sync is a few API calls at most.
	stageBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// jobSetCreationBuckets spans 0.1 s … 2 h: it includes waiting for
	// admission and gang scheduling.
	jobSetCreationBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200}
	// admissionBuckets spans 1 ms … 10 s: a review reads only informer caches,
	// and the API server gives a webhook at most 30 s (timeoutSeconds, 10 s by
	// default).
	admissionBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// progressBuckets spans 0.1 ms … 10 s: a report with a cached review reads
	// only memory and informer caches (tens of microseconds); one that is not
	// costs a TokenReview and a pod read.
	progressBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// Kubernetes API client metrics, under client-go's standard names so stock dashboards
// work. Registered by RegisterClientMetrics.
const (
	// RESTClientRequestsTotal is a counter (requests): API requests this process made,
	// by HTTP status code, method and host. The API-economy e2e test reads it.
	// Labels: code, method, host.
	RESTClientRequestsTotal = "rest_client_requests_total"

	// RESTClientRequestDurationSeconds is a histogram (seconds): API request latency by
	// verb and host. Buckets: 5 ms … 60 s.
	RESTClientRequestDurationSeconds = "rest_client_request_duration_seconds"

	// RESTClientRateLimiterDurationSeconds is a histogram (seconds): time requests waited
	// in the client-side rate limiter (QPS/burst), by verb and host: the signal for
	// tuning --kube-api-qps and --kube-api-burst. Buckets: 5 ms … 60 s.
	RESTClientRateLimiterDurationSeconds = "rest_client_rate_limiter_duration_seconds"

	// APIWritesTotal is a counter (requests): Kubernetes API writes this process
	// sent, retries included, whatever their answer (rest_client_requests_total
	// has the status codes), from the REST client's request hook. Which objects
	// the controller writes, and how often, is its API economy. Labels: verb
	// (Verb* values: create, update, patch, delete), kind (Kind* values: the
	// kinds Trainyard writes, a subresource counting as its object's; other).
	APIWritesTotal = "trainyard_api_writes_total"
)

// Values of the "verb" label of trainyard_api_writes_total: the Kubernetes verbs of
// the HTTP methods POST, PUT, PATCH and DELETE.
const (
	VerbCreate = "create"
	VerbUpdate = "update"
	VerbPatch  = "patch"
	VerbDelete = "delete"
)

// Values of the "kind" label of trainyard_api_writes_total: the kinds Trainyard
// writes (the chart's RBAC). Any other is recorded as KindOther.
const (
	KindTrainJob                       = "TrainJob"
	KindOptimizationJob                = "OptimizationJob"
	KindJobSet                         = "JobSet"
	KindEvent                          = "Event"
	KindConfigMap                      = "ConfigMap"
	KindSecret                         = "Secret"
	KindLease                          = "Lease"
	KindWorkload                       = "Workload"
	KindPodGroup                       = "PodGroup"
	KindValidatingWebhookConfiguration = "ValidatingWebhookConfiguration"
	KindMutatingWebhookConfiguration   = "MutatingWebhookConfiguration"
	KindOther                          = "other"
)

var (
	writeVerbs = []string{VerbCreate, VerbUpdate, VerbPatch, VerbDelete}
	writeKinds = []string{KindTrainJob, KindOptimizationJob, KindJobSet, KindEvent, KindConfigMap, KindSecret, KindLease,
		KindWorkload, KindPodGroup, KindValidatingWebhookConfiguration, KindMutatingWebhookConfiguration, KindOther}
)

// Leader election metrics, under client-go's standard names. Registered by
// RegisterLeaderElectionMetrics.
const (
	// LeaderElectionMasterStatus is a gauge (0 or 1): whether this process holds the
	// Lease. Followers export 0, so sum() over replicas counts leaders. Labels: name
	// (the Lease).
	LeaderElectionMasterStatus = "leader_election_master_status"

	// LeaderElectionSlowpathTotal is a counter (renewals): Lease renewals that had to
	// read the Lease from the API server instead of trusting the cached copy. Labels:
	// name (the Lease).
	LeaderElectionSlowpathTotal = "leader_election_slowpath_total"
)
