package admissiontest

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// OptimizationJobCases are the rules and warnings of the OptimizationJob webhook
// (package admission's ValidateOptimizationJob, docs/compatibility.md#optimizationjob-validation)
// that an OptimizationJob the CRD's schema and CEL rules accept can meet, each with an
// OptimizationJob sent for CREATE. The rules the CRD enforces too (min < max,
// parallelTrials <= numTrials, grid over categorical parameters, ...) are proven by
// package admission's unit tests only: the API server refuses those objects itself
// before calling the webhook. The admitted ones name a runtime that does not exist, so
// that the controller creates trials that wait rather than run.
func OptimizationJobCases(namespace string) []Case {
	b := builder{ns: namespace}
	torch := b.runtime("torch", Skeleton(torchPolicy))
	lr := trainer.Parameter{Name: "lr", SearchSpace: trainer.SearchSpace{LogUniform: &trainer.LogUniformSpace{Min: "0.0001", Max: "0.1"}}}
	oj := func(name, runtimeName string, params ...trainer.Parameter) *trainer.OptimizationJob {
		return &trainer.OptimizationJob{
			TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.OptimizationJobKind},
			ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
			Spec: trainer.OptimizationJobSpec{
				Objectives: []trainer.Objective{{Metric: "loss"}}, Parameters: params,
				NumTrials: ptr.To[int32](2), ParallelTrials: ptr.To[int32](1),
				TrainJobTemplate: trainer.TrainJobTemplateSpec{Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{
					Name: runtimeName, APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.TrainingRuntimeKind)}}},
			},
		}
	}
	categorical := func(name string, choices ...string) trainer.Parameter {
		return trainer.Parameter{Name: name, SearchSpace: trainer.SearchSpace{Categorical: &trainer.CategoricalSpace{Choices: choices}}}
	}

	grid := oj("oj-small-grid", "oj-absent", categorical("hidden", "32", "64"))
	grid.Spec.SearchAlgorithm = &trainer.SearchAlgorithm{Grid: &trainer.GridAlgorithm{}}
	grid.Spec.NumTrials = ptr.To[int32](5)
	reserved := oj("oj-reserved-env", torch.Name, lr)
	reserved.Spec.TrainJobTemplate.Spec.Trainer = &trainer.Trainer{Env: []corev1.EnvVar{env("PET_NNODES", "1")}}
	intRange := oj("oj-int-range", torch.Name, trainer.Parameter{Name: "layers", SearchSpace: trainer.SearchSpace{
		Uniform: &trainer.UniformSpace{Min: "1.2", Max: "1.8", Type: trainer.ParameterTypeInt}}})

	return []Case{
		{
			Name: "OptimizationJob: runtime missing: admitted with a warning", Object: oj("oj-runtime-missing", "oj-absent", lr),
			Warnings: []string{`TrainingRuntime "oj-absent" referenced by spec.trainJobTemplate.spec.runtimeRef not found`},
		},
		{
			Name: "OptimizationJob: grid smaller than numTrials: admitted with a warning", Object: grid,
			Warnings: []string{"the search will stop at 2 trials", `TrainingRuntime "oj-absent" referenced by spec.trainJobTemplate.spec.runtimeRef not found`},
		},
		{
			Name: "OptimizationJob: parameters whose trainer variables collide", Existing: []Object{torch},
			Object: oj("oj-colliding-variables", torch.Name, categorical("learning-rate", "1"), categorical("learning_rate", "2")),
			Errors: []Violation{invalid("spec.parameters[1].name")}, Message: "would both set KUBEFLOW_TRAINER_OPT_LEARNING_RATE",
		},
		{
			Name: "OptimizationJob: Int range without an integer", Existing: []Object{torch}, Object: intRange,
			Errors: []Violation{invalid("spec.parameters[0].searchSpace.uniform")}, Message: "type Int needs at least one integer",
		},
		{
			Name: "OptimizationJob: trial names that are not TrainJob names", Existing: []Object{torch}, Object: oj("oj.dotted", torch.Name, lr),
			Errors: []Violation{invalid("metadata.name")}, Message: `"oj.dotted-0" is not a valid TrainJob name`,
		},
		{
			Name: "OptimizationJob: trial TrainJob sets a reserved variable", Existing: []Object{torch}, Object: reserved,
			Errors: []Violation{invalid("spec.trainJobTemplate.spec.trainer.env")}, Message: "remove PET_NNODES from spec.trainJobTemplate.spec.trainer.env",
		},
	}
}
