package informers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

func TestRuntimeRefKey(t *testing.T) {
	cases := map[string]struct {
		kind, namespace, name string
		want                  string
	}{
		"TrainingRuntime is namespaced":                {trainer.TrainingRuntimeKind, "team-a", "torch", "TrainingRuntime/team-a/torch"},
		"ClusterTrainingRuntime ignores the namespace": {trainer.ClusterTrainingRuntimeKind, "team-a", "torch", "ClusterTrainingRuntime/torch"},
		"ClusterTrainingRuntime without namespace":     {trainer.ClusterTrainingRuntimeKind, "", "torch", "ClusterTrainingRuntime/torch"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := RuntimeRefKey(tc.kind, tc.namespace, tc.name); got != tc.want {
				t.Errorf("RuntimeRefKey(%q, %q, %q) = %q, want %q", tc.kind, tc.namespace, tc.name, got, tc.want)
			}
		})
	}
}

func TestIndexByRuntimeRef(t *testing.T) {
	tj := utiltesting.MakeTrainJob("team-a", "llm")
	cases := map[string]struct {
		obj  any
		want []string
	}{
		"apiGroup and kind unset: ClusterTrainingRuntime": {
			obj:  tj.Clone().RuntimeRef("", "torch").Obj(),
			want: []string{"ClusterTrainingRuntime/torch"},
		},
		"kind unset, apiGroup set: ClusterTrainingRuntime": {
			obj:  tj.Clone().RuntimeRef("", "torch").RuntimeRefGroup(trainer.GroupName).Obj(),
			want: []string{"ClusterTrainingRuntime/torch"},
		},
		"ClusterTrainingRuntime": {
			obj:  tj.Clone().RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").Obj(),
			want: []string{"ClusterTrainingRuntime/torch"},
		},
		"TrainingRuntime: in the TrainJob's namespace": {
			obj:  tj.Clone().RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj(),
			want: []string{"TrainingRuntime/team-a/torch"},
		},
		"TrainingRuntime with apiGroup unset": {
			obj: func() any {
				o := tj.Clone().RuntimeRef(trainer.TrainingRuntimeKind, "torch").Obj()
				o.Spec.RuntimeRef.APIGroup = nil
				return o
			}(),
			want: []string{"TrainingRuntime/team-a/torch"},
		},
		"unsupported kind: not indexed": {
			obj: tj.Clone().RuntimeRef("Foo", "torch").Obj(),
		},
		"unsupported apiGroup: not indexed": {
			obj: tj.Clone().RuntimeRef(trainer.TrainingRuntimeKind, "torch").RuntimeRefGroup("example.com").Obj(),
		},
		"empty apiGroup: not indexed": {
			obj: tj.Clone().RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").RuntimeRefGroup("").Obj(),
		},
		"not a TrainJob": {
			obj: utiltesting.MakeTrainingRuntime("team-a", "torch"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := indexByRuntimeRef(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("indexByRuntimeRef (-want +got):\n%s", diff)
			}
		})
	}
}

func TestControllerTrainJob(t *testing.T) {
	ref := func(apiVersion, kind, name string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: "u", Controller: ptr.To(controller)}
	}
	cases := map[string]struct {
		owners []metav1.OwnerReference
		want   string
	}{
		"no owner": {},
		"controlled by a TrainJob": {
			owners: []metav1.OwnerReference{ref("trainer.kubeflow.org/v1alpha1", "TrainJob", "llm", true)},
			want:   "llm",
		},
		"controller among other owners": {
			owners: []metav1.OwnerReference{
				ref("v1", "ConfigMap", "cm", false),
				ref("trainer.kubeflow.org/v1alpha1", "TrainJob", "llm", true),
			},
			want: "llm",
		},
		"owned by a TrainJob, not controlled": {
			owners: []metav1.OwnerReference{ref("trainer.kubeflow.org/v1alpha1", "TrainJob", "llm", false)},
		},
		"controlled by another kind": {
			owners: []metav1.OwnerReference{ref("batch/v1", "Job", "llm", true)},
		},
		"controlled by a TrainJob of another version": {
			owners: []metav1.OwnerReference{ref("trainer.kubeflow.org/v1", "TrainJob", "llm", true)},
		},
		"controlled by a TrainJob of another group": {
			owners: []metav1.OwnerReference{ref("example.com/v1alpha1", "TrainJob", "llm", true)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			js := utiltesting.MakeJobSet("team-a", "llm").Obj()
			js.OwnerReferences = tc.owners
			if got := ControllerTrainJob(js); got != tc.want {
				t.Errorf("ControllerTrainJob = %q, want %q", got, tc.want)
			}
			var want []string
			if tc.want != "" {
				want = []string{"team-a/" + tc.want}
			}
			got, err := indexByOwnerTrainJob(js)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("indexByOwnerTrainJob (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIndexByOwnerTrainJobIgnoresNonObjects(t *testing.T) {
	got, err := indexByOwnerTrainJob("not an object")
	if err != nil || got != nil {
		t.Errorf("indexByOwnerTrainJob(string) = %v, %v; want nil, nil", got, err)
	}
}

// fullJobSet is a JobSet as the API returns it: Job templates, managed fields, status.
func fullJobSet() *jobsetv1alpha2.JobSet {
	tj := utiltesting.MakeTrainJob("team-a", "llm").Obj()
	js := utiltesting.MakeJobSet("team-a", "llm").ControlledBy(tj).Suspend(true).
		Annotation("trainyard.dev/jobset-hash", "abc").
		Annotation(objectkeys.AnnotationRuntimeSnapshot, `{"kind":"ClusterTrainingRuntime"}`).
		// Kept by TrimJobSet: the build stage compares it with the live runtime's digest
		// and reads the snapshot from the API only when they differ.
		Annotation(objectkeys.AnnotationRuntimeSnapshotHash, "0123456789abcdef0123456789abcdef").
		ReplicatedJob(jobsetv1alpha2.ReplicatedJob{Name: "initializer", Replicas: 1, Template: jobTemplate("init")}).
		ReplicatedJob(jobsetv1alpha2.ReplicatedJob{Name: "node", Replicas: 4, Template: jobTemplate("node")}).
		Condition(utiltesting.Condition("Completed", metav1.ConditionTrue, "AllJobsCompleted", "done")).
		ReplicatedJobStatus("node", 1, 2, 3, 4, 0).Obj()
	js.Labels = map[string]string{"app": "llm"}
	js.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "trainyard", Operation: metav1.ManagedFieldsOperationApply}}
	js.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec.Volumes = []corev1.Volume{
		{Name: "mpi-ssh-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "llm-mpi-ssh-auth-abcdefghij", DefaultMode: ptr.To[int32](0o400),
			Items: []corev1.KeyToPath{{Key: "ssh-privatekey", Path: "id_rsa"}}}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "hf-token"}}},
		{Name: "mpi-hostfile", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "llm-mpi-hostfile"}}}},
	}
	return js
}

