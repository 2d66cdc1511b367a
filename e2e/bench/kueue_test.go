package bench

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// at is an offset in seconds from the epoch of these tests.
func at(seconds float64) time.Time {
	return time.Unix(1000, 0).Add(time.Duration(seconds * float64(time.Second)))
}

// changes turns +1/-1 steps, one per second, into ordered countChanges.
func changes(deltas ...int) []countChange {
	out := make([]countChange, len(deltas))
	for i, d := range deltas {
		out[i] = countChange{at: at(float64(i)), delta: d}
	}
	return out
}

func TestRunningRecordsOnlyChangesOfState(t *testing.T) {
	r := running{on: map[string]bool{}}
	r.set("a", false, at(0)) // never on: no change
	r.set("a", true, at(1))
	r.set("a", true, at(2)) // still on
	r.set("b", true, at(3))
	r.set("a", false, at(4))
	r.set("a", false, at(5))
	if got := peak(r.changes); len(r.changes) != 3 || got != 2 {
		t.Errorf("changes %+v, peak %d; want +1 +1 -1 and a peak of 2", r.changes, got)
	}
}

func TestPeakFollowsTheOrderSeen(t *testing.T) {
	// Two running, one finishes, a third starts: never more than 2, although three
	// were on at some time.
	if got := peak(changes(1, 1, -1, 1, -1, -1)); got != 2 {
		t.Errorf("peak = %d, want 2", got)
	}
	if got := peak(nil); got != 0 {
		t.Errorf("peak of nothing = %d, want 0", got)
	}
}

// kueueRun is a recorded run of four TrainJobs created at 0, 0.5, 1 and 1 s, with
// quota for one at a time.
func kueueRun() (burstResult, kueueRecord) {
	created := burstResult{Start: at(0), End: at(1), Done: []time.Time{at(0), at(0.5), at(1), at(1)}}
	rec := kueueRecord{trainJobs: map[string]*kueueTrainJob{
		// JobSet created suspended before Kueue's unsuspend at 2 s, resumed 0.1 s after.
		name(0): {seen: true, suspendedAtCreate: true, jobSet: at(0.2), unsuspended: at(2), jobSetUnsuspended: at(2.1), finished: at(6)},
		// Queued until 6.5 s; its JobSet seen 0.3 s after the unsuspend, resumed at 7.5 s.
		name(1): {seen: true, suspendedAtCreate: true, unsuspended: at(6.5), jobSet: at(6.8), jobSetUnsuspended: at(7.5), finished: at(11)},
		// Never suspended: it ran outside Kueue's quota, and has no Kueue latency.
		name(2): {seen: true, suspendedAtCreate: false, jobSet: at(1.1), jobSetUnsuspended: at(1.1), finished: at(5)},
		// Queued until 11.5 s, its JobSet created suspended long before.
		name(3): {seen: true, suspendedAtCreate: true, jobSet: at(1.2), unsuspended: at(11.5), jobSetUnsuspended: at(11.6), finished: at(14)},
	}}
	rec.runningTrainJobs = []countChange{{at(2), 1}, {at(6), -1}, {at(6.5), 1}, {at(11), -1}, {at(11.5), 1}, {at(14), -1}}
	rec.activeJobSets = []countChange{{at(1.1), 1}, {at(2.1), 1}, {at(5), -1}, {at(6), -1}, {at(7.5), 1}, {at(11), -1}}
	rec.runningPods = []countChange{{at(1.2), 1}, {at(1.2), 1}, {at(2.2), 1}, {at(2.2), 1}, {at(5), -1}, {at(5), -1}}
	return created, rec
}

