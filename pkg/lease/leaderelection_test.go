package lease

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// fakeLock is a Lease held in memory. Every call first goes through the hook, when
// set, which may fail the call (an error) or hang it (block).
type fakeLock struct {
	identity string

	mu     sync.Mutex
	record *resourcelock.LeaderElectionRecord
	hook   func(ctx context.Context, call string, ler *resourcelock.LeaderElectionRecord) error
	// releases counts Updates that clear the holder (a release).
	releases int
}

func (l *fakeLock) setHook(hook func(ctx context.Context, call string, ler *resourcelock.LeaderElectionRecord) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hook = hook
}

func (l *fakeLock) intercept(ctx context.Context, call string, ler *resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	hook := l.hook
	if call == "update" && ler.HolderIdentity == "" {
		l.releases++
	}
	l.mu.Unlock()
	if hook == nil {
		return nil
	}
	return hook(ctx, call, ler)
}

func (l *fakeLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if err := l.intercept(ctx, "get", nil); err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.record == nil {
		return nil, nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), "trainyard-controller")
	}
	rec := *l.record
	raw, err := json.Marshal(rec)
	return &rec, raw, err
}

func (l *fakeLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := l.intercept(ctx, "create", &ler); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.record != nil {
		return apierrors.NewAlreadyExists(coordinationv1.Resource("leases"), "trainyard-controller")
	}
	l.record = &ler
	return nil
}

func (l *fakeLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := l.intercept(ctx, "update", &ler); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.record = &ler
	return nil
}

func (l *fakeLock) RecordEvent(string) {}
func (l *fakeLock) Identity() string   { return l.identity }
func (l *fakeLock) Describe() string   { return "trainyard-system/trainyard-controller" }

// state returns the Lease record (zero when there is none) and how many updates so far
// cleared the holder.
func (l *fakeLock) state() (resourcelock.LeaderElectionRecord, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.record == nil {
		return resourcelock.LeaderElectionRecord{}, l.releases
	}
	return *l.record, l.releases
}

// awaitClosed fails the test if ch is not closed within wait.ForeverTestTimeout: a guard
// against hanging, never a measure of how long something took.
func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// leaderElectionTimings are the default timings with a short retryPeriod, so that
// client-go's elector (it keeps its own real clock) renews at once; the renewal deadline
// the tests step over runs on a fake clock. A loaded machine would have to stall the
// renewals for 10 s to lose the Lease by itself.
var leaderElectionTimings = componentbaseconfigv1alpha1.LeaderElectionConfiguration{
	LeaderElect: ptr.To(true), ResourceName: "trainyard-controller", ResourceNamespace: "trainyard-system",
	LeaseDuration: metav1.Duration{Duration: 15 * time.Second}, RenewDeadline: metav1.Duration{Duration: 10 * time.Second},
	RetryPeriod: metav1.Duration{Duration: 20 * time.Millisecond},
}

// leaderRun runs an elector over lock in the background with a pipeline that records
// its context and returns when it is cancelled.
type leaderRun struct {
	pipelineCtx chan context.Context // receives the pipeline's context once leading
	drained     chan struct{}        // closed once the pipeline returned
	fence       *Fence               // the elector's
	lost        chan struct{}        // closed when the elector reports the Lease lost
	done        chan struct{}        // closed when the elector returned
}

func startLeader(t *testing.T, ctx context.Context, le componentbaseconfigv1alpha1.LeaderElectionConfiguration, lock *fakeLock, clk *testingclock.FakeClock) *leaderRun {
	r := &leaderRun{pipelineCtx: make(chan context.Context, 1), drained: make(chan struct{}),
		lost: make(chan struct{}), done: make(chan struct{}), fence: NewFence(clk, le.RenewDeadline.Duration)}
	e := elector{config: le, lock: lock, fence: r.fence,
		logger: ktesting.NewLogger(t, ktesting.DefaultConfig), lost: func() { close(r.lost) }}
	go func() {
		defer close(r.done)
		e.run(ctx, func(ctx context.Context) {
			defer close(r.drained)
			r.pipelineCtx <- ctx
			<-ctx.Done()
		})
	}()
	return r
}

// hangUntil makes every call of l hang, deaf to its context, until unhang is closed,
// then fail; it returns once client-go has made such a call.
func (l *fakeLock) hangUntil(t *testing.T, unhang <-chan struct{}) {
	t.Helper()
	hanging := make(chan struct{})
	var once sync.Once
	l.setHook(func(context.Context, string, *resourcelock.LeaderElectionRecord) error {
		once.Do(func() { close(hanging) })
		<-unhang
		return errors.New("connection reset")
	})
	awaitClosed(t, hanging, "client-go's next Lease call")
}

