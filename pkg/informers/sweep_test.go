package informers

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/objectkeys"
	"github.com/trainyard/trainyard/pkg/trainjob"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

func TestJobSetLags(t *testing.T) {
	tj := func() *utiltesting.TrainJobWrapper {
		return utiltesting.MakeTrainJob("ns", "llm").UID("u1").Generation(3).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch")
	}
	jobSet := func(owner *trainer.TrainJob, generation string, suspend bool) *utiltesting.JobSetWrapper {
		return utiltesting.MakeJobSet("ns", "llm").ControlledBy(owner).Annotation(objectkeys.AnnotationTrainJobGeneration, generation).Suspend(suspend)
	}
	cond := utiltesting.Condition
	cases := map[string]struct {
		tj            *trainer.TrainJob
		js            func(tj *trainer.TrainJob) runtime.Object
		runtimeExists bool
		want          bool
	}{
		"JobSet of the current generation": {
			tj: tj().Obj(), js: func(o *trainer.TrainJob) runtime.Object { return jobSet(o, "3", false).Obj() }, want: false,
		},
		"suspended TrainJob, JobSet of an older generation (the Kueue two-step lost)": {
			tj: tj().Suspend(true).Obj(), js: func(o *trainer.TrainJob) runtime.Object { return jobSet(o, "2", false).Obj() }, want: true,
		},
		"resumed TrainJob, JobSet still suspended at an older generation": {
			tj: tj().Suspend(false).Obj(), js: func(o *trainer.TrainJob) runtime.Object { return jobSet(o, "2", true).Obj() }, want: true,
		},
		"both running: the JobSet may not change": {
			tj: tj().Suspend(false).Obj(), js: func(o *trainer.TrainJob) runtime.Object { return jobSet(o, "2", false).Obj() }, want: false,
		},
		"no JobSet, nothing recorded": {
			tj: tj().Obj(), runtimeExists: true, want: true,
		},
		"no JobSet, bad input recorded at this generation": {
			tj:   tj().Condition(withGeneration(cond(trainjob.ConditionJobSetReady, metav1.ConditionFalse, trainjob.ReasonInvalidSpec, "bad"), 3)).Obj(),
			want: false,
		},
		"no JobSet, bad input recorded at an older generation": {
			tj:   tj().Condition(withGeneration(cond(trainjob.ConditionJobSetReady, metav1.ConditionFalse, trainjob.ReasonInvalidSpec, "bad"), 2)).Obj(),
			want: true,
		},
		"no JobSet, waiting for a missing runtime": {
			tj:   tj().Condition(cond(trainjob.ConditionRuntimeResolved, metav1.ConditionFalse, trainjob.ReasonRuntimeNotFound, "missing")).Obj(),
			want: false,
		},
		"no JobSet, the awaited runtime exists now": {
			tj:            tj().Condition(cond(trainjob.ConditionRuntimeResolved, metav1.ConditionFalse, trainjob.ReasonRuntimeNotFound, "missing")).Obj(),
			runtimeExists: true, want: true,
		},
		"a foreign JobSet, not reported": {
			tj: tj().Obj(), js: func(*trainer.TrainJob) runtime.Object {
				return jobSet(utiltesting.MakeTrainJob("ns", "llm").UID("other").Obj(), "3", false).Obj()
			}, want: true,
		},
		"finished": {
			tj:   tj().Suspend(true).Condition(cond(trainer.TrainJobComplete, metav1.ConditionTrue, "Completed", "done")).Obj(),
			want: false,
		},
		"managed by another controller": {
			tj: tj().ManagedBy("kueue.x-k8s.io/multikueue").Obj(), want: false,
		},
		"being deleted": {
			tj: tj().Deleting(time.Now()).Obj(), want: false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.js != nil {
				objs = append(objs, tc.js(tc.tj))
			}
			jobSets := jobsetlisters.NewJobSetLister(utiltesting.Indexer(t, objs...))
			got := JobSetLags(tc.tj, jobSets, func(*trainer.TrainJob) bool { return tc.runtimeExists })
			if got != tc.want {
				t.Errorf("JobSetLags = %v, want %v", got, tc.want)
			}
		})
	}
}

func withGeneration(c metav1.Condition, g int64) metav1.Condition {
	c.ObservedGeneration = g
	return c
}

