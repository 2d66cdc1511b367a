// Package dra is pipeline stage 5: Dynamic Resource Allocation claims (KEP-2782 for
// TrainJob, KEP-4381 for the structured parameters the scheduler allocates from).
//
// Pod-level resourceClaims and container-level resources.claims reach the desired
// JobSet from the runtime template and from runtimePatches (PodSpecPatch.resourceClaims
// and ContainerPatch.resources, merged by name in stage 2). Kubernetes does the rest: the
// resourceclaim controller creates one ResourceClaim per pod from each
// ResourceClaimTemplate, and the scheduler allocates devices from the ResourceSlices the
// DRA drivers publish. This stage runs before anything is created and
//
//   - validates the claims (see validate.go), turning each mistake into a
//     *plan.InvalidInputError that names the field and the fix: the TrainJob gets
//     JobSetReady=False and waits. A missing ResourceClaimTemplate, ResourceClaim or
//     DeviceClass is waited for: the DRA informers (package informers, NewDRA) send
//     TrainJobs back to stage 1 when one appears;
//   - derives torchrun's processes per node from the claim templates when
//     spec.trainer.numProcPerNode is unset (see gpus.go): with DRA-only GPUs the ML
//     policy stage sees no nvidia.com/gpu resource and would start one process per CPU.
package dra

import (
	"context"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"

	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/events"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/step"
)

// Name is the stage name: its queue name and its metrics' stage label; the stage
// table (package stages) places the stage in the pipeline.
const Name = "dra_claims"

// Event reasons of the stage.
const (
	// ReasonProcsPerNodeFromClaims (Normal) says PET_NPROC_PER_NODE was derived from
	// the trainer's claim templates.
	ReasonProcsPerNodeFromClaims = "ProcsPerNodeFromClaims"
	// ReasonProcsPerNodeUnknown (Warning) says the trainer has GPU claims whose device
	// count cannot be known before allocation, so the ML policy's value stays.
	ReasonProcsPerNodeUnknown = "ProcsPerNodeNotDerived"
)

// Listers read the informer caches of resource.k8s.io/v1 (informers.NewDRA).
type Listers struct {
	Templates      resourcelisters.ResourceClaimTemplateLister
	ResourceClaims resourcelisters.ResourceClaimLister
	DeviceClasses  resourcelisters.DeviceClassLister
	// ResourceSlices feed the capacity check (capacity.go); nil skips it.
	ResourceSlices resourcelisters.ResourceSliceLister
}

// Claims is the stage's configuration and dependencies. Until SetListers is called —
// the API server does not serve resource.k8s.io/v1 (yet) — a TrainJob whose pods
// carry claims is rejected with a *plan.UnsupportedError while every other TrainJob
// passes through.
type Claims struct {
	listers atomic.Pointer[Listers]

	// IsGPUClass reports whether the devices of the DeviceClass named className are GPUs,
	// i.e. count towards torchrun's processes per node. Nil means DefaultIsGPUClass.
	IsGPUClass func(className string) bool

	// Recorder records the events about the derived processes per node; nil records
	// none.
	Recorder events.EventRecorder
}

// SetListers makes the stage read the DRA caches l (every lister but ResourceSlices
// set); safe to call while the stage runs, when resource.k8s.io/v1 becomes served.
func (c *Claims) SetListers(l *Listers) { c.listers.Store(l) }

// run is one sync's view: the listers loaded once, and the configuration.
type run struct {
	Listers
	*Claims
}

// DefaultIsGPUClass is the default Claims.IsGPUClass: a class whose name contains "gpu"
// (case-insensitive), e.g. gpu.nvidia.com, gpu.amd.com, gpu.intel.com.
func DefaultIsGPUClass(className string) bool {
	return strings.Contains(strings.ToLower(className), "gpu")
}

// Step returns the stage's step function: validate the claims of every replicatedJob's
// pods, then derive PET_NPROC_PER_NODE from the trainer's claim templates. Errors: a
// *plan.InvalidInputError for a malformed or dangling claim (see validate), a
// *plan.UnsupportedError for claims when resource.k8s.io/v1 is not served, and any
// lister error other than NotFound as is (retried).
func (c *Claims) Step() step.Func {
	return func(_ context.Context, tj *trainer.TrainJob, p *plan.Plan) error {
		if p.JobSet == nil || !hasClaims(p) {
			return nil
		}
		l := c.listers.Load()
		if l == nil {
			return &plan.UnsupportedError{Object: p.Runtime.Ref(),
				Feature: "pod resourceClaims: the API server does not serve resource.k8s.io/v1 (Dynamic Resource Allocation); " +
					"enable it (the TrainJob proceeds by itself once it is served) or remove the claims"}
		}
		r := &run{Listers: *l, Claims: c}
		if err := r.validate(tj, p); err != nil {
			return err
		}
		if err := r.checkCapacity(tj, p); err != nil {
			return err
		}
		return r.applyProcsPerNode(tj, p)
	}
}

// isGPUClass applies IsGPUClass or its default.
func (c *Claims) isGPUClass(className string) bool {
	if c.IsGPUClass != nil {
		return c.IsGPUClass(className)
	}
	return DefaultIsGPUClass(className)
}

// hasClaims reports whether any pod template of the desired JobSet has a pod-level
// claim or a container claim reference.
func hasClaims(p *plan.Plan) bool {
	for i := range p.JobSet.Spec.ReplicatedJobs {
		pod := plan.PodSpec(&p.JobSet.Spec.ReplicatedJobs[i])
		if len(pod.ResourceClaims) > 0 {
			return true
		}
		for _, cs := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
			for j := range cs {
				if len(cs[j].Resources.Claims) > 0 {
					return true
				}
			}
		}
	}
	return false
}
