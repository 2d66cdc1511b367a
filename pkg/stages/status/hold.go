package status

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/trainjob"
)

// DefaultSuspendedHold is the SuspendedHold production uses: Kueue's runtime patch and
// its unsuspend arrive 10–30 ms apart on a quiet control plane, a few hundred under a
// burst, and a queued TrainJob's JobSet that shows a change half a second late costs
// nothing (no pod runs; Kueue reads only its pod sets, set when it was created).
const DefaultSuspendedHold = 500 * time.Millisecond

// heldChange is a suspended TrainJob's change that SuspendedHold holds back.
type heldChange struct {
	uid   types.UID
	since time.Time // when the first change of the hold reached the stage
}

// holdSuspended returns how much longer SuspendedHold holds back the change of tj
// (changed: the plan's JobSet differs from what is applied): the rest of the hold
// when tj is suspended and its JobSet js exists suspended, counted from the first
// change held; 0 otherwise, or once the hold is over, and then it forgets the hold.
func (s *Stage) holdSuspended(key cache.ObjectName, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, changed bool) time.Duration {
	hold := changed && s.SuspendedHold > 0 && js != nil && trainjob.IsSuspended(tj) && ptr.Deref(js.Spec.Suspend, false)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[key]
	if !hold {
		delete(s.held, key)
		return 0
	}
	if !ok || h.uid != tj.UID {
		if s.held == nil {
			s.held = map[cache.ObjectName]heldChange{}
		}
		s.held[key] = heldChange{uid: tj.UID, since: now}
		return s.SuspendedHold
	}
	if wait := h.since.Add(s.SuspendedHold).Sub(now); wait > 0 {
		return wait
	}
	delete(s.held, key)
	return 0
}
