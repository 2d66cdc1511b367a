package informers

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
)

// The cache transforms intern the strings that repeat from one cached object to the
// next: each JSON decoding allocates its own copy of every string, so 50,000 finished
// TrainJobs held 50,000 copies of "trainer.kubeflow.org/v1alpha1", of their runtime's
// name, of "AllJobsCompleted" (docs/design/memory.md, "Interning"). Interned, equal
// strings share one canonical backing array (the standard library's unique package,
// which drops a canonical copy once no string refers to it). Only strings of a small
// vocabulary are interned — keys, API versions and kinds, runtime names, condition
// types, statuses and reasons, replicatedJob names, known annotation values — never
// names, UIDs, messages or user-chosen values, which are distinct per object and would
// each add an entry to the canonical map for nothing. Strings are immutable, so
// sharing them between cached objects changes no reader; the values are unchanged.

// intern returns the canonical copy of s ("" as is).
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// internedAnnotationValues are the annotations whose values repeat across objects: the
// digest of the runtime a JobSet was built from (one per runtime generation) and the
// TrainJob generation it was built for (small numbers).
var internedAnnotationValues = map[string]bool{
	objectkeys.AnnotationRuntimeSnapshotHash: true,
	objectkeys.AnnotationTrainJobGeneration:  true,
}

// internObjectMeta interns m's namespace, its label and annotation keys, the values of
// internedAnnotationValues, its owner references' apiVersion and kind, and its
// finalizers. The label and annotation maps are rebuilt with the interned keys.
func internObjectMeta(m *metav1.ObjectMeta) {
	m.Namespace = intern(m.Namespace)
	if m.Labels != nil {
		labels := make(map[string]string, len(m.Labels))
		for k, v := range m.Labels {
			labels[intern(k)] = v
		}
		m.Labels = labels
	}
	if m.Annotations != nil {
		annotations := make(map[string]string, len(m.Annotations))
		for k, v := range m.Annotations {
			if internedAnnotationValues[k] {
				v = intern(v)
			}
			annotations[intern(k)] = v
		}
		m.Annotations = annotations
	}
	for i := range m.OwnerReferences {
		ref := &m.OwnerReferences[i]
		ref.APIVersion, ref.Kind = intern(ref.APIVersion), intern(ref.Kind)
	}
	for i := range m.Finalizers {
		m.Finalizers[i] = intern(m.Finalizers[i])
	}
}

// internConditions interns the type, status and reason of each condition; messages
// carry per-object detail and stay as they are.
func internConditions(conditions []metav1.Condition) {
	for i := range conditions {
		c := &conditions[i]
		c.Type, c.Status, c.Reason = intern(c.Type), metav1.ConditionStatus(intern(string(c.Status))), intern(c.Reason)
	}
}

// internTrainJob interns tj's metadata (internObjectMeta), its runtimeRef (name, apiGroup,
// kind), managedBy, and in its status the conditions' types, statuses and reasons and
// the jobsStatus names (replicatedJob names).
func internTrainJob(tj *trainer.TrainJob) {
	internObjectMeta(&tj.ObjectMeta)
	ref := &tj.Spec.RuntimeRef
	ref.Name = intern(ref.Name)
	internPointee(ref.APIGroup)
	internPointee(ref.Kind)
	internPointee(tj.Spec.ManagedBy)
	internConditions(tj.Status.Conditions)
	for i := range tj.Status.JobsStatus {
		tj.Status.JobsStatus[i].Name = intern(tj.Status.JobsStatus[i].Name)
	}
}

// internJobSet interns js's metadata (internObjectMeta), the names of the replicatedJobs
// the cache keeps, and in its status the conditions' types, statuses and reasons, the
// replicatedJobsStatus names and the terminal state.
func internJobSet(js *jobsetv1alpha2.JobSet) {
	internObjectMeta(&js.ObjectMeta)
	for i := range js.Spec.ReplicatedJobs {
		js.Spec.ReplicatedJobs[i].Name = intern(js.Spec.ReplicatedJobs[i].Name)
	}
	internConditions(js.Status.Conditions)
	for i := range js.Status.ReplicatedJobsStatus {
		js.Status.ReplicatedJobsStatus[i].Name = intern(js.Status.ReplicatedJobsStatus[i].Name)
	}
	js.Status.TerminalState = intern(js.Status.TerminalState)
}

// internPointee sets *p to its interned copy; a nil p is left alone. The pointer itself
// stays the object's own: only the string data is shared.
func internPointee(p *string) {
	if p != nil {
		*p = intern(*p)
	}
}
