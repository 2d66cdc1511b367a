package dra

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// validate checks the claims of every replicatedJob's pod template in p.JobSet, in
// this order, and returns the first failure as a *plan.InvalidInputError:
//
//  1. each pod resourceClaims entry sets exactly one of resourceClaimName and
//     resourceClaimTemplateName (core/v1 PodResourceClaim; the API server would only
//     reject it when the Job controller creates the pods);
//  2. each container and init container resources.claims entry names a pod-level claim;
//  3. each referenced ResourceClaimTemplate and ResourceClaim exists in the TrainJob's
//     namespace;
//  4. each DeviceClass a referenced template's device requests name (exactly and
//     firstAvailable alike) exists.
//
// Rules 1–2 need no API and run for every replicatedJob first, so a TrainJob with
// several mistakes learns about the structural ones before waiting for objects. Lister
// errors other than NotFound are returned as is.
func (c *run) validate(tj *trainer.TrainJob, p *plan.Plan) error {
	loc := locator{tj: tj, rt: p.Runtime}
	rjs := p.JobSet.Spec.ReplicatedJobs
	for i := range rjs {
		if err := validatePod(loc, rjs[i].Name, plan.PodSpec(&rjs[i])); err != nil {
			return err
		}
	}
	checkedTemplates := map[string]bool{}
	for i := range rjs {
		for _, pc := range plan.PodSpec(&rjs[i]).ResourceClaims {
			if err := c.validateSource(loc, rjs[i].Name, pc, checkedTemplates); err != nil {
				return err
			}
		}
	}
	return nil
}

// validatePod applies rules 1 and 2 to the pod spec of replicatedJob rj.
func validatePod(loc locator, rj string, pod *corev1.PodSpec) error {
	names := make([]string, 0, len(pod.ResourceClaims))
	for _, pc := range pod.ResourceClaims {
		names = append(names, pc.Name)
		byName, byTemplate := set(pc.ResourceClaimName), set(pc.ResourceClaimTemplateName)
		if byName == byTemplate {
			what := "sets both resourceClaimName and resourceClaimTemplateName"
			if !byName {
				what = "sets neither resourceClaimName nor resourceClaimTemplateName"
			}
			object, path := loc.podClaim(rj, pc.Name)
			return &plan.InvalidInputError{Object: object, Field: path.String(),
				Message: what + "; set exactly one: resourceClaimTemplateName for a ResourceClaim per pod " +
					"(per-node devices), or resourceClaimName to share one existing ResourceClaim"}
		}
	}
	for _, cs := range []struct {
		field      string
		containers []corev1.Container
	}{{"initContainers", pod.InitContainers}, {"containers", pod.Containers}} {
		for _, ctr := range cs.containers {
			for _, ref := range ctr.Resources.Claims {
				if slices.Contains(names, ref.Name) {
					continue
				}
				object, path := loc.containerClaim(rj, cs.field, ctr.Name, ref.Name)
				return &plan.InvalidInputError{Object: object, Field: path.String(),
					Message: fmt.Sprintf("container %q uses claim %q, but the pod has no resourceClaims entry of that name "+
						"(pod claims: %v); add it to the pod's resourceClaims (PodSpecPatch.resourceClaims in a runtime patch) "+
						"or use one of the pod's claims", ctr.Name, ref.Name, names)}
			}
		}
	}
	return nil
}

// validateSource applies rules 3 and 4 to pod claim pc of replicatedJob rj. Templates
// already checked (by name) are skipped.
func (c *run) validateSource(loc locator, rj string, pc corev1.PodResourceClaim, checked map[string]bool) error {
	ns := loc.tj.Namespace
	object, path := loc.podClaim(rj, pc.Name)
	if name := pc.ResourceClaimName; set(name) {
		_, err := c.ResourceClaims.ResourceClaims(ns).Get(*name)
		if apierrors.IsNotFound(err) {
			return &plan.InvalidInputError{Object: object, Field: path.Child("resourceClaimName").String(),
				Message: fmt.Sprintf("ResourceClaim %q not found in namespace %q; create it (the TrainJob proceeds "+
					"by itself when it appears) or name an existing ResourceClaim", *name, ns)}
		}
		return err
	}
	name := *pc.ResourceClaimTemplateName
	if checked[name] {
		return nil
	}
	tmpl, err := c.Templates.ResourceClaimTemplates(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return &plan.InvalidInputError{Object: object, Field: path.Child("resourceClaimTemplateName").String(),
			Message: fmt.Sprintf("ResourceClaimTemplate %q not found in namespace %q; create it (the TrainJob proceeds "+
				"by itself when it appears) or name an existing ResourceClaimTemplate", name, ns)}
	}
	if err != nil {
		return err
	}
	checked[name] = true
	return c.validateDeviceClasses(tmpl)
}

