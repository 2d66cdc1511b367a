package render_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/pkg/render"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// facts are what trainer-compat.md specifies for one upstream runtime × TrainJob, checked
// on the rendered objects. Values are written out from the spec, not computed.
type facts struct {
	// unsupported is the mlPolicy member Trainyard does not implement yet; the render
	// must fail with a *plan.UnsupportedError naming it and nothing else is checked.
	unsupported string

	// replicatedJobs are the names in order (§2.3: the runtime's order); containers per
	// replicatedJob; dependsOn per replicatedJob as "name=status".
	replicatedJobs []string
	containers     map[string][]string
	dependsOn      map[string][]string
	// counts: parallelism == completions per replicatedJob (§2.4); replicas per
	// replicatedJob (§2.5 steps 3–4: 1 for ancestor steps).
	counts   map[string]int32
	replicas map[string]int32
	// labels and annotations of the JobSet (§2.3 step 1); suspend (§2.5 step 6).
	labels, annotations map[string]string
	suspend             bool
	// env per "<replicatedJob>/<container>": name → literal value, or "fieldRef:<path>".
	env map[string]map[string]string
	// noEnv per "<replicatedJob>/<container>": names that must be absent.
	noEnv map[string][]string
	// ports per "<replicatedJob>/<container>".
	ports map[string][]int32
	// image and command of "<replicatedJob>/<container>" when given.
	image   map[string]string
	command map[string][]string
	// objects: side objects as "<apiVersion> <Kind> <name>", in apply order.
	objects []string
	// podAnnotations per replicatedJob that must be present.
	podAnnotations map[string]map[string]string
}

const rankPath = "fieldRef:metadata.annotations['batch.kubernetes.io/job-completion-index']"

// torchEnv is the Torch env set (§3.1 step 3) for TrainJob name on nnodes nodes.
func torchEnv(name, nnodes, nproc string) map[string]string {
	return map[string]string{
		"PET_NNODES": nnodes, "PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": rankPath,
		"PET_MASTER_ADDR": name + "-node-0-0." + name, "PET_MASTER_PORT": "29500",
	}
}

// torchtuneFacts are the facts of the shipped torchtune runtimes with `tune run` on one
// node (§3.1.1, §9): initializers then the trainer, GPUs 2 → nproc auto and a
// rendezvous endpoint, no PET_MASTER_*.
func torchtuneFacts(modelURI, config string, tokenizerArgs ...string) facts {
	command := append([]string{"tune", "run", "--rdzv_endpoint=minimal-node-0-0.minimal:29500", "full_finetune_distributed",
		"--config", config, "output_dir=/workspace/output"}, tokenizerArgs...)
	command = append(command, "checkpointer.checkpoint_dir=/workspace/model")
	return facts{
		replicatedJobs: []string{"dataset-initializer", "model-initializer", "node"},
		containers:     map[string][]string{"dataset-initializer": {"dataset-initializer"}, "model-initializer": {"model-initializer"}, "node": {"node"}},
		dependsOn:      map[string][]string{"node": {"dataset-initializer=Complete", "model-initializer=Complete"}},
		counts:         map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": 1},
		replicas:       map[string]int32{"dataset-initializer": 1, "model-initializer": 1, "node": 1},
		env: map[string]map[string]string{
			"dataset-initializer/dataset-initializer": {"STORAGE_URI": "hf://tatsu-lab/alpaca"},
			"model-initializer/model-initializer":     {"STORAGE_URI": modelURI},
			"node/node":                               {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "auto", "PET_NODE_RANK": rankPath},
		},
		noEnv:   map[string][]string{"node/node": {"PET_MASTER_ADDR", "PET_MASTER_PORT"}},
		ports:   map[string][]int32{"node/node": {29500}},
		image:   map[string]string{"node/node": "ghcr.io/kubeflow/trainer/torchtune-trainer"},
		command: map[string][]string{"node/node": command},
	}
}

