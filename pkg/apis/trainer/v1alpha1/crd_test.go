package v1alpha1_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	schemavalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

const crdDir = "../../../../charts/trainyard/crds"

// crd is one generated CRD ready to validate objects in-process the way the API server
// does: prune unknown fields, apply defaults, validate the OpenAPI schema, run CEL.
type crd struct {
	file       string
	v1         *apiextensionsv1.CustomResourceDefinition // as in the file
	internal   *apiextensions.CustomResourceDefinition
	structural *structuralschema.Structural
	schema     schemavalidation.SchemaValidator
	cel        *cel.Validator
}

func loadCRDs(t *testing.T) map[string]*crd {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(files) != 4 {
		t.Fatalf("want 4 CRDs in %s, found %v (%v): run make generate", crdDir, files, err)
	}
	byKind := map[string]*crd{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var v1 apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &v1); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		// The API server records the stored version on create; validation requires it.
		v1.Status.StoredVersions = []string{"v1alpha1"}
		internal := &apiextensions.CustomResourceDefinition{}
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, internal, nil); err != nil {
			t.Fatalf("%s: convert: %v", file, err)
		}
		if len(internal.Spec.Versions) != 1 || internal.Spec.Versions[0].Name != "v1alpha1" {
			t.Fatalf("%s: want exactly the v1alpha1 version", file)
		}
		validation, err := apiextensions.GetSchemaForVersion(internal, "v1alpha1")
		if err != nil || validation == nil {
			t.Fatalf("%s: no schema for v1alpha1: %v", file, err)
		}
		props := validation.OpenAPIV3Schema
		structural, err := structuralschema.NewStructural(props)
		if err != nil {
			t.Fatalf("%s: not a structural schema: %v", file, err)
		}
		validator, _, err := schemavalidation.NewSchemaValidator(props)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		byKind[internal.Spec.Names.Kind] = &crd{
			file:       filepath.Base(file),
			v1:         &v1,
			internal:   internal,
			structural: structural,
			schema:     validator,
			cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
		}
	}
	return byKind
}

// admit runs what the API server runs on a create (old == nil) or an update: it returns
// the paths of pruned (unknown) fields and the validation errors. obj is defaulted in place.
func (c *crd) admit(obj, old map[string]any) (pruned []string, errs field.ErrorList) {
	pruned = structuralpruning.PruneWithOptions(obj, c.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	structuraldefaulting.Default(obj, c.structural)
	if old == nil {
		errs = schemavalidation.ValidateCustomResource(nil, obj, c.schema)
	} else {
		errs = schemavalidation.ValidateCustomResourceUpdate(nil, obj, old, c.schema)
	}
	var oldObj any
	if old != nil {
		oldObj = old
	}
	celErrs, _ := c.cel.Validate(context.Background(), nil, c.structural, obj, oldObj, celconfig.RuntimeCELCostBudget)
	return pruned, append(errs, celErrs...)
}

func TestCRDsAreValid(t *testing.T) {
	for kind, c := range loadCRDs(t) {
		t.Run(kind, func(t *testing.T) {
			// The API server's own CRD validation: structural schema, list types, CEL
			// compilation and CEL cost estimation against the per-CRD limits.
			if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), c.internal); len(errs) > 0 {
				t.Fatalf("%s is rejected by the API server:\n%v", c.file, errs.ToAggregate())
			}
		})
	}
}

func TestCRDNamesAndScope(t *testing.T) {
	crds := loadCRDs(t)
	for _, tc := range []struct {
		kind, plural string
		scope        apiextensions.ResourceScope
		status       bool
	}{
		{trainer.TrainJobKind, "trainjobs", apiextensions.NamespaceScoped, true},
		{trainer.TrainingRuntimeKind, "trainingruntimes", apiextensions.NamespaceScoped, false},
		{trainer.ClusterTrainingRuntimeKind, "clustertrainingruntimes", apiextensions.ClusterScoped, false},
		{trainer.OptimizationJobKind, "optimizationjobs", apiextensions.NamespaceScoped, true},
	} {
		c, ok := crds[tc.kind]
		if !ok {
			t.Fatalf("no CRD for %s", tc.kind)
		}
		spec := c.internal.Spec
		if spec.Group != trainer.GroupName || spec.Names.Plural != tc.plural || spec.Scope != tc.scope {
			t.Errorf("%s: group %q plural %q scope %q, want %q %q %q", tc.kind, spec.Group, spec.Names.Plural, spec.Scope, trainer.GroupName, tc.plural, tc.scope)
		}
		v := spec.Versions[0]
		if !v.Served || !v.Storage {
			t.Errorf("%s: v1alpha1 must be served and stored", tc.kind)
		}
		sub, err := apiextensions.GetSubresourcesForVersion(c.internal, "v1alpha1")
		if err != nil {
			t.Fatal(err)
		}
		if hasStatus := sub != nil && sub.Status != nil; hasStatus != tc.status {
			t.Errorf("%s: status subresource = %v, want %v", tc.kind, hasStatus, tc.status)
		}
	}
}

