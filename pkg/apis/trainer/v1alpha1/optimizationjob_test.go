package v1alpha1_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/trainyard/trainyard/pkg/admission/admissiontest"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// schemaOf returns the v1alpha1 OpenAPI schema of the CRD in file, as generic JSON with
// every description removed (prose, not wire).
func schemaOf(t *testing.T, file string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	js, err := json.Marshal(crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(js, &schema); err != nil {
		t.Fatal(err)
	}
	dropDescriptions(schema)
	return schema
}

func dropDescriptions(v any) {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "description")
		for _, child := range v {
			dropDescriptions(child)
		}
	case []any:
		for _, child := range v {
			dropDescriptions(child)
		}
	}
}

// cut removes the subtree at the dotted path of properties from schema and returns it.
func cut(t *testing.T, schema map[string]any, path string) any {
	t.Helper()
	node := schema
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := node["properties"].(map[string]any)[p].(map[string]any)
		if !ok {
			t.Fatalf("no %s in the schema", path)
		}
		node = next
	}
	props := node["properties"].(map[string]any)
	sub := props[parts[len(parts)-1]]
	delete(props, parts[len(parts)-1])
	return sub
}

// TestOptimizationJobSchemaIsUpstreams (issue 26): the generated OptimizationJob CRD
// has upstream's schema field for field — types, bounds, patterns, defaults, list types,
// CEL rules and messages — but for the TrainJob template's spec, which is Trainyard's
// own TrainJob spec (its CRD's), with the extensions that CRD documents.
func TestOptimizationJobSchemaIsUpstreams(t *testing.T) {
	upstreamFile := filepath.Join(utiltesting.UpstreamDir(t), "optimizationjob", "trainer.kubeflow.org_optimizationjobs.yaml")
	upstream := schemaOf(t, upstreamFile)
	ours := schemaOf(t, filepath.Join(crdDir, "trainer.kubeflow.org_optimizationjobs.yaml"))
	trainJob := schemaOf(t, filepath.Join(crdDir, "trainer.kubeflow.org_trainjobs.yaml"))

	template := cut(t, ours, "spec.trainJobTemplate.spec")
	cut(t, upstream, "spec.trainJobTemplate.spec")
	if !reflect.DeepEqual(upstream, ours) {
		a, _ := json.MarshalIndent(upstream, "", " ")
		b, _ := json.MarshalIndent(ours, "", " ")
		t.Errorf("the OptimizationJob schema differs from upstream's (%s):\nupstream:\n%s\nours:\n%s", upstreamFile, a, b)
	}
	if want := cut(t, trainJob, "spec"); !reflect.DeepEqual(template, want) {
		t.Error("spec.trainJobTemplate.spec is not the TrainJob CRD's spec schema")
	}
}

