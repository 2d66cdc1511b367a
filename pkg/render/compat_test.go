package render_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/render"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// facts are what docs/compatibility.md specifies for one upstream runtime × TrainJob, checked
// on the rendered objects. Values are written out from the spec, not computed.
type facts struct {
	// replicatedJobs are the names in order (docs/compatibility.md#the-build-model: the
	// runtime's order); containers per replicatedJob; dependsOn per replicatedJob as
	// "name=status".
	replicatedJobs []string
	containers     map[string][]string
	dependsOn      map[string][]string
	// counts: parallelism == completions per replicatedJob
	// (docs/compatibility.md#plugin-order); replicas per replicatedJob
	// (docs/compatibility.md#building-the-jobset steps 3–4: 1 for ancestor steps).
	counts   map[string]int32
	replicas map[string]int32
	// labels and annotations of the JobSet (docs/compatibility.md#the-build-model step
	// 1); suspend (docs/compatibility.md#building-the-jobset step 6).
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
	// objects: side objects as "<apiVersion> <Kind> <name>", in the order the render
	// output lists them before the JobSet (create-only objects first, then the applied
	// ones; Result.Objects).
	objects []string
	// podAnnotations per replicatedJob that must be present.
	podAnnotations map[string]map[string]string

	// initContainers per replicatedJob, in order. A "<replicatedJob>/<container>" key of
	// the maps above and below names an init container when no container has the name.
	initContainers map[string][]string
	// volumes per replicatedJob: all of the pod's volumes, name → volumeString.
	volumes map[string]map[string]string
	// mounts per "<replicatedJob>/<container>": all of its volumeMounts, mountPath →
	// volume name, " (ro)" appended when readOnly.
	mounts map[string]map[string]string
	// resources per "<replicatedJob>/<container>": all of its limits and requests,
	// "limits.<name>" / "requests.<name>" → quantity.
	resources map[string]map[string]string
	// content of side objects per "<Kind> <name>".
	content map[string]objectFacts
}

// objectFacts are the content of a Secret or ConfigMap.
type objectFacts struct {
	// secretType is a Secret's type; an object without one is "Opaque", the API
	// server's default.
	secretType string
	// immutable, when set.
	immutable *bool
	// keys are all keys of data and stringData (binaryData for ConfigMaps), sorted.
	keys []string
	// data are exact values by key (Secrets: decoded).
	data map[string]string
	// contains are substrings each found in some value: facts of generated content.
	contains []string
}

const rankPath = "fieldRef:metadata.annotations['batch.kubernetes.io/job-completion-index']"

// torchEnv is the Torch env set (docs/compatibility.md#torch step 3) for TrainJob name
// on nnodes nodes.
func torchEnv(name, nnodes, nproc string) map[string]string {
	return map[string]string{
		"PET_NNODES": nnodes, "PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": rankPath,
		"PET_MASTER_ADDR": name + "-node-0-0." + name, "PET_MASTER_PORT": "29500",
	}
}

// torchtuneFacts are the facts of the shipped torchtune runtimes with `tune run` on one
// node (docs/compatibility.md#torchtune, docs/compatibility.md#shipped-runtimes):
// initializers then the trainer, GPUs 2 → nproc auto and a rendezvous endpoint, no
// PET_MASTER_*.
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

// secretSuffix ends the names of create-only Secrets rendered without a key for a
// TrainJob without a uid (mlpolicy.SecretNames; upstream names them without it,
// docs/compatibility.md "Secret names").
const secretSuffix = "-wyjwpgqict"

