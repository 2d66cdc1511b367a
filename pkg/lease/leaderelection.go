package lease

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"k8s.io/klog/v2"

	"github.com/trainyard/trainyard/pkg/kubeclient"
)

// Run runs fn while this process holds the Lease le names (in le.ResourceNamespace, else
// in namespace), as elector.run describes; losing the Lease exits the process. fn must
// return once its context is cancelled, after its in-flight work has finished (the
// pipeline drains). fence (NewFence with le's renewDeadline) is the one the leader-only
// clients are built with (FencedConfig).
func Run(ctx context.Context, le componentbaseconfigv1alpha1.LeaderElectionConfiguration, namespace string, kube kubeclient.Interface,
	fence *Fence, logger klog.Logger, fn func(context.Context),
) {
	if le.ResourceNamespace != "" {
		namespace = le.ResourceNamespace
	}
	host, _ := os.Hostname()
	identity := host + "_" + uuid.NewString()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: le.ResourceName, Namespace: namespace},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	logger.Info("Waiting for leadership", "lease", klog.KRef(namespace, le.ResourceName), "identity", identity)
	elector{config: le, lock: lock, fence: fence, logger: logger, lost: func() {
		logger.Error(nil, "Lost leadership; exiting so a fresh process can rejoin")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}}.run(ctx, fn)
}

// elector runs a function while this process holds a Lease, and stops it before
// another process may take the Lease over.
type elector struct {
	// config gives the Lease's name and timings (Validate holds).
	config componentbaseconfigv1alpha1.LeaderElectionConfiguration
	// lock reads and writes the Lease under this process's identity.
	lock resourcelock.Interface
	// fence is valid while this process leads and its last renewal is younger than
	// renewDeadline (config's); its clock times the renewal deadline (client-go's
	// elector keeps its own real clock). The leader-only clients check it before each
	// write (fenceTransport).
	fence  *Fence
	logger klog.Logger
	// lost is called when the Lease is lost while ctx is live, after fn's context was
	// cancelled; Run's exits the process.
	lost func()
}

// run campaigns for the Lease until ctx is done and runs fn while it holds it. It
// returns after ctx is done and fn has returned, or after lost.
//
// Two writers never overlap. Let t be the moment, on this process's clock, at which it
// started its last successful write of the Lease (the acquisition or a renewal):
//
//   - A follower takes over only once the Lease has stayed unchanged for leaseDuration
//     (whole seconds: the Lease records leaseDurationSeconds) from the moment it read the
//     change, and it cannot read that write before the write commits, after t; a
//     takeover decided on an older read fails on the Lease's resourceVersion. So a
//     follower's first write comes after t + leaseDuration.
//   - This process sends no leader-only write from t + renewDeadline on: e.fence closes
//     then, and every write of the leader-only clients (the pipeline's JobSet, side-object
//     and TrainJob status writes, its events, the CA ConfigMaps) is checked against it
//     just before it is sent (fenceTransport), and refused locally once it is closed.
//     That holds whatever the process's goroutines were doing: a process frozen past its
//     Lease (SIGSTOP, a paused VM) whose workers resume before anything else has run
//     sends nothing. At the same instant it cancels fn's context (renewalLock.expire), so
//     the pipeline stops, whatever client-go is doing; calls in flight are abandoned.
//     Validate keeps leaseDuration − renewDeadline above retryPeriod: the
//     margin for requests already past the fence, on the wire, and for the two clocks'
//     rates. (A process frozen between the fence's check and the request reaching the
//     API server is beyond any local check.)
//
// client-go alone would not keep that order. Its renewal loop gives up renewDeadline
// after the start of the first attempt that follows the last success, so retryPeriod
// plus that success's latency after t + renewDeadline. And with ReleaseOnCancel it
// cancels fn's context only after releasing the Lease, a Get and an Update that may take
// renewDeadline more (its release trusts a holder it may not have read since the
// renewals began failing, and can clear a successor's Lease). So ReleaseOnCancel is off:
//
//   - Losing the Lease (t + renewDeadline passed, or client-go gave up first) cancels
//     fn's context, closes the fence for good, stops the election and calls lost, which
//     exits the process as Kubernetes' own controllers do: the pod restarts as a follower
//     with fresh caches. The Lease is not released: the API server may be out of reach,
//     or a successor may hold the Lease already.
//   - Stopping (ctx done, e.g. SIGTERM) cancels fn's context, waits for fn to return,
//     closes the fence for good, and only then stops the election and releases the Lease
//     (releaseLease) for a follower to take at once, instead of leaseDuration later.
func (e elector) run(ctx context.Context, fn func(context.Context)) {
	renewals := &renewalLock{Interface: e.lock, fence: e.fence}
	// The election outlives ctx until fn has drained: the Lease stays renewed meanwhile.
	electionCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElection()
	// A successful acquisition always starts OnStartedLeading, which closes drained.
	drained := make(chan struct{})
	go func() {
		select {
		case <-electionCtx.Done():
			return
		case <-ctx.Done():
		}
		if renewals.acquired() {
			<-drained
		}
		stopElection()
	}()
	renewDeadline := e.config.RenewDeadline.Duration
	leaderelection.RunOrDie(electionCtx, leaderelection.LeaderElectionConfig{
		Lock:          renewals,
		LeaseDuration: e.config.LeaseDuration.Duration,
		RenewDeadline: renewDeadline,
		RetryPeriod:   e.config.RetryPeriod.Duration,
		Name:          e.config.ResourceName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				defer close(drained)
				defer e.fence.stop() // what fn left running writes no more
				runCtx, cancel := context.WithCancel(leadCtx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				go func() {
					if last, ok := renewals.expire(runCtx); ok {
						e.logger.Error(nil, "Lease not renewed within renewDeadline; stopping the pipeline",
							"lease", e.lock.Describe(), "lastRenewal", last, "renewDeadline", renewDeadline)
						cancel()
						stopElection()
					}
				}()
				fn(runCtx)
			},
			OnStoppedLeading: func() {
				// client-go cancelled fn's context just before.
				e.fence.stop()
				if ctx.Err() == nil {
					e.lost()
				}
			},
		},
	})
	if ctx.Err() == nil || !renewals.acquired() {
		return // lost, or never led
	}
	<-drained
	releaseCtx, cancel := context.WithTimeout(context.Background(), renewDeadline)
	defer cancel()
	switch released, err := releaseLease(releaseCtx, e.lock, e.fence.clock.Now()); {
	case err != nil:
		e.logger.Error(err, "Releasing the Lease; followers take over once it expires", "lease", e.lock.Describe())
	case released:
		e.logger.Info("Released the Lease for a follower to take over at once", "lease", e.lock.Describe())
	}
}

