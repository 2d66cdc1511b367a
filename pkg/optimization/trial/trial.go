// Package trial turns an OptimizationJob's parameter assignments into trial TrainJobs
// and reads them back (KEP-3562): each trial is a TrainJob made from trainJobTemplate,
// owned by the OptimizationJob, named after it and its index, with each parameter as
// environment variable KUBEFLOW_TRAINER_OPT_<NAME> in spec.trainer.env and the whole
// assignment as a JSON annotation. The trials are the search's only record: the
// controller rebuilds its history from them (Read) after a restart.
package trial

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

const (
	// EnvPrefix starts the name of each parameter's environment variable in the
	// trainer: KUBEFLOW_TRAINER_OPT_<NAME>, NAME being the parameter's name in upper
	// case with every character but letters and digits replaced by '_' (KEP-3562).
	EnvPrefix = "KUBEFLOW_TRAINER_OPT_"
	// AnnotationParameters holds a trial's assignment as JSON, a list of {name, value}
	// in spec.parameters order: the trial's record of what it ran.
	AnnotationParameters = "trainyard.dev/trial-parameters"
	// LabelOptimizationJob names the OptimizationJob a trial belongs to (its owner
	// reference says the same by uid; the label lets `kubectl get trainjobs -l` find
	// them).
	LabelOptimizationJob = "trainyard.dev/optimization-job"
	// LabelIndex is the trial's index in the search, from 0: its assignment is the
	// search's Assignment(index).
	LabelIndex = "trainyard.dev/trial-index"
	// AnnotationTrialsCreated is the controller's record on an OptimizationJob of how
	// many trials it has created, a decimal integer: trials 0 to N-1 exist or existed.
	// A trial below N that is gone was deleted — cancelled, not created again — which
	// the trials alone cannot tell for the last ones. Written by the controller only
	// (a merge patch after it creates trials); admission refuses it on CREATE.
	AnnotationTrialsCreated = "trainyard.dev/trials-created"
)

// TrialsCreated returns job's AnnotationTrialsCreated, 0 when it is absent or not a
// whole number.
func TrialsCreated(job *trainer.OptimizationJob) int {
	n, err := strconv.Atoi(job.Annotations[AnnotationTrialsCreated])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// maxNameLength is a TrainJob name's limit (an RFC 1035 label: it names the JobSet and
// the pods' DNS subdomain).
const maxNameLength = 63

// Name returns the name of trial index of the OptimizationJob named job:
// "<job>-<index>", with job cut short and followed by 8 hex digits of its SHA-256 when
// the whole would pass 63 characters, so that two long names sharing a prefix do not
// share trials. The same job and index always give the same name: a controller that
// restarts mid-search finds its trial instead of creating it again.
func Name(job string, index int) string {
	suffix := "-" + strconv.Itoa(index)
	if len(job)+len(suffix) <= maxNameLength {
		return job + suffix
	}
	sum := sha256.Sum256([]byte(job))
	hash := "-" + hex.EncodeToString(sum[:4])
	keep := strings.TrimRight(job[:maxNameLength-len(suffix)-len(hash)], "-.")
	return keep + hash + suffix
}

// EnvName returns the trainer environment variable of parameter name (EnvPrefix).
func EnvName(name string) string {
	var b strings.Builder
	b.WriteString(EnvPrefix)
	for _, r := range strings.ToUpper(name) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// New returns trial index of job, running assignment: trainJobTemplate's labels,
// annotations and spec (deep-copied; never its finalizers, which would hold the trial
// back from the garbage collector — search.ValidateSpec refuses them), named Name(job.Name, index) in job's namespace, labelled
// LabelOptimizationJob and LabelIndex, annotated AnnotationParameters, controlled by
// job (deleting it deletes its trials), and with each parameter's variable set in
// spec.trainer.env (replacing one of that name the template sets). Errors: a TrainJob
// name that is not valid, or two parameters with one variable name.
func New(job *trainer.OptimizationJob, index int, assignment []trainer.ParameterAssignment) (*trainer.TrainJob, error) {
	tmpl := job.Spec.TrainJobTemplate.DeepCopy()
	record, err := json.Marshal(assignment)
	if err != nil {
		return nil, fmt.Errorf("encoding the assignment of trial %d: %w", index, err)
	}
	tj := &trainer.TrainJob{
		TypeMeta: metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind},
		ObjectMeta: metav1.ObjectMeta{
			Name: Name(job.Name, index), Namespace: job.Namespace,
			Labels: tmpl.Labels, Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, trainer.SchemeGroupVersion.WithKind(trainer.OptimizationJobKind))},
		},
		Spec: tmpl.Spec,
	}
	if tj.Labels == nil {
		tj.Labels = map[string]string{}
	}
	if tj.Annotations == nil {
		tj.Annotations = map[string]string{}
	}
	tj.Labels[LabelOptimizationJob] = LabelValue(job.Name)
	tj.Labels[LabelIndex] = strconv.Itoa(index)
	tj.Annotations[AnnotationParameters] = string(record)
	if tj.Spec.Trainer == nil {
		tj.Spec.Trainer = &trainer.Trainer{}
	}
	seen := map[string]string{}
	for _, a := range assignment {
		name := EnvName(a.Name)
		if other, ok := seen[name]; ok {
			return nil, fmt.Errorf("parameters %q and %q both set %s: rename one", other, a.Name, name)
		}
		seen[name] = a.Name
		tj.Spec.Trainer.Env = setEnv(tj.Spec.Trainer.Env, name, a.Value)
	}
	return tj, nil
}

// setEnv sets variable name to value in env, in place of an entry of that name.
func setEnv(env []corev1.EnvVar, name, value string) []corev1.EnvVar {
	for i := range env {
		if env[i].Name == name {
			env[i] = corev1.EnvVar{Name: name, Value: value}
			return env
		}
	}
	return append(env, corev1.EnvVar{Name: name, Value: value})
}

// LabelValue is name as a label value (LabelOptimizationJob): names longer than 63 characters (an
// OptimizationJob's may be) are cut, with a hash, as Name does.
func LabelValue(name string) string {
	if len(name) <= maxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:4])
	return strings.TrimRight(name[:maxNameLength-len(hash)-1], "-._") + "-" + hash
}

// Record is what a trial TrainJob says about itself.
type Record struct {
	// Index is the trial's index (LabelIndex).
	Index int
	// Parameters is its assignment (AnnotationParameters).
	Parameters []trainer.ParameterAssignment
}

// Read returns the record of trial tj, or an error naming the label or annotation that
// is missing or malformed (a TrainJob someone edited, or not a trial).
func Read(tj *trainer.TrainJob) (Record, error) {
	index, err := strconv.Atoi(tj.Labels[LabelIndex])
	if err != nil || index < 0 {
		return Record{}, fmt.Errorf("TrainJob %s/%s: label %s %q is not a trial index", tj.Namespace, tj.Name, LabelIndex, tj.Labels[LabelIndex])
	}
	var params []trainer.ParameterAssignment
	if err := json.Unmarshal([]byte(tj.Annotations[AnnotationParameters]), &params); err != nil {
		return Record{}, fmt.Errorf("TrainJob %s/%s: annotation %s: %w", tj.Namespace, tj.Name, AnnotationParameters, err)
	}
	return Record{Index: index, Parameters: params}, nil
}

// IsTrialOf reports whether job controls tj (by uid).
func IsTrialOf(tj *trainer.TrainJob, job *trainer.OptimizationJob) bool {
	ref := metav1.GetControllerOfNoCopy(tj)
	return ref != nil && ref.UID == job.UID && ptr.Deref(ref.Controller, false)
}
