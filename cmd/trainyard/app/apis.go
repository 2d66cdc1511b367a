package app

import (
	"context"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/informers"
	"github.com/trainyard/trainyard/pkg/informers/namespaces"
	"github.com/trainyard/trainyard/pkg/kubeclient"
	"github.com/trainyard/trainyard/pkg/stages/dra"
	"github.com/trainyard/trainyard/pkg/stages/gang/coscheduling"
	"github.com/trainyard/trainyard/pkg/stages/gang/volcano"
	"github.com/trainyard/trainyard/pkg/stages/gang/workload"
	"github.com/trainyard/trainyard/pkg/stages/resolveruntime"
	"github.com/trainyard/trainyard/pkg/stages/status"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// draResources are what resource.k8s.io/v1 must serve for the DRA claims stage.
var draResources = []string{"resourceclaimtemplates", "resourceclaims", "deviceclasses", "resourceslices"}

// optionalAPIs owns what depends on APIs a cluster may serve late or never: the DRA
// informers (resource.k8s.io/v1), the PodGroup informers (Workload API, coscheduling,
// Volcano) and, with the side-object informers, that of Workloads. When one becomes
// served after start-up (ServedAPIs.Run), it starts its informers and sends the
// TrainJobs rejected for its absence (JobSetReady=False, NotSupported) back to stage 1,
// so they proceed by themselves. It also starts, routes and syncs the side-object
// informers of the APIs always served (ConfigMaps), which sideObjects watches
// from its creation.
type optionalAPIs struct {
	served      *informers.ServedAPIs
	podGroups   *informers.PodGroups
	sideObjects *informers.SideObjects
	claims      *dra.Claims
	kube        kubeclient.Interface
	trainJobs   trainerlisters.TrainJobLister
	router      informers.Router
	logger      klog.Logger
	// watched are the namespaces of the DRA claims and templates watched (empty: every
	// namespace).
	watched namespaces.Set

	mu      sync.Mutex
	ctx     context.Context // set by start
	leading bool
	dra     *informers.DRAInformers
}

// register asks discovery about each optional API and sets up the informers of those
// served now; the others get a hook that runs when they appear.
func (a *optionalAPIs) register(context.Context) error {
	if a.served.Add(resourcev1.SchemeGroupVersion.String(), draResources, a.draServed) {
		a.useDRA(informers.NewDRA(a.kube, 0, a.watched))
	} else {
		a.logger.Info("resource.k8s.io/v1 is not served: TrainJobs with resource claims wait with a condition until it is")
	}
	watchedWorkload := false
	for _, v := range workload.Versions {
		gvr := schema.FromAPIVersionAndKind(v, "").GroupVersion().WithResource("podgroups")
		if a.served.Add(v, workload.Resources, a.workloadServed(gvr)) && !watchedWorkload {
			// The newest served version only: older ones show the same objects.
			watchedWorkload = true
			if err := a.watchWorkload(gvr); err != nil {
				return err
			}
		}
	}
	for _, gv := range []string{coscheduling.GroupVersion, volcano.GroupVersion} {
		gvr := schema.FromAPIVersionAndKind(gv, "").GroupVersion().WithResource("podgroups")
		if a.served.Add(gv, []string{"podgroups"}, a.podGroupsServed(gvr)) {
			if err := a.podGroups.Watch(gvr); err != nil {
				return err
			}
		}
	}
	return nil
}

// useDRA keeps the DRA informers in and hands their listers to the claims stage; the
// caller holds a.mu or runs before start.
func (a *optionalAPIs) useDRA(in *informers.DRAInformers) {
	a.dra = in
	a.claims.SetListers(&dra.Listers{
		Templates: in.ResourceClaimTemplateLister, ResourceClaims: in.ResourceClaimLister,
		DeviceClasses: in.DeviceClassLister, ResourceSlices: in.ResourceSliceLister,
	})
}

// draServed runs when resource.k8s.io/v1 appears after start-up: start the informers,
// wait for them (the stage must not read empty caches), route, and resume the TrainJobs
// that waited for the API.
func (a *optionalAPIs) draServed(ctx context.Context) {
	in := informers.NewDRA(a.kube, 0, a.watched)
	a.mu.Lock()
	runCtx := a.ctx
	a.mu.Unlock()
	in.Start(runCtx)
	if !in.WaitForCacheSync(ctx) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.useDRA(in)
	if a.leading {
		a.routeDRA()
		a.resume()
	}
}

// watchWorkload watches the Workload API's PodGroups (gvr) and Workloads (same version,
// side-object informer). A Workload API served later watches its newest version
// first; one watched resource stays watched in the version it started with.
func (a *optionalAPIs) watchWorkload(podGroups schema.GroupVersionResource) error {
	if err := a.podGroups.Watch(podGroups); err != nil {
		return err
	}
	if a.sideObjects == nil {
		return nil
	}
	return a.sideObjects.Watch(podGroups.GroupVersion().WithResource("workloads"))
}

// workloadServed returns the hook for a Workload API version that appears after
// start-up.
func (a *optionalAPIs) workloadServed(gvr schema.GroupVersionResource) func(context.Context) {
	return func(context.Context) {
		if err := a.watchWorkload(gvr); err != nil {
			a.logger.Error(err, "Watching the Workload API", "resource", gvr)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.leading {
			a.resume()
		}
	}
}

// podGroupsServed returns the hook for a PodGroup API that appears after start-up.
func (a *optionalAPIs) podGroupsServed(gvr schema.GroupVersionResource) func(context.Context) {
	return func(context.Context) {
		if err := a.podGroups.Watch(gvr); err != nil {
			a.logger.Error(err, "Watching PodGroups", "resource", gvr)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.leading {
			a.resume()
		}
	}
}

// resume sends the TrainJobs rejected for a missing API back to stage 1.
func (a *optionalAPIs) resume() {
	if err := informers.EnqueueRejected(a.trainJobs, a.router, resolveruntime.Name, trainjob.ReasonUnsupported); err != nil {
		a.logger.Error(err, "Resuming TrainJobs that waited for an API")
	}
}

func (a *optionalAPIs) routeDRA() {
	if err := a.dra.Route(a.logger, a.router, resolveruntime.Name, a.trainJobs); err != nil {
		a.logger.Error(err, "Routing DRA events")
	}
}

// start runs the informers that exist now; later ones start when their API appears.
func (a *optionalAPIs) start(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ctx = ctx
	a.podGroups.Start(ctx)
	if a.sideObjects != nil {
		a.sideObjects.Start(ctx)
	}
	if a.dra != nil {
		a.dra.Start(ctx)
	}
}

// lead routes the optional informers' events to the pipeline (on leadership).
func (a *optionalAPIs) lead() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leading = true
	if err := a.podGroups.Route(a.router, informers.Routes{Build: resolveruntime.Name, Status: status.Name}); err != nil {
		return err
	}
	if a.sideObjects != nil {
		if err := a.sideObjects.Route(a.router, resolveruntime.Name); err != nil {
			return err
		}
	}
	if a.dra != nil {
		return a.dra.Route(a.logger, a.router, resolveruntime.Name, a.trainJobs)
	}
	return nil
}

// HasSynced reports whether the optional informers that exist have synced.
func (a *optionalAPIs) HasSynced() bool {
	a.mu.Lock()
	in := a.dra
	a.mu.Unlock()
	return a.podGroups.HasSynced() && (a.sideObjects == nil || a.sideObjects.HasSynced()) && (in == nil || in.HasSynced())
}

// shutdown waits for the optional and side-object informers' goroutines after ctx was
// cancelled.
func (a *optionalAPIs) shutdown() {
	a.mu.Lock()
	in := a.dra
	a.mu.Unlock()
	if in != nil {
		in.Shutdown()
	}
	a.podGroups.Shutdown()
	if a.sideObjects != nil {
		a.sideObjects.Shutdown()
	}
}
