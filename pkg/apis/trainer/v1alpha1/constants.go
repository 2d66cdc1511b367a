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

// Well-known names of the Kubeflow Trainer v2.3 contract
// (docs/compatibility.md#trainjob-status, docs/compatibility.md#well-known-names). They
// are part of the observable API: Kueue, the Python SDK and runtimes key on them.
const (
	// TrainJobKind, TrainingRuntimeKind and ClusterTrainingRuntimeKind are the kinds of
	// this group; runtimeRef.kind must be one of the two runtime kinds.
	TrainJobKind               = "TrainJob"
	TrainingRuntimeKind        = "TrainingRuntime"
	ClusterTrainingRuntimeKind = "ClusterTrainingRuntime"

	// ManagedByTrainJobController is the default spec.managedBy: this controller.
	ManagedByTrainJobController = "trainer.kubeflow.org/trainjob-controller"
	// ManagedByMultiKueue hands the TrainJob to MultiKueue; the controller ignores it.
	ManagedByMultiKueue = "kueue.x-k8s.io/multikueue"

	// LabelTrainJobAncestor on a replicatedJob's Job template marks which TrainJob
	// section applies to it: AncestorDatasetInitializer, AncestorModelInitializer or
	// AncestorTrainer.
	LabelTrainJobAncestor      = "trainer.kubeflow.org/trainjob-ancestor-step"
	AncestorDatasetInitializer = "dataset-initializer"
	AncestorModelInitializer   = "model-initializer"
	AncestorTrainer            = "trainer"

	// LabelFramework is informational (torch, deepspeed, jax...), read by the SDK.
	LabelFramework = "trainer.kubeflow.org/framework"
	// LabelSupport = SupportDeprecated marks a ClusterTrainingRuntime scheduled for removal.
	LabelSupport      = "trainer.kubeflow.org/support"
	SupportDeprecated = "deprecated"

	// ContainerNode is the trainer container (also the MPI launcher's container);
	// ContainerDatasetInitializer and ContainerModelInitializer are the initializers'.
	ContainerNode               = "node"
	ContainerDatasetInitializer = "dataset-initializer"
	ContainerModelInitializer   = "model-initializer"

	// ReplicatedJobNode and ReplicatedJobLauncher are the replicatedJob names the ML
	// policies key on.
	ReplicatedJobNode     = "node"
	ReplicatedJobLauncher = "launcher"

	// EnvStorageURI carries an initializer's storageUri.
	EnvStorageURI = "STORAGE_URI"

	// ContainerPortRendezvous is the trainer rendezvous/coordinator/tracker port.
	ContainerPortRendezvous int32 = 29500

	// JobCompletionIndexFieldPath is the downward-API path of a pod's Job completion index.
	JobCompletionIndexFieldPath = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
)

// Condition types and reasons of TrainJob status
// (docs/compatibility.md#trainjob-status,
// docs/compatibility.md#status-from-the-jobset).
const (
	// TrainJobSuspended is True while spec.suspend is true (reason
	// TrainJobSuspendedReason). Upstream sets it False after a resume (reason
	// TrainJobResumedReason); Trainyard removes it, so that the Python SDK reports a
	// resumed TrainJob Running (docs/compatibility.md#suspended-condition).
	TrainJobSuspended = "Suspended"
	// TrainJobComplete is True once the JobSet completed; reason and message are the
	// JobSet's (default AllJobsCompleted).
	TrainJobComplete = "Complete"
	// TrainJobFailed is True once the TrainJob failed: from the JobSet (its reason), or
	// DeadlineExceeded, or TrainingRuntimeNotSupported.
	TrainJobFailed = "Failed"

	TrainJobSuspendedReason = "Suspended"
	TrainJobResumedReason   = "Resumed"

	TrainJobSuspendedMessage = "TrainJob is suspended"
	TrainJobResumedMessage   = "TrainJob is resumed"

	// TrainJobDeadlineExceededReason fails a TrainJob that ran past activeDeadlineSeconds.
	TrainJobDeadlineExceededReason  = "DeadlineExceeded"
	TrainJobDeadlineExceededMessage = "TrainJob exceeded its active deadline"

	// TrainJobRuntimeNotSupportedReason fails a TrainJob whose runtimeRef names a kind or
	// apiGroup other than the two runtime kinds of trainer.kubeflow.org.
	TrainJobRuntimeNotSupportedReason = "TrainingRuntimeNotSupported"
)
