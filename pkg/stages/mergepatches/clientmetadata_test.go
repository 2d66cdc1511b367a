package mergepatches

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/stages/plan/plantest"
)

// TestMergeIgnoresClientMetadata: the TrainJob cache drops kubectl's
// last-applied-configuration annotation (informers.StripClientMetadata), which is safe
// only while the JobSet built from a TrainJob does not depend on the TrainJob's own
// annotations. It is the same built from the TrainJob as the API server holds it and
// from the cached one.
func TestMergeIgnoresClientMetadata(t *testing.T) {
	rt := plantest.SkeletonRuntime(&trainer.MLPolicy{NumNodes: ptr.To[int32](2)})
	tj := plantest.TrainJob(rt.Name, &trainer.Trainer{Image: ptr.To("test:trainjob")})
	tj.Annotations = map[string]string{
		corev1.LastAppliedConfigAnnotation: `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob"}`,
		"team":                             "a",
	}
	cached, err := informers.StripClientMetadata(tj.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(mustMerge(t, tj, rt), mustMerge(t, cached.(*trainer.TrainJob), rt)); diff != "" {
		t.Errorf("JobSet built from the cached TrainJob (-from the API server's +from the cache):\n%s", diff)
	}
}
