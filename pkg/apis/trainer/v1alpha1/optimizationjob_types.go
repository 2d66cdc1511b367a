package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OptimizationJobKind is the kind of OptimizationJob.
const OptimizationJobKind = "OptimizationJob"

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.conditions[ ?(@.type=="Failed"),?(@.type=="Complete")].type`,description="Failed or Complete once the search has ended (the controller sets either only True); empty while it runs."
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[ ?(@.type=="Failed"),?(@.type=="Complete")].reason`,description="Why the search ended: MaxTrialsReached or SearchSpaceExhausted (Complete); NoTrialSucceeded, MaxFailedTrialsReached or InvalidSpec (Failed)."
// +kubebuilder:printcolumn:name="Trials",type=string,JSONPath=`.status.conditions[?(@.type=="Created")].message`,description="The Created condition's message: trials created of the search's total, done (succeeded, failed, cancelled), running, and the best trial with its objective value; while a trial cannot be created, why."
// +kubebuilder:printcolumn:name="Best",type=string,JSONPath=`.status.result.trainJobName`,description="status.result.trainJobName: the trial whose objective metric is best so far."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// OptimizationJob is a hyperparameter search (KEP-3562): it runs trials, each a TrainJob
// made from trainJobTemplate with one assignment of the parameters, and records the
// trial whose reported objective metric is best. Its wire form is upstream Kubeflow
// Trainer's (master, after v2.3.0): the same fields, defaults and validation rules.
type OptimizationJob struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the OptimizationJob.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the OptimizationJob.
	// +required
	Spec OptimizationJobSpec `json:"spec"`

	// status of the OptimizationJob.
	// +optional
	Status OptimizationJobStatus `json:"status,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// OptimizationJobList is a collection of OptimizationJobs.
type OptimizationJobList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata of the list.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of OptimizationJobs.
	Items []OptimizationJob `json:"items"`
}

// OptimizationJobSpec is the search: what to optimize, over which parameters, how, how
// many trials and how many at once, and the TrainJob each trial runs. It cannot change
// once created.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="OptimizationJobSpec is immutable and cannot be updated after creation"
// +kubebuilder:validation:XValidation:rule="self.parallelTrials <= self.numTrials",message="parallelTrials cannot exceed numTrials"
// +kubebuilder:validation:XValidation:rule="!has(self.searchAlgorithm.grid) || self.parameters.all(p, has(p.searchSpace.categorical))",message="Grid search requires all parameters to be Categorical; Uniform and LogUniform are not supported."
type OptimizationJobSpec struct {
	// objectives is the list of objectives to optimize.
	// +listType=map
	// +listMapKey=metric
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1
	// +required
	Objectives []Objective `json:"objectives"`

	// searchAlgorithm is how parameter assignments are chosen. Defaults to random.
	// +kubebuilder:default={random:{}}
	// +optional
	SearchAlgorithm *SearchAlgorithm `json:"searchAlgorithm,omitempty"`

	// parameters is the list of hyperparameters to search over.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +required
	Parameters []Parameter `json:"parameters"`

	// numTrials is the total number of trials to run. Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	NumTrials *int32 `json:"numTrials,omitempty"`

	// parallelTrials is the number of trials to run in parallel. Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	ParallelTrials *int32 `json:"parallelTrials,omitempty"`

	// trainJobTemplate is the template for the train job to run.
	// +required
	TrainJobTemplate TrainJobTemplateSpec `json:"trainJobTemplate"`
}

// ObjectiveDirection says whether the objective metric is best low or high.
// +kubebuilder:validation:Enum=Maximize;Minimize
type ObjectiveDirection string

// The ObjectiveDirection values.
const (
	ObjectiveDirectionMaximize ObjectiveDirection = "Maximize"
	ObjectiveDirectionMinimize ObjectiveDirection = "Minimize"
)

// Objective is the metric a trial is judged by: the metric of that name in the trial
// TrainJob's status.trainerStatus.metrics when it completes.
type Objective struct {
	// metric is the name of the objective metric to track.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +required
	Metric string `json:"metric"`

	// direction is the optimization goal. Defaults to Minimize.
	// +kubebuilder:default=Minimize
	// +optional
	Direction ObjectiveDirection `json:"direction,omitempty"`
}

// SearchAlgorithm chooses the parameter assignments: exactly one of random and grid.
// +kubebuilder:validation:ExactlyOneOf=random;grid
type SearchAlgorithm struct {
	// random samples each parameter from its search space.
	// +optional
	Random *RandomAlgorithm `json:"random,omitempty"`

	// grid runs every combination of the parameters' categorical choices, in order,
	// up to numTrials.
	// +optional
	Grid *GridAlgorithm `json:"grid,omitempty"`
}

// RandomAlgorithm is random search.
type RandomAlgorithm struct {
	// seed makes the sampled assignments reproducible.
	// +optional
	Seed *int64 `json:"seed,omitempty"`
}

// GridAlgorithm is grid search over categorical parameters.
type GridAlgorithm struct{}

// ParameterType is the type of a numeric parameter's values.
// +kubebuilder:validation:Enum=Int;Float
type ParameterType string

// The ParameterType values.
const (
	ParameterTypeInt   ParameterType = "Int"
	ParameterTypeFloat ParameterType = "Float"
)

// Parameter is one hyperparameter and the space its values come from.
type Parameter struct {
	// name is the name of the hyperparameter.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +required
	Name string `json:"name"`

	// searchSpace is where the hyperparameter's values come from.
	// +required
	SearchSpace SearchSpace `json:"searchSpace"`
}

// SearchSpace is a parameter's distribution: exactly one of uniform, logUniform and
// categorical.
// +kubebuilder:validation:ExactlyOneOf=uniform;logUniform;categorical
type SearchSpace struct {
	// uniform is a uniform distribution over [min, max].
	// +optional
	Uniform *UniformSpace `json:"uniform,omitempty"`

	// logUniform is a distribution over [min, max] whose logarithm is uniform.
	// +optional
	LogUniform *LogUniformSpace `json:"logUniform,omitempty"`

	// categorical is a set of choices.
	// +optional
	Categorical *CategoricalSpace `json:"categorical,omitempty"`
}

// Double is a decimal number written as a string (JSON numbers would lose precision
// and type): an optional minus sign, digits, an optional fraction and exponent.
// +kubebuilder:validation:Pattern=`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=64
type Double string

