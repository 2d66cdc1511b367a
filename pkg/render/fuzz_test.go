package render_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
	"github.com/trainyard/trainyard/pkg/render"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// Bits of FuzzRender's flags argument.
const (
	fuzzProgress   = 1 << iota // stages.Options.ProgressURL set
	fuzzNoAPIs                 // no optional API served (gang and DRA APIs absent)
	fuzzNamespaced             // Load's namespace "team-a" instead of "default"
)

// FuzzRender renders arbitrary runtime + TrainJob pairs through the offline renderer's
// public API (render.Load of two YAML sources, render.Render, render.WriteYAML): the
// sources are decoded strictly into the API types and run through the controller's own
// stages 1-5 and status.DesiredOf. Inputs the CRDs refuse (plantest.CRDRefuses) are
// skipped. flags picks the options (the progress server's URL,
// no optional API served, another default namespace). Seeds: plantest.FuzzInputs (the
// upstream runtimes with their example TrainJobs, hand-written edge cases) and the
// golden files under testdata/golden, each giving two pairs: the runtime recorded in
// the JobSet's runtime-snapshot annotation with a TrainJob for it, and a runtime whose
// template is the rendered JobSet (a render of a render). For every pair that loads:
//
//   - rendering is deterministic: two renders of the same inputs write byte-identical
//     YAML, or fail with the same error (this also catches a render that modifies its
//     inputs);
//   - a failure is one *render.Error per TrainJob, never a stage's non-input error (a
//     bug the controller would retry forever);
//   - every rendered plan is one the status stage can apply (plantest.CheckPlan).
func FuzzRender(f *testing.F) {
	for i, in := range plantest.FuzzInputs(f) {
		f.Add(in.Runtime, in.TrainJob, uint8(i%4))
		if strings.HasSuffix(in.Name, "+ runtime patches") {
			// The DRA objects the patches' claims name, after the TrainJob.
			f.Add(in.Runtime, append(append(in.TrainJob[:len(in.TrainJob):len(in.TrainJob)], "---\n"...), fuzzDRAObjects...), uint8(0))
		}
	}
	for _, seed := range goldenSeeds(f) {
		f.Add(seed.Runtime, seed.TrainJob, uint8(0))
	}
	url := func(namespace, name string) string {
		return progress.BaseURL("trainyard-webhook", "trainyard-system", 10443) + wire.Path(namespace, name)
	}
	f.Fuzz(func(t *testing.T, runtime, trainJob []byte, flags uint8) {
		namespace := "default"
		if flags&fuzzNamespaced != 0 {
			namespace = "team-a"
		}
		in, err := render.Load([]render.Source{{Name: "runtime.yaml", Data: runtime}, {Name: "trainjob.yaml", Data: trainJob}}, namespace)
		if err != nil || len(in.TrainJobs) == 0 { // nothing to render: Render says so
			return
		}
		for _, tj := range in.TrainJobs {
			if plantest.CRDRefuses(tj, nil) {
				return
			}
		}
		for _, rt := range in.TrainingRuntimes {
			if plantest.CRDRefuses(nil, &rt.Spec) {
				return
			}
		}
		for _, rt := range in.ClusterTrainingRuntimes {
			if plantest.CRDRefuses(nil, &rt.Spec) {
				return
			}
		}
		var opts render.Options
		if flags&fuzzProgress != 0 {
			opts.Build.ProgressURL = url
		}
		if flags&fuzzNoAPIs != 0 {
			opts.APIVersions = []string{}
		}
		results, out1, err1 := renderYAML(in, opts)
		_, out2, err2 := renderYAML(in, opts)
		switch {
		case (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()):
			t.Fatalf("two renders of the same inputs fail differently:\n%v\n---\n%v", err1, err2)
		case !bytes.Equal(out1, out2):
			t.Fatalf("two renders of the same inputs differ:\n%s\n---\n%s", out1, out2)
		}
		if err1 != nil {
			checkRenderError(t, err1)
			return
		}
		for _, res := range results {
			if err := plantest.CheckPlan(res.TrainJob, res.Plan); err != nil {
				t.Fatalf("%s: rendered plan: %v", res.Origin, err)
			}
		}
	})
}

