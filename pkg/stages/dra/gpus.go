package dra

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/mlpolicy"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// envPETNProcPerNode is torchrun's --nproc-per-node, written by the ML policy stage.
const envPETNProcPerNode = "PET_NPROC_PER_NODE"

// claimDevices is what the trainer container's claims say about its GPUs.
type claimDevices struct {
	// gpus is the number of GPU devices every trainer pod is allocated, summed over the
	// requests whose count is known.
	gpus int64
	// unknown explains each GPU request whose count cannot be known before allocation.
	unknown []string
	// otherClasses are the DeviceClasses of requests not counted as GPUs.
	otherClasses []string
}

// applyProcsPerNode sets PET_NPROC_PER_NODE from the trainer's claims (KEP-2782 "GPU
// count from claims"), when
//   - the runtime uses mlPolicy.torch and spec.trainer.numProcPerNode is unset (an
//     explicit value always wins), and
//   - the trainer replicatedJob's "node" container uses claims of a GPU DeviceClass.
//
// For mlPolicy.mpi it sets the slots per host the same way (the hostfile and the
// launcher's slots variable, mlpolicy.SetMPISlots) from the MPI hosts' "node"
// container claims, when neither spec.trainer.numProcPerNode nor a policy value other
// than 1 sets them (docs/compatibility.md#mpi: 1 becomes the node's GPU count).
//
// The count is the sum, over the container's claims from ResourceClaimTemplates, of
// exactly.count of each request of a GPU class (only the request the container names,
// when its reference sets one). It replaces the ML policy's value ("auto" or a CPU
// count) on the trainer container and on the envInjection targets that carry it.
//
// When a GPU request's count cannot be known — allocationMode All, firstAvailable
// alternatives of different counts, or a shared ResourceClaim whose devices every pod
// sees — the ML policy's value stays, as upstream falls back, and a Warning event and
// the condition ProcsPerNodeDerived=False (set with the JobSet, p.Conditions) say why
// and that spec.trainer.numProcPerNode fixes it. Once the count is known again, a False
// condition turns True.
//
// Not covered: the torchtune recipe the ML policy chose from nvidia.com/gpu (single
// device vs distributed) is not revisited; set numProcPerNode for torchtune with DRA.
func (c *run) applyProcsPerNode(tj *trainer.TrainJob, p *plan.Plan) error {
	// Healed unless the derivation below fails again: a rebuilt plan without the
	// warning turns an earlier ProcsPerNodeDerived=False True.
	if meta.IsStatusConditionFalse(tj.Status.Conditions, trainjob.ConditionProcsPerNodeDerived) {
		defer func() {
			if !slices.ContainsFunc(p.Conditions, func(c metav1.Condition) bool { return c.Type == trainjob.ConditionProcsPerNodeDerived }) {
				p.Conditions = append(p.Conditions, metav1.Condition{Type: trainjob.ConditionProcsPerNodeDerived,
					Status: metav1.ConditionTrue, Reason: ReasonProcsPerNodeFromClaims,
					Message: "PET_NPROC_PER_NODE is known: set by spec.trainer.numProcPerNode or derived from the claims", ObservedGeneration: tj.Generation})
			}
		}()
	}
	target, ctr, devices, err := c.claimedDevices(tj, p)
	if err != nil || target == nil {
		return err
	}
	current := target.current(ctr)
	switch {
	case len(devices.unknown) > 0:
		message := fmt.Sprintf("%s; %s stays %q: set spec.trainer.numProcPerNode", devices.problem(target.whose), target.what, current)
		c.event(tj, corev1.EventTypeWarning, ReasonProcsPerNodeUnknown, "%s", message)
		p.Conditions = append(p.Conditions, metav1.Condition{Type: trainjob.ConditionProcsPerNodeDerived,
			Status: metav1.ConditionFalse, Reason: trainjob.ReasonDeviceCountUnknown, Message: message, ObservedGeneration: tj.Generation})
		return nil
	case devices.gpus == 0:
		// Claims, but none of a GPU class: either no GPUs (then the ML policy's value is
		// right) or a GPU class the IsGPUClass predicate does not know. Say so.
		message := fmt.Sprintf("%s, so %s stays %q: set spec.trainer.numProcPerNode if these are GPUs",
			devices.problem(target.whose), target.what, current)
		p.Conditions = append(p.Conditions, metav1.Condition{Type: trainjob.ConditionProcsPerNodeDerived,
			Status: metav1.ConditionFalse, Reason: trainjob.ReasonDeviceCountUnknown, Message: message, ObservedGeneration: tj.Generation})
	case devices.gpus > 0:
		value := strconv.FormatInt(devices.gpus, 10)
		if value == current {
			return nil
		}
		if err := target.set(ctr, devices.gpus); err != nil {
			return err
		}
		c.event(tj, corev1.EventTypeNormal, ReasonProcsPerNodeFromClaims,
			"%s is %s, the GPUs each %s claims through DRA (was %q)", target.what, value, target.pod, current)
	}
	return nil
}

