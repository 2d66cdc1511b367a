// Package admissiontest is the table of admission rules: for every rule of the
// TrainJob, TrainingRuntime and ClusterTrainingRuntime webhooks (upstream's,
// docs/compatibility.md#admission-rules, and Trainyard's own), and for the
// OptimizationJob webhook's rules the CRD does not enforce itself
// (docs/compatibility.md#optimizationjob-validation), an object that breaks it, the
// objects that must exist first, and what the answer must say; and for every admission
// warning, an object that earns it.
//
// The same table is proven twice: package admission's unit tests run each case through
// the rules with caches holding Existing, and the e2e tests (e2e/trainjob) send each
// Object with `kubectl apply` to a real API server, which calls the controller's
// webhooks over 127.0.0.1. A rule added here is therefore tested in both places.
package admissiontest

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Object is an API object of the table: a TrainJob, TrainingRuntime,
// ClusterTrainingRuntime, OptimizationJob, PriorityClass or ResourceClaim, with its TypeMeta set (so it
// serialises to what `kubectl apply -f` reads).
type Object interface {
	runtime.Object
	metav1.Object
}

// Case is one admission rule or warning, proven by one object sent for CREATE.
type Case struct {
	// Name names the rule, starting with the kind it applies to, e.g. "TrainJob:
	// runtimePatches[].manager not a domain-prefixed path".
	Name string
	// Existing are the objects that must exist, and be in the controller's caches,
	// before Object is sent. A runtime that breaks a runtime rule (to prove the
	// TrainJob rule that reports it) carries LabelWebhookValidation=disabled so that it
	// can be created. Two cases that name the same object give it the same content.
	Existing []Object
	// Object is the object sent; its name is unique in the table.
	Object Object
	// Errors are the violations of the answer, in any order; none when it is admitted.
	Errors []Violation
	// Message is part of the answer's message (every violation, aggregated); "" when
	// admitted.
	Message string
	// Warnings are parts of the answer's warnings, one per warning, in order.
	Warnings []string
}

// Violation is one field error of a refusal.
type Violation struct {
	Type field.ErrorType
	// Field is the path of the field the message names, e.g. "spec.trainer.env".
	Field string
}

// String is "<type>: <field>", e.g. "FieldValueInvalid: spec.trainer.env".
func (v Violation) String() string { return string(v.Type) + ": " + v.Field }

// InMessage is how the violation starts in the refusal's message, as field.Error
// prints it: "<field>: <type's text>", e.g. "spec.trainer.env: Invalid value".
func (v Violation) InMessage() string { return v.Field + ": " + v.Type.String() }

// Strings returns the String of each violation of vs, sorted.
func Strings(vs []Violation) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.String())
	}
	sort.Strings(out)
	return out
}

// LabelWebhookValidation = "disabled" on a runtime opts it out of the runtime webhooks
// (upstream's objectSelector, docs/compatibility.md#admission-rules; package
// admission's constant of the same name).
const LabelWebhookValidation = "trainer.kubeflow.org/webhook-validation"

// VolcanoQueueAnnotation names a Volcano runtime's queue (package volcano's
// AnnotationQueueName; not imported, to keep the e2e module's dependencies those of the
// API types).
const VolcanoQueueAnnotation = "scheduling.volcano.sh/queue-name"

// DeviceClassName is the DeviceClass the table's ResourceClaims ask devices of: the
// local control plane's fake GPUs (e2e/cluster.DeviceClassName).
const DeviceClassName = "gpu.trainyard.dev"

func invalid(path string) Violation   { return Violation{field.ErrorTypeInvalid, path} }
func forbidden(path string) Violation { return Violation{field.ErrorTypeForbidden, path} }

// builder makes the table's objects for one namespace.
type builder struct{ ns string }

// clusterName is the name of a cluster-scoped object of the table: prefixed with the
// namespace, so that tables of two namespaces share one cluster.
func (b builder) clusterName(name string) string { return b.ns + "-" + name }

