// Package trainjob holds small, pure helpers about TrainJob objects that several stages
// share: whether the controller should act on one, which runtime it names, and its
// condition bookkeeping. No I/O.
package trainjob

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// FieldManager is the field manager of every write Trainyard makes: JobSet and side
// object applies, and TrainJob status patches.
const FieldManager = "trainyard"

// Condition types Trainyard adds to explain a waiting TrainJob
// (docs/design/architecture.md#upstream-conditions-keep-their-meaning allows more
// types; Suspended, Complete and Failed keep their upstream meaning).
const (
	// ConditionRuntimeResolved is False (reason ReasonRuntimeNotFound) while the
	// referenced runtime does not exist, and turns True (reason ReasonRuntimeFound) once
	// it appears. TrainJobs whose runtime exists from the start never get it, which
	// saves a status write per TrainJob.
	ConditionRuntimeResolved = "RuntimeResolved"
	// ConditionJobSetReady is False (with a reason naming the bad input) when the desired
	// JobSet cannot be built from the TrainJob and its runtime.
	ConditionJobSetReady = "JobSetReady"
	// ConditionGangScheduled is False (reason ReasonGangUnschedulable, the message naming
	// how many pods wait and the scheduler's explanation from the PodGroup status) while
	// the gang scheduler cannot place the TrainJob's pods together, and turns True
	// (reason ReasonGangScheduled) once it can. A gang scheduled at the first attempt
	// never gets it: no status write on the happy path.
	ConditionGangScheduled = "GangScheduled"
	// ConditionProcsPerNodeDerived is False (reason ReasonDeviceCountUnknown) when the
	// trainer's DRA claims hold GPUs whose count per node cannot be known before
	// allocation, so PET_NPROC_PER_NODE keeps the ML policy's value; set with the JobSet
	// apply. It is a warning: the TrainJob runs.
	ConditionProcsPerNodeDerived = "ProcsPerNodeDerived"
	// ConditionPodGroupResourceClaims is False (reason ReasonPodGroupClaimsUnsupported)
	// when a podGroupPolicy.workload TrainJob's pods share a ResourceClaim that Trainyard
	// would reserve for their PodGroup (KEP-5729) but the served Workload API version
	// cannot take PodGroup-level claims (Kubernetes 1.36's v1alpha2 has them only behind
	// an alpha gate); the claim stays pod-level and the TrainJob runs. It is True
	// (reason ReasonPodGroupClaims) when the served version takes them and they go to
	// the PodGroup (Kubernetes 1.37). Set with the JobSet apply; absent when the pods
	// share no claim.
	ConditionPodGroupResourceClaims = "PodGroupResourceClaims"

	ReasonRuntimeNotFound = "TrainingRuntimeNotFound"
	ReasonRuntimeFound    = "TrainingRuntimeFound"
	ReasonInvalidSpec     = "InvalidTrainJobSpec"
	ReasonUnsupported     = "NotSupported"
	ReasonJobSetBuilt     = "JobSetBuilt"
	// ReasonJobSetConflict (JobSetReady=False): a JobSet of the TrainJob's name exists
	// and is not controlled by the TrainJob; it is left alone.
	ReasonJobSetConflict = "JobSetConflict"
	// ReasonSideObjectConflict (JobSetReady=False): an object of a side object's kind
	// and name (the MPI hostfile ConfigMap or SSH Secret, a PodGroup, a Workload)
	// exists and is not controlled by the TrainJob — someone else's, nobody's, or left
	// by an earlier TrainJob of the same name. The message names it, its controller and
	// the fix; the TrainJob proceeds by itself once the object is gone.
	ReasonSideObjectConflict = "SideObjectConflict"
	// ReasonInsufficientDevices (JobSetReady=False): the gang needs more devices of a
	// DeviceClass than all ResourceSlices publish; the TrainJob proceeds when a slice
	// is added or grows.
	ReasonInsufficientDevices = "InsufficientDevices"
	// ReasonPrefixWrite starts the reason of JobSetReady=False when the API server has
	// refused to write the TrainJob's JobSet or one of its side objects several times in
	// a row with an error retrying does not fix (Forbidden, Invalid, BadRequest,
	// RequestEntityTooLarge, MethodNotAllowed): the reason is the prefix followed by the
	// metav1.StatusReason, e.g. "WriteInvalid" for a ValidatingAdmissionPolicy denying
	// JobSets in the namespace (a policy's default reason) or a JobSet the server does
	// not accept, "WriteForbidden" for RBAC or a webhook's denial. The message
	// names the object and quotes the server. The TrainJob is tried again after a long
	// delay and at once when its spec changes; the condition turns True (reason
	// ReasonJobSetBuilt) once the write succeeds. Upstream retries such writes forever
	// with events only.
	ReasonPrefixWrite = "Write"

	ReasonGangUnschedulable  = "GangUnschedulable"
	ReasonGangScheduled      = "GangScheduled"
	ReasonDeviceCountUnknown = "DeviceCountUnknown"

	ReasonPodGroupClaimsUnsupported = "PodGroupClaimsNeedKubernetes137"
	ReasonPodGroupClaims            = "ReservedForPodGroup"
)

