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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Printer columns (`kubectl get trainjobs`; docs/compatibility.md, "Printer columns").
// A filter list such as `[ ?(A),?(B)]` is a JSONPath union of filters: the API server
// prints the first value found, so its order is the column's priority. The space after
// the bracket is what makes the API server's parser read a union and not one filter.
// State and Reason read only conditions upstream's and Trainyard's controllers set
// anyway: a TrainJob that runs cleanly keeps exactly upstream's conditions. The reasons
// of Reason are trainjob.WaitingReasons (pkg/trainjob), in that order, then Failed's.

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.conditions[ ?(@.type=="Failed"),?(@.type=="Complete"),?(@.reason=="Suspended")].type`,description="Failed, Complete or Suspended: the first of these conditions the TrainJob has True (upstream's Suspended=False, reason Resumed, is not shown); empty while the TrainJob runs or waits (see Reason)."
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[ ?(@.reason=="TrainingRuntimeNotFound"),?(@.reason=="InvalidTrainJobSpec"),?(@.reason=="NotSupported"),?(@.reason=="JobSetConflict"),?(@.reason=="SideObjectConflict"),?(@.reason=="InsufficientDevices"),?(@.reason=="WriteForbidden"),?(@.reason=="WriteInvalid"),?(@.reason=="WriteBadRequest"),?(@.reason=="WriteRequestEntityTooLarge"),?(@.reason=="WriteMethodNotAllowed"),?(@.reason=="GangUnschedulable"),?(@.type=="Failed")].reason`,description="Why the TrainJob waits: the reason of its RuntimeResolved, JobSetReady or GangScheduled condition that is False; else, for a failed TrainJob, the reason of Failed."
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`,description="spec.suspend."
// +kubebuilder:printcolumn:name="Progress",type=integer,JSONPath=`.status.trainerStatus.progressPercentage`,description="The percentage of training done, as the trainer last reported it (status.trainerStatus.progressPercentage)."
// +kubebuilder:printcolumn:name="ETA",type=integer,JSONPath=`.status.trainerStatus.estimatedRemainingSeconds`,description="The seconds of training left, as the trainer last estimated them (status.trainerStatus.estimatedRemainingSeconds)."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtimeRef.name`,priority=1,description="spec.runtimeRef.name."
// +kubebuilder:printcolumn:name="NumNodes",type=integer,JSONPath=`.spec.trainer.numNodes`,priority=1,description="spec.trainer.numNodes; empty when the runtime's mlPolicy.numNodes applies."
// +kubebuilder:printcolumn:name="Started",type=date,JSONPath=`.status.startTime`,priority=1,description="status.startTime, as an age: how long the TrainJob has been running since it last started or resumed, while it runs."
// +kubebuilder:printcolumn:name="Completed",type=date,JSONPath=`.status.completionTime`,priority=1,description="status.completionTime, as an age: how long ago the TrainJob completed."
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must match RFC 1035 DNS label format"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be no more than 63 characters"

