package faults

import (
	"context"
	"testing"
	"time"

	"github.com/trainyard/trainyard/e2e/cluster"
)

// apiServerOutage is how long TestAPIServerOutage keeps the API server stopped.
const apiServerOutage = 30 * time.Second

// TestAPIServerOutage stops the API server for 30 s in the middle of a burst of 600
// TrainJobs and starts it again in place (same port, same etcd). The controller is left
// alone: it must keep running through the outage (no exit, so no crash loop under a
// Deployment), resume by itself once the API server is back — its informers re-list,
// its failed writes are retried — and give every TrainJob exactly one JobSet. The
// figures, from the audit log: recovery (API server ready to the controller's first
// write: a retry of a write the outage failed) and resume (API server ready to the
// first JobSet of a TrainJob created after it: the TrainJob informer watches again).
// Resume is bounded by client-go's reflector backoff, not by the controller: every
// failed list or watch during the outage doubled the wait before the next one (0.8 s
// up to 30 s, jittered up to 2×), so it takes up to a minute; the test allows 2.
func TestAPIServerOutage(t *testing.T) {
	timed(t)
	const n = 600
	const user = "trainyard-outage"
	e := newEnv(t)
	e.settleAfterOutage(t)
	ns := e.namespace(t)
	audit := e.auditFromNow(t)
	ctrl := e.startController(t, "", user)

	b := e.startBurst(ns, n, 0)
	b.waitCreated(n / 3)
	stopped := time.Now()
	if err := e.c.StopComponent(cluster.KubeAPIServer); err != nil {
		t.Fatal(err)
	}
	t.Logf("API server stopped after %d TrainJobs created", b.created.Load())
	time.Sleep(apiServerOutage - time.Since(stopped))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := e.c.StartComponent(ctx, cluster.KubeAPIServer); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("API server back after %s", back.Sub(stopped).Round(100*time.Millisecond))

	b.wait(t, 5*time.Minute)
	final := e.waitAllJobSets(t, ns, n, 4*time.Minute)
	allDone := time.Since(back)
	expectExact(t, final, n)
	if exited, err := ctrl.Exited(); exited {
		t.Fatalf("the controller exited during the outage: %v (log: %s)", err, ctrl.LogPath)
	}
	if !ctrl.Ready(t.Context()) {
		t.Errorf("the controller is not ready after the outage (log: %s)", ctrl.LogPath)
	}

	events := readAudit(t, audit)
	var firstAfter, resumed time.Time
	createdAfter := map[string]bool{} // TrainJobs created after the API server was back
	for _, ev := range events {
		if !ev.Succeeded() || !ev.RequestReceivedTimestamp.After(back) || ev.ObjectRef == nil || ev.ObjectRef.Namespace != ns {
			continue
		}
		switch {
		case ev.Verb == "create" && ev.ObjectRef.Resource == "trainjobs":
			createdAfter[ev.ObjectRef.Name] = true
		case ev.User.Username == user && firstAfter.IsZero():
			firstAfter = ev.RequestReceivedTimestamp
		}
		if ev.User.Username == user && ev.ObjectRef.Resource == "jobsets" && createdAfter[ev.ObjectRef.Name] && resumed.IsZero() {
			resumed = ev.RequestReceivedTimestamp
		}
	}
	if firstAfter.IsZero() || resumed.IsZero() {
		t.Fatalf("the audit log has no write by the controller after the outage, or none for a TrainJob created after it (log: %s)", e.c.AuditLogPath())
	}
	t.Logf("recovery %s (API server ready to the controller's first write), resume %s (to the first JobSet of a TrainJob created after the outage), the last JobSet %s after the API server was back; %d create retries during the outage; the controller kept running (pid %d); %s",
		firstAfter.Sub(back).Round(10*time.Millisecond), resumed.Sub(back).Round(10*time.Millisecond), allDone.Round(100*time.Millisecond), b.retries.Load(), ctrl.Pid(), final)
	if allDone > 2*time.Minute {
		t.Errorf("the last JobSet came %s after the API server was back, want ≤ 2m (reflector backoff ≤ 1m, then the work)", allDone)
	}
}
