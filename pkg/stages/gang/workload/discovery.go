package workload

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/discovery"
)

// recheckMissing is how long a negative discovery answer is trusted: an API enabled
// later is noticed within this time, without asking discovery on every sync.
const recheckMissing = 30 * time.Second

// ServedCheck returns a Served function for Backend that asks discovery whether the API
// server serves GroupVersion's workloads and podgroups. A positive answer is kept; a
// negative one is asked again after 30 seconds.
func ServedCheck(client discovery.DiscoveryInterface) func(context.Context) bool {
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
		resources, err := client.ServerResourcesForGroupVersion(GroupVersion.String())
		if err != nil {
			return false
		}
		found := map[string]bool{}
		for _, r := range resources.APIResources {
			found[r.Name] = true
		}
		served = found["workloads"] && found["podgroups"]
		return served
	}
}
