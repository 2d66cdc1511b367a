package app

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"k8s.io/klog/v2"
)

// runWithLeaderElection runs fn while this process holds the Lease; fn must return once
// its context is cancelled, after its in-flight work has finished (the pipeline drains).
//
// Two writers never overlap:
//   - Losing the Lease (renewal failed for renewDeadline) cancels fn's context and exits
//     the process at once, as Kubernetes controllers do: a half-stopped pipeline must not
//     keep writing next to the new leader. validateLeaderElection makes sure this happens
//     before a follower may take over (renewDeadline + retryPeriod < leaseDuration).
//   - Stopping (ctx cancelled, e.g. SIGTERM) cancels fn's context, waits for fn to return,
//     and only then releases the Lease for a follower to take at once. Releasing first
//     (ReleaseOnCancel on ctx itself) would let a follower lead while this pipeline still
//     writes.
func runWithLeaderElection(ctx context.Context, le componentbaseconfigv1alpha1.LeaderElectionConfiguration, kube kubernetes.Interface, logger klog.Logger, fn func(context.Context)) {
	namespace := le.ResourceNamespace
	if namespace == "" {
		namespace = podNamespace()
	}
	host, _ := os.Hostname()
	identity := host + "_" + uuid.NewString()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: le.ResourceName, Namespace: namespace},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	// The election outlives ctx until fn has drained.
	electionCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElection()
	var started atomic.Bool
	drained := make(chan struct{})
	go func() {
		select {
		case <-electionCtx.Done():
			return
		case <-ctx.Done():
		}
		if started.Load() {
			<-drained
		}
		stopElection()
	}()
	logger.Info("Waiting for leadership", "lease", klog.KRef(namespace, le.ResourceName), "identity", identity)
	leaderelection.RunOrDie(electionCtx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration.Duration,
		RenewDeadline:   le.RenewDeadline.Duration,
		RetryPeriod:     le.RetryPeriod.Duration,
		ReleaseOnCancel: true,
		Name:            le.ResourceName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				started.Store(true)
				defer close(drained)
				runCtx, cancel := context.WithCancel(leadCtx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				fn(runCtx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					logger.Error(nil, "Lost leadership; exiting so a fresh process can rejoin")
					klog.FlushAndExit(klog.ExitFlushTimeout, 1)
				}
			},
		},
	})
}

// validateLeaderElection returns what is wrong with le's timings, nil when le is off or
// sound. Beyond client-go's own checks (which panic after the caches synced), a leader
// that cannot renew gives up at most renewDeadline + retryPeriod after its last renewal,
// and a follower takes over leaseDuration after it: the first must come first, or two
// leaders write at once.
func validateLeaderElection(le componentbaseconfigv1alpha1.LeaderElectionConfiguration) []string {
	if !ptrBool(le.LeaderElect) {
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
	case renew <= time.Duration(leaderelection.JitterFactor*float64(retry)):
		problems = append(problems, fmt.Sprintf("leaderElection.renewDeadline (%s) must exceed %.1f × retryPeriod (%s)", renew, leaderelection.JitterFactor, retry))
	case renew+retry >= lease:
		problems = append(problems, fmt.Sprintf("leaderElection.renewDeadline + retryPeriod (%s + %s) must be less than leaseDuration (%s): "+
			"a leader that cannot renew must stop before a follower may take over", renew, retry, lease))
	}
	return problems
}
