package engine

import (
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// flowKeyFunc names the flow a key belongs to. A stage queue serves its flows in turn
// (fairQueue), so the flow is the unit that one burst cannot make another wait behind.
type flowKeyFunc func(cache.ObjectName) string

// namespaceFlow is the flow key of every stage queue: the namespace of the key
// ("namespace/name"), because a namespace is what a tenant owns
// (docs/design/architecture.md#fair-queuing-in-every-stage). It is the one place to
// change for another flow (a label of the TrainJob, a LocalQueue): config.flowKey.
func namespaceFlow(key cache.ObjectName) string { return key.Namespace }

// fairQueue is the storage under a stage's client-go workqueue (workqueue.Queue, set
// as TypedQueueConfig.Queue): one FIFO per flow (by default the key's namespace) and a
// round-robin over the flows with keys waiting, each Pop taking the oldest key of the
// flow whose turn it is. Why: with client-go's one FIFO, a key of a quiet namespace
// waited in every stage behind up to WithMaxInFlight keys of a namespace in a burst
// (issue 43 measured 9.1 s for one TrainJob behind 3,000); served in turn, it waits for
// about one key per namespace with keys waiting.
//
// Everything else stays client-go's: the workqueue around it keeps the dirty and
// processing sets (a key is queued once while it waits and is never handed to two
// workers at once: Push is called only for a key that is neither queued nor being
// processed), the metrics, shutdown, and the delaying and rate-limiting layers, which
// reach it through Add. With one flow the order is client-go's FIFO exactly.
//
// Memory follows the keys waiting: a flow is dropped when its last key is popped, with
// its buffer (ring), so no array the size of a past burst is kept once the burst has
// passed (unlike client-go's FIFO, whose slice keeps its array until an append outgrows
// it). The in-flight gate parks keys in one too (parkedKeys), so the gate and the stages
// take namespaces in turn by one rule. Not safe for concurrent use: the workqueue calls
// it with its lock held, as workqueue.Queue requires.
type fairQueue struct {
	flowOf flowKeyFunc
	flows  map[string]*flow // flows with keys waiting
	turns  ring[*flow]      // the flows in q.flows, next turn first
	n      int              // keys waiting, over all flows
	spare  *flow            // the last flow dropped, reused to spare an allocation
	// last is the flow of the last Push while it has keys waiting: a burst pushes to one
	// flow many times over, and comparing its name is cheaper than the map lookup.
	last *flow
}

var _ workqueue.Queue[cache.ObjectName] = (*fairQueue)(nil)

// flow is one flow's keys, oldest first.
type flow struct {
	name string
	keys ring[cache.ObjectName]
}

// newFairQueue returns an empty fairQueue whose flows flowOf names.
func newFairQueue(flowOf flowKeyFunc) *fairQueue {
	return &fairQueue{flowOf: flowOf, flows: map[string]*flow{}}
}

// Touch does nothing: a key added again while it waits keeps its place.
func (q *fairQueue) Touch(cache.ObjectName) {}

// Push queues key behind the keys of its flow. A flow that had no key waiting takes its
// turn after every flow that has.
func (q *fairQueue) Push(key cache.ObjectName) {
	name := q.flowOf(key)
	f := q.last
	if f == nil || f.name != name {
		f = q.flows[name]
	}
	if f == nil {
		f = q.spare
		if f == nil {
			f = &flow{}
		}
		q.spare = nil
		f.name = name
		q.flows[name] = f
		q.turns.push(f)
	}
	q.last = f
	f.keys.push(key)
	q.n++
}

// Len is the number of keys waiting.
func (q *fairQueue) Len() int { return q.n }

// Pop returns the oldest key of the flow whose turn it is and moves that flow to the end
// of the turn order if it has keys left. The workqueue calls it only when Len > 0; on an
// empty fairQueue it panics, like client-go's default queue.
func (q *fairQueue) Pop() cache.ObjectName {
	f := q.turns.peek()
	key := f.keys.pop()
	q.n--
	switch {
	case f.keys.len() == 0:
		q.turns.pop()
		delete(q.flows, f.name)
		f.name = ""
		q.spare = f
		if q.last == f {
			q.last = nil
		}
	case q.turns.len() > 1:
		q.turns.push(q.turns.pop())
	}
	return key
}

// ring is a FIFO in a circular buffer whose size is a power of two. It grows by
// doubling when full and drops a buffer larger than ringMinSize once empty, so it holds
// at most twice the most it held since it was last empty. It does not shrink while it
// holds keys: halving on the way down cost a copy per halving, 40% more CPU per key in
// BenchmarkQueueStorage, for memory a burst frees anyway when it has passed. The zero
// ring is empty and ready to use.
type ring[T any] struct {
	buf  []T
	head int // index of the oldest element
	n    int
}

// ringMinSize is the smallest buffer a ring allocates, and the largest it keeps when empty.
const ringMinSize = 8

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(x T) {
	if r.n == len(r.buf) {
		r.resize(max(ringMinSize, 2*len(r.buf)))
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = x
	r.n++
}

// peek returns the oldest element; it panics on an empty ring.
func (r *ring[T]) peek() T {
	if r.n == 0 {
		panic("engine: peek on an empty ring")
	}
	return r.buf[r.head]
}

// pop removes and returns the oldest element; it panics on an empty ring.
func (r *ring[T]) pop() T {
	if r.n == 0 {
		panic("engine: pop on an empty ring")
	}
	var zero T
	x := r.buf[r.head]
	r.buf[r.head] = zero // the buffer keeps no reference to what left it
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n == 0 && len(r.buf) > ringMinSize {
		r.buf, r.head = nil, 0
	}
	return x
}

// resize moves the elements, oldest first, to a new buffer of size elements.
func (r *ring[T]) resize(size int) {
	buf := make([]T, size)
	if r.n > 0 {
		end := r.head + r.n
		if end <= len(r.buf) {
			copy(buf, r.buf[r.head:end])
		} else {
			k := copy(buf, r.buf[r.head:])
			copy(buf[k:], r.buf[:end-len(r.buf)])
		}
	}
	r.buf, r.head = buf, 0
}
