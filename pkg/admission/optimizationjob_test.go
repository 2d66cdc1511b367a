package admission

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/search"
)

// optJob returns OptimizationJob default/digits: minimize loss over lr (log-uniform)
// and hidden (categorical), 4 trials, 2 at a time, of ClusterTrainingRuntime
// test-runtime; then applies each edit.
func optJob(edits ...func(*trainer.OptimizationJob)) *trainer.OptimizationJob {
	job := &trainer.OptimizationJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.OptimizationJobKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "digits", UID: "digits-uid"},
		Spec: trainer.OptimizationJobSpec{
			Objectives:      []trainer.Objective{{Metric: "loss", Direction: trainer.ObjectiveDirectionMinimize}},
			SearchAlgorithm: &trainer.SearchAlgorithm{Random: &trainer.RandomAlgorithm{Seed: ptr.To[int64](7)}},
			Parameters: []trainer.Parameter{
				{Name: "lr", SearchSpace: trainer.SearchSpace{LogUniform: &trainer.LogUniformSpace{Min: "0.0001", Max: "0.1", Type: trainer.ParameterTypeFloat}}},
				{Name: "hidden", SearchSpace: trainer.SearchSpace{Categorical: &trainer.CategoricalSpace{Choices: []string{"32", "64"}}}},
			},
			NumTrials: ptr.To[int32](4), ParallelTrials: ptr.To[int32](2),
			TrainJobTemplate: trainer.TrainJobTemplateSpec{Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: "test-runtime"}}},
		},
	}
	for _, edit := range edits {
		edit(job)
	}
	return job
}

// uniformParam and intParam are parameters of a uniform space.
func uniformParam(name, lo, hi string) trainer.Parameter {
	return trainer.Parameter{Name: name, SearchSpace: trainer.SearchSpace{Uniform: &trainer.UniformSpace{Min: trainer.Double(lo), Max: trainer.Double(hi), Type: trainer.ParameterTypeFloat}}}
}

func intParam(name, lo, hi string) trainer.Parameter {
	p := uniformParam(name, lo, hi)
	p.SearchSpace.Uniform.Type = trainer.ParameterTypeInt
	return p
}

func withParams(params ...trainer.Parameter) func(*trainer.OptimizationJob) {
	return func(j *trainer.OptimizationJob) { j.Spec.Parameters = params }
}

func gridSearch(j *trainer.OptimizationJob) {
	j.Spec.SearchAlgorithm = &trainer.SearchAlgorithm{Grid: &trainer.GridAlgorithm{}}
}

// optJobDeps are Deps whose caches hold ClusterTrainingRuntime test-runtime (torch).
func optJobDeps(t *testing.T) *Deps {
	return fixture{runtimes: []runtime.Object{ctr("test-runtime", skeleton(torchPolicy), nil)}}.deps(t)
}

