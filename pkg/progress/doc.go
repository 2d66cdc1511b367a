// Package progress is Trainyard's training-progress server (KEP-2779, upstream
// Kubeflow Trainer v2.3's "status server", feature gate TrainJobStatus): trainer pods
// POST their progress (percentage, estimated remaining seconds, named metrics) and the
// controller writes it to TrainJob.status.trainerStatus.
//
// The parts, in the order a report goes through them:
//
//   - wire.go: the contract with the pods (endpoint Path, token Audience, environment
//     variables, projected volume, UpdateTrainJobStatusRequest), upstream's exactly.
//   - NewServer: the HTTPS server, bounding its connections (and so its memory).
//   - NewHandler: the HTTP endpoint. It bounds the reports in flight, checks the body
//     size, the bearer token (Authorizer), that the TrainJob exists, and the report's
//     values (ValidateTrainerStatus, the CRD's rules), answers with upstream's status
//     codes and metav1.Status bodies, and hands an accepted report to the Coalescer. It never
//     writes to the API server, so a flood of reports costs memory for at most one
//     report per TrainJob, within the Coalescer's bound in bytes, not API calls.
//   - TokenReviewAuthorizer: who may report. Upstream accepts any token of the TrainJob's
//     namespace issued for its audience; Trainyard also requires the token to be bound
//     to a pod of the TrainJob (its JobSet's, controlled by a Job), so one TrainJob's
//     pods cannot write another's progress. Decisions are cached, and concurrent
//     requests with the same token share one review.
//   - Coalescer: the latest report of each TrainJob, in memory, until it is written; a
//     newer report replaces a pending one. The pending reports are bounded in bytes
//     (ReportBytes, statusServer.maxPendingReportBytes, 32 MiB by default): a report
//     that does not fit is answered 429 with Retry-After, never accepted and dropped.
//   - Stage: the write, an engine.Stage named "progress" run in its own single-stage
//     pipeline. It applies status.trainerStatus at most once per TrainJob per
//     WriteLimits.Period, under global and per-namespace rate limits.
//
// # Who writes, and why two replicas never fight
//
// Like upstream's, the server runs on every replica, leader or not, behind the one
// Service of the webhooks: a TrainJob's reports reach whichever replica the connection
// lands on, so two replicas may each hold a report of the same TrainJob. Each replica
// writes the reports it received; there is no hand-off to the leader. That is safe
// because:
//
//   - Every replica writes with server-side apply on the status subresource, as field
//     manager FieldManager ("trainer-status", upstream's) with force, setting only
//     status.trainerStatus. The leader's status writes (conditions, jobsStatus, field
//     manager "trainyard") never touch trainerStatus, and trainerStatus writes touch
//     nothing else, so neither can undo the other.
//   - lastUpdatedTime only moves forward: a replica writes a report only when its
//     lastUpdatedTime (at the second precision the API server stores) is not older than
//     the TrainJob's, as its informer cache shows it, and than its own last write, and
//     within the same second its progressPercentage is not lower. A report equal to what
//     is stored, or coming before it, is dropped, not written. Reports of one second
//     are not dropped for sharing it: a trainer that reports every epoch of a model
//     that trains in a second sends its final report in the second of its first.
//   - The apply carries the resourceVersion of the cached TrainJob as a precondition, so
//     a replica whose cache has not yet seen the other replica's newer write gets 409
//     Conflict instead of regressing the field; it retries once its cache has caught up,
//     and then drops its older report. The field therefore never goes back in time, and
//     the replicas converge on the newest report either received.
//
// Each replica enforces the period on its own writes, so a TrainJob whose pods reach n
// replicas gets at most n writes per period; the rate limits are per replica too.
//
// # When a report is written
//
// A report is written when its TrainJob had no write from this replica for a Period
// (default 10 s); a report arriving sooner waits until the period ends and is then
// written, unless a newer one replaced it. A finished TrainJob (Complete or Failed) is
// written at once, ignoring the period, so the report a trainer sends just before it
// exits is not left waiting behind a period; call Coalescer.Flush when a TrainJob
// finishes. A TrainJob's first report of progressPercentage 100, the trainer's last, is
// written at once too. A report equal to the stored trainerStatus, or older, is dropped; so is
// a report whose TrainJob left the informer cache or was re-created under the same name.
// A write that the rate limits would delay is not made to wait in a worker: it reserves
// its tokens (its namespace's, then the global one) and the key is requeued for when
// they are due, so waiting writes go in turn, each synced once more, and keys of other
// namespaces go on being written. A report arriving while its TrainJob's write waits
// for the period or its tokens costs no sync: it replaces the pending report.
package progress