// compatTable holds the facts for every upstream case (upstreamCases); a case without a
// row fails TestCompatibility, so a new upstream runtime or example gets one.
var compatTable = map[string]facts{
	"torch-distributed/01-multi-node": {
		replicatedJobs: []string{"node"},
		containers:     map[string][]string{"node": {"node"}},
		counts:         map[string]int32{"node": 3},
		replicas:       map[string]int32{"node": 1},
		// No resources anywhere: cpu 0 → max(1, 0) processes (§3.1 step 2).
		env:   map[string]map[string]string{"node/node": torchEnv("multi-node-example", "3", "1")},
		ports: map[string][]int32{"node/node": {29500}},
		image: map[string]string{"node/node": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"},
	},
	"torch-distributed/02-runtime-patches": {
		replicatedJobs: []string{"node"},
		containers:     map[string][]string{"node": {"node"}},
		counts:         map[string]int32{"node": 2},
		replicas:       map[string]int32{"node": 1},
		labels:         map[string]string{"team": "ml-platform", "cost-center": "research"},
		annotations:    map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
		env: map[string]map[string]string{"node/node": merge(torchEnv("runtime-patches-example", "2", "2"),
			map[string]string{"CUSTOM_VAR": "custom-value", "PYTHONUNBUFFERED": "1"})},
		ports: map[string][]int32{"node/node": {29500}},
	},
	"torch-distributed/03-kueue-integration": {
		replicatedJobs: []string{"node"},
		containers:     map[string][]string{"node": {"node"}},
		counts:         map[string]int32{"node": 3},
		replicas:       map[string]int32{"node": 1},
		suspend:        true,
		env:            map[string]map[string]string{"node/node": torchEnv("kueue-example", "3", "2")},
		ports:          map[string][]int32{"node/node": {29500}},
		image:          map[string]string{"node/node": "python:3.11-slim"},
	},
	"torch-distributed-volcano/04-volcano-integration": {
		replicatedJobs: []string{"node"},
		containers:     map[string][]string{"node": {"node"}},
		counts:         map[string]int32{"node": 4},
		replicas:       map[string]int32{"node": 1},
		env:            map[string]map[string]string{"node/node": torchEnv("volcano-example", "4", "1")},
		ports:          map[string][]int32{"node/node": {29500}},
		// §4.2: one PodGroup named after the TrainJob, annotation on every pod.
		objects:        []string{"scheduling.volcano.sh/v1beta1 PodGroup volcano-example"},
		podAnnotations: map[string]map[string]string{"node": {"scheduling.k8s.io/group-name": "volcano-example"}},
	},
	"torch-with-dataset-init/05-multi-step": {
		replicatedJobs: []string{"dataset-initializer", "node"},
		containers:     map[string][]string{"dataset-initializer": {"dataset-initializer"}, "node": {"node"}},
		dependsOn:      map[string][]string{"node": {"dataset-initializer=Complete"}},
		counts:         map[string]int32{"dataset-initializer": 1, "node": 2},
		replicas:       map[string]int32{"dataset-initializer": 1, "node": 1},
		env: map[string]map[string]string{
			"dataset-initializer/dataset-initializer": {"STORAGE_URI": "hf://tatsu-lab/alpaca"},
			"node/node": torchEnv("multi-step-example", "2", "2"),
		},
		noEnv: map[string][]string{"dataset-initializer/dataset-initializer": {"PET_NNODES"}},
		ports: map[string][]int32{"node/node": {29500}},
	},
	"torch-distributed-with-cache/minimal": {
		replicatedJobs: []string{"dataset-initializer", "node"},
		containers:     map[string][]string{"dataset-initializer": {"dataset-initializer"}, "node": {"node"}},
		dependsOn:      map[string][]string{"node": {"dataset-initializer=Complete"}},
		counts:         map[string]int32{"dataset-initializer": 1, "node": 2},
		replicas:       map[string]int32{"dataset-initializer": 1, "node": 1},
		labels:         map[string]string{},
		env: map[string]map[string]string{
			"dataset-initializer/dataset-initializer": {"STORAGE_URI": "hf://tatsu-lab/alpaca",
				"CACHE_IMAGE": "ghcr.io/kubeflow/trainer/data-cache:latest", "TRAIN_JOB_NAME": "fieldRef:metadata.labels['jobset.sigs.k8s.io/jobset-name']"},
			"node/node": merge(torchEnv("minimal", "2", "1"), map[string]string{"TRAIN_JOB_NAME": "fieldRef:metadata.labels['jobset.sigs.k8s.io/jobset-name']"}),
		},
		ports: map[string][]int32{"node/node": {29500}},
	},
	"jax-distributed/minimal": {
		replicatedJobs: []string{"node"},
		containers:     map[string][]string{"node": {"node"}},
		counts:         map[string]int32{"node": 2},
		replicas:       map[string]int32{"node": 1},
		// §3.3.
		env: map[string]map[string]string{"node/node": {
			"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": rankPath, "JAX_COORDINATOR_ADDRESS": "minimal-node-0-0.minimal:29500",
		}},
		noEnv: map[string][]string{"node/node": {"PET_NNODES", "DMLC_NUM_WORKER"}},
		ports: map[string][]int32{"node/node": {29500}},
		image: map[string]string{"node/node": "nvcr.io/nvidia/jax:25.10-py3"},
	},
	"xgboost-distributed/minimal": {
		replicatedJobs: []string{"node"},
		containers:     map[string][]string{"node": {"node"}},
		counts:         map[string]int32{"node": 2},
		replicas:       map[string]int32{"node": 1},
		// §3.5: no GPU → one worker per node.
		env: map[string]map[string]string{"node/node": {
			"DMLC_TRACKER_URI": "minimal-node-0-0.minimal", "DMLC_TRACKER_PORT": "29500", "DMLC_TASK_ID": rankPath, "DMLC_NUM_WORKER": "2",
		}},
		noEnv: map[string][]string{"node/node": {"PET_NNODES", "JAX_NUM_PROCESSES"}},
		ports: map[string][]int32{"node/node": {29500}},
		image: map[string]string{"node/node": "ghcr.io/kubeflow/trainer/xgboost-runtime"},
	},
	"torchtune-llama3.2-1b/minimal": torchtuneFacts("hf://meta-llama/Llama-3.2-1B-Instruct", "llama3_2/1B_full",
		"tokenizer.path=/workspace/model/original/tokenizer.model"),
	"torchtune-llama3.2-3b/minimal": torchtuneFacts("hf://meta-llama/Llama-3.2-3B-Instruct", "llama3_2/3B_full",
		"tokenizer.path=/workspace/model/original/tokenizer.model"),
	"torchtune-qwen2.5-1.5b/minimal": torchtuneFacts("hf://Qwen/Qwen2.5-1.5B-Instruct", "qwen2_5/1.5B_full",
		"tokenizer.path=/workspace/model/vocab.json", "tokenizer.merges_file=/workspace/model/merges.txt"),
	// TODO(mpi, flux): facts of §3.4 and §3.6 once the MPI and Flux plugins land.
	"deepspeed-distributed/minimal":      {unsupported: "mlPolicy.mpi"},
	"mlx-distributed/minimal":            {unsupported: "mlPolicy.mpi"},
	"flux-distributed/flux-interactive":  {unsupported: "mlPolicy.flux"},
	"flux-distributed/lammps-train-gpus": {unsupported: "mlPolicy.flux"},
	"flux-distributed/lammps-train-job":  {unsupported: "mlPolicy.flux"},
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// TestCompatibility renders every upstream runtime × TrainJob and checks the facts
// trainer-compat.md specifies for it (compatTable), plus what holds for every JobSet
// (§13 items 5–6): name, namespace and controller owner reference of the TrainJob,
// parallelism == completions on every replicatedJob.
func TestCompatibility(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range upstreamCases(t) {
		seen[c.ID()] = true
		t.Run(c.ID(), func(t *testing.T) {
			want, ok := compatTable[c.ID()]
			if !ok {
				t.Fatalf("no compatTable row for %s: add the facts trainer-compat.md specifies for it", c.ID())
			}
			in, err := render.Load(c.Sources, "default")
			if err != nil {
				t.Fatal(err)
			}
			results, err := render.Render(context.Background(), in, render.Options{})
			if want.unsupported != "" {
				var unsupported *plan.UnsupportedError
				if !errors.As(err, &unsupported) || unsupported.Feature != want.unsupported {
					t.Fatalf("Render() error = %v, want *plan.UnsupportedError for %s", err, want.unsupported)
				}
				return
			}
			if err != nil || len(results) != 1 {
				t.Fatalf("Render() = %d results, %v", len(results), err)
			}
			checkFacts(t, results[0], want)
		})
	}
	for id := range compatTable {
		if !seen[id] {
			t.Errorf("compatTable row %s matches no upstream case", id)
		}
	}
}

func checkFacts(t *testing.T, r *render.Result, want facts) {
	t.Helper()
	tj, js := r.TrainJob, r.Desired.JobSet
	// §13.5: name, namespace, owner.
	if js.Name != tj.Name || js.Namespace != tj.Namespace {
		t.Errorf("JobSet %s/%s, want %s/%s", js.Namespace, js.Name, tj.Namespace, tj.Name)
	}
	if len(js.OwnerReferences) != 1 {
		t.Fatalf("ownerReferences %v, want one", js.OwnerReferences)
	}
	owner := js.OwnerReferences[0]
	if owner.APIVersion != "trainer.kubeflow.org/v1alpha1" || owner.Kind != "TrainJob" || owner.Name != tj.Name ||
		owner.Controller == nil || !*owner.Controller || owner.BlockOwnerDeletion == nil || !*owner.BlockOwnerDeletion {
		t.Errorf("ownerReference %+v, want the TrainJob as controller blocking deletion", owner)
	}
	if js.APIVersion != "jobset.x-k8s.io/v1alpha2" || js.Kind != "JobSet" {
		t.Errorf("JobSet type %s %s", js.APIVersion, js.Kind)
	}
	if js.Spec.Suspend == nil || *js.Spec.Suspend != want.suspend {
		t.Errorf("spec.suspend = %v, want %v", js.Spec.Suspend, want.suspend)
	}

	var names []string
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		names = append(names, rj.Name)
		spec := rj.Template.Spec
		// §2.4 PreBuildSync: explicit and equal.
		if spec.Parallelism == nil || spec.Completions == nil || *spec.Parallelism != *spec.Completions {
			t.Errorf("replicatedJob %s: parallelism %v, completions %v; want both set and equal", rj.Name, spec.Parallelism, spec.Completions)
		}
	}
	if diff := cmp.Diff(want.replicatedJobs, names); diff != "" {
		t.Errorf("replicatedJobs (-want +got):\n%s", diff)
	}
	for _, rjName := range want.replicatedJobs {
		rj := plan.ReplicatedJob(js, rjName)
		if rj == nil {
			continue
		}
		if diff := cmp.Diff(want.containers[rjName], plan.ContainerNames(plan.PodSpec(rj).Containers)); diff != "" {
			t.Errorf("replicatedJob %s containers (-want +got):\n%s", rjName, diff)
		}
		if diff := cmp.Diff(want.dependsOn[rjName], dependsOn(rj)); diff != "" {
			t.Errorf("replicatedJob %s dependsOn (-want +got):\n%s", rjName, diff)
		}
		if n, ok := want.counts[rjName]; ok && plan.Count(rj) != n {
			t.Errorf("replicatedJob %s parallelism %d, want %d", rjName, plan.Count(rj), n)
		}
		if n, ok := want.replicas[rjName]; ok && rj.Replicas != n {
			t.Errorf("replicatedJob %s replicas %d, want %d", rjName, rj.Replicas, n)
		}
		for k, v := range want.podAnnotations[rjName] {
			if got := rj.Template.Spec.Template.Annotations[k]; got != v {
				t.Errorf("replicatedJob %s pod annotation %s = %q, want %q", rjName, k, got, v)
			}
		}
	}
	if want.labels != nil || want.annotations != nil {
		labels := withoutHash(js.Labels)
		if diff := cmp.Diff(want.labels, labels, emptyMapIsNil); diff != "" {
			t.Errorf("JobSet labels (-want +got):\n%s", diff)
		}
	}
	if snapshot := js.Annotations[plan.AnnotationRuntimeSnapshot]; snapshot == "" {
		t.Errorf("JobSet has no %s annotation", plan.AnnotationRuntimeSnapshot)
	}
	if want.annotations != nil {
		if diff := cmp.Diff(want.annotations, withoutHash(js.Annotations)); diff != "" {
			t.Errorf("JobSet annotations besides the hash (-want +got):\n%s", diff)
		}
	}

	for where, env := range want.env {
		c := container(t, js, where)
		for name, value := range env {
			if got := envString(c.Env, name); got != value {
				t.Errorf("%s env %s = %q, want %q", where, name, got, value)
			}
		}
	}
	for where, absent := range want.noEnv {
		c := container(t, js, where)
		for _, name := range absent {
			if got := envString(c.Env, name); got != "" {
				t.Errorf("%s env %s = %q, want it absent", where, name, got)
			}
		}
	}
	for where, ports := range want.ports {
		var got []int32
		for _, p := range container(t, js, where).Ports {
			got = append(got, p.ContainerPort)
		}
		if diff := cmp.Diff(ports, got); diff != "" {
			t.Errorf("%s ports (-want +got):\n%s", where, diff)
		}
	}
	for where, image := range want.image {
		if got := container(t, js, where).Image; got != image {
			t.Errorf("%s image %q, want %q", where, got, image)
		}
	}
	for where, command := range want.command {
		if diff := cmp.Diff(command, container(t, js, where).Command); diff != "" {
			t.Errorf("%s command (-want +got):\n%s", where, diff)
		}
	}

	var objects []string
	for _, o := range r.Desired.Objects {
		objects = append(objects, o.GetAPIVersion()+" "+o.GetKind()+" "+o.GetName())
		if o.GetNamespace() != tj.Namespace || len(o.GetOwnerReferences()) != 1 || o.GetOwnerReferences()[0].Name != tj.Name {
			t.Errorf("%s %s: namespace %q, owners %v; want the TrainJob's namespace and the TrainJob as owner", o.GetKind(), o.GetName(), o.GetNamespace(), o.GetOwnerReferences())
		}
	}
	if diff := cmp.Diff(want.objects, objects); diff != "" {
		t.Errorf("side objects (-want +got):\n%s", diff)
	}
}

var emptyMapIsNil = cmp.Transformer("emptyIsNil", func(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
})

// withoutHash drops Trainyard's bookkeeping annotations: the hash and the runtime
// snapshot (checked on their own in checkFacts).
func withoutHash(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != "trainyard.dev/jobset-hash" && k != plan.AnnotationRuntimeSnapshot {
			out[k] = v
		}
	}
	return out
}

func dependsOn(rj *jobsetv1alpha2.ReplicatedJob) []string {
	var out []string
	for _, d := range rj.DependsOn {
		out = append(out, d.Name+"="+string(d.Status))
	}
	return out
}

// container returns the container "<replicatedJob>/<container>" of js.
func container(t *testing.T, js *jobsetv1alpha2.JobSet, where string) *corev1.Container {
	t.Helper()
	rjName, name, _ := strings.Cut(where, "/")
	rj := plan.ReplicatedJob(js, rjName)
	if rj == nil {
		t.Fatalf("no replicatedJob %s", rjName)
	}
	c := plan.Container(plan.PodSpec(rj).Containers, name)
	if c == nil {
		t.Fatalf("replicatedJob %s has no container %s (has %v)", rjName, name, plan.ContainerNames(plan.PodSpec(rj).Containers))
	}
	return c
}

// envString is the literal value of env var name, "fieldRef:<path>" for a downward API
// field, or "" when absent.
func envString(env []corev1.EnvVar, name string) string {
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return ""
	}
	e := env[i]
	if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
		return "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
	}
	if e.ValueFrom != nil {
		return fmt.Sprintf("valueFrom:%v", e.ValueFrom)
	}
	return e.Value
}
