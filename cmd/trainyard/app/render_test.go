package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// A runtime and TrainJob of the tests' own: torch on two nodes, one claiming a GPU
// through DRA.
const (
	torchRuntime = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch
spec:
  mlPolicy:
    numNodes: 1
    torch: {}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            template:
              spec:
                containers:
                - name: node
                  image: pytorch/pytorch
`
	torchJob = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: llm
  namespace: team-a
spec:
  runtimeRef:
    name: torch
  trainer:
    numNodes: 2
`
	gpuPatch = `  runtimePatches:
  - manager: example.com/gpus
    trainingRuntimeSpec:
      template:
        spec:
          replicatedJobs:
          - name: node
            template:
              spec:
                template:
                  spec:
                    resourceClaims:
                    - name: gpu
                      resourceClaimTemplateName: one-gpu
                    containers:
                    - name: node
                      resources:
                        claims:
                        - name: gpu
`
	claimTemplate = `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-gpu
  namespace: team-a
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.example.com
          count: 2
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.example.com
`
)

// writeFiles writes name→content into a temporary directory and returns the paths by
// name.
func writeFiles(t *testing.T, files map[string]string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	paths := map[string]string{}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		paths[name] = p
	}
	return paths
}

// runRender runs the command with args and stdin; it returns the exit code, stdout and
// stderr.
func runRender(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := RunRender(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// documents splits a YAML stream into decoded objects.
func documents(t *testing.T, stream string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, doc := range strings.Split(stream, "\n---\n") {
		doc = strings.TrimPrefix(doc, "---\n")
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("output is not YAML: %v\n%s", err, doc)
		}
		out = append(out, obj)
	}
	return out
}

func dig(obj any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := obj.(map[string]any)
			obj = m[k]
		case int:
			l, _ := obj.([]any)
			if k >= len(l) {
				return nil
			}
			obj = l[k]
		}
	}
	return obj
}

func envValue(container any, name string) any {
	for _, e := range dig(container, "env").([]any) {
		if dig(e, "name") == name {
			return dig(e, "value")
		}
	}
	return nil
}