// TestValidateOptimizationJob: each rule denies with an error at the field at fault
// whose message names that field and the fix, and the warnings say what the search will
// do; a valid OptimizationJob is admitted without a word.
func TestValidateOptimizationJob(t *testing.T) {
	cases := map[string]struct {
		job *trainer.OptimizationJob
		// errs are "<type>: <field>" of every violation; inMessage what the joined
		// message must contain besides each field.
		errs      []string
		inMessage []string
		warnings  []string
	}{
		"valid": {job: optJob()},
		"uniform min not a number": {
			job:       optJob(withParams(uniformParam("lr", "abc", "1"))),
			errs:      []string{"FieldValueInvalid: spec.parameters[0].searchSpace.uniform.min"},
			inMessage: []string{`"abc"`, "must be a decimal number", `e.g. "0.001"`},
		},
		"uniform max not a number": {
			job:       optJob(withParams(uniformParam("lr", "0", "NaN"))),
			errs:      []string{"FieldValueInvalid: spec.parameters[0].searchSpace.uniform.max"},
			inMessage: []string{"must be a decimal number"},
		},
		"min not below max": {
			job:       optJob(withParams(uniformParam("lr", "1", "1"))),
			errs:      []string{"FieldValueInvalid: spec.parameters[0].searchSpace.uniform.min"},
			inMessage: []string{"must be below max (1): swap them"},
		},
		"log-uniform min not above 0": {
			job: optJob(withParams(trainer.Parameter{Name: "lr", SearchSpace: trainer.SearchSpace{
				LogUniform: &trainer.LogUniformSpace{Min: "0", Max: "0.1"}}})),
			errs:      []string{"FieldValueInvalid: spec.parameters[0].searchSpace.logUniform.min"},
			inMessage: []string{"must start above 0", "use uniform"},
		},
		"Int range without an integer": {
			job:       optJob(withParams(intParam("layers", "1.2", "1.8"))),
			errs:      []string{"FieldValueInvalid: spec.parameters[0].searchSpace.uniform"},
			inMessage: []string{"type Int needs at least one integer", "or use type Float"},
		},
		"Int range past 2^53": {
			job:       optJob(withParams(intParam("steps", "1", "1e16"))),
			errs:      []string{"FieldValueInvalid: spec.parameters[0].searchSpace.uniform"},
			inMessage: []string{"within ±2^53"},
		},
		"objective metric empty": {
			job:       optJob(func(j *trainer.OptimizationJob) { j.Spec.Objectives[0].Metric = "" }),
			errs:      []string{"FieldValueRequired: spec.objectives[0].metric"},
			inMessage: []string{"name the metric the trials report"},
		},
		"duplicate parameter name": {
			job:  optJob(withParams(uniformParam("lr", "0", "1"), uniformParam("lr", "1", "2"))),
			errs: []string{"FieldValueDuplicate: spec.parameters[1].name"},
		},
		"parameters whose variables collide": {
			job:       optJob(withParams(uniformParam("learning-rate", "0", "1"), uniformParam("Learning.Rate", "0", "1"))),
			errs:      []string{"FieldValueInvalid: spec.parameters[1].name"},
			inMessage: []string{"KUBEFLOW_TRAINER_OPT_LEARNING_RATE", "rename one"},
		},
		"grid over a uniform parameter": {
			job:       optJob(gridSearch),
			errs:      []string{"FieldValueInvalid: spec.parameters[0].searchSpace"},
			inMessage: []string{"grid search runs categorical parameters only", "or use random search"},
		},
		"parallelTrials above numTrials": {
			job:       optJob(func(j *trainer.OptimizationJob) { j.Spec.ParallelTrials = ptr.To[int32](5) }),
			errs:      []string{"FieldValueInvalid: spec.parallelTrials"},
			inMessage: []string{"must not exceed numTrials (4)", "raise numTrials"},
		},
		"parallelTrials above the default numTrials": {
			job:       optJob(func(j *trainer.OptimizationJob) { j.Spec.NumTrials = nil }),
			errs:      []string{"FieldValueInvalid: spec.parallelTrials"},
			inMessage: []string{"must not exceed numTrials (1)"},
		},
		"name with a dot makes invalid trial names": {
			job:       optJob(func(j *trainer.OptimizationJob) { j.Name = "digits.v2" }),
			errs:      []string{"FieldValueInvalid: metadata.name"},
			inMessage: []string{`"digits.v2-0" is not a valid TrainJob name`, "starting with a letter"},
		},
		"name starting with a digit": {
			job:       optJob(func(j *trainer.OptimizationJob) { j.Name = "2digits" }),
			errs:      []string{"FieldValueInvalid: metadata.name"},
			inMessage: []string{`"2digits-0"`},
		},
		"long name: trial names are cut with a hash": {
			job: optJob(func(j *trainer.OptimizationJob) { j.Name = strings.Repeat("digits-", 30) + "x" }),
		},
		"template: label key the API server refuses": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Spec.TrainJobTemplate.Labels = map[string]string{"team name": "ml"}
			}),
			errs: []string{"FieldValueInvalid: spec.trainJobTemplate.metadata.labels"},
		},
		"template: labels and annotations a TrainJob takes": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Spec.TrainJobTemplate.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}
				j.Spec.TrainJobTemplate.Annotations = map[string]string{"example.com/owner": "ml team"}
			}),
		},
		// Issue 41, finding 8: a finalizer every trial carries holds the trials back from
		// the garbage collector once the OptimizationJob is deleted.
		"template: finalizers, even valid ones": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Spec.TrainJobTemplate.Finalizers = []string{"example.com/cleanup"}
			}),
			errs:      []string{"FieldValueForbidden: spec.trainJobTemplate.metadata.finalizers"},
			inMessage: []string{"garbage collector", "put finalizers on the OptimizationJob itself"},
		},
		"template: runtime of another group": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Spec.TrainJobTemplate.Spec.RuntimeRef.APIGroup = ptr.To("example.com")
			}),
			errs:      []string{"FieldValueInvalid: spec.trainJobTemplate.spec.runtimeRef.apiGroup"},
			inMessage: []string{"spec.trainJobTemplate.spec.runtimeRef must name a TrainingRuntime or ClusterTrainingRuntime"},
		},
		"template: runtime missing is a warning": {
			job:      optJob(func(j *trainer.OptimizationJob) { j.Spec.TrainJobTemplate.Spec.RuntimeRef.Name = "nowhere" }),
			warnings: []string{`spec.trainJobTemplate (every trial): ClusterTrainingRuntime "nowhere" referenced by spec.trainJobTemplate.spec.runtimeRef not found`},
		},
		"template: reserved env": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Spec.TrainJobTemplate.Spec.Trainer = &trainer.Trainer{Env: envs("PET_NNODES")}
			}),
			errs:      []string{"FieldValueInvalid: spec.trainJobTemplate.spec.trainer.env"},
			inMessage: []string{"remove PET_NNODES from spec.trainJobTemplate.spec.trainer.env"},
		},
		"template: runtime patch manager not a domain-prefixed path": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Spec.TrainJobTemplate.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "kueue"}}
			}),
			errs: []string{"FieldValueInvalid: spec.trainJobTemplate.spec.runtimePatches[0].manager"},
		},
		"search and template errors together": {
			job: optJob(withParams(uniformParam("lr", "2", "1")), func(j *trainer.OptimizationJob) {
				j.Spec.TrainJobTemplate.Spec.Trainer = &trainer.Trainer{Env: envs("PET_NNODES")}
			}),
			errs: []string{"FieldValueInvalid: spec.parameters[0].searchSpace.uniform.min", "FieldValueInvalid: spec.trainJobTemplate.spec.trainer.env"},
		},
		"grid smaller than numTrials, and a bad name": {
			job: optJob(gridSearch, withParams(trainer.Parameter{Name: "hidden", SearchSpace: trainer.SearchSpace{
				Categorical: &trainer.CategoricalSpace{Choices: []string{"32", "64", "128"}}}}), func(j *trainer.OptimizationJob) {
				j.Name = "digits.v2"
			}),
			errs:     []string{"FieldValueInvalid: metadata.name"},
			warnings: []string{"the search will stop at 3 trials"},
		},
		"failure budget not a whole number": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Annotations = map[string]string{search.AnnotationMaxFailedTrials: "3.5"}
			}),
			errs:      []string{"FieldValueInvalid: metadata.annotations[trainyard.dev/max-failed-trials]"},
			inMessage: []string{`"3.5"`, "whole number of failed trials from 1", "set it to spec.numTrials to run every trial"},
		},
		"failure budget of 0": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Annotations = map[string]string{search.AnnotationMaxFailedTrials: "0"}
			}),
			errs: []string{"FieldValueInvalid: metadata.annotations[trainyard.dev/max-failed-trials]"},
		},
		// Issue 42, item 4.
		"final report wait past an hour": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Annotations = map[string]string{search.AnnotationFinalReportWait: "2h"}
			}),
			errs:      []string{"FieldValueInvalid: metadata.annotations[trainyard.dev/final-report-wait]"},
			inMessage: []string{`"2h"`, "duration from 0s to 1h"},
		},
		"final report wait of 30s": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Annotations = map[string]string{search.AnnotationFinalReportWait: "30s"}
			}),
		},
		"the controller's record of trials created": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Annotations = map[string]string{"trainyard.dev/trials-created": "4"}
			}),
			errs:      []string{"FieldValueForbidden: metadata.annotations[trainyard.dev/trials-created]"},
			inMessage: []string{"the controller's record of the trials it has created", "remove it"},
		},
		"failure budget of 2": {
			job: optJob(func(j *trainer.OptimizationJob) {
				j.Annotations = map[string]string{search.AnnotationMaxFailedTrials: "2"}
			}),
		},
		"grid cut by numTrials": {
			job: optJob(gridSearch, withParams(trainer.Parameter{Name: "hidden", SearchSpace: trainer.SearchSpace{
				Categorical: &trainer.CategoricalSpace{Choices: []string{"32", "64", "128"}}}}, trainer.Parameter{Name: "opt", SearchSpace: trainer.SearchSpace{
				Categorical: &trainer.CategoricalSpace{Choices: []string{"sgd", "adam"}}}})),
			warnings: []string{"spec.numTrials is 4 but the grid has 6 combinations of its parameters' choices: the search runs 4 of them, " +
				"spread over every parameter's choices, and never the other 2; set spec.numTrials to 6 to run the whole grid"},
		},
		"grid without numTrials runs one combination": {
			job: optJob(gridSearch, withParams(optJob().Spec.Parameters[1]), func(j *trainer.OptimizationJob) {
				j.Spec.NumTrials, j.Spec.ParallelTrials = nil, nil
			}),
			warnings: []string{"spec.numTrials is unset (default 1) but the grid has 2 combinations", "the search runs 1 of them", "set spec.numTrials to 2"},
		},
		"grid past numTrials' maximum": {
			job: optJob(gridSearch, withParams(trainer.Parameter{Name: "a", SearchSpace: trainer.SearchSpace{
				Categorical: &trainer.CategoricalSpace{Choices: strings.Split("0 1 2 3 4 5 6 7 8 9 10", " ")}}}, trainer.Parameter{Name: "b", SearchSpace: trainer.SearchSpace{
				Categorical: &trainer.CategoricalSpace{Choices: strings.Split("0 1 2 3 4 5 6 7 8 9", " ")}}}), func(j *trainer.OptimizationJob) {
				j.Spec.NumTrials = ptr.To[int32](100)
			}),
			warnings: []string{"spec.numTrials is 100 but the grid has 110 combinations", "numTrials is at most 100: remove choices from spec.parameters"},
		},
		"grid of exactly numTrials": {
			job: optJob(gridSearch, withParams(optJob().Spec.Parameters[1]), func(j *trainer.OptimizationJob) {
				j.Spec.NumTrials = ptr.To[int32](2)
			}),
		},
		"grid smaller than numTrials": {
			job: optJob(gridSearch, withParams(trainer.Parameter{Name: "hidden", SearchSpace: trainer.SearchSpace{
				Categorical: &trainer.CategoricalSpace{Choices: []string{"32", "64"}}}}), func(j *trainer.OptimizationJob) {
				j.Spec.NumTrials = ptr.To[int32](10)
			}),
			warnings: []string{"spec.numTrials is 10 but the grid has 2 combinations", "the search will stop at 2 trials"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			warnings, errs := optJobDeps(t).ValidateOptimizationJob(nil, tc.job)

			if diff := cmp.Diff(tc.errs, fields(errs), cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Fatalf("violations (-want +got):\n%s\nerrors: %v", diff, errs)
			}
			message := errs.ToAggregate()
			for _, e := range errs {
				if !strings.Contains(message.Error(), e.Field+": ") {
					t.Errorf("message %q does not name the field %s", message, e.Field)
				}
			}
			for _, want := range tc.inMessage {
				if message == nil || !strings.Contains(message.Error(), want) {
					t.Errorf("message %v does not contain %q", message, want)
				}
			}
			joined := strings.Join(warnings, "\n")
			if len(tc.warnings) == 0 && len(warnings) > 0 {
				t.Errorf("warnings %q, want none", warnings)
			}
			for _, want := range tc.warnings {
				if !strings.Contains(joined, want) {
					t.Errorf("warnings %q do not contain %q", warnings, want)
				}
			}
		})
	}
}

