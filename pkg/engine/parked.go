package engine

import "k8s.io/client-go/tools/cache"

// parkedKeys holds the keys that wait for an in-flight slot (tracker.admit), one FIFO per
// namespace, and hands slots out round-robin over the namespaces that have keys waiting:
// the oldest key of the namespace whose turn it is. Why: with one FIFO, 10,000
// TrainJobs created at once in one namespace held every other namespace's first JobSet
// until the whole burst had passed (about 70 s at 141 TrainJobs/s); round-robin admits a
// quiet namespace's key within as many slots as there are namespaces waiting
// (docs/design/architecture.md#one-namespaces-burst-does-not-hold-another).
//
// Memory is proportional to the keys waiting: a namespace's FIFO and the turn order
// drop their arrays when they empty, so no array the size of a past burst is kept.
// Not safe for concurrent use; the tracker's mutex guards it.
type parkedKeys struct {
	byNamespace map[string][]cache.ObjectName // each oldest first; no empty entries
	turns       []string                      // namespaces with keys waiting, next turn first
	n           int                           // keys waiting, over all namespaces
}

// push parks key behind the keys of its namespace. A namespace that had none waiting
// takes its turn after every namespace already waiting.
func (p *parkedKeys) push(key cache.ObjectName) {
	if p.byNamespace == nil {
		p.byNamespace = map[string][]cache.ObjectName{}
	}
	q, waiting := p.byNamespace[key.Namespace]
	if !waiting {
		p.turns = append(p.turns, key.Namespace)
	}
	p.byNamespace[key.Namespace] = append(q, key)
	p.n++
}

// pop unparks the oldest key of the namespace whose turn it is, and moves that namespace
// to the end of the turn order if it has keys left. ok is false when no key waits.
func (p *parkedKeys) pop() (key cache.ObjectName, ok bool) {
	if len(p.turns) == 0 {
		return cache.ObjectName{}, false
	}
	ns := p.turns[0]
	p.turns = shift(p.turns)
	q := p.byNamespace[ns]
	key = q[0] // before shift clears it
	q = shift(q)
	if q == nil {
		delete(p.byNamespace, ns)
	} else {
		p.byNamespace[ns] = q
		p.turns = append(p.turns, ns)
	}
	p.n--
	return key, true
}

// len is the number of keys waiting.
func (p *parkedKeys) len() int { return p.n }

// shift drops the first element of s. It returns nil, not an empty slice, once s is
// empty: the emptied slice would still hold the array a burst grew, and append would
// keep filling it.
func shift[T any](s []T) []T {
	var zero T
	s[0] = zero // the array keeps no reference to what left it
	if len(s) == 1 {
		return nil
	}
	return s[1:]
}
