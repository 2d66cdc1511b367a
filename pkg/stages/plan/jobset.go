package plan

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Navigation and upsert helpers over the desired JobSet, shared by the stages that
// build it (merge patches, ML policy, gang scheduling, DRA claims). They work on the
// typed JobSet in place and never allocate when there is nothing to change.

// Ancestor returns the trainer.kubeflow.org/trainjob-ancestor-step label of rj's Job
// template ("dataset-initializer", "model-initializer", "trainer"), or "" when absent.
func Ancestor(rj *jobsetv1alpha2.ReplicatedJob) string {
	return rj.Template.Labels[trainer.LabelTrainJobAncestor]
}

// TrainerJob returns the first replicatedJob whose ancestor is "trainer", or nil. This
// is upstream's "trainer PodSet" (docs/compatibility.md#ml-policies): the ML policies
// size and configure only this one.
func TrainerJob(js *jobsetv1alpha2.JobSet) *jobsetv1alpha2.ReplicatedJob {
	for i := range js.Spec.ReplicatedJobs {
		if Ancestor(&js.Spec.ReplicatedJobs[i]) == trainer.AncestorTrainer {
			return &js.Spec.ReplicatedJobs[i]
		}
	}
	return nil
}

// ReplicatedJob returns the replicatedJob named name, or nil.
func ReplicatedJob(js *jobsetv1alpha2.JobSet, name string) *jobsetv1alpha2.ReplicatedJob {
	for i := range js.Spec.ReplicatedJobs {
		if js.Spec.ReplicatedJobs[i].Name == name {
			return &js.Spec.ReplicatedJobs[i]
		}
	}
	return nil
}

// PodSpec returns the pod spec of rj's Job template.
func PodSpec(rj *jobsetv1alpha2.ReplicatedJob) *corev1.PodSpec {
	return &rj.Template.Spec.Template.Spec
}

// Container returns the first container named name in cs, or nil.
func Container(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// ContainerNames returns the names of cs in order, for error messages.
func ContainerNames(cs []corev1.Container) []string {
	names := make([]string, len(cs))
	for i := range cs {
		names[i] = cs[i].Name
	}
	return names
}

// Count returns the number of pods of each Job of rj: its parallelism, 1 when unset
// (the Job default).
func Count(rj *jobsetv1alpha2.ReplicatedJob) int32 {
	if p := rj.Template.Spec.Parallelism; p != nil {
		return *p
	}
	return 1
}

// SetCount sets both parallelism and completions of rj to n. Every replicatedJob of a
// Trainyard JobSet carries both explicitly and equal
// (docs/compatibility.md#plugin-order PreBuildSync); Kueue derives its pod counts from
// them.
func SetCount(rj *jobsetv1alpha2.ReplicatedJob, n int32) {
	spec := &rj.Template.Spec
	if spec.Parallelism == nil || *spec.Parallelism != n {
		spec.Parallelism = &n
	}
	if spec.Completions == nil || *spec.Completions != n {
		spec.Completions = &n
	}
}

// Subdomain returns the DNS subdomain of js's pods: spec.network.subdomain when set,
// else the JobSet name (JobSet's headless Service).
func Subdomain(js *jobsetv1alpha2.JobSet) string {
	if n := js.Spec.Network; n != nil && n.Subdomain != "" {
		return n.Subdomain
	}
	return js.Name
}

// Endpoint returns the stable DNS name JobSet gives pod podIndex of Job jobIndex of the
// replicatedJob rjName: "<jobset>-<rjName>-<jobIndex>-<podIndex>.<subdomain>"
// (docs/compatibility.md#plugin-order endpoints).
func Endpoint(js *jobsetv1alpha2.JobSet, rjName string, jobIndex, podIndex int) string {
	return js.Name + "-" + rjName + "-" + strconv.Itoa(jobIndex) + "-" + strconv.Itoa(podIndex) + "." + Subdomain(js)
}

// UpsertEnv sets each of vars in env by name: an entry with the same name is replaced
// in place, otherwise the variable is appended (docs/compatibility.md#the-build-model
// "upsert env"). The stored entries are deep copies, so callers may pass values they do
// not own.
func UpsertEnv(env []corev1.EnvVar, vars ...corev1.EnvVar) []corev1.EnvVar {
	for i := range vars {
		v := *vars[i].DeepCopy()
		if j := envIndex(env, v.Name); j >= 0 {
			env[j] = v
		} else {
			env = append(env, v)
		}
	}
	return env
}

func envIndex(env []corev1.EnvVar, name string) int {
	for i := range env {
		if env[i].Name == name {
			return i
		}
	}
	return -1
}

// UpsertPort sets port in ports: an entry with the same containerPort, or with the same
// non-empty name, is replaced in place; otherwise port is appended.
//
// Upstream also treats two unnamed ports as the same port, so adding the unnamed
// rendezvous port replaces whatever unnamed port the runtime declared first (quirk
// docs/compatibility.md#upstream-quirks (quirk 16)). Trainyard does not: silently
// dropping a runtime's port (say, a metrics port) is a bug, and ports do not enter
// Kueue's pod-count model.
func UpsertPort(ports []corev1.ContainerPort, port corev1.ContainerPort) []corev1.ContainerPort {
	for i := range ports {
		if ports[i].ContainerPort == port.ContainerPort || (port.Name != "" && ports[i].Name == port.Name) {
			ports[i] = port
			return ports
		}
	}
	return append(ports, port)
}

// MergeResources merges src into dst the way a strategic merge patch of src onto dst
// would, except that claims merge by name: limits and requests per resource name and
// claims per claim name, src winning; entries only in dst are kept. Values are copied.
func MergeResources(dst *corev1.ResourceRequirements, src *corev1.ResourceRequirements) {
	dst.Limits = mergeResourceList(dst.Limits, src.Limits)
	dst.Requests = mergeResourceList(dst.Requests, src.Requests)
	dst.Claims = UpsertResourceClaims(dst.Claims, src.Claims...)
}

func mergeResourceList(dst, src corev1.ResourceList) corev1.ResourceList {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(corev1.ResourceList, len(src))
	}
	for name, q := range src {
		dst[name] = q.DeepCopy()
	}
	return dst
}

// UpsertResourceClaims sets each of claims in list by name: an entry with the same name
// is replaced in place, otherwise the claim is appended. core/v1
// ResourceRequirements.claims has no patch strategy (a strategic merge replaces the
// whole list), so the builders merge claims with this instead.
func UpsertResourceClaims(list []corev1.ResourceClaim, claims ...corev1.ResourceClaim) []corev1.ResourceClaim {
outer:
	for _, c := range claims {
		for i := range list {
			if list[i].Name == c.Name {
				list[i] = c
				continue outer
			}
		}
		list = append(list, c)
	}
	return list
}

// CompletionIndexEnv returns an env var named name whose value is the pod's Job
// completion index (its rank within the replicatedJob), read with the downward API.
func CompletionIndexEnv(name string) corev1.EnvVar {
	return corev1.EnvVar{
		Name: name,
		ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: trainer.JobCompletionIndexFieldPath},
		},
	}
}
