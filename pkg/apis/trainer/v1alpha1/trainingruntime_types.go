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
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster

// ClusterTrainingRuntime is a cluster-wide blueprint for TrainJobs: a JobSet template plus
// the ML and gang-scheduling policies applied to it. Platform teams ship these (e.g.
// torch-distributed); TrainJobs reference them by name.
type ClusterTrainingRuntime struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the runtime. The label trainer.kubeflow.org/support=deprecated marks a
	// runtime scheduled for removal.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the runtime.
	// +optional
	Spec TrainingRuntimeSpec `json:"spec,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// ClusterTrainingRuntimeList is a list of ClusterTrainingRuntimes.
type ClusterTrainingRuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the list.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of ClusterTrainingRuntimes.
	Items []ClusterTrainingRuntime `json:"items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced

// TrainingRuntime is a namespaced blueprint for TrainJobs, usable only by TrainJobs in
// its own namespace. Same spec as ClusterTrainingRuntime.
type TrainingRuntime struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the runtime.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the runtime.
	// +optional
	Spec TrainingRuntimeSpec `json:"spec,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TrainingRuntimeList is a list of TrainingRuntimes.
type TrainingRuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the list.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of TrainingRuntimes.
	Items []TrainingRuntime `json:"items"`
}

// TrainingRuntimeSpec is the spec shared by TrainingRuntime and ClusterTrainingRuntime.
// Its template sets no deadline and no TTL: the TrainJob owns both (KEP-2899), and a
// JobSet or Job deleted or failed under the TrainJob by its own timer would be
// re-created or leave the TrainJob without its final status (kubeflow/trainer #3779).
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec) || !has(self.template.spec.ttlSecondsAfterFinished)",message="template.spec.ttlSecondsAfterFinished must not be set: the TrainJob owns its cleanup; set spec.runPolicy.ttlSecondsAfterFinished on the runtime (or spec.ttlSecondsAfterFinished on the TrainJob) instead"
// +kubebuilder:validation:XValidation:rule="!has(self.template.spec) || !has(self.template.spec.replicatedJobs) || self.template.spec.replicatedJobs.all(rj, !has(rj.template.spec) || (!has(rj.template.spec.activeDeadlineSeconds) && !has(rj.template.spec.ttlSecondsAfterFinished)))",message="template.spec.replicatedJobs[].template.spec must set neither activeDeadlineSeconds nor ttlSecondsAfterFinished: the TrainJob owns its deadline and cleanup; set spec.runPolicy.activeDeadlineSeconds or spec.runPolicy.ttlSecondsAfterFinished on the runtime instead"
type TrainingRuntimeSpec struct {
	// mlPolicy selects the ML framework (torch, mpi, jax, xgboost, flux or none) whose
	// environment the controller injects, and the default number of nodes.
	// +optional
	MLPolicy *MLPolicy `json:"mlPolicy,omitempty"`

	// podGroupPolicy selects the gang-scheduling backend: coscheduling, volcano,
	// kaiScheduler or workload. At most one.
	// +optional
	PodGroupPolicy *PodGroupPolicy `json:"podGroupPolicy,omitempty"`

	// runPolicy holds lifecycle defaults for the TrainJobs of this runtime; a TrainJob's
	// own field of the same name wins (KEP-2899, docs/compatibility.md#ttl-and-run-policy).
	// +optional
	RunPolicy *RunPolicy `json:"runPolicy,omitempty"`

	// template is the JobSet template every TrainJob of this runtime starts from.
	Template JobSetTemplateSpec `json:"template"`
}

// RunPolicy is a runtime's lifecycle defaults for its TrainJobs (KEP-2899 as
// kubeflow/trainer #4052 lists it). Each field applies to a TrainJob that leaves the
// field of the same name in its spec unset, when the TrainJob is built and at every
// sync after.
type RunPolicy struct {
	// activeDeadlineSeconds is the default of a TrainJob's spec.activeDeadlineSeconds:
	// seconds it may run from its start or last resume before it fails with reason
	// DeadlineExceeded.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// ttlSecondsAfterFinished is the default of a TrainJob's
	// spec.ttlSecondsAfterFinished: seconds a finished TrainJob is kept before the
	// controller deletes it (0: at once).
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// JobSetTemplateSpec is a JobSet template.
// +kubebuilder:validation:MinProperties=1
type JobSetTemplateSpec struct {
	// metadata: labels and annotations are copied to the JobSet.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is a jobset.x-k8s.io/v1alpha2 JobSetSpec (JobSet v0.12.0), with all of
	// JobSet's own validation.
	// +optional
	Spec jobsetv1alpha2.JobSetSpec `json:"spec,omitempty"`
}

// MLPolicy is the ML framework policy of a runtime. At most one framework member is set;
// none means plain ML (the controller only scales the trainer step).
// +kubebuilder:validation:XValidation:rule="[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost), has(self.flux)].filter(x, x).size() <= 1",message="Only one of the policy can be configured"
type MLPolicy struct {
	// numNodes is the default number of trainer nodes (pods); TrainJob
	// spec.trainer.numNodes overrides it. Treated as 1 when unset.
	// +optional
	NumNodes *int32 `json:"numNodes,omitempty"`

	MLPolicySource `json:",inline"`
}

// MLPolicySource is the framework member of an MLPolicy.
type MLPolicySource struct {
	// torch configures PyTorch distributed (torchrun): PET_* env and port 29500.
	// +optional
	Torch *TorchMLPolicySource `json:"torch,omitempty"`

	// mpi configures MPI (e.g. DeepSpeed, MLX): SSH keys, hostfile and OMPI_MCA_* env.
	// +optional
	MPI *MPIMLPolicySource `json:"mpi,omitempty"`

	// flux configures the Flux Framework HPC scheduler inside the TrainJob.
	// +optional
	Flux *FluxMLPolicySource `json:"flux,omitempty"`

	// jax configures JAX distributed: JAX_* env and port 29500.
	// +optional
	JAX *JAXMLPolicySource `json:"jax,omitempty"`

	// xgboost configures XGBoost's collective (Rabit): DMLC_* env and port 29500.
	// +optional
	XGBoost *XGBoostMLPolicySource `json:"xgboost,omitempty"`
}

// TorchMLPolicySource configures PyTorch distributed training.
type TorchMLPolicySource struct {
	// envInjection also injects the PET_* variables into other containers.
	// +optional
	EnvInjection *EnvInjection `json:"envInjection,omitempty"`
}

// EnvInjection lists containers, besides the trainer "node" container, that receive the
// PET_* rendezvous variables.
type EnvInjection struct {
	// targets, one per replicatedJob. At most 16.
	// +optional
	// +listType=map
	// +listMapKey=jobName
	// +kubebuilder:validation:MaxItems=16
	Targets []EnvInjectionTarget `json:"targets,omitempty"`
}

// EnvInjectionTarget names containers of one replicatedJob.
type EnvInjectionTarget struct {
	// jobName is the replicatedJob name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	JobName string `json:"jobName"`

	// containerNames are containers or init containers of that replicatedJob, 1 to 8;
	// never "node", which always gets the variables.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!self.exists(c, c == 'node')",message="containerNames must not include the main node container because PET_* envs are always injected into it"
	ContainerNames []string `json:"containerNames"`
}

// MPIImplementation names an MPI implementation.
// +kubebuilder:validation:Enum=OpenMPI;""
type MPIImplementation string

const (
	// MPIImplementationOpenMPI is Open MPI, the only implementation the CRD accepts.
	MPIImplementationOpenMPI MPIImplementation = "OpenMPI"
	// MPIImplementationIntel is Intel MPI (declared upstream, rejected by the CRD).
	MPIImplementationIntel MPIImplementation = "Intel"
	// MPIImplementationMPICH is MPICH (declared upstream, rejected by the CRD).
	MPIImplementationMPICH MPIImplementation = "MPICH"
)

// MPIMLPolicySource configures MPI training.
type MPIMLPolicySource struct {
	// numProcPerNode is the number of MPI slots per node. Defaults to 1 (then the GPU count
	// per node is used when it is greater than 1). At least 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="NumProcPerNode in mpiPolicy must be >= 1"
	NumProcPerNode *int32 `json:"numProcPerNode,omitempty"`

	// mpiImplementation: OpenMPI (the default).
	// +optional
	// +kubebuilder:default="OpenMPI"
	MPIImplementation *MPIImplementation `json:"mpiImplementation,omitempty"`

	// sshAuthMountPath is where the SSH keys Secret is mounted. Defaults to /root/.ssh.
	// +optional
	// +kubebuilder:default="/root/.ssh"
	// +kubebuilder:validation:MaxLength=4096
	SSHAuthMountPath *string `json:"sshAuthMountPath,omitempty"`

	// runLauncherAsNode makes the launcher also a training node. Defaults to false.
	// +optional
	// +kubebuilder:default=false
	RunLauncherAsNode *bool `json:"runLauncherAsNode,omitempty"`
}

// FluxMLPolicySource configures Flux Framework.
type FluxMLPolicySource struct {
	// numProcPerNode is the number of tasks per node. Defaults to 1; at least 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="NumProcPerNode in fluxPolicy must be >= 1"
	NumProcPerNode *int32 `json:"numProcPerNode,omitempty"`
}

// JAXMLPolicySource configures JAX distributed training. It has no fields.
type JAXMLPolicySource struct{}

// XGBoostMLPolicySource configures XGBoost distributed training. It has no fields.
type XGBoostMLPolicySource struct{}

// PodGroupPolicy is the gang-scheduling policy of a runtime.
type PodGroupPolicy struct {
	PodGroupPolicySource `json:",inline"`
}

// PodGroupPolicySource selects one gang-scheduling backend. Upstream documents "only
// one" without enforcing it; Trainyard enforces it with CEL, extended to its additions.
// +kubebuilder:validation:XValidation:rule="[has(self.coscheduling), has(self.volcano), has(self.kaiScheduler), has(self.workload)].filter(x, x).size() <= 1",message="only one of coscheduling, volcano, kaiScheduler or workload can be set in podGroupPolicy"
type PodGroupPolicySource struct {
	// coscheduling creates a scheduler-plugins PodGroup (scheduling.x-k8s.io/v1alpha1).
	// +optional
	Coscheduling *CoschedulingPodGroupPolicySource `json:"coscheduling,omitempty"`

	// volcano creates a Volcano PodGroup (scheduling.volcano.sh/v1beta1).
	// +optional
	Volcano *VolcanoPodGroupPolicySource `json:"volcano,omitempty"`

	// kaiScheduler hands the pods to the KAI Scheduler: they get schedulerName
	// kai-scheduler and the label kai.scheduler/queue; KAI's podgrouper creates the
	// PodGroup. Trainyard extension (Trainer PR 3186).
	// +optional
	KAIScheduler *KAISchedulerPodGroupPolicySource `json:"kaiScheduler,omitempty"`

	// workload gang-schedules the pods through the Kubernetes Workload API
	// (scheduling.k8s.io Workload and PodGroup; pods get spec.schedulingGroup). Needs the
	// GenericWorkload and GangScheduling feature gates on the cluster. Trainyard extension
	// (Trainer issue 3015).
	// +optional
	Workload *WorkloadPodGroupPolicySource `json:"workload,omitempty"`
}

// CoschedulingPodGroupPolicySource configures the scheduler-plugins coscheduling PodGroup.
type CoschedulingPodGroupPolicySource struct {
	// scheduleTimeoutSeconds is how long, in seconds, the PodGroup may wait to be
	// scheduled as a whole. Defaults to 60.
	// +optional
	// +kubebuilder:default=60
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`
}