// TrainJob is one distributed training or fine-tuning run. It names a runtime
// (TrainingRuntime or ClusterTrainingRuntime) that supplies the JobSet template and the
// ML and gang-scheduling policies, and overrides what varies per run (image, command,
// numNodes, resources, initializers, runtime patches).
//
// The controller materialises it as a JobSet named after the TrainJob in the same
// namespace, owned by it. The name is an RFC 1035 DNS label of at most 63 characters
// because it becomes the JobSet name and the pods' DNS subdomain (upstream CEL rules).
type TrainJob struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the TrainJob.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the TrainJob.
	// +optional
	Spec TrainJobSpec `json:"spec,omitempty"`

	// status is the observed state of the TrainJob, written by the controller.
	// +optional
	Status TrainJobStatus `json:"status,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TrainJobList is a list of TrainJobs.
type TrainJobList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the list.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of TrainJobs.
	Items []TrainJob `json:"items"`
}

// TrainJobSpec is the desired state of a TrainJob (upstream TrainJobSpec, Trainer v2.3).
type TrainJobSpec struct {
	// runtimeRef names the runtime whose template and policies this TrainJob uses.
	// Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	RuntimeRef RuntimeRef `json:"runtimeRef"`

	// initializer configures the dataset and model initializer steps of the runtime
	// (the replicatedJobs labelled trainer.kubeflow.org/trainjob-ancestor-step
	// dataset-initializer / model-initializer). Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	Initializer *Initializer `json:"initializer,omitempty"`

	// trainer overrides the trainer step of the runtime (the replicatedJob labelled
	// trainer.kubeflow.org/trainjob-ancestor-step: trainer, container "node"). Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	Trainer *Trainer `json:"trainer,omitempty"`

	// runtimePatches are strategic-merge patches to the runtime's JobSet template, one
	// entry per manager (a user, Kueue, an admission webhook), applied in list order so a
	// later entry wins on conflicting scalars and map keys. At most 16 entries.
	// +optional
	// +listType=map
	// +listMapKey=manager
	// +kubebuilder:validation:MaxItems=16
	RuntimePatches []RuntimePatch `json:"runtimePatches,omitempty"`

	// suspend stops the TrainJob's pods (the JobSet is kept with spec.suspend=true) and
	// resuming starts them again. Kueue keeps queued TrainJobs suspended. Defaults to false.
	// +optional
	// +kubebuilder:default=false
	Suspend *bool `json:"suspend,omitempty"`

	// activeDeadlineSeconds bounds the time in seconds the TrainJob may run, counted from
	// creation or from the last resume; once exceeded the TrainJob fails with reason
	// DeadlineExceeded and its JobSet is deleted. Unset means no deadline. Immutable.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// ttlSecondsAfterFinished is how long, in seconds, the TrainJob is kept once it has
	// finished (Complete or Failed): that long after its terminal condition's
	// lastTransitionTime the controller deletes the TrainJob, and garbage collection
	// deletes its JobSet, Jobs, Pods, Services and side objects with it. 0 deletes it as
	// soon as it finishes. Unset means the runtime's spec.runPolicy.ttlSecondsAfterFinished,
	// and neither set keeps the TrainJob. Mutable, as batch/v1 Job's is
	// (KEP-2899 as kubeflow/trainer #4052 lists it; docs/compatibility.md#ttl-and-run-policy).
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// managedBy names the controller that reconciles this TrainJob:
	// "trainer.kubeflow.org/trainjob-controller" (the default, Trainyard or upstream) or
	// "kueue.x-k8s.io/multikueue" (MultiKueue mirrors it to a worker cluster and this
	// controller leaves it untouched). Immutable.
	// +optional
	// +kubebuilder:default="trainer.kubeflow.org/trainjob-controller"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']",message="ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	ManagedBy *string `json:"managedBy,omitempty"`
}

// RuntimeRef references a TrainingRuntime (looked up in the TrainJob's namespace) or a
// ClusterTrainingRuntime.
type RuntimeRef struct {
	// name of the runtime.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// apiGroup of the runtime. Defaults to trainer.kubeflow.org, the only supported group.
	// +optional
	// +kubebuilder:default="trainer.kubeflow.org"
	// +kubebuilder:validation:MaxLength=253
	APIGroup *string `json:"apiGroup,omitempty"`

	// kind of the runtime: ClusterTrainingRuntime (the default) or TrainingRuntime. Any
	// other kind fails the TrainJob with reason TrainingRuntimeNotSupported.
	// +optional
	// +kubebuilder:default="ClusterTrainingRuntime"
	// +kubebuilder:validation:MaxLength=253
	Kind *string `json:"kind,omitempty"`
}

// Initializer configures the steps that download a dataset and a model before training.
type Initializer struct {
	// dataset configures the dataset initializer (container "dataset-initializer").
	// +optional
	Dataset *DatasetInitializer `json:"dataset,omitempty"`

	// model configures the model initializer (container "model-initializer").
	// +optional
	Model *ModelInitializer `json:"model,omitempty"`
}

// DatasetInitializer configures the dataset-initializer container of the runtime.
type DatasetInitializer struct {
	// storageUri is where the dataset comes from, e.g. hf://tatsu-lab/alpaca or
	// s3://bucket/path; injected as env STORAGE_URI. Empty or scheme://..., at most 2048
	// characters.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",message="storageUri may be empty, or it must be a valid URI (scheme://...)"
	StorageUri *string `json:"storageUri,omitempty"`

	// env is merged by name into the initializer container's env. At most 128 entries.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// secretRef names a Secret in the TrainJob's namespace added as envFrom to the
	// initializer container (credentials for the storage).
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
}

// ModelInitializer configures the model-initializer container of the runtime. Same shape
// and rules as DatasetInitializer.
type ModelInitializer struct {
	// storageUri is where the model comes from, e.g. hf://meta-llama/Llama-3.2-1B-Instruct;
	// injected as env STORAGE_URI. Empty or scheme://..., at most 2048 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",message="storageUri may be empty, or it must be a valid URI (scheme://...)"
	StorageUri *string `json:"storageUri,omitempty"`

	// env is merged by name into the initializer container's env. At most 128 entries.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// secretRef names a Secret in the TrainJob's namespace added as envFrom to the
	// initializer container.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
}

// Trainer overrides the trainer step: the replicatedJob labelled
// trainer.kubeflow.org/trainjob-ancestor-step: trainer and its container named "node".
type Trainer struct {
	// image replaces the trainer container image. At most 500 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=500
	Image *string `json:"image,omitempty"`

	// command replaces the trainer container command. At most 128 items.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=1048576
	Command []string `json:"command,omitempty"`

	// args replaces the trainer container args. At most 128 items.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=1048576
	Args []string `json:"args,omitempty"`

	// env is merged by name into the trainer container's env; a TrainJob entry replaces a
	// runtime entry of the same name. Names the ML policy injects (PET_*, JAX_*, DMLC_*,
	// OMPI_MCA_*) are reserved. At most 128 entries.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// numNodes is the number of training pods (nodes) of the trainer step; it overrides
	// the runtime's mlPolicy.numNodes. Zero is accepted; negative values are rejected.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NumNodes *int32 `json:"numNodes,omitempty"`

	// resourcesPerNode is merged into the trainer container's resources, per resource
	// name (limits, requests) and per claim name (claims); TrainJob values win.
	// +optional
	ResourcesPerNode *corev1.ResourceRequirements `json:"resourcesPerNode,omitempty"`

	// numProcPerNode is the number of processes per node (e.g. PET_NPROC_PER_NODE for
	// Torch, slots for MPI). Unset means "auto": for Torch, the GPU count per node when
	// there are GPUs, else the CPU count. At least 1.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="numProcPerNode must be greater than or equal to 1"
	NumProcPerNode *int32 `json:"numProcPerNode,omitempty"`
}

// RuntimePatch is one manager's patch to the runtime used by a TrainJob.
type RuntimePatch struct {
	// manager identifies who owns this entry, as a domain-prefixed path such as
	// "kueue.x-k8s.io/manager" or "example.io/platform-team". Immutable list-map key.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	Manager string `json:"manager"`

	// time is when the entry was last changed (RFC 3339), stamped by the mutating webhook
	// when one is installed. Informational only.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// trainingRuntimeSpec is the patch to the runtime's spec.
	// +optional
	TrainingRuntimeSpec *TrainingRuntimeSpecPatch `json:"trainingRuntimeSpec,omitempty"`
}

// TrainingRuntimeSpecPatch patches TrainingRuntimeSpec.
type TrainingRuntimeSpecPatch struct {
	// template patches the runtime's JobSet template.
	// +optional
	Template *JobSetTemplatePatch `json:"template,omitempty"`
}

// JobSetTemplatePatch patches the runtime's JobSet template.
type JobSetTemplatePatch struct {
	// metadata: only labels and annotations are used; they are overlaid on the JobSet's
	// labels and annotations (later patches win on the same key).
	// +optional
	Metadata *metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec patches the JobSet spec.
	// +optional
	Spec *JobSetSpecPatch `json:"spec,omitempty"`
}

// JobSetSpecPatch patches the JobSet spec.
type JobSetSpecPatch struct {
	// replicatedJobs patches replicatedJobs of the runtime, matched by name. At most 100.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	ReplicatedJobs []ReplicatedJobPatch `json:"replicatedJobs,omitempty"`
}

// ReplicatedJobPatch patches one replicatedJob of the runtime.
type ReplicatedJobPatch struct {
	// name of the runtime replicatedJob to patch; it must exist in the runtime.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// template patches the replicatedJob's Job template.
	// +optional
	Template *JobTemplatePatch `json:"template,omitempty"`
}

// JobTemplatePatch patches a Job template.
type JobTemplatePatch struct {
	// metadata of the Job template; labels and annotations are merged.
	// +optional
	Metadata *metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec patches the Job spec.
	// +optional
	Spec *JobSpecPatch `json:"spec,omitempty"`
}

// JobSpecPatch patches a Job spec.
type JobSpecPatch struct {
	// template patches the Job's pod template.
	// +optional
	Template *PodTemplatePatch `json:"template,omitempty"`
}

// PodTemplatePatch patches a pod template.
type PodTemplatePatch struct {
	// metadata of the pod template; labels and annotations are merged.
	// +optional
	Metadata *metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec patches the pod spec.
	// +optional
	Spec *PodSpecPatch `json:"spec,omitempty"`
}

// PodSpecPatch is the subset of the pod spec a runtime patch may change. Fields that
// the scheduler integrations write (nodeSelector, affinity, tolerations,
// schedulingGates) are mutable; the others are immutable once set.
// +kubebuilder:validation:XValidation:rule="!has(self.resourceClaims) || self.resourceClaims.all(c, [has(c.resourceClaimName) && size(c.resourceClaimName) > 0, has(c.resourceClaimTemplateName) && size(c.resourceClaimTemplateName) > 0].exists_one(x, x))",message="each resourceClaims entry must set exactly one of resourceClaimName or resourceClaimTemplateName"
type PodSpecPatch struct {
	// serviceAccountName sets the pods' service account. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	ServiceAccountName *string `json:"serviceAccountName,omitempty"`

	// volumes are merged by name into the pod's volumes. At most 128. Immutable.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	Volumes []corev1.Volume `json:"volumes,omitempty"`

	// initContainers patch init containers of the runtime, matched by name. At most 64.
	// Immutable.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	InitContainers []ContainerPatch `json:"initContainers,omitempty"`

	// containers patch containers of the runtime, matched by name. At most 64. Immutable.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	Containers []ContainerPatch `json:"containers,omitempty"`

	// imagePullSecrets are merged by name. At most 64. Immutable.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// securityContext is merged field by field into the pod security context. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`

	// nodeSelector is merged key by key into the pod's nodeSelector. Mutable (Kueue).
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// affinity is merged field by field into the pod's affinity. Mutable (Kueue).
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// tolerations replace the pod's tolerations. At most 128. Mutable (Kueue).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// schedulingGates are merged by name. At most 16. Mutable (Kueue).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	SchedulingGates []corev1.PodSchedulingGate `json:"schedulingGates,omitempty"`

	// terminationGracePeriodSeconds sets the pods' grace period in seconds. Immutable.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`

	// resourceClaims are DRA claims merged by name into the pod's spec.resourceClaims.
	// Each entry sets exactly one of resourceClaimName (a shared ResourceClaim) or
	// resourceClaimTemplateName (one ResourceClaim per pod from a ResourceClaimTemplate).
	// Containers consume a claim through resources.claims, which a runtime provides or a
	// ContainerPatch adds. At most 32. Immutable. Trainyard extension (KEP-2782).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="field is immutable"
	ResourceClaims []corev1.PodResourceClaim `json:"resourceClaims,omitempty"`
}

