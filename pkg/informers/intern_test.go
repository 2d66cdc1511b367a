package informers

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerscheme "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/scheme"
	"github.com/trainyard/trainyard/pkg/objectkeys"
)

// shared reports whether a and b are the same bytes in memory, not only equal.
func shared(a, b string) bool {
	return a == b && unsafe.StringData(a) == unsafe.StringData(b)
}

// decodeTwice decodes data with decoder twice, the second time with the object's name
// and UID replaced, as two objects of one watch would arrive, and passes each through
// transform. It returns the two cached objects and the first decoding untransformed.
func decodeTwice(t *testing.T, decoder k8sruntime.Decoder, data []byte, into func() k8sruntime.Object, transform func(any) (any, error), name, uid string) (first, second, raw k8sruntime.Object) {
	t.Helper()
	decode := func(data []byte) k8sruntime.Object {
		obj, _, err := decoder.Decode(data, nil, into())
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	other := bytes.ReplaceAll(bytes.ReplaceAll(data, []byte(name), []byte("other-trainjob-1")), []byte(uid), []byte("00000000-0000-0000-0000-000000000001"))
	raw = decode(data)
	out := make([]k8sruntime.Object, 2)
	for i, obj := range []k8sruntime.Object{raw.DeepCopyObject(), decode(other)} {
		got, err := transform(obj)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = got.(k8sruntime.Object)
	}
	return out[0], out[1], raw
}

// TestTrainJobCacheInternsRepeatingStrings: two finished TrainJobs decoded as a watch
// decodes them and passed through the TrainJob cache's transform share the bytes of
// the strings that repeat (runtimeRef, managedBy, namespace, condition type, status
// and reason, replicatedJob names) and keep their own names, UIDs and messages; the
// interned object equals the decoded one but for what StripClientMetadata drops.
func TestTrainJobCacheInternsRepeatingStrings(t *testing.T) {
	first, second, raw := decodeTwice(t, jsonSerializer(t, trainerscheme.Codecs), apiServerFinishedTrainJob(t),
		func() k8sruntime.Object { return &trainer.TrainJob{} }, StripClientMetadata,
		"ddp-digits-75110", "db109e47-dc4f-4cf1-b407-749d382a9865")
	a, b := first.(*trainer.TrainJob), second.(*trainer.TrainJob)

	want := raw.(*trainer.TrainJob)
	want.ManagedFields = nil
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("the cached TrainJob differs from the decoded one (-decoded +cached):\n%s", diff)
	}
	for field, pair := range map[string][2]string{
		"metadata.namespace":          {a.Namespace, b.Namespace},
		"spec.runtimeRef.name":        {a.Spec.RuntimeRef.Name, b.Spec.RuntimeRef.Name},
		"spec.runtimeRef.apiGroup":    {*a.Spec.RuntimeRef.APIGroup, *b.Spec.RuntimeRef.APIGroup},
		"spec.runtimeRef.kind":        {*a.Spec.RuntimeRef.Kind, *b.Spec.RuntimeRef.Kind},
		"spec.managedBy":              {*a.Spec.ManagedBy, *b.Spec.ManagedBy},
		"status.conditions[0].type":   {a.Status.Conditions[0].Type, b.Status.Conditions[0].Type},
		"status.conditions[0].status": {string(a.Status.Conditions[0].Status), string(b.Status.Conditions[0].Status)},
		"status.conditions[0].reason": {a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason},
		"status.jobsStatus[0].name":   {a.Status.JobsStatus[0].Name, b.Status.JobsStatus[0].Name},
	} {
		if !shared(pair[0], pair[1]) {
			t.Errorf("%s %q of the two cached TrainJobs is two copies, want one interned", field, pair[0])
		}
	}
	if a.Spec.RuntimeRef.Kind == b.Spec.RuntimeRef.Kind {
		t.Error("the two cached TrainJobs share the spec.runtimeRef.kind pointer, want each its own (only the string data shared)")
	}
	if shared(a.Status.Conditions[0].Message, b.Status.Conditions[0].Message) {
		t.Error("status.conditions[0].message is interned, want each object's own (messages carry per-object detail)")
	}
}

// TestJobSetCacheInternsRepeatingStrings: the same for two completed JobSets through
// the JobSet cache's decoding and transform: the owner reference's apiVersion and kind,
// the annotation keys and the runtime digest, the status's condition and replicatedJob
// names and terminal state are shared; the owner's name and UID, the JobSet's hash
// and the condition message are each object's own.
func TestJobSetCacheInternsRepeatingStrings(t *testing.T) {
	info, err := jobSetWatchSerializer()
	if err != nil {
		t.Fatal(err)
	}
	first, second, raw := decodeTwice(t, info.Serializer, apiServerJobSet(t),
		func() k8sruntime.Object { return nil }, TrimJobSet,
		"ddp-digits-75110", "db109e47-dc4f-4cf1-b407-749d382a9865")
	a, b := first.(*jobsetv1alpha2.JobSet), second.(*jobsetv1alpha2.JobSet)
	if diff := cmp.Diff(raw, a); diff != "" {
		t.Errorf("the cached JobSet differs from the decoded one (-decoded +cached):\n%s", diff)
	}
	key := func(js *jobsetv1alpha2.JobSet, name string) string {
		for k := range js.Annotations {
			if k == name {
				return k
			}
		}
		t.Fatalf("JobSet %s has no annotation %s", js.Name, name)
		return ""
	}
	for field, pair := range map[string][2]string{
		"metadata.namespace":                     {a.Namespace, b.Namespace},
		"metadata.ownerReferences[0].apiVersion": {a.OwnerReferences[0].APIVersion, b.OwnerReferences[0].APIVersion},
		"metadata.ownerReferences[0].kind":       {a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind},
		"the runtime digest annotation's key":    {key(a, objectkeys.AnnotationRuntimeSnapshotHash), key(b, objectkeys.AnnotationRuntimeSnapshotHash)},
		"the runtime digest annotation's value":  {a.Annotations[objectkeys.AnnotationRuntimeSnapshotHash], b.Annotations[objectkeys.AnnotationRuntimeSnapshotHash]},
		"status.conditions[0].type":              {a.Status.Conditions[0].Type, b.Status.Conditions[0].Type},
		"status.conditions[0].reason":            {a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason},
		"status.replicatedJobsStatus[0].name":    {a.Status.ReplicatedJobsStatus[0].Name, b.Status.ReplicatedJobsStatus[0].Name},
		"status.terminalState":                   {a.Status.TerminalState, b.Status.TerminalState},
	} {
		if !shared(pair[0], pair[1]) {
			t.Errorf("%s %q of the two cached JobSets is two copies, want one interned", field, pair[0])
		}
	}
	if a.OwnerReferences[0].Name == b.OwnerReferences[0].Name || a.OwnerReferences[0].UID == b.OwnerReferences[0].UID {
		t.Fatalf("the two JobSets have the same owner %q (UID %q): the test's replacement failed", a.OwnerReferences[0].Name, a.OwnerReferences[0].UID)
	}
	if shared(a.Status.Conditions[0].Message, b.Status.Conditions[0].Message) {
		t.Error("status.conditions[0].message is interned, want each object's own")
	}
}