// TestOptimizationJobRules runs the CRD's validation, as the API server would, on
// OptimizationJobs each breaking one of upstream's rules, and on a valid one defaulted.
func TestOptimizationJobRules(t *testing.T) {
	c := loadCRDs(t)[trainer.OptimizationJobKind]
	const template = `"trainJobTemplate":{"spec":{"runtimeRef":{"name":"torch-distributed"}}}`
	job := func(spec string) string {
		return `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"OptimizationJob","metadata":{"name":"a","namespace":"n"},"spec":{` + spec + `}}`
	}
	lr := `{"name":"lr","searchSpace":{"logUniform":{"min":"0.0001","max":"0.1"}}}`
	hidden := `{"name":"hidden","searchSpace":{"categorical":{"choices":["32","64"]}}}`
	objectives := `"objectives":[{"metric":"loss"}]`

	valid := decodeMap(t, []byte(job(objectives+`,"parameters":[`+lr+`,`+hidden+`],`+template)))
	if _, errs := c.admit(valid, nil); len(errs) > 0 {
		t.Fatalf("a valid OptimizationJob is refused: %v", errs.ToAggregate())
	}
	assertPath(t, valid, "spec.numTrials", int64(1))
	assertPath(t, valid, "spec.parallelTrials", int64(1))
	assertPath(t, valid, "spec.objectives.0.direction", string(trainer.ObjectiveDirectionMinimize))
	assertPath(t, valid, "spec.parameters.0.searchSpace.logUniform.type", string(trainer.ParameterTypeFloat))
	if _, ok := valid["spec"].(map[string]any)["searchAlgorithm"].(map[string]any)["random"]; !ok {
		t.Error("spec.searchAlgorithm does not default to random")
	}

	for name, tc := range map[string]struct{ spec, want string }{
		"two objectives":        {`"objectives":[{"metric":"loss"},{"metric":"acc"}],"parameters":[` + lr + `],` + template, "spec.objectives"},
		"no parameter":          {objectives + `,"parameters":[],` + template, "spec.parameters"},
		"parallel over total":   {objectives + `,"numTrials":2,"parallelTrials":3,"parameters":[` + lr + `],` + template, "parallelTrials cannot exceed numTrials"},
		"101 trials":            {objectives + `,"numTrials":101,"parameters":[` + lr + `],` + template, "spec.numTrials"},
		"grid over a range":     {objectives + `,"searchAlgorithm":{"grid":{}},"parameters":[` + lr + `],` + template, "Grid search requires all parameters to be Categorical"},
		"random and grid":       {objectives + `,"searchAlgorithm":{"grid":{},"random":{}},"parameters":[` + hidden + `],` + template, "exactly one of the fields in [random grid] must be set"},
		"two distributions":     {objectives + `,"parameters":[{"name":"x","searchSpace":{"uniform":{"min":"0","max":"1"},"categorical":{"choices":["a"]}}}],` + template, "exactly one of the fields in [uniform logUniform categorical] must be set"},
		"min not below max":     {objectives + `,"parameters":[{"name":"x","searchSpace":{"uniform":{"min":"2","max":"1"}}}],` + template, "min must be strictly less than max"},
		"log-uniform from zero": {objectives + `,"parameters":[{"name":"x","searchSpace":{"logUniform":{"min":"0","max":"1"}}}],` + template, "min must be strictly greater than 0"},
		"a bound not a number":  {objectives + `,"parameters":[{"name":"x","searchSpace":{"uniform":{"min":"1e","max":"2"}}}],` + template, "spec.parameters[0].searchSpace.uniform.min"},
		"a named template": {objectives + `,"parameters":[` + lr + `],"trainJobTemplate":{"metadata":{"name":"x"},"spec":{"runtimeRef":{"name":"r"}}}`,
			"name and namespace cannot be set in a template."},
	} {
		t.Run(name, func(t *testing.T) {
			_, errs := c.admit(decodeMap(t, []byte(job(tc.spec))), nil)
			if errs == nil || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors %v, want one mentioning %q", errs.ToAggregate(), tc.want)
			}
		})
	}

	t.Run("spec immutable", func(t *testing.T) {
		old := decodeMap(t, []byte(job(objectives+`,"numTrials":4,"parameters":[`+lr+`],`+template)))
		cur := decodeMap(t, []byte(job(objectives+`,"numTrials":5,"parameters":[`+lr+`],`+template)))
		if _, errs := c.admit(old, nil); len(errs) > 0 {
			t.Fatal(errs.ToAggregate())
		}
		_, errs := c.admit(cur, old)
		if errs == nil || !strings.Contains(errs.ToAggregate().Error(), "OptimizationJobSpec is immutable") {
			t.Errorf("update errors %v, want the spec's immutability", errs.ToAggregate())
		}
	})
}

// TestRuleTableOptimizationJobsPassTheCRD: every OptimizationJob of the admission rule
// table (admissiontest.OptimizationJobCases) is accepted by the CRD's schema and CEL
// rules, so that the e2e tests, which send them to a real API server, get the webhook's
// answer and not the API server's 422.
func TestRuleTableOptimizationJobsPassTheCRD(t *testing.T) {
	c := loadCRDs(t)[trainer.OptimizationJobKind]
	for _, tc := range admissiontest.OptimizationJobCases("ns") {
		t.Run(tc.Name, func(t *testing.T) {
			js, err := json.Marshal(tc.Object)
			if err != nil {
				t.Fatal(err)
			}
			pruned, errs := c.admit(decodeMap(t, js), nil)
			if len(pruned) > 0 || len(errs) > 0 {
				t.Errorf("the CRD prunes %v and refuses: %v", pruned, errs.ToAggregate())
			}
		})
	}
}
