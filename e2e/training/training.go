// Package training builds the real-training TrainJobs that `make dev` and the
// real-node e2e tests run on the local control plane's real node (Options.RealNode):
// the scripts in examples/, shipped into the trainer container the way the Kubeflow
// SDK ships a training function (the script inline in `bash -c`, written to a file,
// then run), so that the upstream runtimes work unchanged.
package training

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// DigitsScript is the DDP example's script, relative to the repository root.
const DigitsScript = "examples/ddp-digits/train.py"

// The examples' scripts, relative to the repository root.
const (
	// MPIAllreduceScript is an mpi4py all-reduce across every process mpirun starts.
	MPIAllreduceScript = "examples/mpi-allreduce/allreduce.py"
	// XGBoostDigitsScript is distributed XGBoost on scikit-learn's digits.
	XGBoostDigitsScript = "examples/xgboost-digits/train.py"
)

// The upstream ClusterTrainingRuntimes the examples run on, unchanged.
const (
	// TorchRuntime runs the DDP example.
	TorchRuntime = "torch-distributed"
	// DeepSpeedRuntime runs the MPI example: a launcher and sshd nodes, OpenMPI.
	DeepSpeedRuntime = "deepspeed-distributed"
	// XGBoostRuntime runs the XGBoost example.
	XGBoostRuntime = "xgboost-distributed"
)

// DigitsOptions shapes DigitsTrainJob.
type DigitsOptions struct {
	// Nodes is spec.trainer.numNodes; default 2.
	Nodes int32
	// Epochs of training (the script's EPOCHS); default 30.
	Epochs int
	// BeforeCommand runs in the container before torchrun, e.g. "sleep 20" to hold
	// a running trainer back from training; "" runs nothing.
	BeforeCommand string
	// ExtraCommand runs in the container after the script succeeded, e.g. "exit 1"
	// to make a node fail after training; "" runs nothing.
	ExtraCommand string
}

// DigitsTrainJob returns TrainJob namespace/name on the upstream torch-distributed
// runtime: numNodes nodes of one process each, torchrun running DigitsScript (PyTorch
// DDP over gloo on scikit-learn's digits, reporting its progress), with CPU and memory
// requests that fit the real node's 2 cores beside the control plane. Errors: the
// script cannot be read from repoRoot.
func DigitsTrainJob(repoRoot, namespace, name string, opts DigitsOptions) (*trainer.TrainJob, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 2
	}
	if opts.Epochs == 0 {
		opts.Epochs = 30
	}
	script, err := readScript(repoRoot, DigitsScript)
	if err != nil {
		return nil, err
	}
	// Plain torchrun, as the Kubeflow SDK runs a function: the image's torchrun
	// starts with its defaults (e2e/images: torchrunRedirectsFix).
	run := "torchrun /tmp/train.py"
	if opts.BeforeCommand != "" {
		run = opts.BeforeCommand + " && " + run
	}
	if opts.ExtraCommand != "" {
		run += " && " + opts.ExtraCommand
	}
	tj := ShellTrainJob(namespace, name, TorchRuntime, opts.Nodes, InlineScript("/tmp/train.py", script)+run,
		corev1.EnvVar{Name: "EPOCHS", Value: fmt.Sprint(opts.Epochs)})
	tj.Spec.Trainer.NumProcPerNode = ptr.To[int32](1)
	return tj, nil
}

// DigitsSearchExample is the OptimizationJob over the DDP example, relative to the
// repository root.
const DigitsSearchExample = "examples/digits-search/optimizationjob.yaml"

// DigitsSearchOptions shapes DigitsSearch; zero values keep the example's.
type DigitsSearchOptions struct {
	// NumTrials and ParallelTrials override the example's spec.numTrials (8) and
	// spec.parallelTrials (2).
	NumTrials, ParallelTrials int32
	// Epochs each trial trains (the script's EPOCHS); default 30.
	Epochs int
}