// TestUpstreamDocumentsAreAccepted creates every upstream TrainJob and runtime against
// the generated CRDs: nothing may be pruned (a pruned field is silently lost data) and
// nothing rejected.
func TestUpstreamDocumentsAreAccepted(t *testing.T) {
	crds := loadCRDs(t)
	for _, doc := range utiltesting.UpstreamDocuments(t, trainerKinds...) {
		t.Run(doc.Name(), func(t *testing.T) {
			obj := decodeMap(t, doc.JSON)
			pruned, errs := crds[doc.Kind].admit(obj, nil)
			if len(pruned) > 0 {
				t.Errorf("fields unknown to the CRD (the API server would drop them): %v", pruned)
			}
			if len(errs) > 0 {
				t.Errorf("rejected: %v", errs.ToAggregate())
			}
		})
	}
}

// TestCRDDefaults checks the OpenAPI defaults of docs/compatibility.md#api-defaults on
// upstream input.
func TestCRDDefaults(t *testing.T) {
	crds := loadCRDs(t)
	tj := decodeMap(t, []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"a"},"spec":{"runtimeRef":{"name":"torch-distributed"}}}`))
	if _, errs := crds[trainer.TrainJobKind].admit(tj, nil); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	assertPath(t, tj, "spec.suspend", false)
	assertPath(t, tj, "spec.managedBy", trainer.ManagedByTrainJobController)
	assertPath(t, tj, "spec.runtimeRef.apiGroup", trainer.GroupName)
	assertPath(t, tj, "spec.runtimeRef.kind", trainer.ClusterTrainingRuntimeKind)

	rt := decodeMap(t, []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"ClusterTrainingRuntime","metadata":{"name":"a"},"spec":{
	  "mlPolicy":{"mpi":{}},
	  "podGroupPolicy":{"coscheduling":{}},
	  "template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"containers":[{"name":"node","image":"x"}]}}}}}]}}}}`))
	if _, errs := crds[trainer.ClusterTrainingRuntimeKind].admit(rt, nil); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	assertPath(t, rt, "spec.mlPolicy.mpi.numProcPerNode", int64(1))
	assertPath(t, rt, "spec.mlPolicy.mpi.mpiImplementation", "OpenMPI")
	assertPath(t, rt, "spec.mlPolicy.mpi.sshAuthMountPath", "/root/.ssh")
	assertPath(t, rt, "spec.mlPolicy.mpi.runLauncherAsNode", false)
	assertPath(t, rt, "spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds", int64(60))
	assertPath(t, rt, "spec.template.spec.replicatedJobs.0.replicas", int64(1))

	volcano := decodeMap(t, []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainingRuntime","metadata":{"name":"a","namespace":"n"},"spec":{
	  "podGroupPolicy":{"volcano":{"networkTopology":{}}},"template":{"spec":{}}}}`))
	if _, errs := crds[trainer.TrainingRuntimeKind].admit(volcano, nil); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	assertPath(t, volcano, "spec.podGroupPolicy.volcano.networkTopology.mode", "hard")
	assertPath(t, volcano, "spec.podGroupPolicy.volcano.networkTopology.highestTierAllowed", int64(1))
}

func decodeMap(t *testing.T, js []byte) map[string]any {
	t.Helper()
	var obj map[string]any
	// UseNumber-free decoding as the API server's unstructured JSON: integers as int64.
	if err := yaml.Unmarshal(js, &obj); err != nil {
		t.Fatal(err)
	}
	return normalizeNumbers(obj).(map[string]any)
}

// normalizeNumbers turns float64 values that are whole numbers into int64, as the API
// server's JSON decoding of custom resources does.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
	}
	return v
}

func assertPath(t *testing.T, obj map[string]any, path string, want any) {
	t.Helper()
	var cur any = obj
	for _, part := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[part]
		case []any:
			var i int
			if err := json.Unmarshal([]byte(part), &i); err != nil || i >= len(c) {
				t.Fatalf("%s: bad index %q", path, part)
			}
			cur = c[i]
		default:
			t.Fatalf("%s: no such path", path)
		}
	}
	if cur != want {
		t.Errorf("%s = %#v, want %#v", path, cur, want)
	}
}