func TestRenderCommand(t *testing.T) {
	files := writeFiles(t, map[string]string{"runtime.yaml": torchRuntime, "job.yaml": torchJob})
	code, stdout, stderr := runRender(t, "", "-f", files["job.yaml"], "-f", files["runtime.yaml"])
	if code != ExitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	docs := documents(t, stdout)
	if len(docs) != 1 {
		t.Fatalf("want the JobSet only, got %d documents:\n%s", len(docs), stdout)
	}
	js := docs[0]
	for path, want := range map[string]any{
		"kind": "JobSet", "apiVersion": "jobset.x-k8s.io/v1alpha2",
		"metadata.name": "llm", "metadata.namespace": "team-a",
		"metadata.ownerReferences.0.kind": "TrainJob", "metadata.ownerReferences.0.controller": true,
		"spec.suspend": false, "spec.replicatedJobs.0.template.spec.parallelism": float64(2),
	} {
		var keys []any
		for _, k := range strings.Split(path, ".") {
			if k == "0" {
				keys = append(keys, 0)
			} else {
				keys = append(keys, k)
			}
		}
		if got := dig(js, keys...); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if dig(js, "metadata", "annotations", "trainyard.dev/jobset-hash") == "" || dig(js, "status") != nil {
		t.Errorf("want the hash annotation and no status: %v", dig(js, "metadata"))
	}
	node := dig(js, "spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers", 0)
	if got := envValue(node, "PET_MASTER_ADDR"); got != "llm-node-0-0.llm" {
		t.Errorf("PET_MASTER_ADDR = %v, want llm-node-0-0.llm", got)
	}
	if !strings.HasPrefix(stdout, "---\n# Source: TrainJob team-a/llm from "+files["job.yaml"]+"\n") {
		t.Errorf("output does not start with the source comment:\n%s", stdout)
	}
}

// The same inputs from stdin, in one stream, give the same JobSet.
func TestRenderCommandStdin(t *testing.T) {
	files := writeFiles(t, map[string]string{"runtime.yaml": torchRuntime, "job.yaml": torchJob})
	_, fromFiles, _ := runRender(t, "", "-f", files["runtime.yaml"], "-f", files["job.yaml"])
	code, fromStdin, stderr := runRender(t, torchRuntime+"---\n"+torchJob, "-f", "-")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got, want := documents(t, fromStdin), documents(t, fromFiles); len(got) != 1 || len(want) != 1 || dig(got[0], "spec") == nil ||
		!bytes.Equal(mustJSON(t, got[0]["spec"]), mustJSON(t, want[0]["spec"])) {
		t.Errorf("stdin rendering differs from files:\n%s\n---- vs ----\n%s", fromStdin, fromFiles)
	}
	if !strings.Contains(fromStdin, "# Source: TrainJob team-a/llm from <stdin> (document 2)\n") {
		t.Errorf("want the TrainJob named as stdin document 2:\n%s", fromStdin)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// DRA: claim templates and device classes from files feed the DRA stage; with
// resource.k8s.io/v1 left out of --api-versions the TrainJob is refused as the
// controller refuses it on a cluster without DRA.
func TestRenderCommandDRA(t *testing.T) {
	files := writeFiles(t, map[string]string{
		"runtime.yaml": torchRuntime, "job.yaml": torchJob + gpuPatch, "claims.yaml": claimTemplate,
	})
	code, stdout, stderr := runRender(t, "", "-f", files["runtime.yaml"], "-f", files["job.yaml"], "-f", files["claims.yaml"])
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	docs := documents(t, stdout)
	pod := dig(docs[len(docs)-1], "spec", "replicatedJobs", 0, "template", "spec", "template", "spec")
	if got := dig(pod, "resourceClaims", 0, "resourceClaimTemplateName"); got != "one-gpu" {
		t.Errorf("pod resourceClaims[0].resourceClaimTemplateName = %v, want one-gpu", got)
	}
	// Two GPUs per claim template: torchrun starts two processes per node.
	if got := envValue(dig(pod, "containers", 0), "PET_NPROC_PER_NODE"); got != "2" {
		t.Errorf("PET_NPROC_PER_NODE = %v, want 2 (from the claim template)", got)
	}
	if !strings.Contains(stdout, "# Event: Normal ProcsPerNodeFromClaims: ") {
		t.Errorf("want the DRA stage's event as a comment:\n%s", stdout)
	}

	// Without the template the DRA stage refuses the claim, naming the field.
	code, stdout, stderr = runRender(t, "", "-f", files["runtime.yaml"], "-f", files["job.yaml"])
	if code != ExitBadInput || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want %d and no output", code, stdout, ExitBadInput)
	}
	for _, want := range []string{files["job.yaml"], "TrainJob team-a/llm", "resourceClaimTemplateName", `ResourceClaimTemplate "one-gpu" not found`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not contain %q", stderr, want)
		}
	}

	code, stdout, stderr = runRender(t, "", "-f", files["runtime.yaml"], "-f", files["job.yaml"], "-f", files["claims.yaml"],
		"--api-versions", "scheduling.x-k8s.io/v1alpha1")
	if code != ExitBadInput || stdout != "" || !strings.Contains(stderr, "resource.k8s.io/v1") {
		t.Errorf("without resource.k8s.io/v1: exit %d, stdout %q, stderr %q; want %d naming the API", code, stdout, stderr, ExitBadInput)
	}
}

// --api-versions decides what the gang backends find served, as discovery does.
func TestRenderCommandGangAPIs(t *testing.T) {
	root := utiltesting.UpstreamDir(t)
	volcano := filepath.Join(root, "examples", "yaml", "04-volcano-integration.yaml")

	code, stdout, stderr := runRender(t, "", "-f", volcano)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	docs := documents(t, stdout)
	if len(docs) != 2 || docs[0]["kind"] != "PodGroup" || docs[0]["apiVersion"] != "scheduling.volcano.sh/v1beta1" || docs[1]["kind"] != "JobSet" {
		t.Fatalf("want a Volcano PodGroup then the JobSet, got:\n%s", stdout)
	}

	code, stdout, stderr = runRender(t, "", "-f", volcano, "--api-versions", "resource.k8s.io/v1")
	if code != ExitBadInput || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want %d and no output", code, stdout, ExitBadInput)
	}
	for _, want := range []string{"examples/yaml/04-volcano-integration.yaml (document 1)", "ClusterTrainingRuntime torch-distributed-volcano",
		"podGroupPolicy.volcano", "scheduling.volcano.sh/v1beta1", "rendering TrainJob default/volcano-example"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not contain %q", stderr, want)
		}
	}
}