// fuzzDRAObjects are the DRA objects plantest.FuzzInputs' "runtime patches" TrainJob
// names: the ResourceClaimTemplate gpus (request "a" of 2 GPUs) and its DeviceClass.
var fuzzDRAObjects = []byte(`apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: gpus
spec:
  spec:
    devices:
      requests:
      - name: a
        exactly:
          deviceClassName: gpu.example.com
          count: 2
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.example.com
`)

// renderYAML renders in with opts: the results and their YAML. Errors come from Render
// (the *render.Errors joined) or, wrapped as "WriteYAML: ...", from WriteYAML.
func renderYAML(in *render.Inputs, opts render.Options) ([]*render.Result, []byte, error) {
	results, err := render.Render(context.Background(), in, opts)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	if err := render.WriteYAML(&buf, results); err != nil {
		return nil, nil, errors.New("WriteYAML: " + err.Error())
	}
	return results, buf.Bytes(), nil
}

// checkRenderError fails t unless err is render.Render's: *render.Errors, none a stage's
// non-input error ("stage <name>: ..." without a plan input error inside).
func checkRenderError(t *testing.T, err error) {
	t.Helper()
	if strings.HasPrefix(err.Error(), "WriteYAML: ") {
		t.Fatalf("rendered, but %v", err)
	}
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	for _, e := range errs {
		var re *render.Error
		if !errors.As(e, &re) {
			t.Fatalf("Render: %v: not a *render.Error", e)
		}
		if strings.HasPrefix(re.Err.Error(), "stage ") && !plan.IsInputError(re.Err) {
			t.Fatalf("Render: %v: a stage failed with an error that is not about its input, which the controller would retry forever", e)
		}
	}
}

// goldenSeeds returns two runtime + TrainJob pairs per golden file's JobSet: the runtime
// its runtime-snapshot annotation records, with a TrainJob of the JobSet's name for it
// (numNodes from the trainer's pod count), and the same with the rendered JobSet as the
// runtime's template.
func goldenSeeds(tb testing.TB) []plantest.FuzzInput {
	tb.Helper()
	var out []plantest.FuzzInput
	err := filepath.WalkDir(goldenDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			var js jobsetv1alpha2.JobSet
			if err := yaml.Unmarshal(doc, &js); err != nil || js.Kind != "JobSet" {
				continue
			}
			snapshot := js.Annotations[objectkeys.AnnotationRuntimeSnapshot]
			if snapshot == "" {
				continue
			}
			var rt trainer.ClusterTrainingRuntime // the snapshot's kind says which
			if err := json.Unmarshal([]byte(snapshot), &rt); err != nil {
				tb.Fatalf("%s: runtime snapshot: %v", path, err)
			}
			rt.Namespace = ""
			if rt.Kind == trainer.TrainingRuntimeKind {
				rt.Namespace = js.Namespace
			}
			tj := plantest.TrainJob(rt.Name, nil)
			tj.Name, tj.Namespace, tj.UID = js.Name, js.Namespace, ""
			tj.Spec.RuntimeRef.Kind = ptr.To(rt.Kind)
			for i := range js.Spec.ReplicatedJobs {
				if rj := &js.Spec.ReplicatedJobs[i]; plan.Ancestor(rj) == trainer.AncestorTrainer {
					tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To(plan.Count(rj))}
				}
			}
			tjDoc := mustMarshal(tb, tj)
			out = append(out, plantest.FuzzInput{Name: "golden " + path, Runtime: mustMarshal(tb, &rt), TrainJob: tjDoc})
			rt.Spec.Template.Spec = js.Spec
			out = append(out, plantest.FuzzInput{Name: "golden " + path + " as template", Runtime: mustMarshal(tb, &rt), TrainJob: tjDoc})
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("reading the golden files: %v", err)
	}
	if len(out) == 0 {
		tb.Fatalf("no JobSet with a runtime snapshot under %s", goldenDir)
	}
	return out
}

func mustMarshal(tb testing.TB, obj any) []byte {
	tb.Helper()
	out, err := yaml.Marshal(obj)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