// mpiFacts are the facts of the shipped MPI runtimes (deepspeed-distributed,
// mlx-distributed: docs/compatibility.md#shipped-runtimes, OpenMPI, numProcPerNode 1,
// sshAuthMountPath /home/mpiuser/.ssh, runLauncherAsNode) with the minimal TrainJob
// (numNodes 2, no GPUs), per docs/compatibility.md#mpi.
func mpiFacts(image string) facts {
	const sshMount = "/home/mpiuser/.ssh"
	sshVolume := "secret minimal-mpi-ssh-auth" + secretSuffix + " mode=0400 items=ssh-privatekey>id_rsa:0640,ssh-publickey>id_rsa.pub:0644,ssh-publickey>authorized_keys:0644"
	ompi := []string{"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_orte_keep_fqdn_hostnames", "OMPI_MCA_orte_set_default_slots", "OMPI_MCA_plm_rsh_args"}
	return facts{
		// docs/compatibility.md#shipped-runtimes: the runtime's order, the launcher
		// waiting for the nodes.
		replicatedJobs: []string{"node", "launcher"},
		containers:     map[string][]string{"node": {"node"}, "launcher": {"node"}},
		dependsOn:      map[string][]string{"launcher": {"node=Ready"}},
		// docs/compatibility.md#mpi: runLauncherAsNode → node max(numNodes-1, 1); the
		// launcher, ancestor trainer, mlPolicy.numNodes
		// (docs/compatibility.md#the-build-model step 4).
		counts:   map[string]int32{"node": 1, "launcher": 1},
		replicas: map[string]int32{"launcher": 1},
		// docs/compatibility.md#the-build-model step 1: the runtime's own labels
		// (framework) are not propagated.
		labels: map[string]string{},
		// docs/compatibility.md#mpi: OpenMPI env on the launcher's node container only,
		// slots = the policy's numProcPerNode (no GPUs); no ports.
		env: map[string]map[string]string{"launcher/node": {
			"OMPI_MCA_orte_default_hostfile":    "/etc/mpi/hostfile",
			"OMPI_MCA_orte_keep_fqdn_hostnames": "true",
			"OMPI_MCA_orte_set_default_slots":   "1",
			"OMPI_MCA_plm_rsh_args":             "-o ConnectionAttempts=10",
		}},
		noEnv: map[string][]string{"node/node": ompi},
		ports: map[string][]int32{"node/node": nil, "launcher/node": nil},
		image: map[string]string{"node/node": image, "launcher/node": image},
		// docs/compatibility.md#shipped-runtimes: the node pods run sshd; the minimal
		// TrainJob sets no command.
		command: map[string][]string{"node/node": {"/usr/sbin/sshd"}, "launcher/node": nil},
		volumes: map[string]map[string]string{
			"node":     {"mpi-ssh-auth": sshVolume},
			"launcher": {"mpi-ssh-auth": sshVolume, "mpi-hostfile": "configMap minimal-mpi-hostfile items=hostfile>hostfile:0444"},
		},
		mounts: map[string]map[string]string{
			"node/node":     {sshMount: "mpi-ssh-auth"},
			"launcher/node": {sshMount: "mpi-ssh-auth", "/etc/mpi": "mpi-hostfile"},
		},
		// docs/compatibility.md#objects-per-trainjob; the create-only Secret first
		// (Result.Objects).
		objects: []string{"v1 Secret minimal-mpi-ssh-auth" + secretSuffix, "v1 ConfigMap minimal-mpi-hostfile"},
		content: map[string]objectFacts{
			"Secret minimal-mpi-ssh-auth" + secretSuffix: {
				secretType: "kubernetes.io/ssh-auth", immutable: ptr.To(true),
				keys:     []string{"ssh-privatekey", "ssh-publickey"},
				contains: []string{"-----BEGIN EC PRIVATE KEY-----", "ecdsa-sha2-nistp521 AAAA"},
			},
			// Endpoints in template order (docs/compatibility.md#plugin-order): node
			// pods, then the launcher.
			"ConfigMap minimal-mpi-hostfile": {
				keys: []string{"hostfile"},
				data: map[string]string{"hostfile": "minimal-node-0-0.minimal slots=1\nminimal-launcher-0-0.minimal slots=1\n"},
			},
		},
	}
}

