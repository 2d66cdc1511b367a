package engine

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/trainyard/trainyard/pkg/metrics"
)

// Stage is one step of the pipeline.
//
// Sync brings the TrainJob named by key one step further. It reads the
// current objects from listers and the previous stage's plan, never from the
// key alone, because the key may have waited in the queue while the TrainJob
// changed. It must be idempotent: the same key can be synced again at any
// time, and by another stage at the same time (see the package doc).
//
// ctx carries a logger with "stage" and "trainJob" values
// (klog.FromContext) and is cancelled when the pipeline shuts down; Sync
// should return promptly then.
//
// A non-nil error means CodeRetry, whatever the Result says.
type Stage interface {
	// Name identifies the stage: it names its queue and is the "stage" and
	// "name" label of its metrics. It must be unique in a pipeline and stable.
	Name() string
	Sync(ctx context.Context, key cache.ObjectName) (Result, error)
}

// Code is the outcome of one Sync. Each code has exactly one consequence for
// the key in the stage's queue, stated on the constant. Every code except
// CodeRetry resets the key's backoff (Forget). Stages normally return the
// Result helpers named after the codes (Continue(), RequeueAfter(d), ...).
type Code int

const (
	// CodeContinue: the stage is done with this key for now. Forget it and
	// add it to the next stage's queue; on the last stage, just Forget.
	// It is the zero Code, so Result{} means continue.
	CodeContinue Code = iota

	// CodeRequeueAfter: sync the key again in this stage after Result.After.
	// Forget, then AddAfter(key, After). Use it for time-based waits, such as
	// polling an external condition. After must be positive; a non-positive
	// After is treated as CodeRetry, so that a bug cannot become a hot loop.
	CodeRequeueAfter

	// CodeWaitForEvent: nothing to do until something changes. Forget and
	// drop the key; an informer event enqueues it again.
	CodeWaitForEvent

	// CodeRetry: try this stage again with backoff. AddRateLimited: per-key
	// exponential backoff, capped, combined with a token bucket per namespace.
	// A non-nil error from Sync means CodeRetry, whatever the code.
	CodeRetry

	// CodeTerminal: the key cannot progress and the stage has recorded why,
	// typically as a TrainJob condition. Forget and drop it; only a change
	// to the TrainJob brings it back.
	CodeTerminal

	// CodeRestart: the stage found its input stale, e.g. a plan built for an
	// older TrainJob generation. Forget and add the key to the FIRST stage's
	// queue, so the plan is rebuilt from scratch. A restart is not rate
	// limited: return it only for staleness that a real change caused.
	CodeRestart
)

var codeNames = [...]string{
	CodeContinue:     metrics.ResultContinue,
	CodeRequeueAfter: metrics.ResultRequeueAfter,
	CodeWaitForEvent: metrics.ResultWaitForEvent,
	CodeRetry:        metrics.ResultRetry,
	CodeTerminal:     metrics.ResultTerminal,
	CodeRestart:      metrics.ResultRestart,
}

// String returns the code's name, which is also its "result" label value,
// e.g. "requeue_after".
func (c Code) String() string {
	if c < 0 || int(c) >= len(codeNames) {
		return fmt.Sprintf("Code(%d)", int(c))
	}
	return codeNames[c]
}

// Result is what Sync returns: a Code, plus a delay for CodeRequeueAfter.
type Result struct {
	Code Code
	// After is the delay before the key is synced again. Used only with
	// CodeRequeueAfter, where it must be positive.
	After time.Duration
}

// Continue hands the key to the next stage (CodeContinue).
func Continue() Result { return Result{Code: CodeContinue} }

// RequeueAfter syncs the key again in this stage after d, which must be
// positive (CodeRequeueAfter).
func RequeueAfter(d time.Duration) Result { return Result{Code: CodeRequeueAfter, After: d} }

// WaitForEvent drops the key until an informer event brings it back
// (CodeWaitForEvent).
func WaitForEvent() Result { return Result{Code: CodeWaitForEvent} }

// Retry retries this stage with backoff without reporting an error
// (CodeRetry). To report one, return it as the error instead.
func Retry() Result { return Result{Code: CodeRetry} }

// Terminal drops the key after the stage recorded why it cannot progress
// (CodeTerminal).
func Terminal() Result { return Result{Code: CodeTerminal} }

// Restart runs the key from the first stage again (CodeRestart).
func Restart() Result { return Result{Code: CodeRestart} }