// leading waits until r's process leads and returns its pipeline's context; the test
// fails when it never does.
func (r *leaderRun) leading(t *testing.T) context.Context {
	t.Helper()
	select {
	case ctx := <-r.pipelineCtx:
		return ctx
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("never became leader")
		return nil
	}
}

// A leader whose renewals stop succeeding stops its pipeline renewDeadline after its last
// successful renewal started, even when client-go has not given up (here its Lease calls
// hang): a follower may take over leaseDuration after that renewal, and the old pipeline
// must not write next to the new one (issue 15).
func TestLeaderStopsThePipelineRenewDeadlineAfterItsLastRenewal(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lock := &fakeLock{identity: "leader"}
	unhang := make(chan struct{})
	r := startLeader(t, context.Background(), leaderElectionTimings, lock, clk)
	pipelineCtx := r.leading(t)

	// From now on every Lease call hangs, deaf to its context: an API server that never
	// answers, and a client-go that never gives up by itself.
	lock.hangUntil(t, unhang)
	renewDeadline := leaderElectionTimings.RenewDeadline.Duration
	clk.Step(renewDeadline - time.Nanosecond)
	if err := pipelineCtx.Err(); err != nil {
		t.Fatalf("pipeline stopped before renewDeadline had passed since the last renewal: %v", err)
	}
	clk.Step(time.Nanosecond)
	awaitClosed(t, pipelineCtx.Done(), "the pipeline's context to be cancelled renewDeadline after the last renewal")
	awaitClosed(t, r.drained, "the pipeline to return")
	select {
	case <-r.lost:
		t.Fatal("client-go reported the loss although its Lease calls still hang; the test proves nothing")
	default:
	}

	close(unhang)
	awaitClosed(t, r.lost, "the elector to report the Lease lost (the process exits)")
	awaitClosed(t, r.done, "the elector to return")
	if _, n := lock.state(); n != 0 {
		t.Errorf("the lost Lease was released %d times; want never (a successor may hold it)", n)
	}
}

// When client-go gives up the Lease, the pipeline's context is cancelled at once, not
// after a release of the Lease that may hang (client-go's ReleaseOnCancel releases
// first) (issue 15).
func TestLeaderStopsThePipelineWithoutWaitingForARelease(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // never stepped
	lock := &fakeLock{identity: "leader"}
	unhang := make(chan struct{})
	defer close(unhang)
	le := leaderElectionTimings // client-go gives up after 1 s of failed renewals
	le.LeaseDuration.Duration, le.RenewDeadline.Duration = 2*time.Second, time.Second
	r := startLeader(t, context.Background(), le, lock, clk)
	r.leading(t)

	// Renewals fail from now on; a release (an update clearing the holder) would hang.
	lock.setHook(func(_ context.Context, call string, ler *resourcelock.LeaderElectionRecord) error {
		switch {
		case call == "update" && ler.HolderIdentity == "":
			<-unhang
			return errors.New("connection reset")
		case call == "update":
			return apierrors.NewServiceUnavailable("etcd leader changed")
		}
		return nil
	})
	awaitClosed(t, r.drained, "the pipeline to stop once client-go gave up the Lease")
	awaitClosed(t, r.lost, "the elector to report the Lease lost (the process exits)")
	if _, n := lock.state(); n != 0 {
		t.Errorf("the lost Lease was released %d times; want never (a successor may hold it)", n)
	}
}

// The renewal deadline counts from when the last successful renewal started (its write
// commits later, and followers count leaseDuration from no earlier), not from when it
// returned; writes that failed or that name another holder (a release) do not count.
func TestRenewalLockNotesWhenTheLastRenewalStarted(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(t0)
	inner := &fakeLock{identity: "leader"}
	lock := &renewalLock{Interface: inner, fence: NewFence(clk, 10*time.Second)}
	ctx := context.Background()
	if lock.acquired() {
		t.Fatal("acquired() before any write")
	}
	inner.setHook(func(context.Context, string, *resourcelock.LeaderElectionRecord) error {
		clk.Step(3 * time.Second) // a slow API server
		return nil
	})
	if err := lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "leader"}); err != nil {
		t.Fatal(err)
	}
	inner.setHook(func(context.Context, string, *resourcelock.LeaderElectionRecord) error {
		return apierrors.NewServiceUnavailable("etcd leader changed")
	})
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "leader"}); err == nil {
		t.Fatal("the failing update succeeded")
	}
	inner.setHook(nil)
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil { // a release
		t.Fatal(err)
	}
	if got := lock.lastRenewal(); !got.Equal(t0) {
		t.Errorf("lastRenewal() = %v, want %v (when the only successful write naming us started)", got, t0)
	}
	if !lock.acquired() {
		t.Error("not acquired() after a successful write naming this process")
	}
}