// DigitsSearch returns OptimizationJob namespace/name read from DigitsSearchExample,
// its trainJobTemplate's trainer completed as DigitsTrainJob's of the template's
// numNodes: DigitsScript inline, run by torchrun, with the same requests. Each trial
// trains with the search's KUBEFLOW_TRAINER_OPT_LR and KUBEFLOW_TRAINER_OPT_HIDDEN_SIZE
// and reports its loss, the objective. Errors: the example or the script cannot be
// read from repoRoot, or the example does not decode strictly as an OptimizationJob.
func DigitsSearch(repoRoot, namespace, name string, opts DigitsSearchOptions) (*trainer.OptimizationJob, error) {
	data, err := os.ReadFile(filepath.Join(repoRoot, DigitsSearchExample))
	if err != nil {
		return nil, fmt.Errorf("reading the search: %w", err)
	}
	job := &trainer.OptimizationJob{}
	if err := yaml.UnmarshalStrict(data, job); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", DigitsSearchExample, err)
	}
	job.Name, job.Namespace = name, namespace
	if opts.NumTrials > 0 {
		job.Spec.NumTrials = ptr.To(opts.NumTrials)
	}
	if opts.ParallelTrials > 0 {
		job.Spec.ParallelTrials = ptr.To(opts.ParallelTrials)
	}
	spec := &job.Spec.TrainJobTemplate.Spec
	nodes := int32(1)
	if spec.Trainer != nil && spec.Trainer.NumNodes != nil {
		nodes = *spec.Trainer.NumNodes
	}
	tj, err := DigitsTrainJob(repoRoot, namespace, name, DigitsOptions{Nodes: nodes, Epochs: opts.Epochs})
	if err != nil {
		return nil, err
	}
	spec.Trainer = tj.Spec.Trainer
	return job, nil
}

// MPIAllreduceTrainJob returns TrainJob namespace/name on the upstream
// deepspeed-distributed runtime: numNodes nodes (the launcher counts as one, the
// runtime's runLauncherAsNode), the launcher running MPIAllreduceScript under mpirun
// with one process per node. mpirun finds the nodes in the controller's hostfile and
// starts the processes over SSH, so the script's all-reduce proves the hostfile, the
// SSH keys and the launcher's wait for the nodes. Errors: the script cannot be read
// from repoRoot.
func MPIAllreduceTrainJob(repoRoot, namespace, name string, numNodes int32) (*trainer.TrainJob, error) {
	script, err := readScript(repoRoot, MPIAllreduceScript)
	if err != nil {
		return nil, err
	}
	// The nodes run only sshd, so the script travels in mpirun's argv: orted
	// starts each process with it, no file needs to exist on a node.
	return ShellTrainJob(namespace, name, DeepSpeedRuntime, numNodes,
		InlineScript("/tmp/allreduce.py", script)+`mpirun python3 -c "$(cat /tmp/allreduce.py)"`), nil
}

// XGBoostOptions shapes XGBoostTrainJob.
type XGBoostOptions struct {
	// Nodes is spec.trainer.numNodes; default 2.
	Nodes int32
	// Rounds of boosting (the script's ROUNDS); default 20.
	Rounds int
}

// XGBoostTrainJob returns TrainJob namespace/name on the upstream xgboost-distributed
// runtime: Nodes nodes each running XGBoostDigitsScript, rank 0 running the Rabit
// tracker at the DMLC_* address the controller injects. Errors: the script cannot be
// read from repoRoot.
func XGBoostTrainJob(repoRoot, namespace, name string, opts XGBoostOptions) (*trainer.TrainJob, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 2
	}
	if opts.Rounds == 0 {
		opts.Rounds = 20
	}
	script, err := readScript(repoRoot, XGBoostDigitsScript)
	if err != nil {
		return nil, err
	}
	return ShellTrainJob(namespace, name, XGBoostRuntime, opts.Nodes, InlineScript("/tmp/train.py", script)+"python3 /tmp/train.py",
		corev1.EnvVar{Name: "ROUNDS", Value: fmt.Sprint(opts.Rounds)}), nil
}

func readScript(repoRoot, path string) (string, error) {
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		return "", fmt.Errorf("reading the training script: %w", err)
	}
	return string(data), nil
}

// ShellTrainJob returns TrainJob namespace/name on runtime whose trainer (numNodes
// nodes) runs shell in `bash -c`, with env and CPU and memory requests that fit the
// real node's 2 cores beside the control plane.
func ShellTrainJob(namespace, name, runtime string, numNodes int32, shell string, env ...corev1.EnvVar) *trainer.TrainJob {
	return &trainer.TrainJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: "TrainJob"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: runtime},
			Trainer: &trainer.Trainer{
				NumNodes: ptr.To(numNodes),
				Command:  []string{"bash", "-c", shell},
				// One thread per process: the nodes share the real node's 2 cores.
				Env: append(env, corev1.EnvVar{Name: "OMP_NUM_THREADS", Value: "1"}),
				ResourcesPerNode: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
			},
		},
	}
}

// InlineScript returns shell that writes script to path (a quoted here-document, so
// the shell expands nothing in it), followed by a newline.
func InlineScript(path, script string) string {
	const eof = "TRAINYARD_SCRIPT_EOF"
	if strings.Contains(script, eof) {
		panic("training: the script contains the here-document delimiter " + eof)
	}
	return fmt.Sprintf("cat > %s <<'%s'\n%s\n%s\n", path, eof, strings.TrimRight(script, "\n"), eof)
}