// Bad input exits 1 with one line per problem naming the file, the object and the
// field, and prints nothing on stdout: nothing is rendered half-way.
func TestRenderCommandBadInput(t *testing.T) {
	patchUnknown := func(rj, container string) string {
		p := torchJob + `  runtimePatches:
  - manager: example.com/x
    trainingRuntimeSpec:
      template:
        spec:
          replicatedJobs:
          - name: ` + rj + "\n"
		if container != "" {
			p += `            template:
              spec:
                template:
                  spec:
                    containers:
                    - name: ` + container + "\n"
		}
		return p
	}
	// Neither labelled trainer nor named "node": no step the trainer settings reach.
	noTrainer := strings.Replace(strings.Replace(torchRuntime, "trainer.kubeflow.org/trainjob-ancestor-step: trainer", "app: train", 1),
		"- name: node", "- name: worker", 1)
	cases := map[string]struct {
		files map[string]string
		args  []string
		code  int
		want  []string
	}{
		"patch for an unknown replicatedJob": {
			files: map[string]string{"runtime.yaml": torchRuntime, "job.yaml": patchUnknown("launcher", "")},
			code:  ExitBadInput,
			want: []string{"job.yaml: TrainJob team-a/llm: spec.runtimePatches[manager=example.com/x].trainingRuntimeSpec.template.spec.replicatedJobs[name=launcher]",
				`replicatedJob "launcher" not found`},
		},
		"patch for an unknown container": {
			files: map[string]string{"runtime.yaml": torchRuntime, "job.yaml": patchUnknown("node", "sidecar")},
			code:  ExitBadInput,
			want: []string{"job.yaml: TrainJob team-a/llm: spec.runtimePatches[manager=example.com/x].trainingRuntimeSpec.template.spec.replicatedJobs[name=node].template.spec.template.spec.containers[name=sidecar]",
				`container "sidecar" not found`},
		},
		"runtime without a trainer step": {
			files: map[string]string{"runtime.yaml": noTrainer, "job.yaml": torchJob},
			code:  ExitBadInput,
			want:  []string{"runtime.yaml: ClusterTrainingRuntime torch: spec.template.spec.replicatedJobs: no replicatedJob is the trainer step", "(rendering TrainJob team-a/llm from "},
		},
		"runtime missing": {
			files: map[string]string{"job.yaml": torchJob},
			code:  ExitBadInput,
			want:  []string{"job.yaml: TrainJob team-a/llm: spec.runtimeRef: ClusterTrainingRuntime \"torch\" not found among the inputs"},
		},
		"unknown field": {
			files: map[string]string{"runtime.yaml": torchRuntime, "job.yaml": strings.Replace(torchJob, "numNodes", "numNode", 1)},
			code:  ExitBadInput,
			want:  []string{"job.yaml: TrainJob llm: ", `unknown field "spec.trainer.numNode"`},
		},
		"kind render does not read": {
			files: map[string]string{"job.yaml": torchJob + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"},
			code:  ExitBadInput,
			want:  []string{"job.yaml (document 2): v1 ConfigMap is not an input of render"},
		},
		"object given twice": {
			files: map[string]string{"runtime.yaml": torchRuntime, "job.yaml": torchJob + "---\n" + torchRuntime},
			code:  ExitBadInput,
			want:  []string{"ClusterTrainingRuntime torch is given twice, first in "},
		},
		"managed by another controller": {
			files: map[string]string{"runtime.yaml": torchRuntime, "job.yaml": torchJob + "  managedBy: kueue.x-k8s.io/multikueue\n"},
			code:  ExitBadInput,
			want:  []string{"job.yaml: TrainJob team-a/llm: spec.managedBy: kueue.x-k8s.io/multikueue manages this TrainJob"},
		},
		"no TrainJob": {
			files: map[string]string{"runtime.yaml": torchRuntime},
			code:  ExitBadInput,
			want:  []string{"no TrainJob among the inputs"},
		},
		"missing file": {
			args: []string{"-f", "does-not-exist.yaml"},
			code: ExitBadInput,
			want: []string{"does-not-exist.yaml"},
		},
		"no -f": {
			args: []string{},
			code: ExitBadCommand,
			want: []string{"no input"},
		},
		"unknown flag": {
			args: []string{"--bogus"},
			code: ExitBadCommand,
			want: []string{"unknown flag: --bogus"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			paths := writeFiles(t, tc.files)
			args := tc.args
			for _, f := range []string{"runtime.yaml", "job.yaml"} {
				if p, ok := paths[f]; ok {
					args = append(args, "-f", p)
				}
			}
			code, stdout, stderr := runRender(t, "", args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			for _, want := range tc.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q does not contain %q", stderr, want)
				}
			}
		})
	}
}

