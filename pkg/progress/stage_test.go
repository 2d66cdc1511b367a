package progress_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
	"github.com/trainyard/trainyard/pkg/progress/wire"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// status returns a valid report stamped at.
func status(percent int32, at time.Time, ms ...trainer.Metric) *trainer.TrainerStatus {
	return &trainer.TrainerStatus{
		ProgressPercentage:        ptr.To(percent),
		EstimatedRemainingSeconds: ptr.To(100 - percent),
		Metrics:                   ms,
		LastUpdatedTime:           ptr.To(metav1.NewTime(at)),
	}
}

// stageFixture is a Stage over a fake clientset whose trainjobs/status applies are
// recorded (and answered with applyErr when set), a hand-filled TrainJob cache and a
// fake clock.
type stageFixture struct {
	t         testing.TB
	clock     *testingclock.FakePassiveClock
	trainJobs cache.Indexer
	obs       *observer
	enq       *enqueued
	coalescer *progress.Coalescer
	stage     *progress.Stage
	client    *trainerfake.Clientset // the Stage's, whose patches are recorded

	mu       sync.Mutex
	applies  []clienttesting.PatchActionImpl
	applyErr error
	onApply  func() // called inside the apply, e.g. to record a report meanwhile
}

func newStageFixture(t testing.TB, limits progress.WriteLimits, tjs ...*trainer.TrainJob) *stageFixture {
	return newStageFixtureWith(t, limits, nil, tjs...)
}

