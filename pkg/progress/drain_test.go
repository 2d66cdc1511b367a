package progress_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/cache"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/progress"
)

// runPipeline runs f's Stage in a pipeline of its own, fed by the Coalescer, as the
// controller does; the pipeline stops when the test ends.
func runPipeline(t *testing.T, f *stageFixture) {
	t.Helper()
	p, err := engine.New([]engine.Stage{f.stage})
	if err != nil {
		t.Fatal(err)
	}
	f.enq.mu.Lock()
	f.enq.forward = func(k cache.ObjectName) { p.Enqueue(progress.Name, k) }
	f.enq.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitWritten waits until f has applied n reports; the timeout only guards against a
// hang.
func waitWritten(t *testing.T, f *stageFixture, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(f.written()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("writes %v, want %d", f.written(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDrainWritesReportsTheirPeriodDefers: a stopping replica writes the reports it
// answered 200 that the period still defers (a TrainJob's last report before the
// trainer exits is one), at once rather than at the period's end, and Drain returns
// once none is pending.
func TestDrainWritesReportsTheirPeriodDefers(t *testing.T) {
	a, b := key("team-a", "a"), key("team-b", "b")
	f := newStageFixture(t, progress.WriteLimits{Period: time.Hour},
		trainJob("team-a", "a", nil), trainJob("team-b", "b", nil))
	runPipeline(t, f)
	f.record(a, status(10, t0.Add(-time.Minute)))
	f.record(b, status(20, t0.Add(-time.Minute)))
	waitWritten(t, f, 2)
	f.record(a, status(11, t0)) // deferred by the hour's period
	f.record(b, status(21, t0))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if lost := f.stage.Drain(ctx); lost != 0 {
		t.Fatalf("Drain lost %d reports, want 0", lost)
	}
	got := f.written()[2:]
	if len(got) == 2 && got[0] > got[1] {
		got[0], got[1] = got[1], got[0]
	}
	if diff := cmp.Diff([]string{"team-a/a=11", "team-b/b=21"}, got); diff != "" {
		t.Errorf("writes during the drain (-want +got):\n%s", diff)
	}
}

// TestDrainReportsWhatItCouldNotWrite: a report whose write keeps failing is retried
// until the drain period ends, and counted as lost then.
func TestDrainReportsWhatItCouldNotWrite(t *testing.T) {
	a := key("team-a", "a")
	f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "a", nil))
	f.applyErr = errors.New("connection refused")
	runPipeline(t, f)
	f.record(a, status(10, t0))

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if lost := f.stage.Drain(ctx); lost != 1 {
		t.Errorf("Drain lost %d reports, want 1 (its write always fails)", lost)
	}
	if len(f.written()) == 0 {
		t.Error("the report was never tried during the drain")
	}
}

// TestDrainWithNothingPending returns at once.
func TestDrainWithNothingPending(t *testing.T) {
	f := newStageFixture(t, progress.WriteLimits{})
	if lost := f.stage.Drain(context.Background()); lost != 0 {
		t.Errorf("Drain lost %d reports, want 0", lost)
	}
}

// TestDrainWaitsForTheWriteUnderWay: a report whose write is under way when the replica
// starts stopping (a trainer's final report, written without waiting for the period,
// moments before SIGTERM) is waited for, not left to the pipeline's stop, which would
// cancel it (e2e TestProgressReportsWrittenAtShutdown lost it so).
func TestDrainWaitsForTheWriteUnderWay(t *testing.T) {
	a := key("team-a", "a")
	f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "a", nil))
	inWrite, release := make(chan struct{}), make(chan struct{})
	var applied atomic.Bool
	f.onApply = func() {
		close(inWrite)
		<-release
		applied.Store(true)
	}
	runPipeline(t, f)
	f.record(a, status(100, t0))
	<-inWrite
	go func() {
		time.Sleep(200 * time.Millisecond)
		close(release)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if lost := f.stage.Drain(ctx); lost != 0 {
		t.Fatalf("Drain lost %d reports, want 0", lost)
	}
	if !applied.Load() {
		t.Error("Drain returned while the write was still under way")
	}
}

// TestDrainWritesManyReportsOfOneNamespace: drainReports reports of one namespace,
// pending when the replica stops, are all written within the controller's drain period
// (10 s) at the default write limits. Before the drain's own pace (QPS × DrainSpeedup
// over all namespaces), the namespace's 10 writes a second wrote ~120 of them and lost
// the rest.
func TestDrainWritesManyReportsOfOneNamespace(t *testing.T) {
	if testing.Short() {
		t.Skip("drains for ~5 s")
	}
	const drainReports = 1000
	var tjs []*trainer.TrainJob
	for i := range drainReports {
		tjs = append(tjs, trainJob("team-a", fmt.Sprintf("tj-%d", i), nil))
	}
	f := newStageFixture(t, progress.WriteLimits{}, tjs...)
	realClock, err := progress.NewStage(progress.StageConfig{ // the rate limits on the wall clock
		Client: f.client, TrainJobs: trainerlisters.NewTrainJobLister(f.trainJobs), Coalescer: f.coalescer,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.stage = realClock
	runPipeline(t, f)
	for i := range drainReports {
		f.record(key("team-a", fmt.Sprintf("tj-%d", i)), status(10, t0))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // progressDrainTimeout
	defer cancel()
	start := time.Now()
	if lost := f.stage.Drain(ctx); lost != 0 {
		t.Fatalf("Drain lost %d of %d reports of one namespace, want 0", lost, drainReports)
	}
	t.Logf("drained %d reports of one namespace in %v", drainReports, time.Since(start).Round(time.Millisecond))
}
