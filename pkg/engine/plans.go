package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// Plans is where stages leave their work for the next stage: one plan of type
// P per TrainJob key, stamped with the UID and generation of the TrainJob it
// was built from. A plan for another UID (the TrainJob was deleted and
// re-created under the same name) or another generation (its spec changed)
// is stale, and Get does not return it.
//
// Plans are immutable once stored: Get returns the stored pointer, so a stage
// that needs a changed plan copies it, changes the copy and Puts the copy.
// Plans live only in memory and nothing in them survives a restart: every
// plan must be rebuildable from the API by running the TrainJob from the
// first stage. The owner deletes a key's plan when the TrainJob is deleted.
//
// The zero value is ready to use. Plans is safe for concurrent use and must
// not be copied after first use.
type Plans[P any] struct {
	mu    sync.RWMutex
	plans map[cache.ObjectName]stampedPlan[P]
}

type stampedPlan[P any] struct {
	uid        types.UID
	generation int64
	plan       *P
}

// Put stores plan for key, built from the TrainJob with the given uid and
// generation, and reports whether it did. It keeps an existing plan of the
// same uid with a higher generation, so that a slow stage finishing work on an
// old generation cannot overwrite the plan for a newer one.
func (s *Plans[P]) Put(key cache.ObjectName, uid types.UID, generation int64, plan *P) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.plans[key]; ok && old.uid == uid && old.generation > generation {
		return false
	}
	if s.plans == nil {
		s.plans = map[cache.ObjectName]stampedPlan[P]{}
	}
	s.plans[key] = stampedPlan[P]{uid: uid, generation: generation, plan: plan}
	return true
}

// Get returns the plan for key if it was built from the TrainJob with exactly
// this uid and generation. It returns nil, false if there is no plan or the
// plan is stale; a stage that expected one returns Restart().
func (s *Plans[P]) Get(key cache.ObjectName, uid types.UID, generation int64) (*P, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.plans[key]
	if !ok || p.uid != uid || p.generation != generation {
		return nil, false
	}
	return p.plan, true
}

// Delete removes the plan for key, if any.
func (s *Plans[P]) Delete(key cache.ObjectName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.plans, key)
}

// DeleteIf removes the plan for key if it is plan (the same pointer Get returned), so
// a stage done with the plan it read never drops a newer one stored meanwhile.
func (s *Plans[P]) DeleteIf(key cache.ObjectName, plan *P) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.plans[key]; ok && p.plan == plan {
		delete(s.plans, key)
	}
}

// Len returns the number of stored plans, stale ones included.
func (s *Plans[P]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.plans)
}
