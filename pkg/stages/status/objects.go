package status

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/stages/plan"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// ObjectApplier writes a plan's side objects (PodGroups, Workloads, the MPI hostfile
// ConfigMap and SSH Secret...) and tells who holds the names of applied ones.
type ObjectApplier interface {
	// Apply server-side applies obj under trainjob.FieldManager, forcing ownership. The status
	// stage calls it only once Lookup showed that no object of obj's name exists or
	// that the TrainJob controls the one that does.
	Apply(ctx context.Context, obj *unstructured.Unstructured) error
	// Create creates obj. When an object of its kind, namespace and name exists it
	// changes nothing and returns an error for which apierrors.IsAlreadyExists holds
	// (plan.CreateOnlyObject: what exists is never changed).
	Create(ctx context.Context, obj *unstructured.Unstructured) error
	// Lookup returns the metadata of the object of obj's kind, namespace and name, nil
	// when there is none. The status stage never looks up a create-only object (a
	// Secret). It reads the informer caches first (cached is true when one
	// holds the object); with cacheOnly it stops there — nil then means only that no
	// cache shows one —, otherwise it asks the API server unless a cache holds every
	// object of the kind.
	Lookup(ctx context.Context, obj *unstructured.Unstructured, cacheOnly bool) (existing metav1.Object, cached bool, err error)
}

// ObjectCache is what DynamicApplier.Lookup reads before the API server:
// informers.SideObjectCache in production.
type ObjectCache interface {
	// Lookup returns the cached metadata of resource gr's object namespace/name, nil
	// when no cache holds it. complete reports whether a miss is final (the cache holds
	// every object of gr, not only Trainyard's labelled ones).
	Lookup(gr schema.GroupResource, namespace, name string) (obj metav1.Object, complete bool)
}

// DynamicApplier applies any kind through the dynamic client, finding its resource with
// Mapper (a discovery-backed RESTMapper that refreshes on a miss, such as
// restmapper.NewDeferredDiscoveryRESTMapper).
type DynamicApplier struct {
	Client dynamic.Interface
	Mapper meta.ResettableRESTMapper
	// Metadata reads, for Lookup, objects no cache shows: a list by name, metadata
	// only, so the controller never reads a Secret's data (and needs "list", which its
	// side-object informers need anyway, rather than "get").
	Metadata metadata.Interface
	// Cache answers Lookup before the API server; nil asks the API server every time.
	Cache ObjectCache
}

// Apply maps obj's kind to its resource, retrying once after a discovery refresh (a CRD
// installed after start), and applies it. It returns an error naming the kind when the
// API server does not serve it, and the API error otherwise.
func (a *DynamicApplier) Apply(ctx context.Context, obj *unstructured.Unstructured) error {
	resource, err := a.resource(obj)
	if err != nil {
		return err
	}
	_, err = resource.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: trainjob.FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// Create creates obj; the API server's AlreadyExists comes back wrapped. It needs only
// the "create" verb, so the controller never gets to change objects of that kind
// (Secrets).
func (a *DynamicApplier) Create(ctx context.Context, obj *unstructured.Unstructured) error {
	resource, err := a.resource(obj)
	if err != nil {
		return err
	}
	if _, err = resource.Create(ctx, obj, metav1.CreateOptions{FieldManager: trainjob.FieldManager}); err != nil {
		return fmt.Errorf("creating %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// Lookup implements ObjectApplier: Cache first, then a metadata-only list of obj's
// resource in its namespace with a metadata.name field selector (one object at most).
func (a *DynamicApplier) Lookup(ctx context.Context, obj *unstructured.Unstructured, cacheOnly bool) (metav1.Object, bool, error) {
	gvr, err := a.gvr(obj)
	if err != nil {
		return nil, false, err
	}
	namespace, name := obj.GetNamespace(), obj.GetName()
	if a.Cache != nil {
		found, complete := a.Cache.Lookup(gvr.GroupResource(), namespace, name)
		if found != nil {
			return found, true, nil
		}
		if complete {
			return nil, false, nil
		}
	}
	if cacheOnly {
		return nil, false, nil
	}
	if a.Metadata == nil {
		return nil, false, fmt.Errorf("looking up %s %s/%s: the DynamicApplier has no metadata client", obj.GetKind(), namespace, name)
	}
	list, err := a.Metadata.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		return nil, false, fmt.Errorf("reading the metadata of %s %s/%s: %w", obj.GetKind(), namespace, name, err)
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i], false, nil
		}
	}
	return nil, false, nil
}

// resource maps obj's kind to its resource in obj's namespace.
func (a *DynamicApplier) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvr, err := a.gvr(obj)
	if err != nil {
		return nil, err
	}
	return a.Client.Resource(gvr).Namespace(obj.GetNamespace()), nil
}

// gvr maps obj's kind to its resource, retrying once after a discovery refresh (a CRD
// installed after start).
func (a *DynamicApplier) gvr(obj *unstructured.Unstructured) (schema.GroupVersionResource, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.Mapper.Reset()
		mapping, err = a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("the API server does not serve %s: %w", gvk, err)
	}
	return mapping.Resource, nil
}

