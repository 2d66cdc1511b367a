package status

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/trainyard/trainyard/pkg/stages/plan"
)

// ObjectApplier writes a plan's side objects (PodGroups, Workloads, the MPI hostfile
// ConfigMap and SSH Secret...).
type ObjectApplier interface {
	// Apply server-side applies obj under FieldManager, forcing ownership.
	Apply(ctx context.Context, obj *unstructured.Unstructured) error
	// Create creates obj unless an object of its kind, namespace and name exists, which
	// counts as success: what exists is never read or changed (plan.CreateOnlyObject).
	Create(ctx context.Context, obj *unstructured.Unstructured) error
}

// DynamicApplier applies any kind through the dynamic client, finding its resource with
// Mapper (a discovery-backed RESTMapper that refreshes on a miss, such as
// restmapper.NewDeferredDiscoveryRESTMapper).
type DynamicApplier struct {
	Client dynamic.Interface
	Mapper meta.ResettableRESTMapper
}

// Apply maps obj's kind to its resource, retrying once after a discovery refresh (a CRD
// installed after start), and applies it. It returns an error naming the kind when the
// API server does not serve it, and the API error otherwise.
func (a *DynamicApplier) Apply(ctx context.Context, obj *unstructured.Unstructured) error {
	resource, err := a.resource(obj)
	if err != nil {
		return err
	}
	_, err = resource.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// Create creates obj; AlreadyExists is success. It needs only the "create" verb, so the
// controller never gets to read or overwrite objects of that kind (Secrets).
func (a *DynamicApplier) Create(ctx context.Context, obj *unstructured.Unstructured) error {
	resource, err := a.resource(obj)
	if err != nil {
		return err
	}
	_, err = resource.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// resource maps obj's kind to its resource in obj's namespace, retrying once after a
// discovery refresh (a CRD installed after start).
func (a *DynamicApplier) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.Mapper.Reset()
		mapping, err = a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("the API server does not serve %s: %w", gvk, err)
	}
	return a.Client.Resource(mapping.Resource).Namespace(obj.GetNamespace()), nil
}

// applyObjects writes p's side objects, which pods need when they appear, so before the
// JobSet: first the create-only objects, each generated right before its creation, then
// the applied ones, in order. The first failure stops it.
func (s *Stage) applyObjects(ctx context.Context, p *plan.Plan) error {
	if s.Objects == nil && (len(p.CreateOnly) > 0 || len(p.Objects) > 0) {
		return fmt.Errorf("the plan holds side objects but the status stage has no ObjectApplier")
	}
	for _, o := range p.CreateOnly {
		obj := o.Object.DeepCopy()
		if o.Generate != nil {
			if err := o.Generate(obj); err != nil {
				return err
			}
		}
		if err := s.Objects.Create(ctx, obj); err != nil {
			return err
		}
	}
	for _, obj := range p.Objects {
		if err := s.Objects.Apply(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}