// VolcanoPodGroupPolicySource configures the Volcano PodGroup.
type VolcanoPodGroupPolicySource struct {
	// networkTopology constrains where Volcano places the gang (network-topology-aware
	// scheduling), copied to the PodGroup's spec.networkTopology.
	// +optional
	NetworkTopology *NetworkTopologySpec `json:"networkTopology,omitempty"`
}

// NetworkTopologyMode is how strictly Volcano honours network topology.
// +kubebuilder:validation:Enum=hard;soft
type NetworkTopologyMode string

const (
	// NetworkTopologyModeHard keeps the gang within the allowed tier.
	NetworkTopologyModeHard NetworkTopologyMode = "hard"
	// NetworkTopologyModeSoft prefers, but does not require, the allowed tier.
	NetworkTopologyModeSoft NetworkTopologyMode = "soft"
)

// NetworkTopologySpec is Volcano's scheduling.volcano.sh/v1beta1 NetworkTopologySpec.
type NetworkTopologySpec struct {
	// mode: hard (the default) or soft.
	// +optional
	// +kubebuilder:default=hard
	Mode NetworkTopologyMode `json:"mode,omitempty"`

	// highestTierAllowed is the highest network tier the gang may span. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	HighestTierAllowed *int `json:"highestTierAllowed,omitempty"`
}

// KAISchedulerPodGroupPolicySource configures the KAI Scheduler integration.
type KAISchedulerPodGroupPolicySource struct {
	// queue is the KAI queue the TrainJob's pods are scheduled from, set as the label
	// kai.scheduler/queue on the JobSet and every pod. Required: KAI schedules only pods
	// of a queue. A label value: 1 to 63 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Queue string `json:"queue"`
}

// WorkloadPodGroupPolicySource configures gang scheduling through the Kubernetes Workload
// API. It has no fields yet; the gang's minCount is the number of trainer pods.
type WorkloadPodGroupPolicySource struct{}
