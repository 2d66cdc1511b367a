package mlpolicy

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// Case 4 of docs/compatibility.md#upstream-test-cases: the torchtune command rewrite,
// no PET_MASTER_*.
func TestTorchtuneCase4(t *testing.T) {
	rt := plantest.SkeletonRuntime(torchPolicy(100))
	rt.Name = "torchtune-llama3.3-70b"
	c := &rt.Spec.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
	c.Command = []string{
		"tune", "run", "full_finetune_distributed", "--config", "llama3_3/70B_full_multinode",
		"output_dir=/workspace/model/llama3_3/70B",
		"tokenizer.path=/workspace/model/original/tokenizer.model",
		"checkpointer.checkpoint_dir=/workspace/model",
	}
	args := []string{"dtype=fp16", "batch_size=32", "epochs=10", "loss=torchtune.modules.loss.CEWithChunkedOutputLoss"}
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{
		Image:          ptr.To("test:trainjob"),
		Command:        []string{"tune", "run"},
		Args:           args,
		NumNodes:       ptr.To[int32](30),
		NumProcPerNode: ptr.To[int32](3),
	})
	js := mustBuild(t, tj, rt)

	want := c.DeepCopy()
	want.Image = "test:trainjob"
	want.Command = []string{
		"tune", "run", "--rdzv_endpoint=test-job-node-0-0.test-job:29500",
		"full_finetune_distributed", "--config", "llama3_3/70B_full_multinode",
		"output_dir=/workspace/model/llama3_3/70B",
		"tokenizer.path=/workspace/model/original/tokenizer.model",
		"checkpointer.checkpoint_dir=/workspace/model",
	}
	want.Args = args
	want.Env = petEnv("30", "3")[:3]
	want.Ports = port29500
	if diff := cmp.Diff(want, nodeContainer(t, js)); diff != "" {
		t.Errorf("node container (-want +got):\n%s", diff)
	}
	if n := plan.Count(plan.TrainerJob(js)); n != 30 {
		t.Errorf("trainer count = %d, want 30", n)
	}
}