// fluxFacts are the facts of the example runtime flux-distributed
// (docs/compatibility.md#shipped-runtimes) for TrainJob name in namespace default, per
// docs/compatibility.md#flux: image and command string as the TrainJob gives them;
// scriptFacts are the scripts' parameters that depend on the TrainJob (flags, resource
// spec, hostlist).
func fluxFacts(name string, nodes int32, image, command string, scriptFacts ...string) facts {
	entrypoint := name + "-flux-entrypoint"
	return facts{
		replicatedJobs: []string{"node"},
		containers:     map[string][]string{"node": {"node"}},
		initContainers: map[string][]string{"node": {"flux-installer"}},
		// docs/compatibility.md#plainml (PlainML acts with Flux): numNodes → the
		// trainer's count.
		counts:   map[string]int32{"node": nodes},
		replicas: map[string]int32{"node": 1},
		// docs/compatibility.md#the-build-model step 1: the runtime's own labels
		// (framework, webhook-validation) are not propagated.
		labels: map[string]string{},
		image: map[string]string{
			"node/node": image,
			// FLUX_VIEW_IMAGE, default or as the example sets it (the same value).
			"node/flux-installer": "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy",
		},
		command: map[string][]string{
			"node/node":           {"/bin/bash", "/etc/flux-config/entrypoint.sh", command},
			"node/flux-installer": {"/bin/bash", "/etc/flux-config/init.sh"},
		},
		ports: map[string][]int32{"node/node": nil},
		volumes: map[string]map[string]string{"node": {
			"spack-install": "emptyDir",
			"flux-install":  "emptyDir",
			entrypoint:      "configMap " + entrypoint + " mode=0755",
			"shared-memory": "emptyDir medium=Memory",
			"flux-curve":    "secret " + name + "-flux-curve" + secretSuffix + " mode=0400",
		}},
		mounts: map[string]map[string]string{
			"node/node": {
				"/mnt/flux": "flux-install", "/opt/software": "spack-install", "/etc/flux-config": entrypoint + " (ro)",
				"/curve": "flux-curve (ro)", "/dev/shm": "shared-memory (ro)",
			},
			"node/flux-installer": {"/mnt/flux": "flux-install", "/etc/flux-config": entrypoint + " (ro)"},
		},
		// docs/compatibility.md#objects-per-trainjob; the create-only Secret first
		// (Result.Objects).
		objects: []string{"v1 Secret " + name + "-flux-curve" + secretSuffix, "v1 ConfigMap " + entrypoint},
		content: map[string]objectFacts{
			// docs/compatibility.md#objects-per-trainjob Opaque. Its key is random, not
			// the UID's hash (docs/compatibility.md, "Flux CURVE certificate"); the
			// ZeroMQ certificate names the TrainJob.
			"Secret " + name + "-flux-curve" + secretSuffix: {
				secretType: "Opaque", keys: []string{"curve.cert"},
				contains: []string{"name = \"" + name + "\"", "public-key = ", "secret-key = "},
			},
			// Trainyard's own scripts with upstream's parameters (docs/compatibility.md,
			// "Flux scripts"): lead host, hostlist, the broker TOML's port, bind and
			// connect addresses and queue policy (FLUX_* defaults).
			"ConfigMap " + entrypoint: {
				keys: []string{"entrypoint.sh", "init.sh"},
				contains: append([]string{
					name + "-node-0-0",
					"default_port = 8050", `"tcp://eth0:%p"`, `"tcp://%h.` + name + `.default.svc.cluster.local:%p"`, `queue-policy = "fcfs"`,
				}, scriptFacts...),
			},
		},
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
		// No resources anywhere: cpu 0 → max(1, 0) processes
		// (docs/compatibility.md#torch step 2).
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
		// docs/compatibility.md#volcano: one PodGroup named after the TrainJob,
		// annotation on every pod.
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
		// docs/compatibility.md#jax.
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
		// docs/compatibility.md#xgboost: no GPU → one worker per node.
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
	"deepspeed-distributed/minimal": mpiFacts("ghcr.io/kubeflow/trainer/deepspeed-runtime"),
	"mlx-distributed/minimal":       mpiFacts("ghcr.io/kubeflow/trainer/mlx-runtime"),
	// docs/compatibility.md#flux with the policy's numProcPerNode 1
	// (docs/compatibility.md#api-defaults), no GPUs.
	"flux-distributed/flux-interactive": fluxFacts("lammps-flux-interactive", 4,
		"ghcr.io/converged-computing/metric-lammps:latest", "sleep infinity",
		"-N 4 -n 4", "--cores=0", "lammps-flux-interactive-node-0-[0-3]"),
	"flux-distributed/lammps-train-gpus": withFacts(fluxFacts("lammps-flux", 2, "ghcr.io/flux-framework/tutorials:gpu-lammps-hwloc",
		"lmp_gpu -k on g 8 -sf kk -pk kokkos cuda/aware off newton on neigh half -in in.reaxff.hns -v x 8 -v y 8 -v z 16 -in in.reaxff.hns -nocite",
		// numProcPerNode 1, one GPU per node (resourcesPerNode).
		"-N 2 -n 2 -g 1", "--cores=0 --gpu=0", "lammps-flux-node-0-[0-1]"), func(f *facts) {
		// docs/compatibility.md#building-the-jobset step 4: spec.trainer.env on the
		// trainer container; docs/compatibility.md#the-build-model: resourcesPerNode
		// merged.
		f.env = map[string]map[string]string{"node/node": {
			"OMPI_MCA_btl": "tcp,self", "FLUX_VIEW_IMAGE": "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy",
		}}
		f.resources = map[string]map[string]string{"node/node": {"limits.nvidia.com/gpu": "1", "requests.nvidia.com/gpu": "1"}}
	}),
	"flux-distributed/lammps-train-job": withFacts(fluxFacts("lammps-flux", 2, "ghcr.io/converged-computing/metric-lammps:latest",
		"lmp -v x 4 -v y 4 -v z 4 -in in.reaxc.hns -nocite",
		// numProcPerNode 4, no GPUs.
		"-N 2 -n 8", "--cores=0-3", "lammps-flux-node-0-[0-1]"), func(f *facts) {
		f.env = map[string]map[string]string{"node/node": {"FLUX_VIEW_IMAGE": "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy"}}
	}),
}

// withFacts returns f changed by change.
func withFacts(f facts, change func(*facts)) facts {
	change(&f)
	return f
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
// docs/compatibility.md specifies for it (compatTable), plus what holds for every
// JobSet: name, namespace and controller owner reference of the TrainJob
// (docs/compatibility.md#building-the-jobset), parallelism == completions on every
// replicatedJob (docs/compatibility.md#plugin-order).
func TestCompatibility(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range upstreamCases(t) {
		seen[c.ID()] = true
		t.Run(c.ID(), func(t *testing.T) {
			want, ok := compatTable[c.ID()]
			if !ok {
				t.Fatalf("no compatTable row for %s: add the facts docs/compatibility.md specifies for it", c.ID())
			}
			in, err := render.Load(c.Sources, "default")
			if err != nil {
				t.Fatal(err)
			}
			results, err := render.Render(context.Background(), in, render.Options{})
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
	// Name, namespace, owner (docs/compatibility.md#building-the-jobset).
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
		// docs/compatibility.md#plugin-order PreBuildSync: explicit and equal.
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
	if snapshot := js.Annotations[objectkeys.AnnotationRuntimeSnapshot]; snapshot == "" {
		t.Errorf("JobSet has no %s annotation", objectkeys.AnnotationRuntimeSnapshot)
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
	for rjName, names := range want.initContainers {
		if rj := plan.ReplicatedJob(js, rjName); rj != nil {
			if diff := cmp.Diff(names, plan.ContainerNames(plan.PodSpec(rj).InitContainers)); diff != "" {
				t.Errorf("replicatedJob %s initContainers (-want +got):\n%s", rjName, diff)
			}
		}
	}
	for rjName, volumes := range want.volumes {
		if rj := plan.ReplicatedJob(js, rjName); rj != nil {
			got := map[string]string{}
			for _, v := range plan.PodSpec(rj).Volumes {
				got[v.Name] = volumeString(v)
			}
			if diff := cmp.Diff(volumes, got); diff != "" {
				t.Errorf("replicatedJob %s volumes (-want +got):\n%s", rjName, diff)
			}
		}
	}
	for where, mounts := range want.mounts {
		got := map[string]string{}
		for _, m := range container(t, js, where).VolumeMounts {
			got[m.MountPath] = m.Name
			if m.ReadOnly {
				got[m.MountPath] += " (ro)"
			}
		}
		if diff := cmp.Diff(mounts, got); diff != "" {
			t.Errorf("%s volumeMounts (-want +got):\n%s", where, diff)
		}
	}
	for where, resources := range want.resources {
		c := container(t, js, where)
		got := map[string]string{}
		for prefix, list := range map[string]corev1.ResourceList{"limits.": c.Resources.Limits, "requests.": c.Resources.Requests} {
			for name, q := range list {
				got[prefix+string(name)] = q.String()
			}
		}
		if diff := cmp.Diff(resources, got); diff != "" {
			t.Errorf("%s resources (-want +got):\n%s", where, diff)
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

	// The render output: side objects, then the JobSet.
	out, err := r.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if last := (&unstructured.Unstructured{Object: out[len(out)-1]}); last.GetKind() != "JobSet" {
		t.Errorf("render output ends with %s %s, want the JobSet", last.GetKind(), last.GetName())
	}
	var objects []string
	for _, obj := range out[:len(out)-1] {
		o := &unstructured.Unstructured{Object: obj}
		objects = append(objects, o.GetAPIVersion()+" "+o.GetKind()+" "+o.GetName())
		// docs/compatibility.md#objects-per-trainjob: every object has the TrainJob as
		// its controller.
		owners := o.GetOwnerReferences()
		if o.GetNamespace() != tj.Namespace || len(owners) != 1 || owners[0].Kind != "TrainJob" || owners[0].Name != tj.Name ||
			owners[0].Controller == nil || !*owners[0].Controller {
			t.Errorf("%s %s: namespace %q, owners %v; want the TrainJob's namespace and the TrainJob as controller", o.GetKind(), o.GetName(), o.GetNamespace(), owners)
		}
	}
	if diff := cmp.Diff(want.objects, objects); diff != "" {
		t.Errorf("side objects (-want +got):\n%s", diff)
	}
	if len(want.content) > 0 {
		checkContent(t, r, want.content)
	}
}

// checkContent checks the content of r's side objects, as created: create-only objects
// with their generated content, values not redacted.
func checkContent(t *testing.T, r *render.Result, want map[string]objectFacts) {
	t.Helper()
	objects := map[string]*unstructured.Unstructured{}
	for _, o := range r.Plan.CreateOnly {
		obj := o.Object.DeepCopy()
		if o.Generate != nil {
			if err := o.Generate(obj); err != nil {
				t.Fatal(err)
			}
		}
		objects[obj.GetKind()+" "+obj.GetName()] = obj
	}
	for _, obj := range r.Desired.Objects {
		objects[obj.GetKind()+" "+obj.GetName()] = obj
	}
	for id, facts := range want {
		obj := objects[id]
		if obj == nil {
			t.Errorf("no side object %s", id)
			continue
		}
		var (
			typ       string
			immutable *bool
			data      = map[string]string{}
		)
		switch obj.GetKind() {
		case "Secret":
			var s corev1.Secret
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &s); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			typ, immutable = string(s.Type), s.Immutable
			if typ == "" {
				typ = string(corev1.SecretTypeOpaque)
			}
			for k, v := range s.Data {
				data[k] = string(v)
			}
			for k, v := range s.StringData {
				data[k] = v
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &cm); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			immutable = cm.Immutable
			for k, v := range cm.Data {
				data[k] = v
			}
			for k, v := range cm.BinaryData {
				data[k] = string(v)
			}
		default:
			t.Fatalf("%s: content facts cover Secrets and ConfigMaps", id)
		}
		if typ != facts.secretType {
			t.Errorf("%s type %q, want %q", id, typ, facts.secretType)
		}
		if facts.immutable != nil && ptr.Deref(immutable, false) != *facts.immutable {
			t.Errorf("%s immutable %v, want %v", id, ptr.Deref(immutable, false), *facts.immutable)
		}
		if diff := cmp.Diff(facts.keys, slices.Sorted(maps.Keys(data))); diff != "" {
			t.Errorf("%s keys (-want +got):\n%s", id, diff)
		}
		for k, v := range facts.data {
			if data[k] != v {
				t.Errorf("%s %s = %q, want %q", id, k, data[k], v)
			}
		}
		for _, sub := range facts.contains {
			if !slices.ContainsFunc(slices.Collect(maps.Values(data)), func(v string) bool { return strings.Contains(v, sub) }) {
				t.Errorf("%s: no value contains %q", id, sub)
			}
		}
	}
}

// volumeString describes the source of v as the facts give it: "emptyDir" with
// " medium=<m>", "secret <name>" or "configMap <name>" with " mode=<defaultMode>" and
// " items=<key>><path>:<mode>,…" (modes in octal).
func volumeString(v corev1.Volume) string {
	mode := func(m *int32) string {
		if m == nil {
			return ""
		}
		return fmt.Sprintf(":%04o", *m)
	}
	source := func(kind, name string, defaultMode *int32, items []corev1.KeyToPath) string {
		s := kind + " " + name
		if defaultMode != nil {
			s += " mode=" + mode(defaultMode)[1:]
		}
		var list []string
		for _, it := range items {
			list = append(list, it.Key+">"+it.Path+mode(it.Mode))
		}
		if len(list) > 0 {
			s += " items=" + strings.Join(list, ",")
		}
		return s
	}
	switch {
	case v.EmptyDir != nil:
		if v.EmptyDir.Medium != "" {
			return "emptyDir medium=" + string(v.EmptyDir.Medium)
		}
		return "emptyDir"
	case v.Secret != nil:
		return source("secret", v.Secret.SecretName, v.Secret.DefaultMode, v.Secret.Items)
	case v.ConfigMap != nil:
		return source("configMap", v.ConfigMap.Name, v.ConfigMap.DefaultMode, v.ConfigMap.Items)
	}
	return fmt.Sprintf("other %+v", v.VolumeSource)
}

var emptyMapIsNil = cmp.Transformer("emptyIsNil", func(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
})

// withoutHash drops Trainyard's bookkeeping annotations: the hash, the runtime
// snapshot (checked on its own in checkFacts) and the snapshot's digest.
func withoutHash(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != "trainyard.dev/jobset-hash" && k != objectkeys.AnnotationRuntimeSnapshot && k != objectkeys.AnnotationRuntimeSnapshotHash {
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

// container returns the container "<replicatedJob>/<container>" of js, or the init
// container when no container has the name.
func container(t *testing.T, js *jobsetv1alpha2.JobSet, where string) *corev1.Container {
	t.Helper()
	rjName, name, _ := strings.Cut(where, "/")
	rj := plan.ReplicatedJob(js, rjName)
	if rj == nil {
		t.Fatalf("no replicatedJob %s", rjName)
	}
	pod := plan.PodSpec(rj)
	c := plan.Container(pod.Containers, name)
	if c == nil {
		c = plan.Container(pod.InitContainers, name)
	}
	if c == nil {
		t.Fatalf("replicatedJob %s has no container %s (has %v, init %v)", rjName, name, plan.ContainerNames(pod.Containers), plan.ContainerNames(pod.InitContainers))
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
