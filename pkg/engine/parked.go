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
// The order is the stage queues' (a fairQueue by namespace), so the gate and the stages
// behind it take namespaces in turn by one rule, and memory follows the keys waiting in
// the same way: a namespace's FIFO is dropped when it empties. The zero parkedKeys is
// empty and ready to use. Not safe for concurrent use; the tracker's mutex guards it.
type parkedKeys struct {
	q *fairQueue // nil until the first push
}

// push parks key behind the keys of its namespace. A namespace that had none waiting
// takes its turn after every namespace already waiting.
func (p *parkedKeys) push(key cache.ObjectName) {
	if p.q == nil {
		p.q = newFairQueue(namespaceFlow)
	}
	p.q.Push(key)
}

// pop unparks the oldest key of the namespace whose turn it is, and moves that namespace
// to the end of the turn order if it has keys left. ok is false when no key waits.
func (p *parkedKeys) pop() (key cache.ObjectName, ok bool) {
	if p.len() == 0 {
		return cache.ObjectName{}, false
	}
	return p.q.Pop(), true
}

// len is the number of keys waiting.
func (p *parkedKeys) len() int {
	if p.q == nil {
		return 0
	}
	return p.q.Len()
}