func jobTemplate(container string) batchv1.JobTemplateSpec {
	t := batchv1.JobTemplateSpec{}
	t.Labels = map[string]string{trainer.LabelTrainJobAncestor: "trainer"}
	t.Spec.Parallelism = ptr.To[int32](2)
	t.Spec.Template.Spec.Containers = []corev1.Container{{Name: container, Image: "pytorch:latest", Command: []string{"torchrun"}}}
	return t
}

// TestTrimJobSet: the cached JobSet keeps its metadata (without managedFields and the
// runtime snapshot), spec.suspend, its status, and of its replicatedJobs only the one
// that mounts the TrainJob's create-only Secret, by name; every other spec field goes.
func TestTrimJobSet(t *testing.T) {
	in := fullJobSet()
	in.Spec.Network = &jobsetv1alpha2.Network{EnableDNSHostnames: ptr.To(true), Subdomain: "llm"}
	in.Spec.SuccessPolicy = &jobsetv1alpha2.SuccessPolicy{Operator: jobsetv1alpha2.OperatorAll}
	in.Spec.FailurePolicy = &jobsetv1alpha2.FailurePolicy{MaxRestarts: 3}
	in.Spec.StartupPolicy = &jobsetv1alpha2.StartupPolicy{StartupPolicyOrder: jobsetv1alpha2.InOrder}
	in.Spec.TTLSecondsAfterFinished = ptr.To[int32](60)
	in.Status.Restarts = 2

	want := &jobsetv1alpha2.JobSet{
		TypeMeta:   in.TypeMeta,
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Spec: jobsetv1alpha2.JobSetSpec{
			Suspend: ptr.To(true),
			// Only the replicatedJob mounting the TrainJob's create-only Secret stays,
			// with that volume by name: a restart of this JobSet must rebuild the
			// TrainJob (MountsSideObjectSecret).
			ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node", Replicas: 4}},
		},
		Status: *in.Status.DeepCopy(),
	}
	want.ManagedFields = nil
	delete(want.Annotations, objectkeys.AnnotationRuntimeSnapshot)
	want.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "mpi-ssh-auth",
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "llm-mpi-ssh-auth-abcdefghij"}}}}

	out, err := TrimJobSet(in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("TrimJobSet (-want +got):\n%s", diff)
	}
}

// TestTrimJobSetNoSideObjectSecret: a JobSet whose pods mount none of the TrainJob's
// Secrets (every runtime but MPI and Flux) is cached without replicatedJobs.
func TestTrimJobSetNoSideObjectSecret(t *testing.T) {
	in := fullJobSet()
	in.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec.Volumes = nil
	out, err := TrimJobSet(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*jobsetv1alpha2.JobSet).Spec.ReplicatedJobs; got != nil {
		t.Errorf("cached replicatedJobs = %+v, want none", got)
	}
}