// TestValidateOptimizationJobUpdate: an UPDATE that leaves spec alone (status,
// labels, finalizers) is admitted even when the spec breaks a rule (one added after
// the object was created, or a runtime edited since); one that changes spec is
// validated.
func TestValidateOptimizationJobUpdate(t *testing.T) {
	deps := optJobDeps(t)
	old := optJob(func(j *trainer.OptimizationJob) {
		j.Spec.ParallelTrials = ptr.To[int32](9) // above numTrials: refused on CREATE
		j.Spec.TrainJobTemplate.Spec.Trainer = &trainer.Trainer{Env: envs("PET_NNODES")}
	})
	if _, errs := deps.ValidateOptimizationJob(nil, old); len(errs) == 0 {
		t.Fatal("the old object must break rules for this test to mean anything")
	}

	statusOnly := old.DeepCopy()
	statusOnly.Labels = map[string]string{"team": "ml"}
	statusOnly.Status.Conditions = []metav1.Condition{{Type: trainer.OptimizationJobCreated, Status: metav1.ConditionTrue, Reason: trainer.OptimizationJobTrialsCreatedReason}}
	if warnings, errs := deps.ValidateOptimizationJob(old, statusOnly); len(errs) > 0 || len(warnings) > 0 {
		t.Errorf("status and label update: warnings %q, errors %v; want admitted as is", warnings, errs)
	}

	specChanged := old.DeepCopy()
	specChanged.Spec.NumTrials = ptr.To[int32](5)
	_, errs := deps.ValidateOptimizationJob(old, specChanged)
	if got := fields(errs); !cmp.Equal(got, []string{"FieldValueInvalid: spec.parallelTrials", "FieldValueInvalid: spec.trainJobTemplate.spec.trainer.env"}) {
		t.Errorf("spec update: violations %v; want the spec validated", got)
	}
}