// The recorder takes what each watch delivers: a TrainJob first seen suspended, its
// JobSet (possibly delivered first) suspended then resumed, Kueue's unsuspend, Complete.
func TestKueueRecorderFollowsTheWatches(t *testing.T) {
	k := &kueueRecorder{trainJobs: map[string]*kueueTrainJob{},
		tjs: running{on: map[string]bool{}}, jobSets: running{on: map[string]bool{}}, podsOn: running{on: map[string]bool{}}}
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: name(0)}, Spec: trainer.TrainJobSpec{Suspend: ptr.To(true)}}
	js := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: name(0)}, Spec: jobsetv1alpha2.JobSetSpec{Suspend: ptr.To(true)}}
	k.onJobSet(js, false) // the JobSet's watch delivered first
	k.onTrainJob(tj)
	if rec := k.record().trainJobs[name(0)]; !rec.seen || !rec.suspendedAtCreate || rec.jobSet.IsZero() || !rec.unsuspended.IsZero() || !rec.jobSetUnsuspended.IsZero() {
		t.Fatalf("after the creates: %+v, want seen suspended, its JobSet seen, nothing unsuspended", rec)
	}
	tj = tj.DeepCopy()
	tj.Spec.Suspend = ptr.To(false)
	k.onTrainJob(tj)
	js = js.DeepCopy()
	js.Spec.Suspend = ptr.To(false)
	k.onJobSet(js, false)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	k.onPod(pod, false)
	tj = tj.DeepCopy()
	tj.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue}}
	k.onTrainJob(tj)
	js = js.DeepCopy()
	js.Status.TerminalState = "Completed"
	k.onJobSet(js, false)
	k.onPod(pod, true)
	rec := k.record()
	got := rec.trainJobs[name(0)]
	if got.unsuspended.IsZero() || got.jobSetUnsuspended.Before(got.unsuspended) || got.finished.Before(got.jobSetUnsuspended) {
		t.Errorf("moments %+v, want unsuspended, then its JobSet unsuspended, then finished", got)
	}
	for what, changes := range map[string][]countChange{"TrainJobs": rec.runningTrainJobs, "JobSets": rec.activeJobSets, "pods": rec.runningPods} {
		if len(changes) != 2 || changes[0].delta != 1 || changes[1].delta != -1 {
			t.Errorf("%s running: %+v, want on once, then off", what, changes)
		}
	}
}

