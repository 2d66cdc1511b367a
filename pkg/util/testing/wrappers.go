package testing

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// Builders for the API objects the stages and informers read. Argument order is fixed
// as (namespace, name), as in upstream Trainer's wrappers. Every builder starts from the
// smallest valid object; Obj returns the object built so far (not a copy: take Clone()
// first to branch off a variant).

// IgnoreConditionTimes ignores metav1.Condition.LastTransitionTime, which stages stamp
// with the current time.
var IgnoreConditionTimes = cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")

// ConditionsDiff returns the cmp.Diff (-want +got) of two condition lists, ignoring
// LastTransitionTime and the order of the lists.
func ConditionsDiff(want, got []metav1.Condition) string {
	return cmp.Diff(want, got, IgnoreConditionTimes, cmpopts.EquateEmpty(),
		cmpopts.SortSlices(func(a, b metav1.Condition) bool { return a.Type < b.Type }))
}

// TrainJobWrapper builds a TrainJob.
type TrainJobWrapper struct{ trainer.TrainJob }

// MakeTrainJob returns a TrainJob ns/name with uid "<name>-uid", generation 1 and a
// runtimeRef to the ClusterTrainingRuntime "torch-distributed" with apiGroup and kind
// left unset (the CRD defaults apply).
func MakeTrainJob(ns, name string) *TrainJobWrapper {
	return &TrainJobWrapper{trainer.TrainJob{
		TypeMeta: metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID(name + "-uid"), Generation: 1,
		},
		Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: "torch-distributed"}},
	}}
}

// Obj returns the TrainJob.
func (w *TrainJobWrapper) Obj() *trainer.TrainJob { return &w.TrainJob }

// Clone returns a deep copy of the wrapper.
func (w *TrainJobWrapper) Clone() *TrainJobWrapper {
	return &TrainJobWrapper{*w.TrainJob.DeepCopy()}
}

// UID sets metadata.uid.
func (w *TrainJobWrapper) UID(uid types.UID) *TrainJobWrapper {
	w.ObjectMeta.UID = uid
	return w
}

// Generation sets metadata.generation.
func (w *TrainJobWrapper) Generation(g int64) *TrainJobWrapper {
	w.ObjectMeta.Generation = g
	return w
}

// Created sets metadata.creationTimestamp.
func (w *TrainJobWrapper) Created(t time.Time) *TrainJobWrapper {
	w.CreationTimestamp = metav1.NewTime(t)
	return w
}

// Deleting sets metadata.deletionTimestamp.
func (w *TrainJobWrapper) Deleting(t time.Time) *TrainJobWrapper {
	w.DeletionTimestamp = ptr.To(metav1.NewTime(t))
	return w
}

// RuntimeRef references the runtime kind/name in apiGroup trainer.kubeflow.org. An
// empty kind leaves both kind and apiGroup unset (the CRD defaults apply).
func (w *TrainJobWrapper) RuntimeRef(kind, name string) *TrainJobWrapper {
	w.Spec.RuntimeRef = trainer.RuntimeRef{Name: name}
	if kind != "" {
		w.Spec.RuntimeRef.Kind = ptr.To(kind)
		w.Spec.RuntimeRef.APIGroup = ptr.To(trainer.GroupName)
	}
	return w
}

// RuntimeRefGroup sets spec.runtimeRef.apiGroup.
func (w *TrainJobWrapper) RuntimeRefGroup(group string) *TrainJobWrapper {
	w.Spec.RuntimeRef.APIGroup = ptr.To(group)
	return w
}

// Suspend sets spec.suspend.
func (w *TrainJobWrapper) Suspend(s bool) *TrainJobWrapper {
	w.Spec.Suspend = ptr.To(s)
	return w
}

// ManagedBy sets spec.managedBy.
func (w *TrainJobWrapper) ManagedBy(m string) *TrainJobWrapper {
	w.Spec.ManagedBy = ptr.To(m)
	return w
}

// ActiveDeadlineSeconds sets spec.activeDeadlineSeconds.
func (w *TrainJobWrapper) ActiveDeadlineSeconds(s int64) *TrainJobWrapper {
	w.Spec.ActiveDeadlineSeconds = ptr.To(s)
	return w
}

// TTLSecondsAfterFinished sets spec.ttlSecondsAfterFinished.
func (w *TrainJobWrapper) TTLSecondsAfterFinished(s int32) *TrainJobWrapper {
	w.Spec.TTLSecondsAfterFinished = ptr.To(s)
	return w
}

// Trainer sets spec.trainer.
func (w *TrainJobWrapper) Trainer(t *trainer.Trainer) *TrainJobWrapper {
	w.Spec.Trainer = t
	return w
}

// Condition sets a status condition (replacing one of the same type).
func (w *TrainJobWrapper) Condition(c metav1.Condition) *TrainJobWrapper {
	for i := range w.Status.Conditions {
		if w.Status.Conditions[i].Type == c.Type {
			w.Status.Conditions[i] = c
			return w
		}
	}
	w.Status.Conditions = append(w.Status.Conditions, c)
	return w
}