// WaitingReasons are the reasons of the conditions that hold a TrainJob back before it
// runs — RuntimeResolved, JobSetReady or GangScheduled False — most fundamental first:
// the reasons the Reason printer column of the TrainJob CRD shows, in this order (its
// JSONPath in pkg/apis/trainer/v1alpha1 lists them; a test keeps the two equal). A new
// reason of one of these conditions belongs here and in that column. The warnings
// ProcsPerNodeDerived and PodGroupResourceClaims do not hold a TrainJob back and are
// not listed.
var WaitingReasons = []string{
	ReasonRuntimeNotFound,
	ReasonInvalidSpec,
	ReasonUnsupported,
	ReasonJobSetConflict,
	ReasonSideObjectConflict,
	ReasonInsufficientDevices,
	ReasonPrefixWrite + string(metav1.StatusReasonForbidden),
	ReasonPrefixWrite + string(metav1.StatusReasonInvalid),
	ReasonPrefixWrite + string(metav1.StatusReasonBadRequest),
	ReasonPrefixWrite + string(metav1.StatusReasonRequestEntityTooLarge),
	ReasonPrefixWrite + string(metav1.StatusReasonMethodNotAllowed),
	ReasonGangUnschedulable,
}

// IsFinished reports whether tj reached a terminal condition: Complete or Failed True.
// Finished TrainJobs are never re-applied (docs/compatibility.md#one-pass step 4).
func IsFinished(tj *trainer.TrainJob) bool {
	return meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) ||
		meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed)
}

// IsManaged reports whether this controller reconciles tj: spec.managedBy is unset or
// trainer.kubeflow.org/trainjob-controller (kueue.x-k8s.io/multikueue is left alone).
func IsManaged(tj *trainer.TrainJob) bool {
	return tj.Spec.ManagedBy == nil || *tj.Spec.ManagedBy == trainer.ManagedByTrainJobController
}

// IsSuspended reports spec.suspend (unset means false, the CRD default).
func IsSuspended(tj *trainer.TrainJob) bool {
	return tj.Spec.Suspend != nil && *tj.Spec.Suspend
}

// RuntimeKind returns the runtime kind tj references, TrainingRuntime or
// ClusterTrainingRuntime, applying the CRD defaults for an unset apiGroup and kind. It
// returns an error, whose text is the upstream condition message "unsupported runtime:
// <Kind>.<group>", for any other group or kind.
func RuntimeKind(tj *trainer.TrainJob) (string, error) {
	group, kind := trainer.GroupName, trainer.ClusterTrainingRuntimeKind
	if g := tj.Spec.RuntimeRef.APIGroup; g != nil {
		group = *g
	}
	if k := tj.Spec.RuntimeRef.Kind; k != nil {
		kind = *k
	}
	if group == trainer.GroupName && (kind == trainer.TrainingRuntimeKind || kind == trainer.ClusterTrainingRuntimeKind) {
		return kind, nil
	}
	gk := kind
	if group != "" {
		gk += "." + group
	}
	return "", fmt.Errorf("unsupported runtime: %s", gk)
}

// ControllerName returns the name of the TrainJob that is obj's controller owner
// (trainer.kubeflow.org/v1alpha1 TrainJob), or "" when none is. The name alone does not
// make obj a given TrainJob's: an earlier TrainJob of the same name had another UID
// (metav1.IsControlledBy compares UIDs).
func ControllerName(obj metav1.Object) string {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != trainer.TrainJobKind || ref.APIVersion != trainer.SchemeGroupVersion.String() {
		return ""
	}
	return ref.Name
}

// RunPolicy is a TrainJob's effective run policy: each field the TrainJob's own when
// it sets it, else its runtime's spec.runPolicy default, else nil (no deadline, never
// deleted). This is KEP-2899's value resolution (kubeflow/trainer #4052;
// docs/compatibility.md#ttl-and-run-policy).
func RunPolicy(tj *trainer.TrainJob, runtime *trainer.RunPolicy) trainer.RunPolicy {
	out := trainer.RunPolicy{ActiveDeadlineSeconds: tj.Spec.ActiveDeadlineSeconds, TTLSecondsAfterFinished: tj.Spec.TTLSecondsAfterFinished}
	if runtime != nil {
		if out.ActiveDeadlineSeconds == nil {
			out.ActiveDeadlineSeconds = runtime.ActiveDeadlineSeconds
		}
		if out.TTLSecondsAfterFinished == nil {
			out.TTLSecondsAfterFinished = runtime.TTLSecondsAfterFinished
		}
	}
	return out
}

// FinishedAt returns when tj's status st says it finished: the lastTransitionTime of
// its Failed condition when True, else of its Complete condition when True; false when
// it has not finished. The TTL counts from it (KEP-2899).
func FinishedAt(st *trainer.TrainJobStatus) (time.Time, bool) {
	for _, t := range []string{trainer.TrainJobFailed, trainer.TrainJobComplete} {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}
