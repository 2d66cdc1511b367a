package status

import (
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// Defaults of Stage.RefusalThreshold and Stage.RefusalDelay.
const (
	// DefaultRefusalThreshold: five refusals in a row are 1.5 s apart at the least
	// (RefusalBackoff), so a lasting refusal shows on the TrainJob within seconds, while
	// one that an admission webhook or policy being rolled out answers only briefly
	// does not.
	DefaultRefusalThreshold = 5
	// DefaultRefusalDelay is twice the queue's longest backoff (5 min): a refused
	// TrainJob costs one write attempt per 10 minutes, and a change to its spec brings
	// it back at once.
	DefaultRefusalDelay = 10 * time.Minute
)

// writeError is the failure of one write of the status stage: the JobSet's apply or a
// side object's apply or creation. Only such failures can be refusals (countRefusal);
// a failed read or an internal error is retried as usual.
type writeError struct {
	kind, name string // the object written
	err        error  // the client's error, wrapped with what was written
}

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// refusedReason returns the API server's reason for err when it is one retrying does
// not fix: 403 Forbidden (RBAC, an admission webhook denying the object, a terminating
// namespace, an exhausted object-count quota), 422 Invalid (the object's validation, a
// ValidatingAdmissionPolicy's denial by default), 400 BadRequest, 413
// RequestEntityTooLarge and 405 MethodNotAllowed. Conflicts, timeouts,
// throttling (429) and server errors (5xx) are not refusals: they are retried with the
// queue's backoff. A status without a reason is judged by its code, as apierrors does.
func refusedReason(err error) (metav1.StatusReason, bool) {
	switch {
	case apierrors.IsForbidden(err):
		return metav1.StatusReasonForbidden, true
	case apierrors.IsInvalid(err):
		return metav1.StatusReasonInvalid, true
	case apierrors.IsBadRequest(err):
		return metav1.StatusReasonBadRequest, true
	case apierrors.IsRequestEntityTooLargeError(err):
		return metav1.StatusReasonRequestEntityTooLarge, true
	case apierrors.IsMethodNotSupported(err):
		return metav1.StatusReasonMethodNotAllowed, true
	}
	return "", false
}

// refusal is a write the API server has refused RefusalThreshold times in a row or
// more: it becomes JobSetReady=False, reason ReasonPrefixWrite + reason.
type refusal struct {
	kind, name string
	reason     metav1.StatusReason
	words      string // the server's message
	times      int    // refusals in a row, at least threshold
	threshold  int    // Stage.RefusalThreshold
	delay      time.Duration
}

// refusalCount is the refusals in a row of one TrainJob generation's writes.
type refusalCount struct {
	uid        types.UID
	generation int64
	n          int
}

// RefusalBackoff is the wait before the next attempt after the n-th refusal in a row
// below the threshold: 100 ms doubling (the default threshold's four waits add up to
// 1.5 s, so a policy being rolled out for a moment does not put a condition on the
// TrainJob, while a lasting one shows on it within seconds). These retries bypass the
// stage queue's token bucket, which paces retries against an overloaded API server: a
// refusal is an answer, not overload, and at 10 retries a second a namespace of 600
// denied TrainJobs would wait 4 minutes for its conditions.
func RefusalBackoff(n int) time.Duration {
	return 100 * time.Millisecond << min(n-1, 10)
}

// countRefusal records the failure err of a write for tj and returns how many refusals
// in a row of tj's current generation it makes (0 when err is no refusal), and the
// refusal to report when that is RefusalThreshold or more (nil below). Failures that
// are no refusal (see refusedReason) leave the count alone: a timeout between two
// denials says nothing about whether the denial went away. The count starts again at a
// new generation or UID, and ends at a successful pass (refusalsEnded).
func (s *Stage) countRefusal(key cache.ObjectName, tj *trainer.TrainJob, err error) (int, *refusal) {
	var we *writeError
	if !errors.As(err, &we) {
		return 0, nil
	}
	reason, ok := refusedReason(we.err)
	if !ok {
		return 0, nil
	}
	if s.Metrics != nil {
		s.Metrics.WriteRefused(string(reason))
	}
	s.mu.Lock()
	c := s.refusals[key]
	if c.uid != tj.UID || c.generation != tj.Generation {
		c = refusalCount{uid: tj.UID, generation: tj.Generation}
	}
	c.n++
	if s.refusals == nil {
		s.refusals = map[cache.ObjectName]refusalCount{}
	}
	s.refusals[key] = c
	s.mu.Unlock()

	threshold := s.RefusalThreshold
	if threshold <= 0 {
		threshold = DefaultRefusalThreshold
	}
	if c.n < threshold {
		return c.n, nil
	}
	words := we.err.Error()
	var status apierrors.APIStatus
	if errors.As(we.err, &status) && status.Status().Message != "" {
		words = status.Status().Message
	}
	return c.n, &refusal{kind: we.kind, name: we.name, reason: reason, words: words, times: c.n, threshold: threshold, delay: s.refusalDelay()}
}

// refusalsEnded forgets the refusals of the TrainJob at key: its writes went through.
func (s *Stage) refusalsEnded(key cache.ObjectName) {
	s.mu.Lock()
	delete(s.refusals, key)
	s.mu.Unlock()
}

func (s *Stage) refusalDelay() time.Duration {
	if s.RefusalDelay <= 0 {
		return DefaultRefusalDelay
	}
	return s.RefusalDelay
}

// conditionReason is the JobSetReady=False reason of r, e.g. "WriteForbidden".
func (r *refusal) conditionReason() string {
	return trainjob.ReasonPrefixWrite + string(r.reason)
}

// message is the JobSetReady=False message: the object, the server's words (cut to
// what a condition should carry), and when Trainyard tries again. It stays the same
// while the server says the same, so a repeated refusal costs no status write.
func (r *refusal) message() string {
	return fmt.Sprintf("the API server refused to write %s %q %d times in a row (%s), which retrying does not fix: %s. "+
		"Trainyard tries again every %v, and at once when the TrainJob's spec changes",
		r.kind, r.name, r.threshold, r.reason, truncateMessage(r.words), r.delay)
}

// writeCondition records r as JobSetReady=False, reason Write<reason>, or conflict as
// JobSetReady=False, reason SideObjectConflict (at most one is non-nil); with neither,
// once healed says the writes went through (the side objects are the TrainJob's and its
// JobSet exists), it turns a JobSetReady=False condition that a refusal or a conflict
// set True again (a JobSet applied in the same pass heals any in computeStatus already;
// a running JobSet is not applied again).
func writeCondition(st *trainer.TrainJobStatus, tj *trainer.TrainJob, r *refusal, conflict *sideObjectConflict, healed bool, now time.Time) {
	switch {
	case r != nil:
		setCondition(st, trainjob.ConditionJobSetReady, metav1.ConditionFalse, r.conditionReason(), r.message(), tj.Generation, now)
		return
	case conflict != nil:
		setCondition(st, trainjob.ConditionJobSetReady, metav1.ConditionFalse, trainjob.ReasonSideObjectConflict, conflict.message(), tj.Generation, now)
		return
	}
	c := meta.FindStatusCondition(st.Conditions, trainjob.ConditionJobSetReady)
	if !healed || c == nil || c.Status != metav1.ConditionFalse {
		return
	}
	if c.Reason == trainjob.ReasonSideObjectConflict || strings.HasPrefix(c.Reason, trainjob.ReasonPrefixWrite) {
		setCondition(st, trainjob.ConditionJobSetReady, metav1.ConditionTrue, trainjob.ReasonJobSetBuilt,
			"JobSet built from the TrainJob and its runtime; its side objects are the TrainJob's", tj.Generation, now)
	}
}