// UniformSpace is a uniform distribution over [min, max].
// +kubebuilder:validation:XValidation:rule="double(self.min) < double(self.max)",message="min must be strictly less than max"
type UniformSpace struct {
	// min is the lower bound.
	// +required
	Min Double `json:"min"`

	// max is the upper bound.
	// +required
	Max Double `json:"max"`

	// type is the values' type: Int values are rounded. Defaults to Float.
	// +kubebuilder:default=Float
	// +optional
	Type ParameterType `json:"type,omitempty"`
}

// LogUniformSpace is a distribution over [min, max] whose logarithm is uniform.
// +kubebuilder:validation:XValidation:rule="double(self.min) > 0.0",message="min must be strictly greater than 0"
// +kubebuilder:validation:XValidation:rule="double(self.min) < double(self.max)",message="min must be strictly less than max"
type LogUniformSpace struct {
	// min is the lower bound, above 0.
	// +required
	Min Double `json:"min"`

	// max is the upper bound.
	// +required
	Max Double `json:"max"`

	// type is the values' type: Int values are rounded. Defaults to Float.
	// +kubebuilder:default=Float
	// +optional
	Type ParameterType `json:"type,omitempty"`
}

// CategoricalSpace is a set of unordered choices.
type CategoricalSpace struct {
	// choices is the set of strings to sample from.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=64
	// +required
	Choices []string `json:"choices"`
}

// TrainJobTemplateSpec is the TrainJob each trial runs; the controller names it and
// sets the parameters.
type TrainJobTemplateSpec struct {
	// metadata of the trials' TrainJobs: labels, annotations, finalizers; no name or
	// namespace.
	// +kubebuilder:validation:XValidation:rule="!has(self.name) && !has(self.namespace)",message="name and namespace cannot be set in a template."
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the trials' TrainJobs.
	// +required
	Spec TrainJobSpec `json:"spec"`
}

// OptimizationJobStatus is the search's state.
type OptimizationJobStatus struct {
	// conditions: Created, Complete, Failed.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// result is the best trial so far.
	// +optional
	Result *OptimizationResult `json:"result,omitempty"`
}

// OptimizationResult names the best trial and its parameters.
type OptimizationResult struct {
	// trainJobName is the name of the trial TrainJob that achieved this result.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	TrainJobName string `json:"trainJobName"`

	// parameters are the trial's parameter assignments.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Parameters []ParameterAssignment `json:"parameters,omitempty"`
}

// ParameterAssignment is one hyperparameter and its assigned value.
type ParameterAssignment struct {
	// name of the hyperparameter.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +required
	Name string `json:"name"`

	// value assigned, as a string.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +required
	Value string `json:"value"`
}

// Condition types and reasons of OptimizationJob status (KEP-3562).
const (
	// OptimizationJobCreated is True once the controller runs the search's trials;
	// False, reason TrainJobsCreationFailed, while it cannot create one.
	OptimizationJobCreated = "Created"
	// OptimizationJobComplete is True once every trial the search makes has finished
	// and at least one reported the objective metric.
	OptimizationJobComplete = "Complete"
	// OptimizationJobFailed is True when the search cannot run (reason InvalidSpec),
	// finished without any trial reporting the objective metric (NoTrialSucceeded), or
	// ran out of its failure budget (MaxFailedTrialsReached: Trainyard's, annotation
	// trainyard.dev/max-failed-trials, docs/compatibility.md#failure-budget).
	OptimizationJobFailed = "Failed"

	OptimizationJobTrialsCreatedReason           = "TrialsCreated"
	OptimizationJobTrainJobsCreationFailedReason = "TrainJobsCreationFailed"
	OptimizationJobMaxTrialsReachedReason        = "MaxTrialsReached"
	OptimizationJobSearchSpaceExhaustedReason    = "SearchSpaceExhausted"
	OptimizationJobNoTrialSucceededReason        = "NoTrialSucceeded"
	OptimizationJobInvalidSpecReason             = "InvalidSpec"
	OptimizationJobMaxFailedTrialsReachedReason  = "MaxFailedTrialsReached"
)
