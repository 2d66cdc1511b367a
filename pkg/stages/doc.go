// Package stages is Trainyard's pipeline engine. It knows nothing about
// TrainJobs: it moves keys (cache.ObjectName, namespace/name) through an
// ordered list of Stages. Queues carry keys, never objects: a stage reads
// current state from listers and the previous stage's plan (see Plans).
//
// Each stage has its own rate-limited workqueue, named after the stage, and a
// pool of workers. A worker takes a key, calls Stage.Sync, and applies the
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
// Ordering: a key is processed by at most one worker of a stage at a time,
// and adds of a key already waiting in a queue are coalesced. Nothing orders a
// key across stages: it can be in several queues at once, e.g. in flight in
// stage 3 while a spec change enqueues it on stage 1. Stages must therefore
// be idempotent, and a stage that finds its plan built for an older TrainJob
// generation returns Restart().
//
// The caller starts the informers and waits for their caches to sync before
// Pipeline.Run; the engine does not. Run blocks until its context is
// cancelled, then stops the queues in stage order, lets in-flight syncs
// finish, and returns when every worker has stopped.
package stages