// fakeTarget is the pipeline as the sweep sees it.
type fakeTarget struct {
	busy     map[cache.ObjectName]bool
	requeued []cache.ObjectName
}

func (f *fakeTarget) Has(key cache.ObjectName) bool     { return f.busy[key] }
func (f *fakeTarget) EnqueueFirst(key cache.ObjectName) { f.requeued = append(f.requeued, key) }
func (f *fakeTarget) reset(busy ...cache.ObjectName)    { f.requeued = nil; f.busy = setOf(busy) }
func setOf(keys []cache.ObjectName) map[cache.ObjectName]bool {
	m := map[cache.ObjectName]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// A TrainJob is re-queued only once it lagged on two sweeps in a row at one generation
// while the pipeline was not working on it; lagging past the threshold is counted
// whether or not the pipeline works on it.
func TestSweeper(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lost := utiltesting.MakeTrainJob("ns", "lost").UID("u1").Generation(3).Suspend(true).Obj()
	busy := utiltesting.MakeTrainJob("ns", "busy").UID("u2").Generation(5).Suspend(true).Obj()
	fine := utiltesting.MakeTrainJob("ns", "fine").UID("u3").Generation(1).Obj()
	js := func(tj *trainer.TrainJob, generation string) runtime.Object {
		return utiltesting.MakeJobSet("ns", tj.Name).ControlledBy(tj).Annotation(objectkeys.AnnotationTrainJobGeneration, generation).Obj()
	}
	tjCache := utiltesting.Indexer(t, lost, busy, fine)
	jsCache := utiltesting.Indexer(t, js(lost, "2"), js(busy, "4"), js(fine, "1"))
	clk := testingclock.NewFakePassiveClock(time.Unix(1000, 0))
	target := &fakeTarget{}
	var lagging, requeues int
	s := &Sweeper{
		TrainJobs: trainerlisters.NewTrainJobLister(tjCache), JobSets: jobsetlisters.NewJobSetLister(jsCache),
		RuntimeExists: func(*trainer.TrainJob) bool { return true }, Target: target,
		Observe: func(l, r int) { lagging, requeues = l, requeues+r },
		Period:  time.Minute, LagThreshold: 90 * time.Second, Clock: clk,
	}
	keyOf := func(tj *trainer.TrainJob) cache.ObjectName { return cache.MetaObjectToName(tj) }

	target.reset(keyOf(busy))
	if n := s.Sweep(ctx); n != 0 || lagging != 0 {
		t.Fatalf("first sweep re-queued %d, lagging %d; want 0, 0 (a lag seen once may be an event in delivery)", n, lagging)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	target.reset(keyOf(busy))
	if n := s.Sweep(ctx); n != 1 || len(target.requeued) != 1 || target.requeued[0] != keyOf(lost) {
		t.Fatalf("second sweep re-queued %v, want only %v (busy is being worked on)", target.requeued, keyOf(lost))
	}
	if lagging != 0 {
		t.Errorf("lagging = %d after 1m, want 0 (threshold 90s)", lagging)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	target.reset(keyOf(busy), keyOf(lost)) // the pipeline now works on lost
	s.Sweep(ctx)
	if len(target.requeued) != 0 || lagging != 2 || requeues != 1 {
		t.Errorf("third sweep: re-queued %v, lagging %d, re-queues %d; want none, 2 (both past 90s), 1 in all", target.requeued, lagging, requeues)
	}

	// A new generation restarts the clock; a lag seen once at it is not yet lost.
	bumped := lost.DeepCopy()
	bumped.Generation = 4
	if err := tjCache.Update(bumped); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	target.reset()
	s.Sweep(ctx)
	if len(target.requeued) != 0 || lagging != 1 {
		t.Errorf("fourth sweep: re-queued %v, lagging %d; want none (busy was worked on last time, lost is at a new generation), 1 (busy)", target.requeued, lagging)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	target.reset()
	s.Sweep(ctx)
	if want := []cache.ObjectName{keyOf(busy), keyOf(lost)}; !slices.Equal(sorted(target.requeued), want) {
		t.Errorf("fifth sweep re-queued %v, want %v (both idle on two sweeps)", target.requeued, want)
	}
}

func sorted(keys []cache.ObjectName) []cache.ObjectName {
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b cache.ObjectName) int { return strings.Compare(a.String(), b.String()) })
	return out
}