// JobsStatus sets status.jobsStatus.
func (w *TrainJobWrapper) JobsStatus(js ...trainer.JobStatus) *TrainJobWrapper {
	w.Status.JobsStatus = js
	return w
}

// TrainerStatus sets status.trainerStatus.
func (w *TrainJobWrapper) TrainerStatus(ts *trainer.TrainerStatus) *TrainJobWrapper {
	w.Status.TrainerStatus = ts
	return w
}

// Condition returns a condition without a transition time.
func Condition(condType string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: status, Reason: reason, Message: message}
}

// JobStatus returns a TrainJob jobsStatus entry with every count set.
func JobStatus(name string, ready, succeeded, failed, active, suspended int32) trainer.JobStatus {
	return trainer.JobStatus{
		Name: name, Ready: ptr.To(ready), Succeeded: ptr.To(succeeded), Failed: ptr.To(failed),
		Active: ptr.To(active), Suspended: ptr.To(suspended),
	}
}

// MakeTrainingRuntime returns a TrainingRuntime ns/name, generation 1, whose template
// has one replicatedJob "node".
func MakeTrainingRuntime(ns, name string) *trainer.TrainingRuntime {
	return &trainer.TrainingRuntime{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainingRuntimeKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1},
		Spec:       runtimeSpec(),
	}
}

// MakeClusterTrainingRuntime returns a ClusterTrainingRuntime name, generation 1, whose
// template has one replicatedJob "node".
func MakeClusterTrainingRuntime(name string) *trainer.ClusterTrainingRuntime {
	return &trainer.ClusterTrainingRuntime{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.ClusterTrainingRuntimeKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec:       runtimeSpec(),
	}
}

func runtimeSpec() trainer.TrainingRuntimeSpec {
	return trainer.TrainingRuntimeSpec{Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
		ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: trainer.ReplicatedJobNode, Replicas: 1}},
	}}}
}

// JobSetWrapper builds a JobSet as the informer cache holds it.
type JobSetWrapper struct{ jobsetv1alpha2.JobSet }

// MakeJobSet returns a JobSet ns/name without owner.
func MakeJobSet(ns, name string) *JobSetWrapper {
	return &JobSetWrapper{jobsetv1alpha2.JobSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: "JobSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
	}}
}

// Obj returns the JobSet.
func (w *JobSetWrapper) Obj() *jobsetv1alpha2.JobSet { return &w.JobSet }

// Clone returns a deep copy of the wrapper.
func (w *JobSetWrapper) Clone() *JobSetWrapper {
	return &JobSetWrapper{*w.JobSet.DeepCopy()}
}

// ControlledBy makes tj the JobSet's controller owner, as the stages build it.
func (w *JobSetWrapper) ControlledBy(tj *trainer.TrainJob) *JobSetWrapper {
	w.OwnerReferences = append(w.OwnerReferences, metav1.OwnerReference{
		APIVersion: trainer.SchemeGroupVersion.String(), Kind: trainer.TrainJobKind,
		Name: tj.Name, UID: tj.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	})
	return w
}

// OwnerReference appends an owner reference.
func (w *JobSetWrapper) OwnerReference(ref metav1.OwnerReference) *JobSetWrapper {
	w.OwnerReferences = append(w.OwnerReferences, ref)
	return w
}

// Suspend sets spec.suspend.
func (w *JobSetWrapper) Suspend(s bool) *JobSetWrapper {
	w.Spec.Suspend = ptr.To(s)
	return w
}

// Annotation sets a metadata annotation.
func (w *JobSetWrapper) Annotation(k, v string) *JobSetWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
	return w
}

// ReplicatedJob appends a replicatedJob with the given Job template.
func (w *JobSetWrapper) ReplicatedJob(rj jobsetv1alpha2.ReplicatedJob) *JobSetWrapper {
	w.Spec.ReplicatedJobs = append(w.Spec.ReplicatedJobs, rj)
	return w
}

// Condition sets a status condition (replacing one of the same type).
func (w *JobSetWrapper) Condition(c metav1.Condition) *JobSetWrapper {
	for i := range w.Status.Conditions {
		if w.Status.Conditions[i].Type == c.Type {
			w.Status.Conditions[i] = c
			return w
		}
	}
	w.Status.Conditions = append(w.Status.Conditions, c)
	return w
}

// ReplicatedJobStatus appends a status.replicatedJobsStatus entry.
func (w *JobSetWrapper) ReplicatedJobStatus(name string, ready, succeeded, failed, active, suspended int32) *JobSetWrapper {
	w.Status.ReplicatedJobsStatus = append(w.Status.ReplicatedJobsStatus, jobsetv1alpha2.ReplicatedJobStatus{
		Name: name, Ready: ready, Succeeded: succeeded, Failed: failed, Active: active, Suspended: suspended,
	})
	return w
}

// Indexer returns a namespace-indexed cache.Indexer holding objs, as an informer's
// would after its initial list. Wrap it in a generated lister (e.g.
// trainerlisters.NewTrainJobLister) to give a stage its cache.
func Indexer(t testing.TB, objs ...runtime.Object) cache.Indexer {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, obj := range objs {
		if err := indexer.Add(obj); err != nil {
			t.Fatalf("seeding indexer: %v", err)
		}
	}
	return indexer
}