// newStageFixtureWith is newStageFixture with options for its Coalescer.
func newStageFixtureWith(t testing.TB, limits progress.WriteLimits, opts []progress.CoalescerOption, tjs ...*trainer.TrainJob) *stageFixture {
	f := &stageFixture{
		t:         t,
		clock:     testingclock.NewFakePassiveClock(t0),
		trainJobs: utiltesting.Indexer(t),
		obs:       &observer{},
		enq:       &enqueued{},
	}
	for _, tj := range tjs {
		f.setTrainJob(tj)
	}
	client := trainerfake.NewSimpleClientset()
	f.client = client
	client.PrependReactor("patch", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchActionImpl)
		f.mu.Lock()
		f.applies = append(f.applies, p)
		err, onApply := f.applyErr, f.onApply
		f.mu.Unlock()
		if onApply != nil {
			onApply()
		}
		if err != nil {
			return true, nil, err
		}
		return true, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}, nil
	})
	f.coalescer = progress.NewCoalescer(f.enq.add, f.obs, opts...)
	stage, err := progress.NewStage(progress.StageConfig{
		Client:    client,
		TrainJobs: trainerlisters.NewTrainJobLister(f.trainJobs),
		Coalescer: f.coalescer,
		Limits:    limits,
		Clock:     f.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.stage = stage
	return f
}

// trainJob returns TrainJob ns/name (uid "<name>-uid") with resourceVersion 7 and
// trainerStatus stored.
func trainJob(namespace, name string, stored *trainer.TrainerStatus) *trainer.TrainJob {
	tj := utiltesting.MakeTrainJob(namespace, name).TrainerStatus(stored).Obj()
	tj.ResourceVersion = "7"
	return tj
}

func (f *stageFixture) setTrainJob(tj *trainer.TrainJob) {
	f.t.Helper()
	if err := f.trainJobs.Update(tj); err != nil {
		f.t.Fatal(err)
	}
}

func (f *stageFixture) record(k cache.ObjectName, ts *trainer.TrainerStatus) {
	f.coalescer.Record(k, types.UID(k.Name+"-uid"), ts)
}

func (f *stageFixture) sync(k cache.ObjectName) (engine.Result, error) {
	return f.stage.Sync(context.Background(), k)
}

// mustSync syncs k and fails unless the result is want with no error.
func (f *stageFixture) mustSync(k cache.ObjectName, want engine.Result) {
	f.t.Helper()
	got, err := f.sync(k)
	if err != nil || got != want {
		f.t.Fatalf("Sync(%s) = %+v, %v; want %+v, nil", k, got, err, want)
	}
}

func (f *stageFixture) advance(d time.Duration) { f.clock.SetTime(f.clock.Now().Add(d)) }

// written returns the progressPercentage of each applied report, in order, as
// "ns/name=percent".
func (f *stageFixture) written() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.applies {
		var body struct {
			Status struct {
				TrainerStatus trainer.TrainerStatus `json:"trainerStatus"`
			} `json:"status"`
		}
		if err := json.Unmarshal(p.Patch, &body); err != nil {
			f.t.Fatalf("apply body %s: %v", p.Patch, err)
		}
		s := p.Namespace + "/" + p.Name + "="
		if pp := body.Status.TrainerStatus.ProgressPercentage; pp != nil {
			s += strings.TrimSpace(string(mustJSON(f.t, *pp)))
		}
		out = append(out, s)
	}
	return out
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStageName(t *testing.T) {
	f := newStageFixture(t, progress.WriteLimits{})
	if f.stage.Name() != "progress" || progress.Name != "progress" {
		t.Errorf("Name() = %q, want progress", f.stage.Name())
	}
}

// TestStageCoalesces: 100 reports between two syncs cost one write, of the last.
func TestStageCoalesces(t *testing.T) {
	llm := key("team-a", "llm")
	f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
	for i := range 100 {
		f.record(llm, status(int32(i), t0.Add(time.Duration(i)*time.Second-200*time.Second)))
	}
	if diff := cmp.Diff([]string{"team-a/llm"}, keyStrings(f.enq.get())); diff != "" {
		t.Errorf("enqueued (-want +got):\n%s", diff)
	}
	f.mustSync(llm, engine.WaitForEvent())
	f.mustSync(llm, engine.WaitForEvent()) // nothing left
	if diff := cmp.Diff([]string{"team-a/llm=99"}, f.written()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if f.obs.coalesced != 99 || len(f.obs.writes) != 1 || f.obs.writes[0] != "success" {
		t.Errorf("observed %d coalesced and writes %v, want 99 and [success]", f.obs.coalesced, f.obs.writes)
	}
}

// TestStageWritesOnlyNewerReports: a report is written only when its lastUpdatedTime,
// at the API server's second precision, is newer than the stored one.
func TestStageWritesOnlyNewerReports(t *testing.T) {
	stored := status(40, t0, trainer.Metric{Name: "loss", Value: "0.5"})
	for name, tc := range map[string]struct {
		stored      *trainer.TrainerStatus
		report      *trainer.TrainerStatus
		wantWritten bool
		wantDropped string
	}{
		"nothing stored":                  {stored: nil, report: status(40, t0), wantWritten: true},
		"newer":                           {stored: stored, report: status(41, t0.Add(time.Second)), wantWritten: true},
		"newer, same values":              {stored: stored, report: status(40, t0.Add(time.Second), trainer.Metric{Name: "loss", Value: "0.5"}), wantWritten: true},
		"unchanged":                       {stored: stored, report: status(40, t0, trainer.Metric{Name: "loss", Value: "0.5"}), wantDropped: metrics.ReasonUnchanged},
		"unchanged, with sub-second time": {stored: stored, report: status(40, t0.Add(900*time.Millisecond), trainer.Metric{Name: "loss", Value: "0.5"}), wantDropped: metrics.ReasonUnchanged},
		"same second, more progress":      {stored: stored, report: status(45, t0.Add(500*time.Millisecond)), wantWritten: true},
		"same second, other metrics":      {stored: stored, report: status(40, t0, trainer.Metric{Name: "loss", Value: "0.4"}), wantWritten: true},
		"same second, less progress":      {stored: stored, report: status(35, t0.Add(500*time.Millisecond)), wantDropped: metrics.ReasonStale},
		"older":                           {stored: stored, report: status(90, t0.Add(-time.Second)), wantDropped: metrics.ReasonStale},
	} {
		t.Run(name, func(t *testing.T) {
			llm := key("team-a", "llm")
			f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", tc.stored))
			f.record(llm, tc.report)
			f.mustSync(llm, engine.WaitForEvent())
			if got := len(f.written()) == 1; got != tc.wantWritten {
				t.Errorf("written %v, want a write: %t", f.written(), tc.wantWritten)
			}
			var wantDropped []string
			if tc.wantDropped != "" {
				wantDropped = []string{tc.wantDropped}
			}
			if diff := cmp.Diff(wantDropped, f.obs.dropped); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
			if p := f.coalescer.Pending(llm); p != nil {
				t.Errorf("still pending: %+v", p)
			}
		})
	}
}

// TestStagePeriod: a report within the period of the last write waits for its end,
// then is written; never dropped.
func TestStagePeriod(t *testing.T) {
	llm := key("team-a", "llm")
	f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
	f.record(llm, status(10, t0))
	f.mustSync(llm, engine.WaitForEvent())

	f.advance(3 * time.Second)
	f.record(llm, status(20, t0.Add(3*time.Second)))
	f.mustSync(llm, engine.RequeueAfter(7*time.Second))
	f.advance(2 * time.Second)
	f.record(llm, status(30, t0.Add(5*time.Second))) // replaces 20
	f.mustSync(llm, engine.RequeueAfter(5*time.Second))
	if diff := cmp.Diff([]string{"team-a/llm=10"}, f.written()); diff != "" {
		t.Fatalf("writes within the period (-want +got):\n%s", diff)
	}

	f.advance(5 * time.Second)
	f.mustSync(llm, engine.WaitForEvent())
	if diff := cmp.Diff([]string{"team-a/llm=10", "team-a/llm=30"}, f.written()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	// Keys enqueued: the first report's, and the one after the write; the reports
	// arriving while one was pending added none.
	if diff := cmp.Diff([]string{"team-a/llm", "team-a/llm"}, keyStrings(f.enq.get())); diff != "" {
		t.Errorf("enqueued (-want +got):\n%s", diff)
	}
}

// TestStageFinishedTrainJobIsWrittenAtOnce: the period does not hold back the report
// of a TrainJob that finished.
func TestStageFinishedTrainJobIsWrittenAtOnce(t *testing.T) {
	for name, tc := range map[string]struct {
		condition metav1.Condition
		want      engine.Result
	}{
		"Complete": {condition: utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", ""), want: engine.WaitForEvent()},
		"Failed":   {condition: utiltesting.Condition(trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs", ""), want: engine.WaitForEvent()},
		"Suspended, not finished": {condition: utiltesting.Condition(trainer.TrainJobSuspended, metav1.ConditionTrue, "Suspended", ""),
			want: engine.RequeueAfter(9 * time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			llm := key("team-a", "llm")
			f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
			f.record(llm, status(90, t0))
			f.mustSync(llm, engine.WaitForEvent())
			f.advance(time.Second)
			f.record(llm, status(95, t0.Add(time.Second)))
			tj := trainJob("team-a", "llm", status(90, t0))
			tj.Status.Conditions = []metav1.Condition{tc.condition}
			f.setTrainJob(tj)
			f.coalescer.Flush(llm)
			f.mustSync(llm, tc.want)
			wantWrites := 2
			if tc.want.Code == engine.CodeRequeueAfter {
				wantWrites = 1
			}
			if got := f.written(); len(got) != wantWrites {
				t.Errorf("writes %v, want %d", got, wantWrites)
			}
		})
	}
}

// TestStageFirstFinalReportIsWrittenAtOnce: a trainer's report of progressPercentage
// 100 is its last, sent as its process exits; the period must not hold it back past
// the TrainJob's completion, when readers such as an OptimizationJob take the trial's
// metric. Only the first such report skips the period: a trainer that keeps reporting
// 100 costs no more writes than one that reports anything else.
func TestStageFirstFinalReportIsWrittenAtOnce(t *testing.T) {
	llm := key("team-a", "llm")
	f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
	f.record(llm, status(10, t0))
	f.mustSync(llm, engine.WaitForEvent())
	f.advance(time.Second)
	f.record(llm, status(50, t0.Add(time.Second)))
	f.mustSync(llm, engine.RequeueAfter(9*time.Second))

	f.advance(time.Second)
	f.record(llm, status(100, t0.Add(2*time.Second), trainer.Metric{Name: "loss", Value: "0.12"}))
	// Enqueued by the reports of 10 and 50 (none pending, none deferred), then by this one.
	if got := keyStrings(f.enq.get()); len(got) != 3 {
		t.Fatalf("enqueued %v: the final report must schedule its write though a deferred one is due", got)
	}
	f.mustSync(llm, engine.WaitForEvent())
	if diff := cmp.Diff([]string{"team-a/llm=10", "team-a/llm=100"}, f.written()); diff != "" {
		t.Fatalf("writes (-want +got):\n%s", diff)
	}

	f.advance(time.Second)
	f.setTrainJob(trainJob("team-a", "llm", status(100, t0.Add(2*time.Second))))
	f.record(llm, status(100, t0.Add(3*time.Second)))
	f.mustSync(llm, engine.RequeueAfter(9*time.Second))
	f.advance(time.Second)
	f.record(llm, status(100, t0.Add(4*time.Second)))
	if got := keyStrings(f.enq.get()); len(got) != 4 {
		t.Errorf("enqueued %v: a second final report waits for the deferred write like any other", got)
	}
	if got := f.written(); len(got) != 2 {
		t.Errorf("writes %v: a second final report must wait for the period", got)
	}
}

// TestStageFastTrainerLosesNoReport: a trainer whose whole run fits in one second (the
// digits example's 30 epochs train in 0.7 s on the real node) sends every report with
// the same lastUpdatedTime. Its last one is written, not dropped as no newer than the
// first: the real-node OptimizationJob e2e saw trials ranked by their first epoch's
// loss when it was. A report of that second with less progress is still stale.
func TestStageFastTrainerLosesNoReport(t *testing.T) {
	llm := key("team-a", "llm")
	f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
	f.record(llm, status(3, t0, trainer.Metric{Name: "loss", Value: "2.30"}))
	f.mustSync(llm, engine.WaitForEvent())
	f.record(llm, status(50, t0.Add(300*time.Millisecond), trainer.Metric{Name: "loss", Value: "0.40"}))
	f.record(llm, status(40, t0.Add(400*time.Millisecond), trainer.Metric{Name: "loss", Value: "0.50"})) // another rank, behind
	f.record(llm, status(100, t0.Add(700*time.Millisecond), trainer.Metric{Name: "loss", Value: "0.09"}))
	f.mustSync(llm, engine.WaitForEvent())
	if diff := cmp.Diff([]string{"team-a/llm=3", "team-a/llm=100"}, f.written()); diff != "" {
		t.Fatalf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{metrics.ReasonStale}, f.obs.dropped); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
}

// TestStageDropsReportsOfGoneTrainJobs: a TrainJob deleted, or re-created under the same
// name, loses its pending report.
func TestStageDropsReportsOfGoneTrainJobs(t *testing.T) {
	llm := key("team-a", "llm")
	t.Run("deleted", func(t *testing.T) {
		f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
		f.record(llm, status(10, t0))
		if err := f.trainJobs.Delete(trainJob("team-a", "llm", nil)); err != nil {
			t.Fatal(err)
		}
		f.mustSync(llm, engine.WaitForEvent())
		if len(f.written()) != 0 || f.coalescer.Len() != 0 {
			t.Errorf("writes %v, %d TrainJobs kept; want none", f.written(), f.coalescer.Len())
		}
		if diff := cmp.Diff([]string{metrics.ReasonGone}, f.obs.dropped); diff != "" {
			t.Errorf("dropped (-want +got):\n%s", diff)
		}
	})
	t.Run("re-created", func(t *testing.T) {
		f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
		f.record(llm, status(10, t0))
		tj := trainJob("team-a", "llm", nil)
		tj.UID = "llm-uid-2"
		f.setTrainJob(tj)
		f.mustSync(llm, engine.WaitForEvent())
		if len(f.written()) != 0 || f.coalescer.Len() != 0 {
			t.Errorf("writes %v, %d TrainJobs kept; want none", f.written(), f.coalescer.Len())
		}
	})
	t.Run("forgotten", func(t *testing.T) {
		f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
		f.record(llm, status(10, t0))
		f.coalescer.Forget(llm)
		f.mustSync(llm, engine.WaitForEvent())
		if len(f.written()) != 0 || f.coalescer.Len() != 0 {
			t.Errorf("writes %v, %d TrainJobs kept; want none", f.written(), f.coalescer.Len())
		}
	})
}

// TestStageNeverRegresses: after a write, a report older than it is not written even
// while the informer cache still shows an older trainerStatus.
func TestStageNeverRegresses(t *testing.T) {
	llm := key("team-a", "llm")
	f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", status(0, t0.Add(-time.Minute))))
	f.record(llm, status(50, t0))
	f.mustSync(llm, engine.WaitForEvent())
	f.advance(time.Minute)
	f.record(llm, status(40, t0.Add(-time.Second))) // reordered on the way
	f.mustSync(llm, engine.WaitForEvent())
	if diff := cmp.Diff([]string{"team-a/llm=50"}, f.written()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{metrics.ReasonStale}, f.obs.dropped); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
}

// TestStageRateLimits: a namespace out of tokens has its keys requeued while another
// namespace's are written; the global bucket bounds everyone; a deferred write holds
// the tokens it waits for, so writes waiting for the same bucket go in turn.
func TestStageRateLimits(t *testing.T) {
	a1, a2, a3, b1 := key("ns-a", "a1"), key("ns-a", "a2"), key("ns-a", "a3"), key("ns-b", "b1")
	t.Run("per namespace", func(t *testing.T) {
		f := newStageFixture(t, progress.WriteLimits{NamespaceQPS: 1, NamespaceBurst: 2},
			trainJob("ns-a", "a1", nil), trainJob("ns-a", "a2", nil), trainJob("ns-a", "a3", nil), trainJob("ns-b", "b1", nil))
		for _, k := range []cache.ObjectName{a1, a2, a3, b1} {
			f.record(k, status(1, t0))
		}
		f.mustSync(a1, engine.WaitForEvent())
		f.mustSync(a2, engine.WaitForEvent())
		f.mustSync(a3, engine.RequeueAfter(time.Second)) // ns-a's burst is spent
		f.mustSync(b1, engine.WaitForEvent())            // ns-b is not held back
		if diff := cmp.Diff([]string{"ns-a/a1=1", "ns-a/a2=1", "ns-b/b1=1"}, f.written()); diff != "" {
			t.Errorf("writes (-want +got):\n%s", diff)
		}
		if f.coalescer.Pending(a3) == nil {
			t.Error("a3's report was dropped, want it pending")
		}
		f.advance(time.Second)
		f.mustSync(a3, engine.WaitForEvent())
		if got := f.written(); len(got) != 4 || got[3] != "ns-a/a3=1" {
			t.Errorf("writes %v, want a3's last", got)
		}
	})
	t.Run("global", func(t *testing.T) {
		f := newStageFixture(t, progress.WriteLimits{QPS: 2, Burst: 1},
			trainJob("ns-a", "a1", nil), trainJob("ns-a", "a2", nil), trainJob("ns-b", "b1", nil))
		for _, k := range []cache.ObjectName{a1, a2, b1} {
			f.record(k, status(1, t0))
		}
		f.mustSync(a1, engine.WaitForEvent())
		f.mustSync(b1, engine.RequeueAfter(500*time.Millisecond)) // the next token is b1's
		f.mustSync(a2, engine.RequeueAfter(time.Second))          // and the one after, a2's
		f.mustSync(b1, engine.RequeueAfter(500*time.Millisecond)) // asking again keeps b1's turn
		f.advance(500 * time.Millisecond)
		f.mustSync(b1, engine.WaitForEvent())
		f.mustSync(a2, engine.RequeueAfter(500*time.Millisecond))
		if diff := cmp.Diff([]string{"ns-a/a1=1", "ns-b/b1=1"}, f.written()); diff != "" {
			t.Errorf("writes (-want +got):\n%s", diff)
		}
	})
	t.Run("a dropped deferred write gives its turn back", func(t *testing.T) {
		a4 := key("ns-a", "a4")
		f := newStageFixture(t, progress.WriteLimits{NamespaceQPS: 1, NamespaceBurst: 1},
			trainJob("ns-a", "a1", nil), trainJob("ns-a", "a2", nil), trainJob("ns-a", "a4", nil))
		for _, k := range []cache.ObjectName{a1, a2, a4} {
			f.record(k, status(1, t0))
		}
		f.mustSync(a1, engine.WaitForEvent())
		f.mustSync(a2, engine.RequeueAfter(time.Second))
		if err := f.trainJobs.Delete(trainJob("ns-a", "a2", nil)); err != nil {
			t.Fatal(err)
		}
		f.mustSync(a2, engine.WaitForEvent())            // gone: its token is released
		f.mustSync(a4, engine.RequeueAfter(time.Second)) // a2's turn, not the one after it
	})
	t.Run("asking again takes no other token", func(t *testing.T) {
		f := newStageFixture(t, progress.WriteLimits{QPS: 1, Burst: 1, NamespaceQPS: 0.001, NamespaceBurst: 2},
			trainJob("ns-a", "a1", nil), trainJob("ns-a", "a2", nil), trainJob("ns-a", "a3", nil))
		for _, k := range []cache.ObjectName{a1, a2, a3} {
			f.record(k, status(1, t0))
		}
		f.mustSync(a1, engine.WaitForEvent())
		for range 5 { // held back by the global bucket; a2 holds one token of each bucket, no more
			f.mustSync(a2, engine.RequeueAfter(time.Second))
		}
		f.advance(time.Second)
		f.mustSync(a2, engine.WaitForEvent())
		if got := f.written(); len(got) != 2 {
			t.Errorf("writes %v, want a1's and a2's", got)
		}
	})
}

// TestStageApplyBody: the write is a server-side apply of the status subresource by
// field manager trainer-status with force, carrying only trainerStatus and the cached
// resourceVersion as a precondition.
func TestStageApplyBody(t *testing.T) {
	llm := key("team-a", "llm")
	f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
	f.record(llm, status(42, t0.Add(1500*time.Millisecond), trainer.Metric{Name: "loss", Value: "0.1"}, trainer.Metric{Name: "loss", Value: "0.2"}))
	f.mustSync(llm, engine.WaitForEvent())
	if len(f.applies) != 1 {
		t.Fatalf("%d applies, want 1", len(f.applies))
	}
	p := f.applies[0]
	if p.GetVerb() != "patch" || p.GetResource().Resource != "trainjobs" || p.GetSubresource() != "status" ||
		p.GetNamespace() != "team-a" || p.GetName() != "llm" || p.GetPatchType() != types.ApplyPatchType {
		t.Errorf("action %s %s/%s %s/%s type %s; want an apply patch of trainjobs/status team-a/llm",
			p.GetVerb(), p.GetResource().Resource, p.GetSubresource(), p.GetNamespace(), p.GetName(), p.GetPatchType())
	}
	if p.PatchOptions.FieldManager != "trainer-status" || p.PatchOptions.Force == nil || !*p.PatchOptions.Force {
		t.Errorf("patch options %+v, want field manager trainer-status, force", p.PatchOptions)
	}
	want := `{"kind":"TrainJob","apiVersion":"trainer.kubeflow.org/v1alpha1",` +
		`"metadata":{"name":"llm","namespace":"team-a","resourceVersion":"7"},` +
		`"status":{"trainerStatus":{"progressPercentage":42,"estimatedRemainingSeconds":58,` +
		`"metrics":[{"name":"loss","value":"0.1"},{"name":"loss","value":"0.2"}],"lastUpdatedTime":"2026-03-04T10:00:01Z"}}}`
	var gotJSON, wantJSON any
	if err := json.Unmarshal(p.Patch, &gotJSON); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(want), &wantJSON)
	if diff := cmp.Diff(wantJSON, gotJSON); diff != "" {
		t.Errorf("apply body (-want +got):\n%s\ngot %s", diff, p.Patch)
	}
}

// TestStageWriteFailures: a failed write keeps its report for the retry, unless
// retrying cannot help.
func TestStageWriteFailures(t *testing.T) {
	gr := trainer.Resource("trainjobs")
	for name, tc := range map[string]struct {
		err         error
		wantResult  engine.Result
		wantErr     bool
		wantPending bool
		wantDropped []string
	}{
		"server error: retried with backoff": {
			err: apierrors.NewInternalError(errors.New("etcd")), wantResult: engine.Result{}, wantErr: true, wantPending: true,
		},
		"timeout: retried with backoff": {
			err: context.DeadlineExceeded, wantErr: true, wantPending: true,
		},
		"conflict (stale cache): retried without an error": {
			err: apierrors.NewConflict(gr, "llm", errors.New("the object has been modified")), wantResult: engine.Retry(), wantPending: true,
		},
		"TrainJob gone: dropped": {
			err: apierrors.NewNotFound(gr, "llm"), wantResult: engine.WaitForEvent(), wantDropped: []string{metrics.ReasonGone},
		},
		"refused as invalid: dropped": {
			err:        apierrors.NewInvalid(trainer.Kind("TrainJob"), "llm", field.ErrorList{field.Invalid(field.NewPath("status"), "x", "no")}),
			wantResult: engine.WaitForEvent(),
		},
	} {
		t.Run(name, func(t *testing.T) {
			llm := key("team-a", "llm")
			f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
			f.record(llm, status(10, t0))
			f.applyErr = tc.err
			res, err := f.sync(llm)
			if (err != nil) != tc.wantErr || (!tc.wantErr && res != tc.wantResult) {
				t.Fatalf("Sync = %+v, %v; want %+v, error %t", res, err, tc.wantResult, tc.wantErr)
			}
			if got := f.coalescer.Pending(llm) != nil; got != tc.wantPending {
				t.Errorf("pending %t, want %t", got, tc.wantPending)
			}
			if diff := cmp.Diff(tc.wantDropped, f.obs.dropped); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"error"}, f.obs.writes); diff != "" {
				t.Errorf("observed writes (-want +got):\n%s", diff)
			}
			if !tc.wantPending {
				return
			}
			// The retry writes it, at once: a failed write starts no period.
			f.applyErr = nil
			f.mustSync(llm, engine.WaitForEvent())
			if len(f.written()) != 2 {
				t.Errorf("writes %v, want the failed one and the retry", f.written())
			}
		})
	}
}

// TestStageReportDuringWrite: a report arriving while the previous one is being written
// is scheduled and kept, even when the write fails.
func TestStageReportDuringWrite(t *testing.T) {
	for name, applyErr := range map[string]error{"write succeeds": nil, "write fails": errors.New("boom")} {
		t.Run(name, func(t *testing.T) {
			llm := key("team-a", "llm")
			f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
			f.record(llm, status(10, t0))
			f.applyErr = applyErr
			f.onApply = func() { f.record(llm, status(20, t0.Add(time.Second))) }
			_, _ = f.sync(llm)
			if p := f.coalescer.Pending(llm); p == nil || *p.ProgressPercentage != 20 {
				t.Errorf("pending %+v, want the report of 20%%", p)
			}
			if n := len(f.enq.get()); n != 2 {
				t.Errorf("enqueued %d times, want 2 (the first report, the one during the write)", n)
			}
		})
	}
}

func TestCoalescer(t *testing.T) {
	llm := key("team-a", "llm")
	t.Run("an older report does not replace a pending newer one", func(t *testing.T) {
		obs := &observer{}
		c := progress.NewCoalescer(nil, obs)
		c.Record(llm, "u", status(20, t0.Add(time.Second)))
		c.Record(llm, "u", status(10, t0))
		if p := c.Pending(llm); *p.ProgressPercentage != 20 {
			t.Errorf("pending %d%%, want 20%%", *p.ProgressPercentage)
		}
		if diff := cmp.Diff([]string{metrics.ReasonStale}, obs.dropped); diff != "" || obs.coalesced != 0 {
			t.Errorf("dropped %v, coalesced %d; want [stale], 0", obs.dropped, obs.coalesced)
		}
	})
	t.Run("a report of a re-created TrainJob replaces the earlier one's", func(t *testing.T) {
		obs := &observer{}
		var enq enqueued
		c := progress.NewCoalescer(enq.add, obs)
		c.Record(llm, "u1", status(90, t0.Add(time.Hour)))
		c.Record(llm, "u2", status(1, t0))
		if p := c.Pending(llm); *p.ProgressPercentage != 1 {
			t.Errorf("pending %d%%, want 1%%", *p.ProgressPercentage)
		}
		if diff := cmp.Diff([]string{metrics.ReasonGone}, obs.dropped); diff != "" || len(enq.get()) != 1 {
			t.Errorf("dropped %v, enqueued %d; want [gone], 1", obs.dropped, len(enq.get()))
		}
	})
	t.Run("Flush enqueues only a pending report", func(t *testing.T) {
		var enq enqueued
		c := progress.NewCoalescer(enq.add, nil)
		c.Flush(llm)
		c.Record(llm, "u", status(1, t0))
		c.Flush(llm)
		c.Forget(llm)
		c.Flush(llm)
		if diff := cmp.Diff([]string{"team-a/llm", "team-a/llm"}, keyStrings(enq.get())); diff != "" {
			t.Errorf("enqueued (-want +got):\n%s", diff)
		}
		if c.Len() != 0 {
			t.Errorf("Len %d after Forget, want 0", c.Len())
		}
	})
}

func TestNewStageRequiresItsDependencies(t *testing.T) {
	_, err := progress.NewStage(progress.StageConfig{Limits: progress.WriteLimits{Period: -time.Second}})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"Client is required", "TrainJobs is required", "Coalescer is required", "no field may be negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestStageInAPipeline wires the Coalescer, a single-stage pipeline and the handler as
// the controller does: the first report is written at once, later ones within the
// period are coalesced, and the last is written when the TrainJob finishes and Flush
// is called.
func TestStageInAPipeline(t *testing.T) {
	llm := key("team-a", "llm")
	tj := trainJob("team-a", "llm", nil)
	indexer := utiltesting.Indexer(t, tj)
	var mu sync.Mutex
	var written []string
	client := trainerfake.NewSimpleClientset()
	client.PrependReactor("patch", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		var body struct {
			Status trainer.TrainJobStatus `json:"status"`
		}
		_ = json.Unmarshal(a.(clienttesting.PatchActionImpl).Patch, &body)
		mu.Lock()
		written = append(written, string(mustJSON(t, *body.Status.TrainerStatus.ProgressPercentage)))
		mu.Unlock()
		return true, tj, nil
	})
	m := metrics.New(nil)
	var pipeline *engine.Pipeline
	coalescer := progress.NewCoalescer(func(k cache.ObjectName) { pipeline.Enqueue(progress.Name, k) }, m)
	stage, err := progress.NewStage(progress.StageConfig{
		Client: client, TrainJobs: trainerlisters.NewTrainJobLister(indexer), Coalescer: coalescer,
		Limits: progress.WriteLimits{Period: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	pipeline, err = engine.New([]engine.Stage{stage}, engine.WithMetrics(m), engine.WithMaxInFlight(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- pipeline.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	h := progress.NewHandler(progress.HandlerConfig{
		Authorizer: &fakeAuthorizer{decision: progress.Decision{Verdict: progress.Allowed, TrainJobUID: tj.UID}},
		Coalescer:  coalescer,
		Observer:   m,
	})
	report := func(percent int) {
		t.Helper()
		body := `{"trainerStatus":{"progressPercentage":` + string(mustJSON(t, percent)) +
			`,"lastUpdatedTime":"` + time.Now().Add(time.Duration(percent)*time.Second).UTC().Format(time.RFC3339) + `"}}`
		if code := post(t, h, wire.Path("team-a", "llm"), "t", body); code != 200 {
			t.Fatalf("code %d", code)
		}
	}
	waitFor := func(want []string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			got := append([]string(nil), written...)
			mu.Unlock()
			if cmp.Equal(want, got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("writes %v, want %v", got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	report(1)
	waitFor([]string{"1"})
	for p := 2; p <= 5; p++ { // within the period: coalesced
		report(p)
	}
	time.Sleep(50 * time.Millisecond)
	waitFor([]string{"1"})
	finished := tj.DeepCopy()
	finished.Status.Conditions = []metav1.Condition{utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "")}
	if err := indexer.Update(finished); err != nil {
		t.Fatal(err)
	}
	coalescer.Flush(llm) // what the TrainJob update handler does when it sees the TrainJob finish
	waitFor([]string{"1", "5"})
	if p := coalescer.Pending(llm); p != nil {
		t.Errorf("still pending: %+v", p)
	}
}

// fakeEngine runs a Stage as the pipeline's engine does, without goroutines, on the
// fixture's fake clock, so that a test can count syncs: a key the Coalescer enqueues is
// due at once (an add of a key already due coalesces with it), and RequeueAfter(d)
// makes it due d later unless it is due sooner already (the delaying queue keeps the
// earliest). Results other than WaitForEvent and RequeueAfter fail the test.
type fakeEngine struct {
	f        *stageFixture
	enqueued int // keys of f.enq made due so far
	due      map[cache.ObjectName]time.Time
	syncs    int
}

func newEngine(f *stageFixture) *fakeEngine {
	return &fakeEngine{f: f, due: map[cache.ObjectName]time.Time{}}
}

// schedule makes k due at at, unless it is due sooner.
func (e *fakeEngine) schedule(k cache.ObjectName, at time.Time) {
	if cur, ok := e.due[k]; !ok || at.Before(cur) {
		e.due[k] = at
	}
}

// runUntil syncs the keys due up to end in time order (ties by key), moving the clock
// to each, then moves it to end.
func (e *fakeEngine) runUntil(end time.Time) {
	e.f.t.Helper()
	for {
		keys := e.f.enq.get()
		for _, k := range keys[e.enqueued:] {
			e.schedule(k, e.f.clock.Now())
		}
		e.enqueued = len(keys)
		var next cache.ObjectName
		var at time.Time
		for k, t := range e.due {
			if at.IsZero() || t.Before(at) || t.Equal(at) && k.String() < next.String() {
				next, at = k, t
			}
		}
		if at.IsZero() || at.After(end) {
			break
		}
		delete(e.due, next)
		if at.After(e.f.clock.Now()) {
			e.f.clock.SetTime(at)
		}
		res, err := e.f.sync(next)
		e.syncs++
		switch {
		case err != nil || res.Code != engine.CodeWaitForEvent && res.Code != engine.CodeRequeueAfter:
			e.f.t.Fatalf("Sync(%s) = %+v, %v; want WaitForEvent or RequeueAfter", next, res, err)
		case res.Code == engine.CodeRequeueAfter:
			e.schedule(next, e.f.clock.Now().Add(res.After))
		}
	}
	e.f.clock.SetTime(end)
}

// TestStageSyncsPerWrite: however often a TrainJob's pods report, and however long the
// rate limits make its write wait, the Stage syncs it a few times per write, not once
// per report or per token the buckets refill (issue 14's benchmark: 438,638 syncs for
// 1,675 writes); it still writes at most once per period, and the last report before
// the TrainJob finishes.
func TestStageSyncsPerWrite(t *testing.T) {
	const duration = time.Minute
	t.Run("one TrainJob, 4 pods reporting every second", func(t *testing.T) {
		llm := key("team-a", "llm")
		f := newStageFixture(t, progress.WriteLimits{}, trainJob("team-a", "llm", nil))
		e := newEngine(f)
		var last int32
		for second := time.Duration(0); second < duration; second += time.Second {
			// The pods' reports within a second carry the same lastUpdatedTime as the
			// API server stores it (in seconds), and some arrive after that second's
			// write; they drift against the period.
			jitter := time.Duration(second/time.Second%7) * 30 * time.Millisecond
			for _, offset := range []time.Duration{50, 300, 550, 800} {
				at := t0.Add(second + offset*time.Millisecond + jitter)
				e.runUntil(at)
				last++
				f.record(llm, status(last%100, at))
			}
		}
		e.runUntil(t0.Add(duration))
		writes := len(f.written())
		if periods := int(duration/(10*time.Second)) + 1; writes > periods || writes < periods-1 {
			t.Errorf("%d writes in %v, want one per 10 s period (%d)", writes, duration, periods)
		}
		if e.syncs > 2*writes+1 {
			t.Errorf("%d syncs for %d writes of %d reports, want at most %d (2 per write, 1 for a report waiting at the end)", e.syncs, writes, last, 2*writes+1)
		}

		// The TrainJob completes within its period: its last report is written at once.
		f.advance(100 * time.Millisecond)
		last++
		f.record(llm, status(last%100, f.clock.Now()))
		tj := trainJob("team-a", "llm", nil)
		tj.Status.Conditions = []metav1.Condition{utiltesting.Condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "")}
		f.setTrainJob(tj)
		f.coalescer.Flush(llm)
		e.runUntil(f.clock.Now())
		got := f.written()
		if want := "team-a/llm=" + string(mustJSON(t, last%100)); got[len(got)-1] != want {
			t.Errorf("last write %s, want the last report's, %s", got[len(got)-1], want)
		}
		t.Logf("%d reports, %d writes, %d syncs", last, len(got), e.syncs)
	})
	t.Run("100 TrainJobs of one namespace held back by its rate limit", func(t *testing.T) {
		const n = 100
		limits := progress.WriteLimits{NamespaceQPS: 5, NamespaceBurst: 5} // 100 TrainJobs want 10 writes/s
		var tjs []*trainer.TrainJob
		for i := range n {
			tjs = append(tjs, trainJob("team-a", fmt.Sprintf("tj-%03d", i), nil))
		}
		f := newStageFixture(t, limits, tjs...)
		e := newEngine(f)
		reports := 0
		for at := time.Duration(0); at < duration; at += time.Second {
			e.runUntil(t0.Add(at))
			for _, tj := range tjs {
				f.record(key(tj.Namespace, tj.Name), status(int32(at/time.Second), t0.Add(at)))
				reports++
			}
		}
		e.runUntil(t0.Add(duration))
		writes := len(f.written())
		if allowed := 5*int(duration/time.Second) + 5; writes > allowed || writes < allowed-10 {
			t.Errorf("%d writes in %v, want about %d (5/s, burst 5)", writes, duration, allowed)
		}
		if e.syncs > 3*writes+n {
			t.Errorf("%d syncs for %d writes of %d reports, want at most %d (3 per write, 1 per TrainJob waiting at the end)", e.syncs, writes, reports, 3*writes+n)
		}
		t.Logf("%d reports, %d writes, %d syncs", reports, writes, e.syncs)
	})
}
