package render_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/render"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// upstreamCase is one upstream runtime with one TrainJob for it: an upstream example
// TrainJob that references it, or a minimal TrainJob built here when no example does.
type upstreamCase struct {
	// Runtime is the runtime's name; Name names the case within it: the example's file
	// name without extension, or "minimal".
	Runtime, Name string
	// Sources are the inputs, named by their path under shared/upstream (the minimal
	// TrainJob as "minimal-trainjob.yaml"), so errors and goldens do not depend on
	// where shared/ is checked out.
	Sources []render.Source
}

// ID is the case's name in test output and its golden file's path under
// testdata/golden without extension.
func (c upstreamCase) ID() string { return c.Runtime + "/" + c.Name }

// upstreamCases returns a case for every runtime under shared/upstream/runtimes
// (recursively) and under shared/upstream/examples, paired with every example TrainJob
// that references it, or with a minimal TrainJob when none does. The Helm templates in
// runtimes/helm-chart-files are skipped: they are the same runtimes as Helm input, to be
// rendered with `helm template` first. The test is skipped when shared/upstream is
// absent.
func upstreamCases(t testing.TB) []upstreamCase {
	t.Helper()
	root := utiltesting.UpstreamDir(t)
	type runtimeDoc struct {
		kind, name, file string
		spec             trainer.TrainingRuntimeSpec
	}
	var runtimes []runtimeDoc
	for _, doc := range utiltesting.UpstreamDocuments(t, trainer.TrainingRuntimeKind, trainer.ClusterTrainingRuntimeKind) {
		if strings.HasPrefix(doc.File, filepath.Join("runtimes", "helm-chart-files")+string(filepath.Separator)) {
			continue
		}
		var rt trainer.ClusterTrainingRuntime // both kinds share the spec
		if err := yaml.UnmarshalStrict(doc.JSON, &rt); err != nil {
			t.Fatalf("%s: %v", doc.Name(), err)
		}
		runtimes = append(runtimes, runtimeDoc{kind: doc.Kind, name: rt.Name, file: doc.File, spec: rt.Spec})
	}
	type trainJobDoc struct {
		kind, runtime, file string
	}
	var trainJobs []trainJobDoc
	for _, doc := range utiltesting.UpstreamDocuments(t, trainer.TrainJobKind) {
		var tj trainer.TrainJob
		if err := yaml.UnmarshalStrict(doc.JSON, &tj); err != nil {
			t.Fatalf("%s: %v", doc.Name(), err)
		}
		trainJobs = append(trainJobs, trainJobDoc{
			kind: ptr.Deref(tj.Spec.RuntimeRef.Kind, trainer.ClusterTrainingRuntimeKind), runtime: tj.Spec.RuntimeRef.Name, file: doc.File,
		})
	}
	if len(runtimes) < 10 || len(trainJobs) < 5 {
		t.Fatalf("found %d runtimes and %d TrainJobs under %s: is shared/upstream complete?", len(runtimes), len(trainJobs), root)
	}

	read := func(file string) render.Source {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		return render.Source{Name: filepath.ToSlash(file), Data: data}
	}
	var cases []upstreamCase
	for _, rt := range runtimes {
		found := false
		for _, tj := range trainJobs {
			if tj.kind != rt.kind || tj.runtime != rt.name {
				continue
			}
			found = true
			sources := []render.Source{read(rt.file)}
			if tj.file != rt.file {
				sources = append(sources, read(tj.file))
			}
			cases = append(cases, upstreamCase{Runtime: rt.name, Name: strings.TrimSuffix(filepath.Base(tj.file), filepath.Ext(tj.file)), Sources: sources})
		}
		if !found {
			data, err := yaml.Marshal(minimalTrainJob(rt.kind, rt.name, &rt.spec))
			if err != nil {
				t.Fatal(err)
			}
			cases = append(cases, upstreamCase{Runtime: rt.name, Name: "minimal",
				Sources: []render.Source{read(rt.file), {Name: "minimal-trainjob.yaml", Data: data}}})
		}
	}
	slices.SortFunc(cases, func(a, b upstreamCase) int { return strings.Compare(a.ID(), b.ID()) })
	for i := 1; i < len(cases); i++ {
		if cases[i].ID() == cases[i-1].ID() {
			t.Fatalf("two cases named %s", cases[i].ID())
		}
	}
	return cases
}

// minimalTrainJob is a TrainJob named "minimal" that a user of the runtime would write:
// two nodes, except for torchtune (`tune run` on one node, the only upstream-accepted
// shape for the shipped models), and a dataset storageUri when the runtime has a
// dataset initializer.
func minimalTrainJob(kind, runtimeName string, spec *trainer.TrainingRuntimeSpec) *trainer.TrainJob {
	tj := &trainer.TrainJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind},
		ObjectMeta: metav1.ObjectMeta{Name: "minimal"},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: runtimeName, Kind: ptr.To(kind)},
			Trainer:    &trainer.Trainer{NumNodes: ptr.To[int32](2)},
		},
	}
	if strings.HasPrefix(runtimeName, "torchtune-") {
		tj.Spec.Trainer = &trainer.Trainer{Command: []string{"tune", "run"}}
	}
	for _, rj := range spec.Template.Spec.ReplicatedJobs {
		if rj.Template.Labels[trainer.LabelTrainJobAncestor] == trainer.AncestorDatasetInitializer {
			tj.Spec.Initializer = &trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://tatsu-lab/alpaca")}}
		}
	}
	return tj
}
