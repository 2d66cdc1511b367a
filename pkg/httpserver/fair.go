package httpserver

import "sync"

// FairInFlight is InFlight with a share per key (a namespace, a client): at most Total
// requests at once, of which at most PerKey for any one key, so that one key's requests
// (slow bodies, a flood of large ones) cannot take the slots the others need. A key is
// refused at once beyond its share, like InFlight beyond its bound, and so is every key
// once Total are held; Total ≥ k × PerKey keeps room for k keys. Its zero value, like a
// Total ≤0, admits everything; a PerKey ≤0 shares nothing (InFlight).
type FairInFlight struct {
	total, perKey int
	mu            sync.Mutex
	n             int
	held          map[string]int
}

// NewFairInFlight returns a counter admitting total requests at once, at most perKey of
// them for one key.
func NewFairInFlight(total, perKey int) *FairInFlight {
	return &FairInFlight{total: total, perKey: perKey, held: map[string]int{}}
}

// TryAcquire takes a slot for key and reports whether one was free for it; after true,
// call Release(key) when the request is answered. It never waits.
func (f *FairInFlight) TryAcquire(key string) bool {
	if f.total <= 0 {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n >= f.total || f.perKey > 0 && f.held[key] >= f.perKey {
		return false
	}
	f.n++
	f.held[key]++
	return true
}

// Release frees the slot of key's request TryAcquire admitted.
func (f *FairInFlight) Release(key string) {
	if f.total <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.held[key]--; f.held[key] <= 0 {
		delete(f.held, key)
	}
}

// Max is the bound over all keys (≤0: none) and PerKey the bound of one.
func (f *FairInFlight) Max() int { return f.total }

// PerKey is the bound of one key (≤0: none).
func (f *FairInFlight) PerKey() int { return f.perKey }
