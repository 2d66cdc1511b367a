package render_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetfake "sigs.k8s.io/jobset/client-go/clientset/versioned/fake"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/render"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/stages/statuswriter"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// recordingApplier records the side objects the status stage creates and applies, in
// order; a created Secret's generated values are replaced as render redacts them.
type recordingApplier struct{ applied []map[string]any }

func (a *recordingApplier) Apply(_ context.Context, obj *unstructured.Unstructured) error {
	a.applied = append(a.applied, obj.DeepCopy().Object)
	return nil
}

func (a *recordingApplier) Create(_ context.Context, obj *unstructured.Unstructured) error {
	o := obj.DeepCopy()
	if o.GetKind() == "Secret" {
		for _, field := range []string{"data", "stringData"} {
			if m, ok := o.Object[field].(map[string]any); ok {
				for k := range m {
					m[k] = render.Redacted
				}
			}
		}
	}
	a.applied = append(a.applied, o.Object)
	return nil
}

// Lookup finds nothing: the namespace is empty.
func (a *recordingApplier) Lookup(context.Context, *unstructured.Unstructured, bool) (metav1.Object, bool, error) {
	return nil, false, nil
}

// TestRenderIsWhatTheStatusStageApplies feeds the plan render built to the controller's
// status stage (fake clients) and compares what the stage applies, byte for byte after
// JSON decoding, with render's objects: the renderer does not approximate the
// controller, it is the controller's code.
func TestRenderIsWhatTheStatusStageApplies(t *testing.T) {
	for _, c := range upstreamCases(t) {
		if c.ID() != "torch-distributed/02-runtime-patches" && c.ID() != "torch-distributed-volcano/04-volcano-integration" &&
			c.ID() != "deepspeed-distributed/minimal" {
			continue
		}
		t.Run(c.ID(), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			in, err := render.Load(c.Sources, "default")
			if err != nil {
				t.Fatal(err)
			}
			results, err := render.Render(ctx, in, render.Options{})
			if err != nil {
				t.Fatal(err)
			}
			r := results[0]
			tj := r.TrainJob.DeepCopy()

			jobsets := jobsetfake.NewSimpleClientset()
			var body []byte
			jobsets.PrependReactor("patch", "jobsets", func(a clienttesting.Action) (bool, runtime.Object, error) {
				p := a.(clienttesting.PatchAction)
				if p.GetPatchType() != types.ApplyPatchType {
					return false, nil, nil
				}
				body = p.GetPatch()
				return true, &jobsetv1alpha2.JobSet{}, nil
			})
			plans := &engine.Plans[plan.Plan]{}
			key := cache.MetaObjectToName(tj)
			plans.Put(key, tj.UID, tj.Generation, r.Plan)
			applier := &recordingApplier{}
			stage := &status.Stage{
				Index:     r.Plan.Stage + 1, // the stage after the last the plan reached
				TrainJobs: trainerlisters.NewTrainJobLister(utiltesting.Indexer(t, tj)),
				JobSets:   jobsetlisters.NewJobSetLister(utiltesting.Indexer(t)),
				JobSetAPI: jobsets,
				Plans:     plans,
				Status:    &statuswriter.Writer{Client: trainerfake.NewSimpleClientset(tj)},
				Recorder:  events.NewFakeRecorder(10),
				Objects:   applier,
			}
			if _, err := stage.Sync(ctx, key); err != nil {
				t.Fatalf("status stage Sync: %v", err)
			}
			if body == nil {
				t.Fatal("the status stage applied no JobSet")
			}
			var applied map[string]any
			if err := json.Unmarshal(body, &applied); err != nil {
				t.Fatal(err)
			}

			objs, err := r.Objects()
			if err != nil {
				t.Fatal(err)
			}
			rendered := normalize(t, objs)
			controller := normalize(t, append(applier.applied, applied))
			if diff := cmp.Diff(controller, rendered); diff != "" {
				t.Errorf("render differs from what the status stage applies (-controller +render):\n%s", diff)
			}
		})
	}
}