// runtime returns the TrainingRuntime name with spec.
func (b builder) runtime(name string, spec *trainer.TrainingRuntimeSpec) *trainer.TrainingRuntime {
	return &trainer.TrainingRuntime{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainingRuntimeKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec:       *spec,
	}
}

// clusterRuntime returns the ClusterTrainingRuntime clusterName(name) with spec.
func (b builder) clusterRuntime(name string, spec *trainer.TrainingRuntimeSpec) *trainer.ClusterTrainingRuntime {
	return &trainer.ClusterTrainingRuntime{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.ClusterTrainingRuntimeKind},
		ObjectMeta: metav1.ObjectMeta{Name: b.clusterName(name)},
		Spec:       *spec,
	}
}

// trainJob returns the TrainJob name of the TrainingRuntime runtimeName, with t as
// spec.trainer.
func (b builder) trainJob(name, runtimeName string, t *trainer.Trainer) *trainer.TrainJob {
	return &trainer.TrainJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: runtimeName, APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.TrainingRuntimeKind)},
			Trainer:    t,
		},
	}
}

// ofClusterRuntime makes tj reference the ClusterTrainingRuntime clusterName(name).
func (b builder) ofClusterRuntime(tj *trainer.TrainJob, name string) *trainer.TrainJob {
	tj.Spec.RuntimeRef.Kind = ptr.To(trainer.ClusterTrainingRuntimeKind)
	tj.Spec.RuntimeRef.Name = b.clusterName(name)
	return tj
}

// priorityClass returns the PriorityClass clusterName(name).
func (b builder) priorityClass(name string) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: schedulingv1.SchemeGroupVersion.String(), Kind: "PriorityClass"},
		ObjectMeta: metav1.ObjectMeta{Name: b.clusterName(name)},
		Value:      1000,
	}
}

// resourceClaim returns the ResourceClaim name, shared by every pod that names it,
// asking for n devices of DeviceClassName.
func (b builder) resourceClaim(name string, n int64) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpus",
			Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: DeviceClassName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n,
			},
		}}}},
	}
}

// disabled labels a runtime LabelWebhookValidation=disabled and returns it.
func disabled[T metav1.Object](obj T) T {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelWebhookValidation] = "disabled"
	obj.SetLabels(labels)
	return obj
}

// podPatch returns a runtime patch of manager that patches replicatedJob rj's pod spec.
func podPatch(manager, rj string, spec trainer.PodSpecPatch) trainer.RuntimePatch {
	return trainer.RuntimePatch{Manager: manager, TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
		Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
			Name: rj, Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: &spec}}},
		}}}},
	}}
}

// patchPath is the path of replicatedJob rj of manager's runtime patch.
func patchPath(manager, rj string) string {
	return fmt.Sprintf("spec.runtimePatches[manager=%s].trainingRuntimeSpec.template.spec.replicatedJobs[name=%s]", manager, rj)
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// Check reports the problems of a table: an Object named twice, or an object of
// Existing that two cases give different contents (the e2e tests create each once).
// equal compares two objects' contents.
func Check(cases []Case, equal func(a, b Object) bool) []string {
	var problems []string
	key := func(o Object) string {
		return fmt.Sprintf("%s %s/%s", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName())
	}
	sent := map[string]string{}
	existing := map[string]Object{}
	for _, c := range cases {
		k := key(c.Object)
		if prev, ok := sent[k]; ok {
			problems = append(problems, fmt.Sprintf("%q and %q both send %s", prev, c.Name, k))
		}
		sent[k] = c.Name
		for _, o := range c.Existing {
			k := key(o)
			if prev, ok := existing[k]; ok && !equal(prev, o) {
				problems = append(problems, fmt.Sprintf("%q gives %s other contents than an earlier case", c.Name, k))
			}
			existing[k] = o
		}
	}
	for _, c := range cases {
		if k := key(c.Object); existing[k] != nil {
			problems = append(problems, fmt.Sprintf("%q sends %s, which another case needs to exist", c.Name, k))
		}
		if !strings.Contains(c.Name, ": ") {
			problems = append(problems, fmt.Sprintf("case %q: name it \"<Kind>: <rule>\"", c.Name))
		}
	}
	return problems
}
