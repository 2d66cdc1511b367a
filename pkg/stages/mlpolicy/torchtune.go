package mlpolicy

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// torchtune (docs/compatibility.md#torchtune): a TrainJob whose spec.trainer.command is
// exactly ["tune", "run"] has its command completed from the runtime: rendezvous
// endpoint, recipe, config and the runtime-managed paths.

// torchtuneModels are the models the shipped torchtune runtimes support, as
// "<family>/<size>" derived from the runtime name.
var torchtuneModels = []string{torchtuneLlama32_1B, torchtuneLlama32_3B, torchtuneLlama33_70B, torchtuneQwen25_1_5B}

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

// torchtuneCommand returns the trainer command for a torchtune TrainJob that passed
// validateTorchtune:
//
//	tune run [--rdzv_endpoint=<endpoint>] <recipe> --config <model><suffix> <runtime paths...>
//
// The endpoint is included when more than one process takes part. The runtime paths
// are the runtime trainer container's command items keyed output_dir, tokenizer.path,
// checkpointer.checkpoint_dir or tokenizer.merges_file; spec.trainer.args stay args.
func torchtuneCommand(tj *trainer.TrainJob, rt plan.Runtime, p torchtuneParams) []string {
	model := torchtuneModel(tj.Spec.RuntimeRef.Name)
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
	return cmd
}

// Torchtune models with rules of their own (docs/compatibility.md#torchtune).
const (
	torchtuneLlama32_1B  = "llama3_2/1B"
	torchtuneLlama32_3B  = "llama3_2/3B"
	torchtuneLlama33_70B = "llama3_3/70B"
	torchtuneQwen25_1_5B = "qwen2_5/1.5B"
)

// validateTorchtune checks a torchtune TrainJob (spec.trainer.command [tune run])
// against upstream's admission rules (docs/compatibility.md#torchtune), with p.JobSet
// the desired JobSet before the ML policy; each message starts with upstream's text:
//
//   - the runtime name must give a supported model (spec.runtimeRef.name);
//   - only llama3_3/70B runs on more than one node (spec.trainer.numNodes);
//   - QLoRA is not for qwen2_5/1.5B (spec.runtimeRef.name), and distributed QLoRA not
//     for llama3_2 1B and 3B (spec.trainer.numProcPerNode and
//     spec.trainer.resourcesPerNode);
//   - LoRA and QLoRA run on one node only (spec.trainer.numNodes);
//   - spec.trainer.args[i] must not set a key the runtime manages (output_dir,
//     tokenizer.path, checkpointer.checkpoint_dir, tokenizer.merges_file).
//
// The node count is the one the ML policy will use: spec.trainer.numNodes, else the
// runtime's (upstream takes 1 when spec.trainer.numNodes is unset; every shipped
// torchtune runtime has 1).
func validateTorchtune(tj *trainer.TrainJob, p *plan.Plan) field.ErrorList {
	var errs field.ErrorList
	t := tj.Spec.Trainer
	name := field.NewPath("spec", "runtimeRef", "name")
	model := torchtuneModel(tj.Spec.RuntimeRef.Name)
	if !slices.Contains(torchtuneModels, model) {
		errs = append(errs, field.Invalid(name, tj.Spec.RuntimeRef.Name, fmt.Sprintf(
			"must have a supported pretrained model, invalid model configured: %q: torchtune (command [tune run]) supports "+
				"the runtimes of models %v, named <prefix>-<family>-<size> (e.g. torchtune-llama3.2-1b)", model, torchtuneModels)))
	}
	res := nodeResources(tj, p.JobSet)
	gpus := gpuCount(res)
	procs := torchProcsPerNode(tj, res, gpus)
	nnodes := trainerCount(p.JobSet)
	if t.NumNodes != nil && plan.TrainerJob(p.JobSet) != nil {
		nnodes = *t.NumNodes
	}
	numNodes := trainerPath.Child("numNodes")
	if nnodes > 1 && model != "" && model != torchtuneLlama33_70B {
		errs = append(errs, field.Invalid(numNodes, nnodes, fmt.Sprintf(
			"must be 1 for %v model: only %s fine-tunes on several nodes; set spec.trainer.numNodes to 1", model, torchtuneLlama33_70B)))
	}
	_, suffix := torchtuneRecipe(nnodes, procs, gpus, t.Args)
	if strings.Contains(suffix, "_qlora") {
		if model == torchtuneQwen25_1_5B {
			errs = append(errs, field.Invalid(name, tj.Spec.RuntimeRef.Name, fmt.Sprintf(
				"QLoRA is not supported for %v model: remove model.quantize_base=true from spec.trainer.args", model)))
		}
		if suffix == "_qlora" && (model == torchtuneLlama32_1B || model == torchtuneLlama32_3B) {
			errs = append(errs,
				field.Invalid(trainerPath.Child("numProcPerNode"), procs.String(), fmt.Sprintf(
					"must be auto or 1 for %v model when using QLoRA: QLoRA runs on a single device; set it to 1", model)),
				field.Invalid(trainerPath.Child("resourcesPerNode"), field.OmitValueType{}, fmt.Sprintf(
					"must have gpu resource with value 1 for %v model when using QLoRA: request one GPU per node", model)))
		}
	}
	if lora, qlora := torchtuneMode(t.Args); nnodes > 1 && (lora || qlora) {
		errs = append(errs, field.Invalid(numNodes, nnodes,
			"LoRA fine-tuning is not supported for multi-node training in TorchTune: set spec.trainer.numNodes to 1 or drop the LoRA args"))
	}
	for i, arg := range t.Args {
		if key, _, _ := strings.Cut(arg, "="); slices.Contains(torchtuneRuntimeKeys, key) {
			errs = append(errs, field.Invalid(trainerPath.Child("args").Index(i), arg, fmt.Sprintf(
				"must not set immutable config %q in trainer args; it is managed by the runtime", key)))
		}
	}
	return errs
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
// fine-tuning mode the args select (docs/compatibility.md#torchtune).
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
