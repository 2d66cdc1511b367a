package mlpolicy

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// Env vars XGBoost's collective (Rabit) tracker and workers read.
const (
	envDMLCTrackerURI  = "DMLC_TRACKER_URI"
	envDMLCTrackerPort = "DMLC_TRACKER_PORT"
	envDMLCTaskID      = "DMLC_TASK_ID"
	envDMLCNumWorker   = "DMLC_NUM_WORKER"
)

type xgboost struct{}

// XGBoost returns the mlPolicy.xgboost plugin (docs/compatibility.md#xgboost): trainer
// count from spec.trainer.numNodes, DMLC_* env and port 29500 on the trainer "node"
// container. Each node runs one worker per GPU, or one when it has none.
//
// Upstream quirk 1 (docs/compatibility.md#upstream-quirks), not reproduced: the env and
// port are injected even when the TrainJob has no spec.trainer (see the package doc).
func XGBoost() Plugin { return xgboost{} }

func (xgboost) Name() string { return "XGBoost" }

func (xgboost) Enabled(p *trainer.MLPolicy) bool { return p != nil && p.XGBoost != nil }

// xgboostReservedEnv are the variables the plugin sets.
var xgboostReservedEnv = []string{envDMLCTrackerURI, envDMLCTrackerPort, envDMLCTaskID, envDMLCNumWorker}

// ValidateRuntime implements Plugin: XGBoost needs nothing of the runtime.
func (xgboost) ValidateRuntime(*trainer.TrainingRuntimeSpec) field.ErrorList { return nil }

// ValidateTrainJob implements Plugin: spec.trainer.numProcPerNode other than 1 is
// rejected (onePerNode), and each spec.trainer.env[i] named DMLC_TRACKER_URI,
// DMLC_TRACKER_PORT, DMLC_TASK_ID or DMLC_NUM_WORKER is Forbidden at
// spec.trainer.env[i]: "<NAME> is reserved for the XGBoost runtime" (upstream's
// admission rule and text, docs/compatibility.md#xgboost).
func (xgboost) ValidateTrainJob(tj *trainer.TrainJob, p *plan.Plan) field.ErrorList {
	errs := onePerNode(tj, p.Runtime, "xgboost", "one worker per GPU (one on a node without GPUs)")
	if t := tj.Spec.Trainer; t != nil {
		for i, e := range t.Env {
			if slices.Contains(xgboostReservedEnv, e.Name) {
				errs = append(errs, field.Forbidden(trainerPath.Child("env").Index(i), fmt.Sprintf(
					"%s is reserved for the XGBoost runtime: mlPolicy.xgboost sets it; remove it from spec.trainer.env", e.Name)))
			}
		}
	}
	return errs
}

// Apply implements Plugin. It does not fail.
func (xgboost) Apply(tj *trainer.TrainJob, p *plan.Plan) error {
	js := p.JobSet
	if plan.TrainerJob(js) == nil {
		return nil
	}
	overrideTrainerCount(tj, js)
	c := trainerContainer(js)
	if c == nil {
		return nil
	}
	workersPerNode := max(gpuCount(nodeResources(tj, js)), 1)
	c.Env = plan.UpsertEnv(c.Env,
		corev1.EnvVar{Name: envDMLCTrackerURI, Value: coordinatorHost(js)},
		corev1.EnvVar{Name: envDMLCTrackerPort, Value: rendezvousPortString},
		plan.CompletionIndexEnv(envDMLCTaskID),
		corev1.EnvVar{Name: envDMLCNumWorker, Value: strconv.FormatInt(int64(trainerCount(js))*workersPerNode, 10)},
	)
	c.Ports = plan.UpsertPort(c.Ports, rendezvousPort)
	return nil
}