// ContainerPatch patches one container (or init container) of the runtime, matched by name.
type ContainerPatch struct {
	// name of the container to patch; it must exist in the runtime's replicatedJob.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// env is merged by name into the container env. Not allowed on the containers the
	// controller owns ("node", "dataset-initializer", "model-initializer"): use
	// spec.trainer.env or spec.initializer.*.env instead. At most 128.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// volumeMounts are merged into the container's volume mounts. At most 128.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	// securityContext is merged field by field into the container security context.
	// +optional
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`

	// resources is merged into the container's resources: limits and requests per
	// resource name, claims (references to the pod's resourceClaims) by name. This is
	// how a patch wires a DRA claim into a container. Trainyard extension (KEP-2782).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// TrainJobStatus is the observed state of a TrainJob.
// +kubebuilder:validation:MinProperties=1
type TrainJobStatus struct {
	// conditions: Suspended, Complete and Failed mean what they mean upstream (Kueue and
	// the SDK read them); Trainyard adds conditions that explain a waiting TrainJob.
	// At most 8.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// jobsStatus mirrors the JobSet's replicatedJobsStatus, one entry per replicatedJob.
	// At most 100.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	JobsStatus []JobStatus `json:"jobsStatus,omitempty"`

	// startTime is when the TrainJob last became active (not suspended), as a Job's and
	// a JobSet's status.startTime (kubernetes-sigs/jobset KEP-1186): set when it first
	// runs unsuspended, cleared when it is suspended, set again at each resume. The
	// active deadline counts from it. Written by the controller; kept once finished.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the TrainJob completed: its Complete condition's
	// lastTransitionTime (the JobSet's). As a Job's, it is set only on success: a
	// failed TrainJob has none (its Failed condition says when).
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// trainerStatus is the progress the training code reports to the controller's
	// progress server (KEP-2779, feature gate TrainJobStatus), written by field manager
	// trainer-status at most once per TrainJob per statusServer.writePeriod.
	// +optional
	TrainerStatus *TrainerStatus `json:"trainerStatus,omitempty"`
}

// JobStatus counts the Jobs of one replicatedJob by state.
type JobStatus struct {
	// name of the replicatedJob.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// ready is the number of Jobs whose pods are ready.
	// +kubebuilder:validation:Minimum=0
	Ready *int32 `json:"ready"`

	// succeeded is the number of Jobs that completed.
	// +kubebuilder:validation:Minimum=0
	Succeeded *int32 `json:"succeeded"`

	// failed is the number of Jobs that failed.
	// +kubebuilder:validation:Minimum=0
	Failed *int32 `json:"failed"`

	// active is the number of Jobs with at least one running pod.
	// +kubebuilder:validation:Minimum=0
	Active *int32 `json:"active"`

	// suspended is the number of suspended Jobs.
	// +kubebuilder:validation:Minimum=0
	Suspended *int32 `json:"suspended"`
}

// TrainerStatus is the training progress reported from inside the trainer pods.
// +kubebuilder:validation:XValidation:rule="has(self.lastUpdatedTime)",message="lastUpdatedTime is required when trainerStatus is present"
type TrainerStatus struct {
	// progressPercentage is the completed fraction of training, 0 to 100.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ProgressPercentage *int32 `json:"progressPercentage,omitempty"`

	// estimatedRemainingSeconds is the estimated time to completion in seconds.
	// +optional
	// +kubebuilder:validation:Minimum=0
	EstimatedRemainingSeconds *int32 `json:"estimatedRemainingSeconds,omitempty"`

	// metrics are the latest training metrics (e.g. loss). At most 256.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Metrics []Metric `json:"metrics,omitempty"`

	// lastUpdatedTime is when the status was last reported. Required when trainerStatus
	// is present.
	// +optional
	LastUpdatedTime *metav1.Time `json:"lastUpdatedTime,omitempty"`
}

// Metric is one named training metric.
type Metric struct {
	// name of the metric, e.g. "loss".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`

	// value of the metric as a decimal string, e.g. "0.0123".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Value string `json:"value"`
}
