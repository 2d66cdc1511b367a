package app

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// On stop (SIGTERM), the leader releases its Lease only once the pipeline has drained:
// a follower that took the released Lease while the old pipeline still wrote would make
// two writers (issue 15).
func TestLeaderReleasesTheLeaseOnlyAfterDraining(t *testing.T) {
	kube := kubefake.NewClientset()
	var mu sync.Mutex
	var drainedAt, releasedAt time.Time
	kube.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		lease := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ptr.Deref(lease.Spec.HolderIdentity, "") == "" {
			mu.Lock()
			releasedAt = time.Now()
			mu.Unlock()
		}
		return false, nil, nil
	})
	le := componentbaseconfigv1alpha1.LeaderElectionConfiguration{
		LeaderElect: ptr.To(true), ResourceName: "trainyard-controller", ResourceNamespace: "trainyard-system",
		LeaseDuration: metav1.Duration{Duration: 3 * time.Second}, RenewDeadline: metav1.Duration{Duration: 2 * time.Second},
		RetryPeriod: metav1.Duration{Duration: 100 * time.Millisecond},
	}
	ctx, stop := context.WithCancel(context.Background())
	leading := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runWithLeaderElection(ctx, le, kube, ktesting.NewLogger(t, ktesting.DefaultConfig), func(ctx context.Context) {
			close(leading)
			<-ctx.Done()
			time.Sleep(300 * time.Millisecond) // in-flight syncs finishing their writes
			mu.Lock()
			drainedAt = time.Now()
			mu.Unlock()
		})
	}()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("never became leader")
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if drainedAt.IsZero() {
		t.Fatal("runWithLeaderElection returned before the pipeline drained (the process would exit mid-write)")
	}
	if releasedAt.IsZero() {
		t.Fatal("the Lease was never released on stop")
	}
	if releasedAt.Before(drainedAt) {
		t.Errorf("the Lease was released %s before the pipeline drained; want after", drainedAt.Sub(releasedAt))
	}
}
