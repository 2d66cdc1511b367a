package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/trainyard/trainyard/e2e/cluster"
	ctrlproc "github.com/trainyard/trainyard/e2e/controller"
)

// Lease timings of TestLeaderKilledMidBurst: short, so the test is, yet sound
// (renewDeadline + retryPeriod < leaseDuration, as the controller requires) and with
// room for a renewal on a busy two-core machine.
const (
	leaseDuration = 8 * time.Second
	renewDeadline = 6 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// TestLeaderKilledMidBurst runs two replicas with leader election, each authenticated
// as its own user so that the API server's audit log tells their writes apart, and
// SIGKILLs the leader in the middle of a burst of 1,000 TrainJobs. From the audit log:
// the follower wrote nothing while it followed; it took over (its first write) within
// leaseDuration + 2s of the kill; the old leader wrote nothing after the new leader's
// first write. And every TrainJob has exactly one JobSet.
func TestLeaderKilledMidBurst(t *testing.T) {
	timed(t)
	const n = 1000
	e := newEnv(t)
	ns := e.namespace(t)
	r := rng(t)
	const userA, userB = "trainyard-replica-a", "trainyard-replica-b"
	audit := e.auditFromNow(t)
	a, b := e.startReplicas(t, ns, userA, userB)

	burst := e.startBurst(ns, n, 0)
	killAt := n/4 + r.IntN(n/2)
	burst.waitCreated(killAt)
	if !a.ReadyzSays(t.Context(), "leader-election leading") {
		t.Fatalf("replica a no longer leads before the kill: it lost its lease (renewDeadline %s) on a busy machine (log: %s)", renewDeadline, a.LogPath)
	}
	a.Kill(t)
	killed := time.Now()
	t.Logf("leader killed after %d TrainJobs created", burst.created.Load())
	cluster.Eventually(t, leaseDuration+10*time.Second, "replica b leads", func(ctx context.Context) (bool, string) {
		return b.ReadyzSays(ctx, "leader-election leading"), "not leading"
	})
	leading := time.Since(killed)
	defer func() {
		if exited, err := b.Exited(); exited {
			t.Errorf("the new leader exited: %v (log: %s)", err, b.LogPath)
		}
	}()
	burst.wait(t, 5*time.Minute)
	final := e.waitAllJobSets(t, ns, n, 5*time.Minute)
	expectExact(t, final, n)

	events := readAudit(t, audit)
	var writesA, writesB, followerWrites, lateWrites int
	var firstB time.Time
	for _, ev := range events {
		switch ev.User.Username {
		case userB:
			writesB++
			if ev.RequestReceivedTimestamp.Before(killed) {
				followerWrites++
			}
			if firstB.IsZero() {
				firstB = ev.RequestReceivedTimestamp
			}
		}
	}
	if firstB.IsZero() {
		t.Fatalf("the audit log has no write by %s (log: %s)", userB, e.c.AuditLogPath())
	}
	for _, ev := range events {
		if ev.User.Username == userA {
			writesA++
			if !ev.RequestReceivedTimestamp.Before(firstB) {
				lateWrites++
			}
		}
	}
	takeover := firstB.Sub(killed)
	t.Logf("takeover %s (kill to the new leader's first write; leading reported after %s; target ≤ %s), writes: old leader %d, new leader %d; old leader's writes after the new leader's first: %d; follower's writes before the kill: %d; %s",
		takeover.Round(10*time.Millisecond), leading.Round(10*time.Millisecond), leaseDuration+2*time.Second, writesA, writesB, lateWrites, followerWrites, final)
	if writesA == 0 {
		t.Errorf("the audit log has no write by the old leader %s: it cannot tell the replicas apart", userA)
	}
	if lateWrites != 0 {
		t.Errorf("the old leader wrote %d times after the new leader's first write", lateWrites)
	}
	if followerWrites != 0 {
		t.Errorf("the follower wrote %d times before the leader was killed", followerWrites)
	}
	if takeover > leaseDuration+2*time.Second {
		t.Errorf("takeover took %s, more than leaseDuration + 2s = %s", takeover, leaseDuration+2*time.Second)
	}
}

// startReplicas starts two controllers with leader election (the Lease in ns, the
// short timings above), replica a as userA and b as userB, and returns once a leads
// and b follows.
func (e *env) startReplicas(t *testing.T, ns, userA, userB string) (a, b *ctrlproc.Process) {
	t.Helper()
	config := leaderElectionConfig(t, ns)
	a = e.startController(t, "a", userA, "--config="+config)
	cluster.Eventually(t, 30*time.Second, "replica a leads", func(ctx context.Context) (bool, string) {
		return a.ReadyzSays(ctx, "leader-election leading"), "not leading"
	})
	b = e.startController(t, "b", userB, "--config="+config)
	if !b.ReadyzSays(t.Context(), "leader-election following") {
		t.Fatal("replica b does not report following")
	}
	return a, b
}

// leaderElectionConfig writes a controller Configuration with leader election on, the
// Lease in ns and the short timings above, and returns its path.
func leaderElectionConfig(t *testing.T, ns string) string {
	t.Helper()
	config := filepath.Join(t.TempDir(), "config.yaml")
	data := fmt.Sprintf(`apiVersion: config.trainyard.dev/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: true
  resourceNamespace: %s
  leaseDuration: %s
  renewDeadline: %s
  retryPeriod: %s
`, ns, leaseDuration, renewDeadline, retryPeriod)
	if err := os.WriteFile(config, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return config
}

// TestLeaderPausedPastItsLease freezes the leader (SIGSTOP to its process group, as a
// long GC pause, a frozen cgroup or a suspended VM would) mid-burst until the follower
// has taken over, then lets it run again (SIGCONT). The old leader must not write once
// the new leader has: from the audit log, zero writes by it after the new leader's
// first.
//
// Leader election alone cannot stop a process that was not running: before the write
// fence (pkg/lease/fence.go), the old leader's pipeline wrote what it had
// queued at once on resuming and kept running until its renewal round gave up,
// renewDeadline later (one run: 308 JobSet applies accepted after the new leader's
// first write, the first 41 ms after resuming). The fence refuses every leader-only
// write once the last successful renewal, on the monotonic clock, is renewDeadline old.
func TestLeaderPausedPastItsLease(t *testing.T) {
	timed(t)
	const n = 1000
	e := newEnv(t)
	ns := e.namespace(t)
	const userA, userB = "trainyard-paused-a", "trainyard-paused-b"
	audit := e.auditFromNow(t)
	a, b := e.startReplicas(t, ns, userA, userB)
	burst := e.startBurst(ns, n, 0)
	burst.waitCreated(n / 2)
	if err := syscall.Kill(-a.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	cluster.Eventually(t, leaseDuration+10*time.Second, "replica b leads", func(ctx context.Context) (bool, string) {
		return b.ReadyzSays(ctx, "leader-election leading"), "not leading"
	})
	if err := syscall.Kill(-a.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	burst.wait(t, 5*time.Minute)
	final := e.waitAllJobSets(t, ns, n, 3*time.Minute)
	expectExact(t, final, n)
	// The old leader gives up within renewDeadline of resuming, at the latest.
	time.Sleep(renewDeadline + time.Second)

	events := readAudit(t, audit)
	var firstB time.Time
	for _, ev := range events {
		if ev.User.Username == userB {
			firstB = ev.RequestReceivedTimestamp
			break
		}
	}
	if firstB.IsZero() {
		t.Fatalf("the audit log has no write by %s", userB)
	}
	late := 0
	for _, ev := range events {
		if ev.User.Username == userA && !ev.RequestReceivedTimestamp.Before(firstB) {
			if late++; late <= 5 {
				t.Logf("old leader's write %s after resuming: %s %s/%s, code %d", ev.RequestReceivedTimestamp.Sub(resumed).Round(time.Millisecond), ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name, ev.Code())
			}
		}
	}
	exited, _ := a.Exited()
	t.Logf("paused %s; the new leader's first write %s after the pause; old leader's writes after it: %d; old leader exited: %t",
		resumed.Sub(paused).Round(10*time.Millisecond), firstB.Sub(paused).Round(10*time.Millisecond), late, exited)
	if late != 0 {
		t.Errorf("the old leader wrote %d times after the new leader's first write", late)
	}
	if !exited {
		t.Errorf("the old leader still runs %s after resuming without its lease (log: %s)", time.Since(resumed).Round(time.Second), a.LogPath)
	}
}
