package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// firstFailure collects the outcome of tasks run side by side that stop each other: the
// first task to fail cancels the rest, whose own errors are then its consequences (a
// killed download's cut-off output, "context canceled"), not causes. Err reports the
// first failure and names the tasks stopped because of it, so a cold build that fails
// shows one cause, not a second, unrelated-looking error (issue 37).
type firstFailure struct {
	cancel context.CancelFunc

	mu      sync.Mutex
	first   error
	stopped []string // tasks that failed after the first failure
}

// newFirstFailure returns a context that the first failure cancels, and the collector.
func newFirstFailure(ctx context.Context) (context.Context, *firstFailure) {
	ctx, cancel := context.WithCancel(ctx)
	return ctx, &firstFailure{cancel: cancel}
}

// fail records that task ended with err (nil: it succeeded). The first error cancels the
// context of newFirstFailure; later ones are counted as stopped by it.
func (f *firstFailure) fail(task string, err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		f.first = err
		f.cancel()
		return
	}
	f.stopped = append(f.stopped, task)
}

// Err releases the context and returns nil when no task failed; else the first error,
// wrapped with the names of the tasks stopped because of it, e.g.
// "building the real node's images: …; stopped because of it: kubernetes v1.36.3".
func (f *firstFailure) Err() error {
	f.cancel()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		return nil
	}
	if len(f.stopped) == 0 {
		return f.first
	}
	return fmt.Errorf("%w; stopped because of it: %s", f.first, strings.Join(f.stopped, ", "))
}

// canceled wraps err with ctx's error when ctx has ended: a command killed by its context
// reports "signal: killed" and whatever it had printed, which alone hides why it stopped.
func canceled(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (%v)", ctx.Err(), err)
}
