package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// TestOneNamespaceBurstDoesNotHoldAnother (issue 25, item 7): one team has 1,500
// TrainJobs waiting when the controller starts, more than the pipeline's 500 in-flight
// slots, so most of them wait for a slot; then another team creates 5. A freed slot goes round robin to the
// namespaces with TrainJobs waiting (docs/design/architecture.md#one-namespaces-burst-does-not-hold-another),
// so the other team's JobSets come within a few slots, long before the burst is
// through: the test asserts that at least a fifth of the burst still waits for its
// JobSet when the last of the 5 has its own (measured: 3.8–4.4 s after the controller
// started, with 961–990 of 1,500 still waiting). With one queue in arrival order they
// wait for the whole backlog ahead of them (11.5 s, 60 still waiting: the test fails).
func TestOneNamespaceBurstDoesNotHoldAnother(t *testing.T) {
	timed(t)
	const burstSize, others = 1500, 5
	e := newEnv(t)
	busy, quiet := e.namespace(t), e.namespace(t)
	// The burst is all there when the controller starts, so its first list queues every
	// TrainJob at once: the backlog of a burst faster than the pipeline, made certain.
	e.startBurst(busy, burstSize, 0).wait(t, 3*time.Minute)
	e.startController(t, "", "trainyard-fairness")
	created := time.Now()
	e.startBurst(quiet, others, 0).wait(t, time.Minute)

	var busyDone, quietDone int
	cluster.Eventually(t, 3*time.Minute, fmt.Sprintf("the %d TrainJobs of %s with their JobSets", others, quiet), func(ctx context.Context) (bool, string) {
		// The busy namespace first: a count taken after the quiet one's would flatter
		// the quiet one.
		busyDone = e.jobSetCount(ctx, t, busy)
		quietDone = e.jobSetCount(ctx, t, quiet)
		return quietDone == others, fmt.Sprintf("%d of %d", quietDone, others)
	})
	latency := time.Since(created)
	waiting := burstSize - busyDone
	t.Logf("%d TrainJobs of %s got their JobSets %v after the controller started, while %d of the other namespace's %d still waited for theirs (%.0f%%)",
		others, "the quiet namespace", latency.Round(10*time.Millisecond), waiting, burstSize, 100*float64(waiting)/burstSize)
	if waiting < burstSize/5 {
		t.Errorf("only %d of %d TrainJobs of the busy namespace still waited when the quiet one's %d had their JobSets: the quiet namespace waited behind the burst", waiting, burstSize, others)
	}
	final := e.waitAllJobSets(t, busy, burstSize, 5*time.Minute)
	expectExact(t, final, burstSize)
}

// jobSetCount returns how many JobSets ns holds, from the API server's watch cache.
func (e *env) jobSetCount(ctx context.Context, t *testing.T, ns string) int {
	t.Helper()
	jss, err := e.jobsets.JobsetV1alpha2().JobSets(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Logf("listing the JobSets of %s: %v", ns, err)
		return 0
	}
	return len(jss.Items)
}
