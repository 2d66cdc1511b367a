package informers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerscheme "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/scheme"
)

// apiServerFinishedTrainJob returns a finished TrainJob as the API server sends it
// (compact JSON): the scale benchmark's TrainJob (a torch runtime, two nodes, a
// ttlSecondsAfterFinished) with the defaults the CRD schema sets, the controller's
// status of a completed JobSet (Complete copied from its Completed condition,
// jobsStatus of its one replicatedJob) and the managedFields of the client's create
// and the controller's status apply.
func apiServerFinishedTrainJob(t testing.TB) []byte {
	t.Helper()
	created := metav1.NewTime(time.Date(2026, 11, 28, 14, 11, 55, 0, time.UTC))
	finished := metav1.NewTime(created.Add(12 * time.Second))
	fields := func(manager string, op metav1.ManagedFieldsOperationType, sub, set string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: trainer.SchemeGroupVersion.String(),
			Time: &finished, FieldsType: "FieldsV1", Subresource: sub, FieldsV1: &metav1.FieldsV1{Raw: []byte(set)}}
	}
	tj := &trainer.TrainJob{
		TypeMeta: metav1.TypeMeta{APIVersion: trainer.SchemeGroupVersion.String(), Kind: "TrainJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "ddp-digits-75110", Namespace: "default", UID: "db109e47-dc4f-4cf1-b407-749d382a9865",
			ResourceVersion: "361", Generation: 1, CreationTimestamp: created,
			ManagedFields: []metav1.ManagedFieldsEntry{
				fields("bench", metav1.ManagedFieldsOperationUpdate, "",
					`{"f:spec":{".":{},"f:runtimeRef":{".":{},"f:name":{}},"f:trainer":{".":{},"f:command":{},"f:numNodes":{}},"f:ttlSecondsAfterFinished":{}}}`),
				fields("trainyard", metav1.ManagedFieldsOperationApply, "status",
					`{"f:status":{"f:conditions":{"k:{\"type\":\"Complete\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:jobsStatus":{"k:{\"name\":\"node\"}":{".":{},"f:active":{},"f:failed":{},"f:name":{},"f:ready":{},"f:succeeded":{},"f:suspended":{}}}}}`),
			}},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: "torch-distributed", APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.ClusterTrainingRuntimeKind)},
			Trainer:    &trainer.Trainer{NumNodes: ptr.To[int32](2), Command: []string{"torchrun", "train.py"}},
			ManagedBy:  ptr.To("trainer.kubeflow.org/trainjob-controller"), Suspend: ptr.To(false),
			TTLSecondsAfterFinished: ptr.To[int32](3600),
		},
		Status: trainer.TrainJobStatus{
			Conditions: []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue,
				Reason: "AllJobsCompleted", Message: "jobset completed successfully", LastTransitionTime: finished}},
			JobsStatus: []trainer.JobStatus{{Name: "node", Ready: ptr.To[int32](0), Succeeded: ptr.To[int32](2),
				Failed: ptr.To[int32](0), Active: ptr.To[int32](0), Suspended: ptr.To[int32](0)}},
		},
	}
	data, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// BenchmarkCachedObjectBytes is the live heap one object costs in the controller's
// caches, as a watch delivers it: decoded by the client's serializer (the generated
// one for TrainJobs, NewJobSetWatchClient's for JobSets), transformed as the informer
// transforms it, stored in an indexer with the indexes New gives its informers (the
// generated factory's namespace index, trainJobIndexers). Reported per
// object: B/object, the heap allocated and still live after a garbage collection;
// allocs/object, the heap objects among them. The input is a finished TrainJob
// (apiServerFinishedTrainJob) and the completed JobSet of testdata/jobset.json, each
// object with its own name, UID and resourceVersion so that nothing is shared between
// them that would not be in a cluster.
func BenchmarkCachedObjectBytes(b *testing.B) {
	const objects = 10000
	jobSetSerializer, err := jobSetWatchSerializer()
	if err != nil {
		b.Fatal(err)
	}
	for _, kind := range []struct {
		name      string
		data      []byte
		names     []string // the object's own strings, each replaced per object
		decoder   k8sruntime.Decoder
		into      func() k8sruntime.Object
		transform cache.TransformFunc
		indexers  cache.Indexers
	}{
		{"TrainJob/finished", apiServerFinishedTrainJob(b), []string{"ddp-digits-75110", "db109e47-dc4f-4cf1-b407-749d382a9865"},
			jsonSerializer(b, trainerscheme.Codecs), func() k8sruntime.Object { return &trainer.TrainJob{} }, StripClientMetadata,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, IndexRuntimeRef: trainJobIndexers[IndexRuntimeRef]}},
		{"JobSet/completed", apiServerJobSet(b), []string{"ddp-digits-75110", "db109e47-dc4f-4cf1-b407-749d382a9865", "82b7347c-c6f2-4dbe-a94c-7ccbdd42cc6b"},
			jobSetSerializer.Serializer, func() k8sruntime.Object { return nil }, TrimJobSet,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}},
	} {
		b.Run(kind.name, func(b *testing.B) {
			inputs := make([][]byte, objects)
			for i := range inputs {
				data := kind.data
				for j, s := range kind.names {
					data = bytes.ReplaceAll(data, []byte(s), []byte(fmt.Sprintf("%0*d", len(s), i*len(kind.names)+j)))
				}
				inputs[i] = data
			}
			var perObject, allocsPerObject float64
			for b.Loop() {
				store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, kind.indexers)
				before := liveHeap()
				for _, data := range inputs {
					decoded, _, err := kind.decoder.Decode(data, nil, kind.into())
					if err != nil {
						b.Fatal(err)
					}
					obj, err := kind.transform(decoded)
					if err != nil {
						b.Fatal(err)
					}
					if err := store.Add(obj); err != nil {
						b.Fatal(err)
					}
				}
				after := liveHeap()
				if n := len(store.ListKeys()); n != objects {
					b.Fatalf("the store has %d objects, want %d", n, objects)
				}
				perObject = float64(after.HeapAlloc-before.HeapAlloc) / objects
				allocsPerObject = float64(after.HeapObjects-before.HeapObjects) / objects
				runtime.KeepAlive(store)
			}
			b.ReportMetric(perObject, "B/object")
			b.ReportMetric(allocsPerObject, "allocs/object")
		})
	}
}

// liveHeap returns the runtime's memory statistics after two garbage collections (the
// second frees what the first's finalizers released).
func liveHeap() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}