// claimedDevices returns where tj's GPU count from claims goes (nil when nowhere, see
// procsTarget, or when the counted "node" container has no claims), that container, and
// what its claims say.
func (c *run) claimedDevices(tj *trainer.TrainJob, p *plan.Plan) (*procsCount, *corev1.Container, claimDevices, error) {
	target := procsTarget(tj, p)
	if target == nil {
		return nil, nil, claimDevices{}, nil
	}
	pod := plan.PodSpec(target.rj)
	ctr := plan.Container(pod.Containers, trainer.ContainerNode)
	if ctr == nil || len(ctr.Resources.Claims) == 0 {
		return nil, nil, claimDevices{}, nil
	}
	devices, err := c.trainerDevices(tj.Namespace, pod, ctr)
	return target, ctr, devices, err
}

// problem says why claims that are d give no GPU count for processes per node (whose
// names them, e.g. "the trainer's"), "" when they give one.
func (d claimDevices) problem(whose string) string {
	switch {
	case len(d.unknown) > 0:
		return fmt.Sprintf("cannot derive GPUs per node from %s DRA claims (%s)", whose, strings.Join(d.unknown, "; "))
	case d.gpus == 0:
		return fmt.Sprintf("%s DRA claims request no DeviceClass counted as GPUs (classes %v; a class counts when "+
			"its name contains \"gpu\")", whose, d.otherClasses)
	}
	return ""
}

// ProcsPerNodeUnknown returns why the GPUs per node cannot be derived from tj's DRA
// claims — what the condition ProcsPerNodeDerived=False the stage sets says, without
// the value kept — or "" when they can, when nothing is derived (no Torch or MPI policy,
// spec.trainer.numProcPerNode set, no claims on the counted "node" container), when a
// claim's template or ResourceClaim is not in the cache yet (the stage waits for it),
// and before the stage has DRA caches (SetListers). p.JobSet is the desired JobSet.
// The TrainJob admission webhook calls it to warn at admission. Errors: the listers'.
func (c *Claims) ProcsPerNodeUnknown(tj *trainer.TrainJob, p *plan.Plan) (string, error) {
	l := c.listers.Load()
	if l == nil || p.JobSet == nil || p.Runtime.Spec == nil {
		return "", nil
	}
	r := &run{Listers: *l, Claims: c}
	target, _, devices, err := r.claimedDevices(tj, p)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil || target == nil {
		return "", err
	}
	return devices.problem(target.whose), nil
}

// procsCount is where a derived GPU count goes: Torch's PET_NPROC_PER_NODE on the
// trainer, or MPI's slots per host (the hostfile and the launcher's variable).
type procsCount struct {
	// what, whose and pod name the count, the claims and a pod in messages.
	what, whose, pod string
	rj               *jobsetv1alpha2.ReplicatedJob
	current          func(ctr *corev1.Container) string
	set              func(ctr *corev1.Container, gpus int64) error
}

// procsTarget returns where tj's GPU count from claims goes, nil when nowhere: no Torch
// or MPI policy, an explicit numProcPerNode, or no replicatedJob to count for.
func procsTarget(tj *trainer.TrainJob, p *plan.Plan) *procsCount {
	if p.Runtime.Spec == nil || p.Runtime.Spec.MLPolicy == nil {
		return nil
	}
	switch policy := p.Runtime.Spec.MLPolicy; {
	case policy.Torch != nil:
		if t := tj.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
			return nil
		}
		rj := plan.TrainerJob(p.JobSet)
		if rj == nil {
			return nil
		}
		return &procsCount{what: envPETNProcPerNode, whose: "the trainer's", pod: "trainer pod", rj: rj,
			current: func(ctr *corev1.Container) string { return envValue(ctr.Env, envPETNProcPerNode) },
			set: func(ctr *corev1.Container, gpus int64) error {
				setProcsPerNode(p, ctr, strconv.FormatInt(gpus, 10))
				return nil
			}}
	case policy.MPI != nil:
		rj, slots := mlpolicy.MPIHosts(tj, p)
		if rj == nil || !mlpolicy.MPISlotsFromDevices(tj, p) {
			return nil
		}
		return &procsCount{what: "the MPI slots per host", whose: "the MPI hosts'", pod: "MPI host pod", rj: rj,
			current: func(*corev1.Container) string { return strconv.FormatInt(slots, 10) },
			set:     func(_ *corev1.Container, gpus int64) error { return mlpolicy.SetMPISlots(tj, p, gpus) }}
	}
	return nil
}

