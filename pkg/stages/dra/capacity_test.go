package dra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// slice publishes n devices of driver on node, in pool node at generation gen.
func slice(node, driver string, n int, gen int64) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", node, driver, gen)},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1}}}
	for i := range n {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("dev-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"model": {StringValue: ptr.To("h100")}}})
	}
	return s
}

// selectingClass is a DeviceClass whose CEL selector picks driver's devices.
func selectingClass(name, driver string) *resourcev1.DeviceClass {
	c := deviceClass(name)
	c.Spec.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
		Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].model == \"h100\"", driver, driver)}}}
	return c
}

// TestCapacity: the capacity hint compares the devices the whole TrainJob claims per
// DeviceClass with the matching devices of the cluster's newest slices.
func TestCapacity(t *testing.T) {
	objects := []runtime.Object{
		selectingClass(gpuClass, "gpu.driver"),
		template("eight", request("gpus", gpuClass, 8)),
		template("all", allRequest("gpus", gpuClass)),
		claim("shared", request("gpus", gpuClass, 4)),
		slice("a", "gpu.driver", 8, 2),
		slice("a", "gpu.driver", 8, 1), // an older generation: replaced, not counted
		slice("b", "gpu.driver", 8, 1),
		slice("c", "other.driver", 64, 1), // the class's selector does not match
	}
	cases := map[string]struct {
		claims  []corev1.PodResourceClaim
		pods    int32
		wantErr string // fragment of the WaitingError; "" means it fits
	}{
		"two pods × 8 fit 16":               {claims: []corev1.PodResourceClaim{fromTemplate("gpus", "eight")}, pods: 2},
		"three pods × 8 exceed 16":          {claims: []corev1.PodResourceClaim{fromTemplate("gpus", "eight")}, pods: 3, wantErr: `needs 24 devices of DeviceClass "gpu.example.com" (replicatedJob node: 3 pods × 8 from ResourceClaimTemplate "eight") but the cluster's ResourceSlices publish 16`},
		"a shared claim counts once":        {claims: []corev1.PodResourceClaim{fromTemplate("gpus", "eight"), fromClaim("shared", "shared")}, pods: 2, wantErr: `needs 20 devices`},
		"allocationMode All is not counted": {claims: []corev1.PodResourceClaim{fromTemplate("gpus", "all")}, pods: 30},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, _ := newClaims(t, objects...)
			p := testPlan(pod{claims: tc.claims}, torch())
			p.JobSet.Spec.ReplicatedJobs[1].Template.Spec.Parallelism = ptr.To(tc.pods)
			err := c.Step()(context.Background(), testTrainJob(ptr.To[int32](1)), p)
			var waiting *plan.WaitingError
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (!errors.As(err, &waiting) || waiting.Reason != trainjob.ReasonInsufficientDevices ||
				!strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want a WaitingError %s containing %q", err, trainjob.ReasonInsufficientDevices, tc.wantErr)
			}
		})
	}
}