// TestOptimizationJobThroughTheHandler: AdmissionReviews for OptimizationJobs at
// PathValidateOptimizationJob are answered as the rules decide, observed as kind
// OptimizationJob; another kind at that path is refused as unreviewable.
func TestOptimizationJobThroughTheHandler(t *testing.T) {
	deps := optJobDeps(t)
	obs := &observed{}
	deps.Observer = obs
	srv := httptest.NewServer(NewHandler(deps))
	defer srv.Close()

	t.Run("CREATE admitted", func(t *testing.T) {
		resp := post(t, srv, PathValidateOptimizationJob, review(t, trainer.OptimizationJobKind, admissionv1.Create, optJob(), nil))
		if !resp.Allowed || resp.Result != nil || len(resp.Warnings) != 0 {
			t.Errorf("response %+v: want allowed without warnings", resp)
		}
	})
	t.Run("CREATE with a grid smaller than numTrials: admitted with a warning", func(t *testing.T) {
		job := optJob(gridSearch, withParams(optJob().Spec.Parameters[1]))
		resp := post(t, srv, PathValidateOptimizationJob, review(t, trainer.OptimizationJobKind, admissionv1.Create, job, nil))
		if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "the search will stop at 2 trials") {
			t.Errorf("response %+v: want allowed, warning that the search stops at 2", resp)
		}
	})
	t.Run("CREATE denied", func(t *testing.T) {
		job := optJob(func(j *trainer.OptimizationJob) { j.Spec.ParallelTrials = ptr.To[int32](5) })
		resp := post(t, srv, PathValidateOptimizationJob, review(t, trainer.OptimizationJobKind, admissionv1.Create, job, nil))
		want := metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Message: "spec.parallelTrials: Invalid value: 5: must not exceed numTrials (4): lower parallelTrials, or raise numTrials",
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "FieldValueInvalid", Field: "spec.parallelTrials",
				Message: "Invalid value: 5: must not exceed numTrials (4): lower parallelTrials, or raise numTrials"}}}}
		if resp.Allowed || resp.Result == nil {
			t.Fatalf("response %+v: want denied", resp)
		}
		if diff := cmp.Diff(want, *resp.Result); diff != "" {
			t.Errorf("result (-want +got):\n%s", diff)
		}
	})
	t.Run("UPDATE of the status only: admitted though the spec breaks a rule", func(t *testing.T) {
		old := optJob(withParams(uniformParam("lr", "2", "1")))
		job := old.DeepCopy()
		job.Status.Conditions = []metav1.Condition{{Type: trainer.OptimizationJobFailed, Status: metav1.ConditionTrue,
			Reason: trainer.OptimizationJobInvalidSpecReason, LastTransitionTime: metav1.Now()}}
		resp := post(t, srv, PathValidateOptimizationJob, review(t, trainer.OptimizationJobKind, admissionv1.Update, job, old))
		if !resp.Allowed {
			t.Errorf("response %+v: want allowed", resp)
		}
	})
	t.Run("a TrainJob at the OptimizationJob path", func(t *testing.T) {
		resp := post(t, srv, PathValidateOptimizationJob, review(t, trainer.TrainJobKind, admissionv1.Create, trainJob("test-runtime", nil), nil))
		if resp.Allowed || resp.Result == nil || resp.Result.Code != 400 {
			t.Errorf("response %+v: want refused with 400", resp)
		}
	})
	t.Run("an unknown field", func(t *testing.T) {
		body := []byte(`{"metadata":{"name":"digits","namespace":"default"},"spec":{"objectives":[{"metric":"loss"}],"bogus":1}}`)
		resp := post(t, srv, PathValidateOptimizationJob, review(t, trainer.OptimizationJobKind, admissionv1.Create, body, nil))
		if resp.Allowed || resp.Result == nil || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, "bogus") {
			t.Errorf("response %+v: want refused with 400 naming the field", resp)
		}
	})

	want := []string{"validate OptimizationJob CREATE allowed", "validate OptimizationJob CREATE allowed", "validate OptimizationJob CREATE denied",
		"validate OptimizationJob UPDATE allowed", "validate OptimizationJob CREATE denied", "validate OptimizationJob CREATE denied"}
	if diff := cmp.Diff(want, obs.reviews); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