// renewalLock is the Lease lock client-go's elector writes through. It notes in fence
// when each successful write naming this process as the holder (an acquisition or a
// renewal) started: the write commits after that moment, so followers count
// leaseDuration from no earlier.
type renewalLock struct {
	resourcelock.Interface
	fence *Fence
}

// Create creates the Lease through the wrapped lock and notes the write (see renewalLock).
func (l *renewalLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.Interface.Create(ctx, ler) })
}

// Update updates the Lease through the wrapped lock and notes the write (see renewalLock).
func (l *renewalLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.Interface.Update(ctx, ler) })
}

func (l *renewalLock) write(ler resourcelock.LeaderElectionRecord, call func() error) error {
	start := l.fence.clock.Now()
	err := call()
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.fence.renewed(start)
	}
	return err
}

// lastRenewal is when the last successful write naming this process started; zero before
// any.
func (l *renewalLock) lastRenewal() time.Time { return l.fence.lastRenewal() }

// acquired reports whether this process has written the Lease as its holder.
func (l *renewalLock) acquired() bool { return !l.lastRenewal().IsZero() }

// expire blocks until renewDeadline (the fence's) has passed since the start of the last
// successful write naming this process — the instant the fence closes — and returns that
// start and true; or until ctx is done, and returns false. Writes that succeed meanwhile
// push the deadline back.
func (l *renewalLock) expire(ctx context.Context) (time.Time, bool) {
	clk := l.fence.clock
	for {
		last, expiry := l.fence.expiry()
		left := expiry.Sub(clk.Now())
		if left <= 0 {
			return last, true
		}
		timer := clk.NewTimer(left)
		select {
		case <-ctx.Done():
			timer.Stop()
			return time.Time{}, false
		case <-timer.C():
		}
	}
}

// releaseLease hands the Lease over at once: like client-go's ReleaseOnCancel, it
// writes an empty holder with a one-second duration, which any follower may take. It
// writes only if the Lease read now names lock's identity, and over that read (the
// update carries its resourceVersion), so it never clears a successor's Lease. now is
// the release time recorded in the Lease. It reports whether it released the Lease.
func releaseLease(ctx context.Context, lock resourcelock.Interface, now time.Time) (bool, error) {
	rec, _, err := lock.Get(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the Lease: %w", err)
	}
	if rec.HolderIdentity != lock.Identity() {
		return false, nil // a successor's
	}
	at := metav1.NewTime(now)
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: at, AcquireTime: at,
	}); err != nil {
		return false, fmt.Errorf("writing the Lease: %w", err)
	}
	return true, nil
}

// Validate returns what is wrong with le's timings, nil when le is off or
// sound. Beyond client-go's own checks (which panic after the caches synced), it keeps
// what elector.run's argument needs: the leader stops writing renewDeadline after the
// start of its last renewal, followers take over leaseDuration (in whole seconds, as the
// Lease records it) after it, and leaseDuration − renewDeadline must exceed retryPeriod.
func Validate(le componentbaseconfigv1alpha1.LeaderElectionConfiguration) []string {
	if le.LeaderElect == nil || !*le.LeaderElect {
		return nil
	}
	lease, renew, retry := le.LeaseDuration.Duration, le.RenewDeadline.Duration, le.RetryPeriod.Duration
	var problems []string
	if le.ResourceName == "" {
		problems = append(problems, "leaderElection.resourceName must not be empty")
	}
	switch {
	case lease <= 0 || renew <= 0 || retry <= 0:
		problems = append(problems, "leaderElection.leaseDuration, renewDeadline and retryPeriod must be positive")
	case lease%time.Second != 0:
		problems = append(problems, fmt.Sprintf("leaderElection.leaseDuration (%s) must be a whole number of seconds: "+
			"the Lease records it in seconds, and followers wait that long", lease))
	case renew <= time.Duration(leaderelection.JitterFactor*float64(retry)):
		problems = append(problems, fmt.Sprintf("leaderElection.renewDeadline (%s) must exceed %.1f × retryPeriod (%s)", renew, leaderelection.JitterFactor, retry))
	case renew+retry >= lease:
		problems = append(problems, fmt.Sprintf("leaderElection.renewDeadline + retryPeriod (%s + %s) must be less than leaseDuration (%s): "+
			"a leader that cannot renew must stop before a follower may take over", renew, retry, lease))
	}
	return problems
}