// Two TrainJobs, one bad: nothing is printed, and the error names only the bad one.
func TestRenderCommandAllOrNothing(t *testing.T) {
	bad := strings.Replace(torchJob, "name: llm", "name: other", 1) + "  runtimePatches:\n  - manager: example.com/x\n    trainingRuntimeSpec:\n      template:\n        spec:\n          replicatedJobs:\n          - name: nope\n"
	files := writeFiles(t, map[string]string{"runtime.yaml": torchRuntime, "jobs.yaml": torchJob + "---\n" + bad})
	code, stdout, stderr := runRender(t, "", "-f", files["runtime.yaml"], "-f", files["jobs.yaml"])
	if code != ExitBadInput || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want %d and nothing printed", code, stdout, ExitBadInput)
	}
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "jobs.yaml (document 2): TrainJob team-a/other") {
		t.Errorf("stderr %q: want one line naming TrainJob team-a/other in document 2", stderr)
	}
}

func TestRenderCommandHelp(t *testing.T) {
	code, stdout, stderr := runRender(t, "", "--help")
	if code != ExitOK || stdout != "" || !strings.Contains(stderr, "Usage: trainyard render -f FILE") || !strings.Contains(stderr, "--api-versions") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// The progress server's env follows the controller's configuration: on by default with
// the chart's namespace, per --config and --controller-namespace otherwise, and a bad
// configuration file is an input error.
func TestRenderCommandProgressServer(t *testing.T) {
	files := writeFiles(t, map[string]string{
		"runtime.yaml": torchRuntime, "job.yaml": torchJob,
		"off.yaml":   "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nfeatureGates:\n  TrainJobStatus: false\n",
		"port.yaml":  "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nwebhook:\n  serviceName: ty-webhook\nstatusServer:\n  bindAddress: \":12443\"\n",
		"bogus.yaml": "apiVersion: config.trainyard.dev/v1alpha1\nkind: Configuration\nstatusServer:\n  port: 10443\n",
	})
	const path = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llm/status"
	cases := map[string]struct {
		args    []string
		wantURL any
	}{
		"defaults":             {wantURL: "https://trainyard-webhook.trainyard-system.svc:10443" + path},
		"controller namespace": {args: []string{"--controller-namespace=ml"}, wantURL: "https://trainyard-webhook.ml.svc:10443" + path},
		"configuration file":   {args: []string{"--config=" + files["port.yaml"]}, wantURL: "https://ty-webhook.trainyard-system.svc:12443" + path},
		"gate off in the file": {args: []string{"--config=" + files["off.yaml"]}, wantURL: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"-f", files["job.yaml"], "-f", files["runtime.yaml"]}, tc.args...)
			code, stdout, stderr := runRender(t, "", args...)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			node := dig(documents(t, stdout)[0], "spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers", 0)
			if got := envValue(node, "KUBEFLOW_TRAINER_SERVER_URL"); got != tc.wantURL {
				t.Errorf("KUBEFLOW_TRAINER_SERVER_URL = %v, want %v", got, tc.wantURL)
			}
		})
	}

	code, stdout, stderr := runRender(t, "", "-f", files["job.yaml"], "-f", files["runtime.yaml"], "--config="+files["bogus.yaml"])
	if code != ExitBadInput || stdout != "" || !strings.Contains(stderr, files["bogus.yaml"]) || !strings.Contains(stderr, "port") {
		t.Errorf("bad --config: exit %d, stdout %q, stderr %q; want %d naming the file and the field", code, stdout, stderr, ExitBadInput)
	}
}