// TestTrimmedJobSetReaders: every reader of the JobSet cache in this package answers on
// the trimmed JobSet as on the JobSet the API server holds. A reader that starts using
// a field TrimJobSet drops fails here (the status stage's readers are checked in
// package status, TestComputeStatusOnTrimmedJobSet).
func TestTrimmedJobSetReaders(t *testing.T) {
	tj := utiltesting.MakeTrainJob("team-a", "llm").Obj()
	tj.Generation = 3
	running := utiltesting.MakeJobSet("team-a", "llm").ControlledBy(tj).Suspend(false).
		Annotation(objectkeys.AnnotationTrainJobGeneration, "3").
		ReplicatedJob(jobsetv1alpha2.ReplicatedJob{Name: "node", Replicas: 2, Template: jobTemplate("node")}).
		ReplicatedJobStatus("node", 0, 0, 0, 2, 0).Obj()
	stale := running.DeepCopy()
	stale.Annotations[objectkeys.AnnotationTrainJobGeneration] = "2"
	suspended := stale.DeepCopy()
	suspended.Spec.Suspend = ptr.To(true)
	completed := running.DeepCopy()
	completed.Status.Conditions = []metav1.Condition{utiltesting.Condition("Completed", metav1.ConditionTrue, "AllJobsCompleted", "done")}
	mpi := fullJobSet()
	mpi.Annotations[objectkeys.AnnotationTrainJobGeneration] = "3"
	foreign := running.DeepCopy()
	foreign.OwnerReferences = nil

	jobSets := map[string]*jobsetv1alpha2.JobSet{"running": running, "stale": stale, "suspended": suspended,
		"completed": completed, "mpi": mpi, "foreign": foreign}
	for name, js := range jobSets {
		t.Run(name, func(t *testing.T) {
			trimmed, err := TrimJobSet(js.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			answers := func(js *jobsetv1alpha2.JobSet) []any {
				lister := jobsetlisters.NewJobSetLister(indexerOf(t, js))
				exists := func(*trainer.TrainJob) bool { return true }
				return []any{
					Built(tj, lister), RuntimeMayAffect(tj, lister), JobSetLags(tj, lister, exists),
					MountsSideObjectSecret(js), jobSetFinished(js), metav1.IsControlledBy(js, tj),
					ControllerTrainJob(js),
				}
			}
			if diff := cmp.Diff(answers(js), answers(trimmed.(*jobsetv1alpha2.JobSet))); diff != "" {
				t.Errorf("readers answer differently on the trimmed JobSet (-full +trimmed):\n%s", diff)
			}
		})
	}
}

// indexerOf returns an indexer holding objs.
func indexerOf(t *testing.T, objs ...any) cache.Indexer {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, obj := range objs {
		if err := indexer.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	return indexer
}

func TestTrimJobSetOtherObjects(t *testing.T) {
	tj := utiltesting.MakeTrainJob("team-a", "llm").Obj()
	tj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	want := tj.DeepCopy()
	want.ManagedFields = nil
	out, err := TrimJobSet(tj)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("TrimJobSet(TrainJob) (-want +got):\n%s", diff)
	}

	tombstone := cache.DeletedFinalStateUnknown{Key: "team-a/llm", Obj: fullJobSet()}
	out, err = TrimJobSet(tombstone)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tombstone, out); diff != "" {
		t.Errorf("TrimJobSet(tombstone) changed it (-want +got):\n%s", diff)
	}
}

func TestStripManagedFields(t *testing.T) {
	rt := utiltesting.MakeClusterTrainingRuntime("torch")
	rt.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	want := rt.DeepCopy()
	want.ManagedFields = nil
	out, err := StripManagedFields(rt)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("StripManagedFields (-want +got):\n%s", diff)
	}
	if out, err := StripManagedFields("no metadata"); err != nil || out != "no metadata" {
		t.Errorf("StripManagedFields(string) = %v, %v", out, err)
	}
}

// TestStripClientMetadata: kubectl's last-applied-configuration annotation and
// managedFields go; every other annotation, the labels, spec and status stay.
func TestStripClientMetadata(t *testing.T) {
	lastApplied := `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"llm"}}`
	tj := utiltesting.MakeTrainJob("team-a", "llm").Suspend(true).
		Condition(utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, "Suspended", "")).Obj()
	tj.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}
	tj.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: lastApplied, "team": "a"}
	tj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	want := tj.DeepCopy()
	want.ManagedFields = nil
	want.Annotations = map[string]string{"team": "a"}

	out, err := StripClientMetadata(tj)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("StripClientMetadata(TrainJob) (-want +got):\n%s", diff)
	}

	// A runtime applied with kubectl keeps no annotation at all.
	rt := utiltesting.MakeClusterTrainingRuntime("torch")
	rt.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: lastApplied}
	wantRT := rt.DeepCopy()
	wantRT.Annotations = nil
	if out, err := StripClientMetadata(rt); err != nil || !cmp.Equal(wantRT, out) {
		t.Errorf("StripClientMetadata(ClusterTrainingRuntime) (-want +got):\n%s", cmp.Diff(wantRT, out))
	}

	tombstone := cache.DeletedFinalStateUnknown{Key: "team-a/llm", Obj: tj}
	if out, err := StripClientMetadata(tombstone); err != nil || !cmp.Equal(tombstone, out) {
		t.Errorf("StripClientMetadata(tombstone) = %v, %v; want it unchanged", out, err)
	}
}