// sideObjectConflict is a side object's name held by an object the TrainJob does not
// control: someone else's, nobody's, or an earlier TrainJob's of the same name.
type sideObjectConflict struct {
	kind, name string
	// controller describes the holder's controller, e.g. `Deployment "web"`; "" when it
	// has none or when earlier is set.
	controller string
	// earlier is the UID of the earlier TrainJob of the same name that controls it.
	earlier string
	// watched says the holder's deletion is routed to the TrainJob (it is in an
	// informer cache under the TrainJob's label or controller name), so the TrainJob
	// may wait for that event; otherwise it looks again after ConflictRecheck.
	watched bool
}

// conflictOf returns the conflict existing, which holds want's name, is for tj, or nil
// when tj controls it (its controller owner reference carries tj's UID). cached says
// existing came from an informer cache.
func conflictOf(tj *trainer.TrainJob, want *unstructured.Unstructured, existing metav1.Object, cached bool) *sideObjectConflict {
	if metav1.IsControlledBy(existing, tj) {
		return nil
	}
	c := &sideObjectConflict{kind: want.GetKind(), name: want.GetName()}
	controllerName := trainjob.ControllerName(existing)
	if ref := metav1.GetControllerOf(existing); ref != nil {
		if controllerName == tj.Name {
			c.earlier = string(ref.UID)
		} else {
			c.controller = fmt.Sprintf("%s %q", ref.Kind, ref.Name)
		}
	}
	c.watched = cached && (existing.GetLabels()[objectkeys.LabelTrainJobName] == tj.Name || controllerName == tj.Name)
	return c
}

// message is the JobSetReady=False message: the object, who controls it, and the fix.
func (c *sideObjectConflict) message() string {
	what := fmt.Sprintf("%s %q", c.kind, c.name)
	if c.earlier != "" {
		return fmt.Sprintf("%s belongs to an earlier TrainJob of the same name (uid %s), deleted: Trainyard neither uses nor overwrites a side object "+
			"another TrainJob controls, and creates this TrainJob's own once the garbage collector has deleted it; if it stays (a finalizer), delete it", what, c.earlier)
	}
	holder := "has no controller"
	if c.controller != "" {
		holder = "is controlled by " + c.controller
	}
	return fmt.Sprintf("%s already exists and %s, not this TrainJob: Trainyard neither uses nor overwrites a side object it does not control "+
		"(the TrainJob's pods would mount it); delete or rename that %s, or recreate the TrainJob under another name. The TrainJob proceeds by itself once it is gone",
		what, holder, c.kind)
}

// syncObjects makes p's side objects exist as tj's before the JobSet is applied (pods
// must find them when they appear). Applied objects are all looked up before anything
// is written, so a name held by an object tj does not control (a conflict, returned)
// leaves nothing of someone else's used or overwritten, and nothing created.
//
// Create-only objects (plan.CreateOnlyObject, the Secrets) are created on every pass,
// each generated right before its creation, and never looked up: their names are
// mlpolicy.SecretNames', which no one but the controller can know before it creates
// them, so AlreadyExists means this TrainJob's own (an earlier pass, or one cut short by
// a crash before the JobSet was applied) and counts as success, unread. The controller
// has no read access to Secrets at all. Applied objects are applied when absent, when
// update says the JobSet is being written (they change with it), and when only the API
// server showed them (created before side objects were labelled: the apply adds the
// label). So a side object deleted under an unfinished TrainJob is re-created on the
// next pass with a plan, whatever the JobSet gate says: restarting pods need it. The
// first failure stops it.
func (s *Stage) syncObjects(ctx context.Context, tj *trainer.TrainJob, p *plan.Plan, update bool) (*sideObjectConflict, error) {
	if len(p.CreateOnly) == 0 && len(p.Objects) == 0 {
		return nil, nil
	}
	if s.Objects == nil {
		return nil, fmt.Errorf("the plan holds side objects but the status stage has no ObjectApplier")
	}
	var apply []*unstructured.Unstructured
	for _, obj := range p.Objects {
		existing, cached, err := s.Objects.Lookup(ctx, obj, false)
		if err != nil {
			return nil, err
		}
		if existing != nil {
			if c := conflictOf(tj, obj, existing, cached); c != nil {
				return c, nil
			}
		}
		if existing == nil || update || !cached {
			apply = append(apply, obj)
		}
	}
	for _, o := range p.CreateOnly {
		obj := o.Object.DeepCopy()
		if o.Generate != nil {
			if err := o.Generate(obj); err != nil {
				return nil, err
			}
		}
		if err := s.Objects.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, &writeError{kind: obj.GetKind(), name: obj.GetName(), err: err}
		}
	}
	for _, obj := range apply {
		if err := s.Objects.Apply(ctx, obj); err != nil {
			return nil, &writeError{kind: obj.GetKind(), name: obj.GetName(), err: err}
		}
	}
	return nil, nil
}
