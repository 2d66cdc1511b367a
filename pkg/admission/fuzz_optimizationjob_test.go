package admission

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/search"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// optimizationJobSeeds are OptimizationJob documents for FuzzOptimizationJobAdmission:
// valid ones of each search and space, and ones breaking each rule.
var optimizationJobSeeds = []string{
	`{metadata: {name: digits, namespace: default}, spec: {objectives: [{metric: loss}], parameters: [{name: lr, searchSpace: {logUniform: {min: "0.0001", max: "0.1"}}}, {name: hidden, searchSpace: {categorical: {choices: ["32", "64"]}}}], numTrials: 4, parallelTrials: 2, trainJobTemplate: {spec: {runtimeRef: {name: test-runtime}}}}}`,
	`{metadata: {name: grid, namespace: default}, spec: {objectives: [{metric: acc, direction: Maximize}], searchAlgorithm: {grid: {}}, parameters: [{name: a, searchSpace: {categorical: {choices: [x, y]}}}, {name: b, searchSpace: {categorical: {choices: ["1"]}}}], numTrials: 10, trainJobTemplate: {spec: {runtimeRef: {name: test-runtime, kind: TrainingRuntime}, suspend: true}}}}`,
	`{metadata: {name: ints, namespace: default}, spec: {objectives: [{metric: loss}], searchAlgorithm: {random: {seed: 3}}, parameters: [{name: layers, searchSpace: {uniform: {min: "-2.5", max: "7", type: Int}}}, {name: width, searchSpace: {logUniform: {min: "1", max: "1e3", type: Int}}}], numTrials: 100, parallelTrials: 100, trainJobTemplate: {spec: {runtimeRef: {name: test-runtime}, trainer: {env: [{name: KUBEFLOW_TRAINER_OPT_LAYERS, value: "1"}]}}}}}`,
	`{metadata: {name: bad, namespace: default}, spec: {objectives: [{metric: ""}], parameters: [{name: lr, searchSpace: {uniform: {min: "1e999", max: NaN}}}, {name: LR, searchSpace: {categorical: {choices: []}}}], numTrials: 1, parallelTrials: 3, trainJobTemplate: {spec: {runtimeRef: {name: test-runtime, apiGroup: example.com}}}}}`,
	`{metadata: {name: 9.bad, namespace: default}, spec: {objectives: [{metric: loss}], searchAlgorithm: {grid: {}}, parameters: [{name: x, searchSpace: {uniform: {min: "0", max: "1"}}}], trainJobTemplate: {spec: {runtimeRef: {name: nowhere}, trainer: {env: [{name: PET_NNODES, value: "1"}]}, runtimePatches: [{manager: kueue}]}}}}`,
	`{metadata: {name: long-long-long-long-long-long-long-long-long-long-long-long-long-name, namespace: default}, spec: {objectives: [{metric: loss}], parameters: [{name: "0", searchSpace: {uniform: {min: "-9007199254740992", max: "9007199254740992", type: Int}}}], numTrials: 100, trainJobTemplate: {spec: {runtimeRef: {name: test-runtime}}}}}`,
	`{metadata: {name: labelled, namespace: default}, spec: {objectives: [{metric: loss}], parameters: [{name: x, searchSpace: {categorical: {choices: [a]}}}], trainJobTemplate: {metadata: {labels: {"kueue.x-k8s.io/queue-name": q, "bad key": v}, annotations: {"a/b": c}, finalizers: [example.com/f]}, spec: {runtimeRef: {name: test-runtime}}}}}`,
	`{metadata: {name: budget, namespace: default, annotations: {"trainyard.dev/max-failed-trials": "2"}}, spec: {objectives: [{metric: loss}], parameters: [{name: x, searchSpace: {categorical: {choices: [a, b]}}}], numTrials: 5, trainJobTemplate: {spec: {runtimeRef: {name: test-runtime}}}}}`,
	`{metadata: {name: badbudget, namespace: default, annotations: {"trainyard.dev/max-failed-trials": "-1"}}, spec: {objectives: [{metric: loss}], parameters: [{name: x, searchSpace: {uniform: {min: "-1e308", max: "1e308"}}}], trainJobTemplate: {spec: {runtimeRef: {name: test-runtime}}}}}`,
	`{metadata: {name: empty}, spec: {}}`,
}