// expire returns renewDeadline after the last renewal started, and each renewal pushes
// it back.
func TestRenewalLockExpiresRenewDeadlineAfterTheLastRenewal(t *testing.T) {
	const renewDeadline = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(t0)
	lock := &renewalLock{Interface: &fakeLock{identity: "leader"}, fence: NewFence(clk, renewDeadline)}
	ctx := context.Background()
	if err := lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "leader"}); err != nil {
		t.Fatal(err)
	}
	type expiry struct {
		last time.Time
		ok   bool
	}
	expired := make(chan expiry, 1)
	go func() {
		last, ok := lock.expire(ctx)
		expired <- expiry{last, ok}
	}()
	notExpired := func(when string) {
		t.Helper()
		select {
		case e := <-expired:
			t.Fatalf("expired %s: %+v", when, e)
		default:
		}
	}

	clk.SetTime(t0.Add(renewDeadline - time.Nanosecond))
	notExpired("before renewDeadline had passed since the renewal")
	renewedAt := clk.Now()
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "leader"}); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(renewDeadline))
	notExpired("although a renewal started 1ns before")
	// expire re-arms its timer from the clock's now: moving the clock before it has
	// done so would push the new deadline past the time the test sets (a race on a
	// loaded machine), so wait for the new timer first.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return clk.HasWaiters(), nil }); err != nil {
		t.Fatalf("expire did not wait again after the renewal: %v", err)
	}
	clk.SetTime(renewedAt.Add(renewDeadline))
	select {
	case e := <-expired:
		if !e.ok || !e.last.Equal(renewedAt) {
			t.Errorf("expire = %v, %v; want %v, true", e.last, e.ok, renewedAt)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("did not expire renewDeadline after the last renewal")
	}

	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "leader"}); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := lock.expire(cancelled); ok {
		t.Error("expire reported an expiry when its context was done")
	}
}

func TestReleaseLease(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		holder       string
		wantReleased bool
		wantHolder   string
		wantSeconds  int
	}{
		"ours: cleared for a follower to take at once": {holder: "leader", wantReleased: true, wantHolder: "", wantSeconds: 1},
		"a successor's: left alone":                    {holder: "successor", wantHolder: "successor", wantSeconds: 15},
	} {
		t.Run(name, func(t *testing.T) {
			lock := &fakeLock{identity: "leader", record: &resourcelock.LeaderElectionRecord{
				HolderIdentity: tc.holder, LeaseDurationSeconds: 15, LeaderTransitions: 4}}
			released, err := releaseLease(context.Background(), lock, now)
			if err != nil {
				t.Fatal(err)
			}
			if released != tc.wantReleased {
				t.Errorf("releaseLease reported released = %v, want %v", released, tc.wantReleased)
			}
			got, _ := lock.state()
			if got.HolderIdentity != tc.wantHolder || got.LeaseDurationSeconds != tc.wantSeconds || got.LeaderTransitions != 4 {
				t.Errorf("Lease after release: holder %q, %d s, %d transitions; want %q, %d s, 4",
					got.HolderIdentity, got.LeaseDurationSeconds, got.LeaderTransitions, tc.wantHolder, tc.wantSeconds)
			}
		})
	}
}

// On stop (SIGTERM), the leader releases its Lease only once the pipeline has drained:
// a follower that took the released Lease while the old pipeline still wrote would make
// two writers (issue 15).
func TestLeaderReleasesTheLeaseOnlyAfterDraining(t *testing.T) {
	kube := kubefake.NewClientset()
	var mu sync.Mutex
	var events []string
	record := func(event string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, event)
	}
	kube.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if lease := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease); ptr.Deref(lease.Spec.HolderIdentity, "") == "" {
			record("released")
		}
		return false, nil, nil
	})
	ctx, stop := context.WithCancel(context.Background())
	leading := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, leaderElectionTimings, "default", kube, NewFence(clock.RealClock{}, leaderElectionTimings.RenewDeadline.Duration), ktesting.NewLogger(t, ktesting.DefaultConfig), func(ctx context.Context) {
			close(leading)
			<-ctx.Done()
			record("stopping")
			time.Sleep(300 * time.Millisecond) // in-flight syncs finishing: room for a premature release
			record("drained")
		})
	}()
	awaitClosed(t, leading, "leadership")
	stop()
	awaitClosed(t, done, "Run to return")
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"stopping", "drained", "released"}; !slices.Equal(events, want) {
		t.Errorf("events = %q, want %q (the Lease released once, after the pipeline drained)", events, want)
	}
	lease, err := kube.CoordinationV1().Leases("trainyard-system").Get(context.Background(), "trainyard-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != "" {
		t.Errorf("Lease holder after stop = %q, want none", h)
	}
}