// validateDeviceClasses applies rule 4 to the device requests of tmpl.
func (c *run) validateDeviceClasses(tmpl *resourcev1.ResourceClaimTemplate) error {
	requests := field.NewPath("spec", "spec", "devices", "requests")
	for _, r := range tmpl.Spec.Spec.Devices.Requests {
		type ref struct {
			class string
			path  *field.Path
		}
		var refs []ref
		if r.Exactly != nil {
			refs = append(refs, ref{r.Exactly.DeviceClassName, requests.Key("name="+r.Name).Child("exactly", "deviceClassName")})
		}
		for _, sub := range r.FirstAvailable {
			refs = append(refs, ref{sub.DeviceClassName,
				requests.Key("name=" + r.Name).Child("firstAvailable").Key("name=" + sub.Name).Child("deviceClassName")})
		}
		for _, rf := range refs {
			_, err := c.DeviceClasses.Get(rf.class)
			if apierrors.IsNotFound(err) {
				return &plan.InvalidInputError{Object: "ResourceClaimTemplate/" + tmpl.Name, Field: rf.path.String(),
					Message: fmt.Sprintf("DeviceClass %q not found; install the DRA driver that provides it or name an "+
						"existing DeviceClass (the TrainJob proceeds by itself when it appears)", rf.class)}
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// locator finds where a claim field of the desired JobSet came from, to name it in
// errors: the latest runtime patch (spec.runtimePatches[manager=…]) that sets it, else
// the runtime's template.
type locator struct {
	tj *trainer.TrainJob
	rt plan.Runtime
}

// podClaim locates pod claim claim of replicatedJob rj.
func (l locator) podClaim(rj, claim string) (string, *field.Path) {
	object, pod := l.podSpec(rj, func(p *trainer.PodSpecPatch) bool {
		return slices.ContainsFunc(p.ResourceClaims, func(pc corev1.PodResourceClaim) bool { return pc.Name == claim })
	})
	return object, pod.Child("resourceClaims").Key("name=" + claim)
}

// containerClaim locates the resources.claims entry claim of container ctr (in list,
// "containers" or "initContainers") of replicatedJob rj.
func (l locator) containerClaim(rj, list, ctr, claim string) (string, *field.Path) {
	object, pod := l.podSpec(rj, func(p *trainer.PodSpecPatch) bool {
		patches := p.Containers
		if list == "initContainers" {
			patches = p.InitContainers
		}
		return slices.ContainsFunc(patches, func(cp trainer.ContainerPatch) bool {
			return cp.Name == ctr && cp.Resources != nil &&
				slices.ContainsFunc(cp.Resources.Claims, func(rc corev1.ResourceClaim) bool { return rc.Name == claim })
		})
	})
	return object, pod.Child(list).Key("name="+ctr).Child("resources", "claims").Key("name=" + claim)
}

// podSpec returns the object and the pod spec path of replicatedJob rj in the latest
// runtime patch whose pod spec patch satisfies sets, else in the runtime template.
func (l locator) podSpec(rj string, sets func(*trainer.PodSpecPatch) bool) (string, *field.Path) {
	patches := l.tj.Spec.RuntimePatches
	for i := len(patches) - 1; i >= 0; i-- {
		rp := patches[i]
		if rp.TrainingRuntimeSpec == nil || rp.TrainingRuntimeSpec.Template == nil || rp.TrainingRuntimeSpec.Template.Spec == nil {
			continue
		}
		for _, rjp := range rp.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs {
			t := rjp.Template
			if rjp.Name != rj || t == nil || t.Spec == nil || t.Spec.Template == nil || t.Spec.Template.Spec == nil {
				continue
			}
			if sets(t.Spec.Template.Spec) {
				return "", field.NewPath("spec", "runtimePatches").Key("manager="+rp.Manager).
					Child("trainingRuntimeSpec", "template", "spec", "replicatedJobs").Key("name="+rj).
					Child("template", "spec", "template", "spec")
			}
		}
	}
	return l.rt.Ref(), field.NewPath("spec", "template", "spec", "replicatedJobs").Key("name="+rj).
		Child("template", "spec", "template", "spec")
}

// set reports whether an optional name is set: non-nil and not empty.
func set(name *string) bool { return name != nil && *name != "" }
