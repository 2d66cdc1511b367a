package dra

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// celCache compiles DeviceClass selectors once per expression, with the DRA library the
// scheduler uses (k8s.io/dynamic-resource-allocation/cel), so matching follows the
// scheduler's semantics.
var celCache = cel.NewCache(100, cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true})

// classNeed is what the whole TrainJob asks of one DeviceClass.
type classNeed struct {
	devices int64
	sources []string // "replicatedJob node: 3 pods × 8 (ResourceClaimTemplate x)"
}

// checkCapacity is the capacity hint of KEP-2782: when the TrainJob's claims need more
// devices of a DeviceClass than every ResourceSlice of the cluster publishes for that
// class, its pods could never all be scheduled, so the TrainJob waits with
// JobSetReady=False, reason InsufficientDevices, naming the class, the devices needed
// and those published; a ResourceSlice added or grown resumes it (informers.NewDRA).
//
// Needed: for every replicatedJob, its pods (parallelism × replicas) × exactly.count of
// each ExactCount request of its claim templates, plus each shared ResourceClaim's
// requests once. Requests with allocationMode All or firstAvailable alternatives are
// left out (they need no fixed count). Published: the devices of the slices in each
// pool's newest generation whose driver's devices satisfy every CEL selector of the
// class. Over-approximations keep the hint safe — it only fires when the gang can never
// fit: devices allocated to others are counted as available, and the request's own
// selectors are not applied. A selector that fails to compile or evaluate counts the
// device as matching.
func (c *run) checkCapacity(tj *trainer.TrainJob, p *plan.Plan) error {
	if c.ResourceSlices == nil {
		return nil
	}
	needs, err := c.needs(tj.Namespace, p)
	if err != nil || len(needs) == 0 {
		return err
	}
	slices, err := c.ResourceSlices.List(labels.Everything())
	if err != nil {
		return err
	}
	slices = newestGenerations(slices)
	classes := make([]string, 0, len(needs))
	for class := range needs {
		classes = append(classes, class)
	}
	sort.Strings(classes)
	for _, class := range classes {
		need := needs[class]
		dc, err := c.DeviceClasses.Get(class)
		if err != nil {
			return err // validated to exist: a lister error, retried
		}
		published := publishedDevices(dc, slices)
		if need.devices <= published {
			continue
		}
		return &plan.WaitingError{Reason: trainjob.ReasonInsufficientDevices, Message: fmt.Sprintf(
			"the TrainJob needs %d devices of DeviceClass %q (%s) but the cluster's ResourceSlices publish %d in all, so its pods "+
				"can never all be scheduled: lower spec.trainer.numNodes or the claims' exactly.count, or add nodes with such devices "+
				"(the TrainJob proceeds by itself when a ResourceSlice is added)",
			need.devices, class, strings.Join(need.sources, "; "), published)}
	}
	return nil
}

// needs sums, per DeviceClass, the devices the TrainJob's pods claim (see
// checkCapacity). Claims were validated; a lister error is returned.
func (c *run) needs(ns string, p *plan.Plan) (map[string]*classNeed, error) {
	needs := map[string]*classNeed{}
	add := func(class string, n int64, source string) {
		if needs[class] == nil {
			needs[class] = &classNeed{}
		}
		needs[class].devices += n
		needs[class].sources = append(needs[class].sources, source)
	}
	sharedSeen := map[string]bool{}
	for i := range p.JobSet.Spec.ReplicatedJobs {
		rj := &p.JobSet.Spec.ReplicatedJobs[i]
		pods := int64(ptr.Deref(rj.Template.Spec.Parallelism, 1)) * int64(max(rj.Replicas, 1))
		for _, pc := range plan.PodSpec(rj).ResourceClaims {
			if set(pc.ResourceClaimName) {
				if sharedSeen[*pc.ResourceClaimName] {
					continue
				}
				sharedSeen[*pc.ResourceClaimName] = true
				claim, err := c.ResourceClaims.ResourceClaims(ns).Get(*pc.ResourceClaimName)
				if err != nil {
					return nil, err
				}
				for class, n := range exactCounts(claim.Spec.Devices.Requests) {
					add(class, n, fmt.Sprintf("%d from the shared ResourceClaim %q", n, claim.Name))
				}
				continue
			}
			tmpl, err := c.Templates.ResourceClaimTemplates(ns).Get(*pc.ResourceClaimTemplateName)
			if err != nil {
				return nil, err
			}
			for class, n := range exactCounts(tmpl.Spec.Spec.Devices.Requests) {
				add(class, pods*n, fmt.Sprintf("replicatedJob %s: %d pods × %d from ResourceClaimTemplate %q", rj.Name, pods, n, tmpl.Name))
			}
		}
	}
	return needs, nil
}

// exactCounts sums exactly.count per DeviceClass over the ExactCount requests.
func exactCounts(requests []resourcev1.DeviceRequest) map[string]int64 {
	out := map[string]int64{}
	for _, r := range requests {
		if r.Exactly == nil || r.Exactly.AllocationMode == resourcev1.DeviceAllocationModeAll {
			continue
		}
		out[r.Exactly.DeviceClassName] += max(r.Exactly.Count, 1)
	}
	return out
}

// newestGenerations keeps the slices of each (driver, pool) at the pool's newest
// generation: older ones are being replaced and their devices must not count twice.
func newestGenerations(slices []*resourcev1.ResourceSlice) []*resourcev1.ResourceSlice {
	newest := map[string]int64{}
	key := func(s *resourcev1.ResourceSlice) string { return s.Spec.Driver + "/" + s.Spec.Pool.Name }
	for _, s := range slices {
		newest[key(s)] = max(newest[key(s)], s.Spec.Pool.Generation)
	}
	out := slices[:0:0]
	for _, s := range slices {
		if s.Spec.Pool.Generation == newest[key(s)] {
			out = append(out, s)
		}
	}
	return out
}

// publishedDevices counts the devices of slices that satisfy every selector of class.
func publishedDevices(class *resourcev1.DeviceClass, slices []*resourcev1.ResourceSlice) int64 {
	var n int64
	for _, s := range slices {
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if matches(class, cel.Device{Driver: s.Spec.Driver, AllowMultipleAllocations: d.AllowMultipleAllocations,
				Attributes: d.Attributes, Capacity: d.Capacity}) {
				n++
			}
		}
	}
	return n
}

// matches reports whether device satisfies every CEL selector of class; an expression
// that does not compile or evaluate counts as satisfied (see checkCapacity).
func matches(class *resourcev1.DeviceClass, device cel.Device) bool {
	for _, sel := range class.Spec.Selectors {
		if sel.CEL == nil {
			continue
		}
		compiled := celCache.GetOrCompile(sel.CEL.Expression)
		if compiled.Error != nil {
			continue
		}
		ok, _, err := compiled.DeviceMatches(context.Background(), device)
		if err == nil && !ok {
			return false
		}
	}
	return true
}