// normalize round-trips objects through JSON so numbers compare alike.
func normalize(t *testing.T, objs []map[string]any) []any {
	t.Helper()
	data, err := json.Marshal(objs)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Secrets are printed with every value redacted, and the JobSet hash, which covers
// them, too; the plan itself is left untouched.
func TestObjectsRedactSecrets(t *testing.T) {
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "llm-mpi-ssh-auth", "namespace": "default"},
		"type":     "kubernetes.io/ssh-auth",
		"data":     map[string]any{"ssh-privatekey": "LS0tLS1CRUdJTi...", "ssh-publickey": "ZWNkc2Et..."},
	}}
	configMap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "llm-mpi-hostfile", "namespace": "default"},
		"data":     map[string]any{"hostfile": "llm-node-0-0.llm slots=1\n"},
	}}
	js := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "default"}}
	p := &plan.Plan{JobSet: js, Objects: []*unstructured.Unstructured{configMap, secret}, Stage: 5}
	desired, err := status.DesiredOf(p)
	if err != nil {
		t.Fatal(err)
	}
	r := &render.Result{TrainJob: nil, Plan: p, Desired: desired}
	objs, err := r.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if got := objs[1]["data"]; !cmp.Equal(got, map[string]any{"ssh-privatekey": render.Redacted, "ssh-publickey": render.Redacted}) {
		t.Errorf("Secret data %v, want every value redacted", got)
	}
	if got := objs[0]["data"]; !cmp.Equal(got, map[string]any{"hostfile": "llm-node-0-0.llm slots=1\n"}) {
		t.Errorf("ConfigMap data %v, want it as planned", got)
	}
	if got, _, _ := unstructured.NestedString(objs[2], "metadata", "annotations", status.AnnotationJobSetHash); got != render.Redacted {
		t.Errorf("JobSet hash %q, want %q when a Secret is redacted", got, render.Redacted)
	}
	if secret.Object["data"].(map[string]any)["ssh-privatekey"] != "LS0tLS1CRUdJTi..." || desired.JobSet.Annotations[status.AnnotationJobSetHash] == render.Redacted {
		t.Error("Objects modified the plan")
	}
}

// The same TrainJob in two namespaces resolves its TrainingRuntime in its own namespace,
// and -n applies to inputs without one.
func TestRenderNamespaces(t *testing.T) {
	runtimeDoc := func(metadata, image string) string {
		return `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: ` + metadata + `
spec:
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: ` + image + `}]}}}
`
	}
	jobs := `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: a, namespace: team-b}
spec: {runtimeRef: {name: rt, kind: TrainingRuntime}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: a}
spec: {runtimeRef: {name: rt, kind: TrainingRuntime}}
`
	in, err := render.Load([]render.Source{
		{Name: "a.yaml", Data: []byte(runtimeDoc("{name: rt}", "image-a"))},
		{Name: "b.yaml", Data: []byte(runtimeDoc("{name: rt, namespace: team-b}", "image-b"))},
		{Name: "jobs.yaml", Data: []byte(jobs)},
	}, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	results, err := render.Render(context.Background(), in, render.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := render.WriteYAML(&buf, results); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range results {
		got[r.TrainJob.Namespace] = plan.PodSpec(&r.Desired.JobSet.Spec.ReplicatedJobs[0]).Containers[0].Image
	}
	if diff := cmp.Diff(map[string]string{"team-a": "image-a", "team-b": "image-b"}, got); diff != "" {
		t.Errorf("images by namespace (-want +got):\n%s", diff)
	}
	var first map[string]any
	if err := yaml.Unmarshal([]byte(strings.SplitN(buf.String(), "\n---\n", 2)[0]), &first); err != nil {
		t.Fatal(err)
	}
	if ns, _, _ := unstructured.NestedString(first, "metadata", "namespace"); ns != "team-b" {
		t.Errorf("first document in namespace %q, want the first TrainJob's (team-b)", ns)
	}
}

// A TrainJob in a system namespace is refused as stage 1 refuses it: the error names the
// namespace and the fix, and nothing is rendered.
func TestRenderRefusesSystemNamespaces(t *testing.T) {
	in, err := render.Load([]render.Source{{Name: "jobs.yaml", Data: []byte(`apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: a, namespace: kube-system}
spec: {runtimeRef: {name: torch-distributed}}
`)}}, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	results, err := render.Render(context.Background(), in, render.Options{})
	if err == nil || !strings.Contains(err.Error(), `metadata.namespace: the TrainJob is in namespace "kube-system"`) ||
		!strings.Contains(err.Error(), "create it in another namespace") || len(results) != 0 {
		t.Errorf("Render = %d results, %v; want an error naming kube-system and the fix", len(results), err)
	}
}

// The status stage sends JobSetApplyBody, encoded from the typed JobSet; render prints
// JobSetObject, a map. They must be the same object for every upstream runtime.
func TestJobSetApplyBodyIsJobSetObject(t *testing.T) {
	for _, c := range upstreamCases(t) {
		t.Run(c.ID(), func(t *testing.T) {
			in, err := render.Load(c.Sources, "default")
			if err != nil {
				t.Fatal(err)
			}
			results, err := render.Render(context.Background(), in, render.Options{})
			if err != nil {
				return // cases that do not build are the golden test's
			}
			for _, r := range results {
				obj, err := r.Desired.JobSetObject()
				if err != nil {
					t.Fatal(err)
				}
				body, err := r.Desired.JobSetApplyBody()
				if err != nil {
					t.Fatal(err)
				}
				var decoded map[string]any
				if err := json.Unmarshal(body, &decoded); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(normalize(t, []map[string]any{obj}), normalize(t, []map[string]any{decoded})); diff != "" {
					t.Errorf("JobSetApplyBody differs from JobSetObject (-object +body):\n%s", diff)
				}
			}
		})
	}
}