// The rewrite with the real upstream torchtune runtimes (limits nvidia.com/gpu 2).
func TestTorchtuneUpstreamRuntimes(t *testing.T) {
	const endpoint = "--rdzv_endpoint=test-job-node-0-0.test-job:29500"
	llamaPaths := []string{
		"output_dir=/workspace/output",
		"tokenizer.path=/workspace/model/original/tokenizer.model",
		"checkpointer.checkpoint_dir=/workspace/model",
	}
	cases := map[string]struct {
		file        string
		trainer     trainer.Trainer
		wantCommand []string
		wantNProc   string
	}{
		"llama3.2-1b defaults: 2 GPUs, full distributed": {
			file:        "runtimes/torchtune/llama3_2/llama3_2_1B.yaml",
			wantCommand: append([]string{"tune", "run", endpoint, "full_finetune_distributed", "--config", "llama3_2/1B_full"}, llamaPaths...),
			wantNProc:   "auto",
		},
		"llama3.2-3b on one process: single device, no endpoint": {
			file:        "runtimes/torchtune/llama3_2/llama3_2_3B.yaml",
			trainer:     trainer.Trainer{NumProcPerNode: ptr.To[int32](1)},
			wantCommand: append([]string{"tune", "run", "full_finetune_single_device", "--config", "llama3_2/3B_full_single_device"}, llamaPaths...),
			wantNProc:   "1",
		},
		"llama3.2-1b QLoRA on one GPU": {
			file: "runtimes/torchtune/llama3_2/llama3_2_1B.yaml",
			trainer: trainer.Trainer{
				Args:             []string{"model.lora_attn_modules=[q_proj,v_proj]", "model.quantize_base=True"},
				ResourcesPerNode: &corev1.ResourceRequirements{Limits: quantities("nvidia.com/gpu", "1")},
			},
			wantCommand: append([]string{"tune", "run", "lora_finetune_single_device", "--config", "llama3_2/1B_qlora_single_device"}, llamaPaths...),
			wantNProc:   "auto",
		},
		"qwen2.5-1.5b LoRA on 2 GPUs keeps the merges file": {
			file:    "runtimes/torchtune/qwen2_5/qwen2_5_1.5B.yaml",
			trainer: trainer.Trainer{Args: []string{"model.lora_attn_modules=[q_proj,v_proj]"}},
			wantCommand: []string{
				"tune", "run", endpoint, "lora_finetune_distributed", "--config", "qwen2_5/1.5B_lora",
				"output_dir=/workspace/output",
				"tokenizer.path=/workspace/model/vocab.json",
				"tokenizer.merges_file=/workspace/model/merges.txt",
				"checkpointer.checkpoint_dir=/workspace/model",
			},
			wantNProc: "auto",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := plantest.UpstreamRuntimeFile(t, tc.file)
			tr := tc.trainer
			tr.Command = []string{"tune", "run"}
			tj := plantest.TrainJob(rt.Name, &tr)
			c := nodeContainer(t, mustBuild(t, tj, rt))
			if diff := cmp.Diff(tc.wantCommand, c.Command); diff != "" {
				t.Errorf("command (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tr.Args, c.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(petEnv("1", tc.wantNProc)[:3], c.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTorchtuneRecipe(t *testing.T) {
	lora := []string{"model.lora_attn_modules=[q_proj]"}
	qlora := []string{"model.lora_attn_modules=[q_proj]", "model.quantize_base=TRUE"}
	dora := []string{"model.lora_attn_modules=[q_proj]", "model.quantize_base=true", "model.use_dora=true"}
	one := procsPerNode{n: 1}
	auto := procsPerNode{auto: true}
	cases := []struct {
		nnodes                 int32
		procs                  procsPerNode
		gpus                   int64
		args                   []string
		wantRecipe, wantSuffix string
	}{
		{1, one, 0, nil, "full_finetune_single_device", "_full_single_device"},
		{1, auto, 1, lora, "lora_finetune_single_device", "_lora_single_device"},
		{1, one, 4, qlora, "lora_finetune_single_device", "_qlora_single_device"},
		{1, one, 4, dora, "lora_finetune_single_device", "_lora_single_device"},
		{1, auto, 2, qlora, "lora_finetune_distributed", "_qlora"},
		{1, procsPerNode{n: 4}, 0, lora, "lora_finetune_distributed", "_lora"},
		{1, auto, 8, nil, "full_finetune_distributed", "_full"},
		{2, one, 1, lora, "full_finetune_distributed", "_full_multinode"},
		{0, auto, 8, nil, "full_finetune_distributed", "_full"},
	}
	for _, tc := range cases {
		recipe, suffix := torchtuneRecipe(tc.nnodes, tc.procs, tc.gpus, tc.args)
		if recipe != tc.wantRecipe || suffix != tc.wantSuffix {
			t.Errorf("torchtuneRecipe(%d, %v, %d, %q) = %s, %s; want %s, %s",
				tc.nnodes, tc.procs, tc.gpus, tc.args, recipe, suffix, tc.wantRecipe, tc.wantSuffix)
		}
	}
}

func TestTorchtuneModel(t *testing.T) {
	for name, want := range map[string]string{
		"torchtune-llama3.2-1b":    "llama3_2/1B",
		"torchtune-qwen2.5-1.5b":   "qwen2_5/1.5B",
		"torchtune-llama3.3-70b":   "llama3_3/70B",
		"torch-distributed":        "",
		"my-torchtune-llama3.2-1b": "",
	} {
		if got := torchtuneModel(name); got != want {
			t.Errorf("torchtuneModel(%q) = %q, want %q", name, got, want)
		}
	}
}

// A [tune run] TrainJob against a runtime that names no supported model.
func TestTorchtuneUnsupportedModel(t *testing.T) {
	rt := plantest.SkeletonRuntime(torchPolicy(1))
	rt.Name = "torchtune-mistral-7b"
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{Command: []string{"tune", "run"}})
	_, err := build(t, tj, rt)
	var invalid *plan.InvalidInputError
	if !errors.As(err, &invalid) || invalid.Field != "spec.runtimeRef.name" {
		t.Fatalf("Apply() = %v, want *plan.InvalidInputError at spec.runtimeRef.name", err)
	}
}
