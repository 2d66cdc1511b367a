package mlpolicy

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// torchtune (trainer-compat §3.1.1): a TrainJob whose spec.trainer.command is exactly
// ["tune", "run"] has its command completed from the runtime: rendezvous endpoint,
// recipe, config and the runtime-managed paths.

// torchtuneModels are the models the shipped torchtune runtimes support, as
// "<family>/<size>" derived from the runtime name.
var torchtuneModels = []string{"llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B"}

// torchtuneRuntimeKeys are the runtime command's "key=value" items the rewrite keeps:
// where the initializers put the model and where the output goes.
var torchtuneRuntimeKeys = []string{"output_dir", "tokenizer.path", "checkpointer.checkpoint_dir", "tokenizer.merges_file"}

// isTorchtune reports whether tj asks for the torchtune rewrite.
func isTorchtune(tj *trainer.TrainJob) bool {
	t := tj.Spec.Trainer
	return t != nil && len(t.Command) == 2 && t.Command[0] == "tune" && t.Command[1] == "run"
}

// torchtuneParams are the computed values the rewrite depends on.
type torchtuneParams struct {
	nnodes   int32
	procs    procsPerNode
	gpus     int64
	endpoint string // "<host>:29500" of the first trainer pod
}

// torchtuneCommand returns the trainer command for a torchtune TrainJob:
//
//	tune run [--rdzv_endpoint=<endpoint>] <recipe> --config <model><suffix> <runtime paths...>
//
// The endpoint is included when more than one process takes part. The runtime paths
// are the runtime trainer container's command items keyed output_dir, tokenizer.path,
// checkpointer.checkpoint_dir or tokenizer.merges_file; spec.trainer.args stay args.
//
// Errors: *plan.InvalidInputError at spec.runtimeRef.name when the runtime name does not
// give a supported model ("<x>-<family>-<size>", e.g. torchtune-llama3.2-1b); upstream
// rejects such a TrainJob at admission.
func torchtuneCommand(tj *trainer.TrainJob, rt plan.Runtime, p torchtuneParams) ([]string, error) {
	model := torchtuneModel(tj.Spec.RuntimeRef.Name)
	if !slices.Contains(torchtuneModels, model) {
		return nil, &plan.InvalidInputError{
			Field: field.NewPath("spec", "runtimeRef", "name").String(),
			Message: fmt.Sprintf("torchtune (command [tune run]) supports the runtimes of models %v, named "+
				"<prefix>-<family>-<size> (e.g. torchtune-llama3.2-1b); %q is not one of them",
				torchtuneModels, tj.Spec.RuntimeRef.Name),
		}
	}
	recipe, suffix := torchtuneRecipe(p.nnodes, p.procs, p.gpus, tj.Spec.Trainer.Args)

	cmd := make([]string, 0, 12)
	cmd = append(cmd, tj.Spec.Trainer.Command...)
	if p.nnodes > 1 || (!p.procs.auto && p.procs.n > 1) || (p.procs.auto && p.gpus > 1) {
		cmd = append(cmd, "--rdzv_endpoint="+p.endpoint)
	}
	cmd = append(cmd, recipe, "--config", model+suffix)
	for _, item := range runtimeTrainerCommand(rt) {
		key, _, _ := strings.Cut(item, "=")
		if slices.Contains(torchtuneRuntimeKeys, key) {
			cmd = append(cmd, item)
		}
	}
	return cmd, nil
}

// torchtuneModel derives "<family>/<SIZE>" from a runtime name "<x>-<family>-<size>",
// with '.' in the family replaced by '_': torchtune-llama3.2-1b → llama3_2/1B. It is ""
// for a name of another shape.
func torchtuneModel(runtimeName string) string {
	parts := strings.Split(runtimeName, "-")
	if len(parts) != 3 {
		return ""
	}
	return strings.ReplaceAll(parts[1], ".", "_") + "/" + strings.ToUpper(parts[2])
}

// torchtuneRecipe picks the recipe and config suffix from the topology and the
// fine-tuning mode the args select (trainer-compat §3.1.1).
func torchtuneRecipe(nnodes int32, procs procsPerNode, gpus int64, args []string) (recipe, suffix string) {
	lora, qlora := torchtuneMode(args)
	singleDevice := nnodes == 1 && ((!procs.auto && procs.n == 1) || gpus == 1)
	switch {
	case singleDevice && qlora:
		return "lora_finetune_single_device", "_qlora_single_device"
	case singleDevice && lora:
		return "lora_finetune_single_device", "_lora_single_device"
	case singleDevice:
		return "full_finetune_single_device", "_full_single_device"
	case nnodes == 1 && qlora:
		return "lora_finetune_distributed", "_qlora"
	case nnodes == 1 && lora:
		return "lora_finetune_distributed", "_lora"
	case nnodes > 1:
		return "full_finetune_distributed", "_full_multinode"
	default:
		return "full_finetune_distributed", "_full"
	}
}

// torchtuneMode reports LoRA (an arg mentions model.lora_attn_modules) and QLoRA (an
// arg sets a model.quantize_base key to true and none sets a model.use_dora key to true).
func torchtuneMode(args []string) (lora, qlora bool) {
	var quantize, dora bool
	for _, arg := range args {
		if strings.Contains(arg, "model.lora_attn_modules") {
			lora = true
		}
		key, value, _ := strings.Cut(arg, "=")
		if !strings.EqualFold(value, "true") {
			continue
		}
		if strings.Contains(key, "model.quantize_base") {
			quantize = true
		}
		if strings.Contains(key, "model.use_dora") {
			dora = true
		}
	}
	return lora, quantize && !dora
}

// runtimeTrainerCommand is the command of the runtime's (not the JobSet's, which now
// holds spec.trainer.command) first trainer "node" container. Runtime patches cannot
// change commands, so the runtime is the source.
func runtimeTrainerCommand(rt plan.Runtime) []string {
	rjs := rt.Spec.Template.Spec.ReplicatedJobs
	for i := range rjs {
		if plan.Ancestor(&rjs[i]) != trainer.AncestorTrainer {
			continue
		}
		if c := plan.Container(plan.PodSpec(&rjs[i]).Containers, trainer.ContainerNode); c != nil {
			return c.Command
		}
		return nil
	}
	return nil
}
