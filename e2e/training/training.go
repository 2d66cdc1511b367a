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

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// DigitsScript is the DDP example's script, relative to the repository root.
const DigitsScript = "examples/ddp-digits/train.py"

// TorchRuntime is the upstream ClusterTrainingRuntime the DDP example runs on.
const TorchRuntime = "torch-distributed"

// DigitsOptions shapes DigitsTrainJob.
type DigitsOptions struct {
	// Nodes is spec.trainer.numNodes; default 2.
	Nodes int32
	// Epochs of training (the script's EPOCHS); default 30.
	Epochs int
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
	script, err := os.ReadFile(filepath.Join(repoRoot, DigitsScript))
	if err != nil {
		return nil, fmt.Errorf("reading the training script: %w", err)
	}
	// Debian's torch 1.13 predates Python 3.11, whose IntFlag no longer iterates
	// the zero member: torchrun's default --redirects 0 then parses to None and it
	// crashes ("'NoneType' object has no attribute 'get'"). Redirecting stdout to
	// its log file and teeing it to the console (1, a single-bit flag) parses,
	// and keeps the log where `kubectl logs` reads it.
	run := "torchrun --redirects 1 --tee 1 /tmp/train.py"
	if opts.ExtraCommand != "" {
		run += " && " + opts.ExtraCommand
	}
	return &trainer.TrainJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: "TrainJob"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: TorchRuntime},
			Trainer: &trainer.Trainer{
				NumNodes:       ptr.To(opts.Nodes),
				NumProcPerNode: ptr.To[int32](1),
				Command:        []string{"bash", "-c", InlineScript("/tmp/train.py", string(script)) + run},
				Env: []corev1.EnvVar{
					{Name: "EPOCHS", Value: fmt.Sprint(opts.Epochs)},
					// One thread per process: two nodes share the real node's 2 cores.
					{Name: "OMP_NUM_THREADS", Value: "1"},
				},
				ResourcesPerNode: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
			},
		},
	}, nil
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