// TestInTemplate: a TrainJob spec's field paths in a finding move under
// spec.trainJobTemplate.spec; a runtime's fields and nested "spec." stay.
func TestInTemplate(t *testing.T) {
	for in, want := range map[string]string{
		"spec.trainer.env":                    "spec.trainJobTemplate.spec.trainer.env",
		"set spec.suspend to true":            "set spec.trainJobTemplate.spec.suspend to true",
		"(spec.runtimeRef) and spec.trainer.": "(spec.trainJobTemplate.spec.runtimeRef) and spec.trainJobTemplate.spec.trainer.",
		"ClusterTrainingRuntime x spec.template.spec.replicatedJobs[name=node]: add it":   "ClusterTrainingRuntime x spec.template.spec.replicatedJobs[name=node]: add it",
		"runtime spec.mlPolicy.torch sets PET_NNODES":                                     "runtime spec.mlPolicy.torch sets PET_NNODES",
		"spec.runtimePatches[manager=m].trainingRuntimeSpec.template.spec.replicatedJobs": "spec.trainJobTemplate.spec.runtimePatches[manager=m].trainingRuntimeSpec.template.spec.replicatedJobs",
		"spec.trainerStatus": "spec.trainerStatus",
	} {
		if got := inTemplate(in); got != want {
			t.Errorf("inTemplate(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDigitsSearchExampleIsAdmitted: the OptimizationJob `make dev OPTIMIZE=1` and the
// real-node e2e run (examples/digits-search) passes every rule, on the runtime it names.
func TestDigitsSearchExampleIsAdmitted(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "digits-search", "optimizationjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	job := &trainer.OptimizationJob{}
	if err := yaml.UnmarshalStrict(data, job); err != nil {
		t.Fatalf("the example does not decode strictly: %v", err)
	}
	job.Namespace = "default"
	deps := fixture{runtimes: []runtime.Object{ctr(job.Spec.TrainJobTemplate.Spec.RuntimeRef.Name, skeleton(torchPolicy), nil)}}.deps(t)
	warnings, errs := deps.ValidateOptimizationJob(nil, job)
	if len(errs) != 0 || len(warnings) != 0 {
		t.Errorf("the example is refused or warned about: %v; warnings %q", errs, warnings)
	}
}