// trainerDevices sums the GPUs the claims of container ctr of pod give it. Claims were
// validated: every reference names a pod claim, every template exists (a lister
// NotFound here means it was deleted since, and is returned to be retried).
func (c *run) trainerDevices(ns string, pod *corev1.PodSpec, ctr *corev1.Container) (claimDevices, error) {
	var out claimDevices
	for _, ref := range ctr.Resources.Claims {
		var pc *corev1.PodResourceClaim
		for i := range pod.ResourceClaims {
			if pod.ResourceClaims[i].Name == ref.Name {
				pc = &pod.ResourceClaims[i]
			}
		}
		if pc == nil {
			continue
		}
		if set(pc.ResourceClaimName) {
			claim, err := c.ResourceClaims.ResourceClaims(ns).Get(*pc.ResourceClaimName)
			if err != nil {
				return out, err
			}
			var shared claimDevices
			c.countRequests(&shared, "ResourceClaim "+claim.Name, claim.Spec.Devices.Requests, ref.Request)
			if shared.gpus > 0 || len(shared.unknown) > 0 {
				out.unknown = append(out.unknown, fmt.Sprintf(
					"claim %q is the shared ResourceClaim %q: its devices are not per node", ref.Name, claim.Name))
			}
			continue
		}
		tmpl, err := c.Templates.ResourceClaimTemplates(ns).Get(*pc.ResourceClaimTemplateName)
		if err != nil {
			return out, err
		}
		c.countRequests(&out, "ResourceClaimTemplate "+tmpl.Name, tmpl.Spec.Spec.Devices.Requests, ref.Request)
	}
	return out, nil
}

// countRequests adds the GPU devices of requests (of the claim or template source) to
// out: only the request named only, when set (a container claim reference may name one
// request, "<request>" or "<request>/<subrequest>").
func (c *run) countRequests(out *claimDevices, source string, requests []resourcev1.DeviceRequest, only string) {
	only, _, _ = strings.Cut(only, "/")
	for _, r := range requests {
		if only != "" && r.Name != only {
			continue
		}
		if r.Exactly != nil {
			if !c.isGPUClass(r.Exactly.DeviceClassName) {
				if !slices.Contains(out.otherClasses, r.Exactly.DeviceClassName) {
					out.otherClasses = append(out.otherClasses, r.Exactly.DeviceClassName)
				}
				continue
			}
			if r.Exactly.AllocationMode == resourcev1.DeviceAllocationModeAll {
				out.unknown = append(out.unknown, fmt.Sprintf("%s request %q asks for all devices of class %q (allocationMode All)",
					source, r.Name, r.Exactly.DeviceClassName))
				continue
			}
			out.gpus += max(r.Exactly.Count, 1)
			continue
		}
		// firstAvailable: the scheduler picks one alternative. The count is known only
		// when every alternative is GPUs of one exact count; none being GPUs counts 0.
		var counts []int64
		var other bool
		for _, sub := range r.FirstAvailable {
			switch {
			case !c.isGPUClass(sub.DeviceClassName):
				other = true
			case sub.AllocationMode == resourcev1.DeviceAllocationModeAll:
				counts = append(counts, -1)
			default:
				counts = append(counts, max(sub.Count, 1))
			}
		}
		if len(counts) == 0 {
			continue
		}
		if other || slices.Min(counts) != slices.Max(counts) || counts[0] < 0 {
			out.unknown = append(out.unknown, fmt.Sprintf("%s request %q has firstAvailable alternatives of different GPU counts",
				source, r.Name))
			continue
		}
		out.gpus += counts[0]
	}
}

// setProcsPerNode writes value as PET_NPROC_PER_NODE on the trainer container ctr and
// on every envInjection target container that the ML policy gave the variable.
func setProcsPerNode(p *plan.Plan, ctr *corev1.Container, value string) {
	v := corev1.EnvVar{Name: envPETNProcPerNode, Value: value}
	ctr.Env = plan.UpsertEnv(ctr.Env, v)
	inj := p.Runtime.Spec.MLPolicy.Torch.EnvInjection
	if inj == nil {
		return
	}
	for _, target := range inj.Targets {
		rj := plan.ReplicatedJob(p.JobSet, target.JobName)
		if rj == nil {
			continue
		}
		for _, name := range target.ContainerNames {
			if c := targetContainer(rj, name); c != nil && envIndex(c.Env, envPETNProcPerNode) >= 0 {
				c.Env = plan.UpsertEnv(c.Env, v)
			}
		}
	}
}

// targetContainer is the container, else init container, named name of rj.
func targetContainer(rj *jobsetv1alpha2.ReplicatedJob, name string) *corev1.Container {
	pod := plan.PodSpec(rj)
	if c := plan.Container(pod.Containers, name); c != nil {
		return c
	}
	return plan.Container(pod.InitContainers, name)
}

func envIndex(env []corev1.EnvVar, name string) int {
	for i := range env {
		if env[i].Name == name {
			return i
		}
	}
	return -1
}

func envValue(env []corev1.EnvVar, name string) string {
	if i := envIndex(env, name); i >= 0 {
		return env[i].Value
	}
	return ""
}

// event records an event about tj when the stage has a recorder.
func (c *Claims) event(tj *trainer.TrainJob, eventType, reason, note string, args ...any) {
	if c.Recorder != nil {
		c.Recorder.Eventf(tj, nil, eventType, reason, "Building", note, args...)
	}
}
