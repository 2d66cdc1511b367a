package plantest

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/stages/status"
)

// CheckPlan returns the first way p, built for tj by the plan-building stages without
// an error, breaks what the status stage relies on when it applies it, or nil:
//
//   - the JobSet is named and namespaced as tj, with exactly one controller owner
//     reference, to tj (kind, name and uid);
//   - replicatedJob names are unique, and each has parallelism and completions set,
//     equal and not negative, and replicas not negative
//     (docs/compatibility.md#plugin-order);
//   - status.DesiredOf hashes the plan and Desired.JobSetApplyBody encodes the apply
//     request, which decodes back to the same spec;
//   - every side object (Objects and CreateOnly) has apiVersion, kind and name, lives in
//     tj's namespace, is controlled by tj, and no two share kind and name.
//
// The fuzz targets of the stages assert it on every plan they build.
func CheckPlan(tj *trainer.TrainJob, p *plan.Plan) error {
	js := p.JobSet
	if js == nil {
		return fmt.Errorf("no JobSet")
	}
	if js.Name != tj.Name || js.Namespace != tj.Namespace {
		return fmt.Errorf("JobSet %s/%s for TrainJob %s/%s", js.Namespace, js.Name, tj.Namespace, tj.Name)
	}
	if err := checkController(tj, js.OwnerReferences); err != nil {
		return fmt.Errorf("JobSet: %w", err)
	}
	names := map[string]bool{}
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		if names[rj.Name] {
			return fmt.Errorf("replicatedJob %q twice", rj.Name)
		}
		names[rj.Name] = true
		par, comp := rj.Template.Spec.Parallelism, rj.Template.Spec.Completions
		switch {
		case par == nil || comp == nil:
			return fmt.Errorf("replicatedJob %q: parallelism %v, completions %v: both must be set", rj.Name, par, comp)
		case *par != *comp:
			return fmt.Errorf("replicatedJob %q: parallelism %d != completions %d", rj.Name, *par, *comp)
		case *par < 0:
			return fmt.Errorf("replicatedJob %q: parallelism %d < 0", rj.Name, *par)
		case rj.Replicas < 0:
			return fmt.Errorf("replicatedJob %q: replicas %d < 0", rj.Name, rj.Replicas)
		}
	}
	desired, err := status.DesiredOf(p)
	if err != nil {
		return fmt.Errorf("DesiredOf: %w", err)
	}
	body, err := desired.JobSetApplyBody()
	if err != nil {
		return fmt.Errorf("JobSetApplyBody: %w", err)
	}
	var back jobsetv1alpha2.JobSet
	if err := json.Unmarshal(body, &back); err != nil {
		return fmt.Errorf("the JobSet apply request does not decode: %w", err)
	}
	if back.Name != js.Name || len(back.Spec.ReplicatedJobs) != len(js.Spec.ReplicatedJobs) {
		return fmt.Errorf("the JobSet apply request decodes to %s with %d replicatedJobs, want %s with %d",
			back.Name, len(back.Spec.ReplicatedJobs), js.Name, len(js.Spec.ReplicatedJobs))
	}
	seen := map[string]bool{}
	objects := append([]*unstructured.Unstructured(nil), p.Objects...)
	for _, o := range p.CreateOnly {
		objects = append(objects, o.Object)
	}
	for _, o := range objects {
		if o == nil {
			return fmt.Errorf("nil side object")
		}
		id := o.GetKind() + " " + o.GetName()
		switch {
		case o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "":
			return fmt.Errorf("side object %q: apiVersion %q, kind and name are required", id, o.GetAPIVersion())
		case o.GetNamespace() != tj.Namespace:
			return fmt.Errorf("side object %s in namespace %q, not the TrainJob's %q", id, o.GetNamespace(), tj.Namespace)
		case seen[id]:
			return fmt.Errorf("side object %s twice", id)
		}
		seen[id] = true
		if err := checkController(tj, o.GetOwnerReferences()); err != nil {
			return fmt.Errorf("side object %s: %w", id, err)
		}
	}
	return nil
}

func checkController(tj *trainer.TrainJob, refs []metav1.OwnerReference) error {
	var controllers []metav1.OwnerReference
	for _, r := range refs {
		if r.Controller != nil && *r.Controller {
			controllers = append(controllers, r)
		}
	}
	if len(controllers) != 1 {
		return fmt.Errorf("%d controller owner references, want 1", len(controllers))
	}
	c := controllers[0]
	if c.Kind != trainer.TrainJobKind || c.APIVersion != trainer.SchemeGroupVersion.String() || c.Name != tj.Name || c.UID != tj.UID {
		return fmt.Errorf("controlled by %s %s %s (uid %q), not the TrainJob %s (uid %q)", c.APIVersion, c.Kind, c.Name, c.UID, tj.Name, tj.UID)
	}
	return nil
}
