package gang

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/discovery"
)

// recheckMissing is how long a negative discovery answer is trusted: an API enabled
// later is noticed within this time, without asking discovery on every sync.
const recheckMissing = 30 * time.Second

// ServedCheck returns a function that asks discovery whether the API server serves all
// of resources in groupVersion (e.g. "scheduling.x-k8s.io/v1alpha1", "podgroups"), for a
// backend to tell a missing API from a failed write. A positive answer is kept; a
// negative one is asked again after 30 seconds, so an API installed later is noticed.
func ServedCheck(client discovery.DiscoveryInterface, groupVersion string, resources ...string) func(context.Context) bool {
	var (
		mu      sync.Mutex
		served  bool
		checked time.Time
	)
	return func(context.Context) bool {
		mu.Lock()
		defer mu.Unlock()
		if served || time.Since(checked) < recheckMissing && !checked.IsZero() {
			return served
		}
		checked = time.Now()
		list, err := client.ServerResourcesForGroupVersion(groupVersion)
		if err != nil {
			return false
		}
		found := map[string]bool{}
		for _, r := range list.APIResources {
			found[r.Name] = true
		}
		served = true
		for _, r := range resources {
			served = served && found[r]
		}
		return served
	}
}
