package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// The trainer's GPUs come from a shared ResourceClaim: their count per node is unknown,
// which the DRA stage says with ProcsPerNodeDerived=False and admission as a warning.
func TestDRAWarning(t *testing.T) {
	spec := skeleton(torchPolicy)
	pod := &rjob(spec, "node").Template.Spec.Template.Spec
	pod.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared")}}
	pod.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shared"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", Count: 2}}}}}}
	claims := &dra.Claims{}
	claims.SetListers(&dra.Listers{
		Templates:      resourcelisters.NewResourceClaimTemplateLister(utiltesting.Indexer(t)),
		ResourceClaims: resourcelisters.NewResourceClaimLister(utiltesting.Indexer(t, runtime.Object(claim))),
		DeviceClasses:  resourcelisters.NewDeviceClassLister(utiltesting.Indexer(t)),
	})
	deps := fixture{runtimes: []runtime.Object{ctr("rt", spec, nil)}}.deps(t)
	deps.Claims = claims

	warnings, errs := deps.ValidateTrainJob(nil, trainJob("rt", nil))
	if len(errs) != 0 || len(warnings) != 1 ||
		!strings.Contains(warnings[0], `cannot derive GPUs per node from the trainer's DRA claims (claim "gpu" is the shared ResourceClaim "shared"`) ||
		!strings.HasSuffix(warnings[0], "set spec.trainer.numProcPerNode") {
		t.Errorf("warnings, errors = %q, %v; want one warning saying the GPUs per node are unknown", warnings, errs)
	}
	if warnings, _ := deps.ValidateTrainJob(nil, trainJob("rt", &trainer.Trainer{NumProcPerNode: ptr.To[int32](2)})); len(warnings) != 0 {
		t.Errorf("with numProcPerNode: warnings = %q, want none", warnings)
	}
}
