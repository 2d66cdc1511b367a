// Package engine runs Trainyard's pipeline. It knows nothing about
// TrainJobs: it moves keys (cache.ObjectName, namespace/name) through an
// ordered list of Stages. Queues carry keys, never objects: a stage reads
// current state from listers and the previous stage's plan (see Plans).
//
// Each stage has its own rate-limited workqueue, named after the stage, and a
// pool of workers. The queue is client-go's, over a storage that serves the keys'
// namespaces in turn, so one namespace's burst does not hold another's keys in any
// stage (docs/design/architecture.md#fair-queuing-in-every-stage). A worker takes a key, calls Stage.Sync, and applies the
// returned Code: CodeContinue hands the key to the next stage's queue,
// CodeRequeueAfter syncs it again in the same stage after a delay,
// CodeWaitForEvent and CodeTerminal drop it, CodeRetry (and any error)
// requeues it with exponential backoff, and CodeRestart sends it back to the
// first stage. A panicking Sync is recovered, logged and retried like an
// error. Every sync is measured (see package metrics).
//
// Informer event handlers route each change to the earliest stage it can
// affect: a TrainJob spec or runtime change to the first stage
// (Pipeline.EnqueueFirst), a JobSet or claim status change straight to the
// last (Pipeline.Enqueue), so that status-only traffic never re-runs the
// stages that build the JobSet.
//
// One pass at a time, and no lost update. The engine tracks every key in the
// pipeline: the stage whose queue holds it or that syncs it, and the set of
// stages asked to see it again meanwhile (its pending set). A key is in at most
// one stage at a time, so stages never race each other over a key's plan. An
// event routed to a stage (Enqueue, EnqueueFirst, or a delayed add falling due)
// for a key syncing elsewhere adds the stage to the pending set; for a key
// waiting in a later stage's queue it moves the key to the event's stage at
// once. A stage leaves the pending set only when it begins a sync of the key.
// When a sync ends, the key goes to the earlier of the stage its result names
// and its lowest pending stage; a key with a pending stage never leaves the
// pipeline. This is client-go's workqueue dirty mark (an Add during processing
// re-queues the key at Done), extended across the stages. It establishes:
//
//	After the last event for a key routed to stage s, stage s (or, for a key
//	waiting in a later stage, a stage before s followed by s) syncs the key at
//	least once, and that sync begins after the event, so it reads listers at
//	least as new as the event (informers update their store before they call
//	the handler that routes the event).
//
// Stages keep what makes that enough: a stage reads current state from listers,
// never from the queue, and one that finds its plan built for an older
// TrainJob generation returns Restart(), so a pass that began before an update
// is redone from the first stage. Stages must still be idempotent: a key can be
// synced more often than events ask (a stale entry of a queue it left, a
// delayed add).
//
// The first stage admits a key past it only while fewer than WithMaxInFlight
// keys are past it. A key without room is parked, not waited for, so a worker
// never blocks and keys already in flight that return to the first stage always
// find a worker; a parked key is queued again when a slot frees, the slots going
// round-robin to the namespaces with keys parked, so one namespace's burst does not
// hold another's keys (docs/design/architecture.md#one-namespaces-burst-does-not-hold-another).
// A key waiting out a retry backoff gives its slot up: failing keys hold no
// capacity healthy TrainJobs need.
//
// The caller starts the informers and waits for their caches to sync before
// Pipeline.Run; the engine does not. Run blocks until its context is
// cancelled, then stops the queues in stage order, lets in-flight syncs
// finish, and returns when every worker has stopped.
package engine
