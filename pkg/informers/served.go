package informers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// DefaultServedRecheck is how often ServedAPIs asks discovery again about an API that
// was not served: a CRD installed or a feature gate enabled later is noticed within it.
const DefaultServedRecheck = 30 * time.Second

// ServedAPIs tracks optional APIs — the Workload API, PodGroup CRDs, resource.k8s.io —
// whose presence decides what the stages can do. Register each API with Add, ask
// Served in stages (a cached answer, no API call), and Run it: it asks discovery again,
// every Interval, about each API not served yet, and calls the API's onServed once it
// is. A served API is never re-checked: removing a CRD under a running controller shows
// up as failed writes, not as a condition.
type ServedAPIs struct {
	Discovery discovery.DiscoveryInterface
	// Interval between checks of the missing APIs; zero means DefaultServedRecheck.
	Interval time.Duration

	mu   sync.Mutex
	apis []*servedAPI
}

type servedAPI struct {
	groupVersion string
	resources    []string
	onServed     func(ctx context.Context)
	served       bool
}

// Add registers groupVersion (e.g. "scheduling.x-k8s.io/v1alpha1"), served when
// discovery lists every one of resources in it, asks discovery once and reports whether
// it is served now. onServed (may be nil) is called, from Run's goroutine, when an API
// not served at Add becomes served; it is never called for an API served at Add.
func (s *ServedAPIs) Add(groupVersion string, resources []string, onServed func(ctx context.Context)) bool {
	api := &servedAPI{groupVersion: groupVersion, resources: resources, onServed: onServed}
	api.served = s.ask(api)
	s.mu.Lock()
	s.apis = append(s.apis, api)
	s.mu.Unlock()
	return api.served
}

// Served reports whether groupVersion was served at the last check. An API never added
// is not served.
func (s *ServedAPIs) Served(groupVersion string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, api := range s.apis {
		if api.groupVersion == groupVersion {
			return api.served
		}
	}
	return false
}

// Run checks the missing APIs every Interval until ctx is done.
func (s *ServedAPIs) Run(ctx context.Context) {
	interval := s.Interval
	if interval <= 0 {
		interval = DefaultServedRecheck
	}
	wait.UntilWithContext(ctx, s.CheckMissing, interval)
}

// CheckMissing asks discovery about every API not served yet and calls onServed for
// each that now is (Run calls it periodically).
func (s *ServedAPIs) CheckMissing(ctx context.Context) {
	s.mu.Lock()
	var missing []*servedAPI
	for _, api := range s.apis {
		if !api.served {
			missing = append(missing, api)
		}
	}
	s.mu.Unlock()
	for _, api := range missing {
		if !s.ask(api) {
			continue
		}
		s.mu.Lock()
		api.served = true
		s.mu.Unlock()
		klog.FromContext(ctx).Info("API is now served", "groupVersion", api.groupVersion)
		if api.onServed != nil {
			api.onServed(ctx)
		}
	}
}

// ask reports whether discovery lists every resource of api. Any discovery error,
// NotFound included, counts as not served; the next check asks again.
func (s *ServedAPIs) ask(api *servedAPI) bool {
	list, err := s.Discovery.ServerResourcesForGroupVersion(api.groupVersion)
	if err != nil {
		return false
	}
	found := make(map[string]bool, len(list.APIResources))
	for _, r := range list.APIResources {
		found[r.Name] = true
	}
	for _, r := range api.resources {
		if !found[r] {
			return false
		}
	}
	return true
}

// EnqueueRejected sends every unfinished TrainJob whose JobSetReady condition is False
// with one of reasons to stage: what the owner of an API that just became served (or a
// capacity that just grew) calls, so the TrainJobs waiting for it proceed without a
// rebuild of every other TrainJob.
func EnqueueRejected(trainJobs trainerlisters.TrainJobLister, r Router, stage string, reasons ...string) error {
	jobs, err := trainJobs.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing TrainJobs: %w", err)
	}
	for _, tj := range jobs {
		if tj.DeletionTimestamp != nil || trainjob.IsFinished(tj) {
			continue
		}
		c := meta.FindStatusCondition(tj.Status.Conditions, trainjob.ConditionJobSetReady)
		if c != nil && c.Status == metav1.ConditionFalse && slices.Contains(reasons, c.Reason) {
			r.Enqueue(stage, cache.MetaObjectToName(tj))
		}
	}
	return nil
}
