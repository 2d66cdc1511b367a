package faults

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestControllerKilledDuringBurst SIGKILLs the controller three times at random points
// of a burst of TrainJobs (-faults.burst, default 2,000), starting a fresh process after
// each kill as a Deployment would. Whatever each process had in flight — a JobSet
// apply sent but not answered, a status patch half-way — the last one finds it: every
// TrainJob ends with exactly one JobSet it controls, none is lost, none duplicated.
// The kill points are drawn from -faults.seed: after a random count of created
// TrainJobs, plus a random delay under a second.
func TestControllerKilledDuringBurst(t *testing.T) {
	timed(t)
	e := newEnv(t)
	ns := e.namespace(t)
	r := rng(t)
	n := *burstSize
	kills := make([]int, 3)
	for i := range kills {
		kills[i] = n/10 + r.IntN(n*8/10)
	}
	slices.Sort(kills)

	ctrl := e.startController(t, "run0", "trainyard")
	b := e.startBurst(ns, n, 0)
	var restarts []time.Duration
	for i, at := range kills {
		b.waitCreated(at)
		delay := time.Duration(r.IntN(1000)) * time.Millisecond
		time.Sleep(delay)
		created := b.created.Load()
		ctrl.Kill(t)
		killed := time.Now()
		ctrl = e.startController(t, fmt.Sprintf("run%d", i+1), "trainyard")
		restarts = append(restarts, time.Since(killed).Round(100*time.Millisecond))
		t.Logf("kill %d: after %d TrainJobs created (+%s); the next process was ready %s later", i+1, created, delay, restarts[i])
	}
	created := b.wait(t, 5*time.Minute)
	ty := e.waitAllJobSets(t, ns, n, 5*time.Minute)
	converged := time.Since(b.end)
	// Nothing more comes: a duplicate made late would show now.
	time.Sleep(2 * time.Second)
	final, err := e.count(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	expectExact(t, final, n)
	if exited, err := ctrl.Exited(); exited {
		t.Errorf("the last controller process exited: %v (log: %s)", err, ctrl.LogPath)
	}
	t.Logf("%d TrainJobs created in %s (%d create retries); the last JobSet %s after the last TrainJob; %s; restarts ready in %v",
		n, created.Round(100*time.Millisecond), b.retries.Load(), converged.Round(100*time.Millisecond), ty, restarts)
	t.Logf("lost %d, duplicates %d", len(final.lost), final.duplicates)
}