func TestKueueFiguresFromTheRecord(t *testing.T) {
	created, rec := kueueRun()
	k := kueueFigures(created, rec, 1, 2)
	if k.Quota != 1 || k.QuotaPods != 2 {
		t.Errorf("quota %d TrainJobs, %d pods; want 1 and 2 (numNodes 2)", k.Quota, k.QuotaPods)
	}
	if k.Finished != 4 || k.Seconds != 14 || k.TrainJobsPerSecond != 0.286 {
		t.Errorf("finished %d in %v s at %v/s; want 4 in 14 s (first create → last Complete), 0.286/s", k.Finished, k.Seconds, k.TrainJobsPerSecond)
	}
	if k.SuspendedAtCreate != 3 || k.NotSuspendedAtCreate != 1 || k.Unsuspended != 3 || k.JobSetsBeforeUnsuspend != 2 {
		t.Errorf("suspended at create %d, not %d, unsuspended %d, JobSets before the unsuspend %d; want 3, 1, 3, 2",
			k.SuspendedAtCreate, k.NotSuspendedAtCreate, k.Unsuspended, k.JobSetsBeforeUnsuspend)
	}
	for _, tc := range []struct {
		name string
		got  Latency
		want Latency
	}{
		// Created at 0, 0.5 and 1 s, unsuspended at 2, 6.5 and 11.5 s.
		{"queue wait", k.QueueWait, Latency{Count: 3, P50: 6, P99: 10.5, Max: 10.5}},
		// Two JobSets existed before (0), the other came 0.3 s after.
		{"unsuspend → JobSet", k.UnsuspendToJobSet, Latency{Count: 3, P50: 0, P99: 0.3, Max: 0.3}},
		{"unsuspend → JobSet unsuspended", k.UnsuspendToJobSetUnsuspended, Latency{Count: 3, P50: 0.1, P99: 1, Max: 1}},
		{"unsuspend → finished", k.UnsuspendToFinished, Latency{Count: 3, P50: 4, P99: 4.5, Max: 4.5}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
	if k.PeakTrainJobs != 1 || k.PeakJobSets != 2 || k.PeakPods != 4 {
		t.Errorf("peaks %d TrainJobs, %d JobSets, %d pods; want 1, 2, 4", k.PeakTrainJobs, k.PeakJobSets, k.PeakPods)
	}

	// A create that failed has no TrainJob: it counts nowhere.
	created.Done[2] = time.Time{}
	if k := kueueFigures(created, rec, 1, 2); k.Finished != 3 || k.NotSuspendedAtCreate != 0 || k.Seconds != 14 {
		t.Errorf("without TrainJob 2: finished %d, not suspended %d, %v s; want 3, 0, 14 s", k.Finished, k.NotSuspendedAtCreate, k.Seconds)
	}
}

func TestKueueTargetsAndReport(t *testing.T) {
	created, rec := kueueRun()
	r := &Result{
		Mode: ModeKueue, N: 4, NumNodes: 2,
		Admission: &Admission{}, Lifecycle: &Lifecycle{Finished: 4},
		Controller: Controller{
			Requests: map[string]float64{"PATCH": 16, "GET": 1}, Writes: 16, WritesPerTrainJob: 4,
			Errors: map[string]float64{}, Retries: map[string]float64{},
		},
		Components: map[string]float64{"kueue": 3, "trainyard": 1.5},
		Kueue:      kueueFigures(created, rec, 1, 2),
	}
	r.Targets = evaluateTargets(r)
	met := map[string]bool{}
	for _, tg := range r.Targets {
		met[tg.Name] = tg.Met
	}
	for name, want := range map[string]bool{
		"TrainJobs running at once":                    false, // 2 JobSets and 4 pods against a quota of 1 and 2
		"API writes per TrainJob to Complete":          false, // 4 > 3
		"Kueue's unsuspend → JobSet unsuspended p99":   true,  // 1 s
		"TrainJobs finished":                           false, // one never suspended by Kueue
		"errors":                                       false,
		"failed syncs from the controller's cache lag": true,
	} {
		if got, ok := met[name]; !ok || got != want {
			t.Errorf("target %q met = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if _, ok := met["API writes per TrainJob at admission"]; ok {
		t.Error("Kueue mode states admission mode's targets")
	}

	report := Report(r)
	for _, s := range []string{
		"a ClusterQueue with a nominal quota of 2 pods (1 TrainJobs of numNodes 2 at a time)",
		"| TrainJobs running at once | ≤ the quota: 1 TrainJobs (2 pods) | 1 TrainJobs, 2 JobSets, 4 pods | **no** |",
		"the quota was reached: 1 TrainJobs at once",
		"| API writes per TrainJob to Complete | ≤ 3 (lifecycle mode's target) | 4.000 (PATCH 16) | **no** |",
		"| errors | 0 | 0 create errors, 0 failed syncs, 0 Failed TrainJobs, 1 not suspended by Kueue at creation | **no** |",
		"## Through Kueue v0.19.1 (quota 1 TrainJobs = 2 pods)",
		"4 TrainJobs finished (0 Failed) in 14.0 s from the first create to the last Complete: **0.29 TrainJobs/s**",
		"2 of 3 JobSets existed before Kueue's unsuspend. Kueue's unsuspend → **JobSet exists**: p50 0.000 s, p99 0.300 s, max 0.300 s (3)",
		"Kueue's unsuspend → **JobSet unsuspended** (Trainyard's resume, after which the Jobs' pods are created): p50 0.100 s, p99 1.000 s, max 1.000 s (3)",
		"Kueue's CPU 3.00 s (750.00 s per 1,000 TrainJobs), Trainyard's 1.50 s",
		"per TrainJob: GET 0.250, PATCH 4.000",
	} {
		if !strings.Contains(report, s) {
			t.Errorf("report lacks %q:\n%s", s, report)
		}
	}

	// Within the quota and every TrainJob admitted by Kueue: those targets are met.
	r.Kueue.PeakJobSets, r.Kueue.PeakPods, r.Kueue.NotSuspendedAtCreate, r.Kueue.SuspendedAtCreate = 1, 2, 0, 4
	for _, tg := range evaluateTargets(r) {
		if (tg.Name == "TrainJobs running at once" || tg.Name == "TrainJobs finished" || tg.Name == "errors") && !tg.Met {
			t.Errorf("target %q not met: %+v", tg.Name, tg)
		}
	}
	// A TrainJob whose JobSet was never seen resumed misses the resume target.
	r.Kueue.UnsuspendToJobSetUnsuspended.Count--
	for _, tg := range evaluateTargets(r) {
		if tg.Name == "Kueue's unsuspend → JobSet unsuspended p99" && tg.Met {
			t.Errorf("a JobSet never resumed, yet the target is met: %+v", tg)
		}
	}
}

func TestKueueWritesByClientFromTheAuditLog(t *testing.T) {
	event := func(agent, verb, resource, sub, ns string, code int32) cluster.AuditEvent {
		var e cluster.AuditEvent
		e.UserAgent, e.Verb = agent, verb
		e.ObjectRef = &struct {
			Resource    string `json:"resource"`
			Subresource string `json:"subresource"`
			Namespace   string `json:"namespace"`
			Name        string `json:"name"`
			APIGroup    string `json:"apiGroup"`
		}{Resource: resource, Subresource: sub, Namespace: ns}
		e.ResponseStatus = &struct {
			Code int32 `json:"code"`
		}{Code: code}
		return e
	}
	events := []cluster.AuditEvent{
		event("trainyard/dev", "patch", "jobsets", "", "bench", 200),
		event("trainyard/dev", "patch", "jobsets", "", "bench", 201),
		event("trainyard/dev", "patch", "trainjobs", "status", "bench", 200),
		event("trainyard/dev", "patch", "trainjobs", "status", "bench", 409),               // refused: no write
		event("trainyard/dev", "patch", "trainjobs", "status", "bench-raw-trainjobs", 200), // another namespace
		event("kueue/v0.19.1 (linux/amd64)", "update", "trainjobs", "", "bench", 200),
		{UserAgent: "kube-apiserver", Verb: "deletecollection"}, // no object
	}
	got := kueueWrites(events, "bench", 2)
	want := map[string]map[string]float64{
		"trainyard": {"patch jobsets": 1, "patch trainjobs/status": 0.5},
		"kueue":     {"update trainjobs": 0.5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("writes = %v, want %v", got, want)
	}
	r := &Result{Mode: ModeKueue, N: 2, Kueue: &Kueue{WritesPerTrainJob: got}, Controller: Controller{Requests: map[string]float64{}}}
	report := Report(r)
	for _, s := range []string{"| kueue | 0.500 | update trainjobs 0.500 |", "| trainyard | 1.500 | patch jobsets 1.000, patch trainjobs/status 0.500 |"} {
		if !strings.Contains(report, s) {
			t.Errorf("report lacks %q:\n%s", s, report)
		}
	}
}

func TestCountSeriesKeepsPeaksWhenThinned(t *testing.T) {
	small := countSeries(at(0), changes(1, 1, -1))
	if len(small) != 3 || small[1] != (countPoint{X: 1, Y: 2}) || small[2] != (countPoint{X: 2, Y: 1}) {
		t.Errorf("series = %+v, want every change: 1, 2, 1", small)
	}
	// 3 × maxPoints changes: up to a single peak of 1500 in the middle, down again.
	deltas := make([]int, 3*maxPoints)
	for i := range deltas {
		deltas[i] = 1
		if i >= len(deltas)/2 {
			deltas[i] = -1
		}
	}
	thin := countSeries(at(0), changes(deltas...))
	top := 0.0
	for _, p := range thin {
		top = max(top, p.Y)
	}
	if len(thin) > maxPoints+1 || top != 1500 || thin[len(thin)-1].Y != 0 {
		t.Errorf("%d points, highest %v, last %+v; want at most %d, the peak 1500 kept, ending at 0", len(thin), top, thin[len(thin)-1], maxPoints+1)
	}
}

func TestKueueOutputs(t *testing.T) {
	created, rec := kueueRun()
	r := &Result{Mode: ModeKueue, N: 4, NumNodes: 2, Kueue: kueueFigures(created, rec, 1, 2), Controller: Controller{Requests: map[string]float64{}}}
	finished := newArrivals()
	for i := range 4 {
		finished.record(name(i), rec.trainJobs[name(i)].finished)
	}
	tl := newTimeline(created, newArrivals(), finished, ModeLifecycle)
	tl.kueue = newKueueTimeline(created.Start, rec)
	if got := tl.kueue.resume; len(got) != 3 || got[0] != 0.1 || got[2] != 1 {
		t.Errorf("resume latencies %v, want those of the three TrainJobs Kueue unsuspended, sorted: 0.1, 0.1 and 1 s", got)
	}
	dir := t.TempDir()
	if err := writeOutputs(dir, r, tl); err != nil {
		t.Fatal(err)
	}
	for name, magic := range map[string]string{"plot.svg": "<?xml", "plot.png": "\x89PNG", "report.md": "# Trainyard", "result.json": "{"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.HasPrefix(string(data), magic) {
			t.Errorf("%s: %v, starts %q; want %q", name, err, string(data[:min(len(data), 8)]), magic)
		}
	}
	back, err := ReadResult(filepath.Join(dir, "result.json"))
	if err != nil || back.Kueue == nil || back.Kueue.UnsuspendToJobSetUnsuspended != r.Kueue.UnsuspendToJobSetUnsuspended {
		t.Errorf("result.json read back: %+v, %v; want the Kueue figures", back.Kueue, err)
	}
}
