package metrics

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// jobSetCreationMemory is how many TrainJob UIDs ObserveJobSetCreation
// remembers to record each TrainJob once: about 1 MiB, far more TrainJobs than
// are created between a JobSet's first creation and a re-creation.
const jobSetCreationMemory = 10000

// ObserveJobSetCreation records latency, from a TrainJob's creationTimestamp
// to this process creating its JobSet, under runtimeKind (a RuntimeKind*
// value; other values are recorded as RuntimeKindOther). Call it right after a
// successful JobSet Create, not when a JobSet is found to exist already.
//
// It records each TrainJob UID once and reports whether it recorded: a
// JobSet re-created for the same TrainJob (e.g. after suspend and resume)
// returns false. It remembers the last 10000 UIDs, so memory is bounded and a
// re-creation much later may be recorded again. A negative latency (clock
// skew between the API server and this process) is recorded as 0.
func (m *Metrics) ObserveJobSetCreation(uid types.UID, runtimeKind string, latency time.Duration) bool {
	if !m.jobSetCreationSeen.insert(uid) {
		return false
	}
	if runtimeKind != RuntimeKindTrainingRuntime && runtimeKind != RuntimeKindClusterTrainingRuntime {
		runtimeKind = RuntimeKindOther
	}
	m.jobSetCreationLatency.WithLabelValues(runtimeKind).Observe(max(latency, 0).Seconds())
	return true
}

// uidSet remembers the most recently inserted UIDs, up to a fixed capacity,
// forgetting the oldest first.
type uidSet struct {
	mu   sync.Mutex
	seen map[types.UID]struct{}
	ring []types.UID // insertion order; ring[next] is the oldest once full
	next int
}

func newUIDSet(capacity int) *uidSet {
	return &uidSet{
		seen: make(map[types.UID]struct{}, capacity),
		ring: make([]types.UID, 0, capacity),
	}
}

// insert adds uid and reports whether it was absent.
func (s *uidSet) insert(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[uid]; ok {
		return false
	}
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, uid)
	} else {
		delete(s.seen, s.ring[s.next])
		s.ring[s.next] = uid
		s.next = (s.next + 1) % len(s.ring)
	}
	s.seen[uid] = struct{}{}
	return true
}