// FuzzOptimizationJobAdmission reviews arbitrary OptimizationJobs (object and old, YAML
// or JSON; op picks CREATE, UPDATE, DELETE or CONNECT) at PathValidateOptimizationJob,
// whose caches hold the skeleton torch runtime as ClusterTrainingRuntime test-runtime
// and TrainingRuntime default/test-runtime. Besides serveReview's checks (no panic,
// never a 5xx or a 500 review, answered with the request's uid), an OptimizationJob
// admitted on CREATE is one the controller runs: search.ValidateSpec accepts it (its
// spec and its failure budget's annotation), search.New its spec, and each
// of its first trials (at most 100, the CRD's numTrials maximum) is made by trial.New
// with a valid TrainJob name and passes the TrainJob rules its first one was held to.
func FuzzOptimizationJobAdmission(f *testing.F) {
	for i, doc := range optimizationJobSeeds {
		f.Add(uint8(0), []byte(doc), []byte(nil))
		if i%2 == 0 {
			f.Add(uint8(1), []byte(doc), []byte(optimizationJobSeeds[(i+1)%len(optimizationJobSeeds)]))
			f.Add(uint8(1), []byte(doc), []byte(doc))
		}
	}
	f.Fuzz(func(t *testing.T, op uint8, object, old []byte) {
		operation := fuzzOperations[int(op)%len(fuzzOperations)]
		body, ok := fuzzReviewBody(trainer.OptimizationJobKind, operation, object, old)
		if !ok {
			return
		}
		rt := skeleton(torchPolicy)
		tr := &trainer.TrainingRuntime{}
		tr.Namespace, tr.Name, tr.Spec = "default", "test-runtime", *rt.DeepCopy()
		deps := fixture{runtimes: []runtime.Object{tr, ctr("test-runtime", rt, nil)}}.deps(t)
		req, resp := serveReview(t, NewHandler(deps), PathValidateOptimizationJob, body)
		if req == nil {
			t.Fatal("a review built from the documents was not reviewed")
		}
		if !resp.Allowed || operation != admissionv1.Create {
			return
		}
		var job trainer.OptimizationJob
		if err := json.Unmarshal(req.Object.Raw, &job); err != nil {
			t.Fatalf("admitted an OptimizationJob that does not decode: %v", err)
		}
		if errs := search.ValidateSpec(&job); len(errs) > 0 {
			t.Fatalf("admitted an OptimizationJob the controller refuses: %v", errs)
		}
		srch, err := search.New(&job.Spec, search.Seed(&job))
		if err != nil {
			t.Fatalf("admitted an OptimizationJob whose search cannot run: %v", err)
		}
		n := min(int(ptr.Deref(job.Spec.NumTrials, 1)), srch.Size(), 100)
		for index := range n {
			assignment, err := srch.Assignment(index)
			if err != nil {
				t.Fatalf("trial %d of an admitted OptimizationJob: %v", index, err)
			}
			tj, err := trial.New(&job, index, assignment)
			if err != nil {
				t.Fatalf("trial %d of an admitted OptimizationJob: %v", index, err)
			}
			if msgs := validation.IsDNS1035Label(tj.Name); job.Name != "" && len(msgs) > 0 {
				t.Fatalf("trial %d of an admitted OptimizationJob is named %q: %v", index, tj.Name, msgs)
			}
			if index < 4 {
				if _, errs := deps.ValidateTrainJob(nil, tj); len(errs) > 0 {
					t.Fatalf("trial %d of an admitted OptimizationJob breaks the TrainJob rules: %v", index, errs)
				}
			}
		}
	})
}
