package status

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// ObjectApplier applies a plan's side objects (PodGroups, Workloads...).
type ObjectApplier interface {
	// Apply server-side applies obj under FieldManager, forcing ownership.
	Apply(ctx context.Context, obj *unstructured.Unstructured) error
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
	gvk := obj.GroupVersionKind()
	mapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.Mapper.Reset()
		mapping, err = a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return fmt.Errorf("the API server does not serve %s: %w", gvk, err)
	}
	_, err = a.Client.Resource(mapping.Resource).Namespace(obj.GetNamespace()).Apply(ctx, obj.GetName(), obj,
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}
