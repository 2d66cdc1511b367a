package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerfake "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned/fake"
	trainerlisters "github.com/trainyard/trainyard/pkg/clientset/listers/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/engine"
	"github.com/trainyard/trainyard/pkg/optimization/controller"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
	utiltesting "github.com/trainyard/trainyard/pkg/util/testing"
)

// fixture is a Stage over a fake clientset and hand-kept caches. With lagging set, a
// created trial reaches the client's store but not the cache (an informer that has
// not caught up).
type fixture struct {
	t       *testing.T
	client  *trainerfake.Clientset
	jobs    cache.Indexer
	tjs     cache.Indexer
	stage   *controller.Stage
	lagging bool
	creates int
}

func newFixture(t *testing.T, job *trainer.OptimizationJob) *fixture {
	f := &fixture{t: t, client: trainerfake.NewSimpleClientset(job), jobs: utiltesting.Indexer(t, job), tjs: utiltesting.Indexer(t)}
	f.client.PrependReactor("create", "trainjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		f.creates++
		if !f.lagging {
			if err := f.tjs.Add(a.(clienttesting.CreateAction).GetObject()); err != nil {
				t.Fatal(err)
			}
		}
		return false, nil, nil
	})
	f.client.PrependReactor("patch", "optimizationjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		var patch struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(a.(clienttesting.PatchAction).GetPatch(), &patch); err != nil {
			t.Fatal(err)
		}
		job := f.job().DeepCopy()
		if job.Annotations == nil {
			job.Annotations = map[string]string{}
		}
		maps.Copy(job.Annotations, patch.Metadata.Annotations)
		if err := f.jobs.Update(job); err != nil {
			t.Fatal(err)
		}
		return false, nil, nil
	})
	f.client.PrependReactor("update", "optimizationjobs", func(a clienttesting.Action) (bool, runtime.Object, error) {
		// An update of the status subresource changes the status only, as the API
		// server's does.
		job := f.job().DeepCopy()
		job.Status = a.(clienttesting.UpdateAction).GetObject().(*trainer.OptimizationJob).Status
		if err := f.jobs.Update(job); err != nil {
			t.Fatal(err)
		}
		return false, nil, nil
	})
	f.stage = f.newStage()
	return f
}

// newStage is the Stage a (re)started controller builds over the same caches.
func (f *fixture) newStage() *controller.Stage {
	s, err := controller.New(controller.Config{Client: f.client,
		OptimizationJobs: trainerlisters.NewOptimizationJobLister(f.jobs), TrainJobs: trainerlisters.NewTrainJobLister(f.tjs)})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) sync(want engine.Result) {
	f.t.Helper()
	got, err := f.stage.Sync(context.Background(), cache.ObjectName{Namespace: "team-a", Name: "digits"})
	if err != nil || got != want {
		f.t.Fatalf("Sync = %+v, %v; want %+v", got, err, want)
	}
}

// trials returns the cached trials sorted by name.
func (f *fixture) trials() []*trainer.TrainJob {
	var out []*trainer.TrainJob
	for _, o := range f.tjs.List() {
		out = append(out, o.(*trainer.TrainJob))
	}
	slices.SortFunc(out, func(a, b *trainer.TrainJob) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (f *fixture) unfinished() int {
	n := 0
	for _, tj := range f.trials() {
		if !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) && !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed) {
			n++
		}
	}
	return n
}

// finish ends trial name: Complete with metric loss = loss ("" for none), or Failed.
func (f *fixture) finish(name string, failed bool, loss string) {
	f.t.Helper()
	obj, ok, _ := f.tjs.GetByKey("team-a/" + name)
	if !ok {
		f.t.Fatalf("no trial %s", name)
	}
	tj := obj.(*trainer.TrainJob).DeepCopy()
	cond := trainer.TrainJobComplete
	if failed {
		cond = trainer.TrainJobFailed
	}
	tj.Status.Conditions = []metav1.Condition{{Type: cond, Status: metav1.ConditionTrue}}
	if loss != "" {
		tj.Status.TrainerStatus = &trainer.TrainerStatus{Metrics: []trainer.Metric{{Name: "accuracy", Value: "0.5"}, {Name: "loss", Value: loss}}}
	}
	if err := f.tjs.Update(tj); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) job() *trainer.OptimizationJob {
	obj, _, _ := f.jobs.GetByKey("team-a/digits")
	return obj.(*trainer.OptimizationJob)
}

func (f *fixture) condition(typ string) *metav1.Condition {
	return meta.FindStatusCondition(f.job().Status.Conditions, typ)
}

func optimizationJob(numTrials, parallel int32, alg *trainer.SearchAlgorithm, params ...trainer.Parameter) *trainer.OptimizationJob {
	return &trainer.OptimizationJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "digits", UID: types.UID("digits-uid"), Generation: 1},
		Spec: trainer.OptimizationJobSpec{
			Objectives:      []trainer.Objective{{Metric: "loss", Direction: trainer.ObjectiveDirectionMinimize}},
			SearchAlgorithm: alg, Parameters: params,
			NumTrials: ptr.To(numTrials), ParallelTrials: ptr.To(parallel),
			TrainJobTemplate: trainer.TrainJobTemplateSpec{Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: "torch-distributed"}}},
		},
	}
}

var (
	lr     = trainer.Parameter{Name: "lr", SearchSpace: trainer.SearchSpace{LogUniform: &trainer.LogUniformSpace{Min: "0.0001", Max: "0.1", Type: trainer.ParameterTypeFloat}}}
	hidden = trainer.Parameter{Name: "hidden", SearchSpace: trainer.SearchSpace{Categorical: &trainer.CategoricalSpace{Choices: []string{"32", "64"}}}}
	random = &trainer.SearchAlgorithm{Random: &trainer.RandomAlgorithm{Seed: ptr.To[int64](1)}}
	grid   = &trainer.SearchAlgorithm{Grid: &trainer.GridAlgorithm{}}
)

// TestSearchRunsParallelTrialsAtMost: 5 trials, 2 at a time; at no point more than 2
// unfinished; each finished trial lets one more start; the best by loss wins and the
// search completes, MaxTrialsReached.
func TestSearchRunsParallelTrialsAtMost(t *testing.T) {
	f := newFixture(t, optimizationJob(5, 2, random, lr, hidden))
	losses := map[string]string{"digits-0": "0.9", "digits-1": "0.3", "digits-2": "0.5", "digits-3": "0.1", "digits-4": "0.7"}
	for step := 0; step < 10 && f.condition(trainer.OptimizationJobComplete) == nil; step++ {
		f.sync(engine.WaitForEvent())
		f.sync(engine.WaitForEvent()) // a second pass with nothing new creates nothing
		if n := f.unfinished(); n > 2 {
			t.Fatalf("step %d: %d trials unfinished, parallelTrials is 2", step, n)
		}
		for _, tj := range f.trials() { // finish the oldest unfinished one
			if !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) {
				f.finish(tj.Name, false, losses[tj.Name])
				break
			}
		}
	}
	if got := len(f.trials()); got != 5 || f.creates != 5 {
		t.Errorf("%d trials, %d creates; want 5 and 5", got, f.creates)
	}
	c := f.condition(trainer.OptimizationJobComplete)
	if c == nil || c.Reason != trainer.OptimizationJobMaxTrialsReachedReason || !strings.Contains(c.Message, "best digits-3 (loss 0.1)") {
		t.Fatalf("Complete = %+v; want MaxTrialsReached naming digits-3", c)
	}
	res := f.job().Status.Result
	rec, _ := trial.Read(f.trials()[3])
	if res == nil || res.TrainJobName != "digits-3" || !slices.Equal(res.Parameters, rec.Parameters) {
		t.Errorf("result %+v; want digits-3 with its parameters %+v", res, rec.Parameters)
	}
	f.sync(engine.WaitForEvent()) // finished: nothing more
	if f.creates != 5 {
		t.Errorf("a finished search created %d more trials", f.creates-5)
	}
}

// TestRestartCreatesNoTrialTwice: a pass whose cache lags its own creates, then a
// restarted controller over a cache that shows them, create each trial once, and the
// restarted one picks the search up at the next index.
func TestRestartCreatesNoTrialTwice(t *testing.T) {
	f := newFixture(t, optimizationJob(4, 2, random, lr))
	f.lagging = true
	f.sync(engine.WaitForEvent())
	f.sync(engine.WaitForEvent()) // the cache shows nothing: the creates meet AlreadyExists
	stored, err := f.client.TrainerV1alpha1().TrainJobs("team-a").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.Items) != 2 {
		t.Fatalf("%d trials stored after two lagging passes, want 2", len(stored.Items))
	}
	for i := range stored.Items { // the informer catches up
		if err := f.tjs.Add(&stored.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	f.lagging = false
	f.stage = f.newStage() // a restart
	f.finish("digits-0", false, "0.5")
	f.sync(engine.WaitForEvent())
	var names []string
	for _, tj := range f.trials() {
		names = append(names, tj.Name)
	}
	if !slices.Equal(names, []string{"digits-0", "digits-1", "digits-2"}) {
		t.Errorf("trials %v; want digits-0..2: the restarted controller goes on at index 2", names)
	}
	first, _ := trial.Read(f.trials()[0])
	again, _ := trial.Read(stored.Items[0].DeepCopy())
	if !slices.Equal(first.Parameters, again.Parameters) {
		t.Error("trial 0's parameters changed across the restart")
	}
}

// TestFailedAndMetricLessTrialsDoNotStall: a failed trial and one that completes
// without the metric are counted and said so, and the search goes on to the end.
func TestFailedAndMetricLessTrialsDoNotStall(t *testing.T) {
	f := newFixture(t, optimizationJob(3, 1, random, lr))
	ends := []struct {
		failed bool
		loss   string
	}{{true, ""}, {false, ""}, {false, "0.2"}}
	for i, end := range ends {
		f.sync(engine.WaitForEvent())
		f.finish(fmt.Sprintf("digits-%d", i), end.failed, end.loss)
	}
	f.sync(engine.WaitForEvent())
	c := f.condition(trainer.OptimizationJobComplete)
	if c == nil || !strings.Contains(c.Message, "1 succeeded, 1 failed, 1 completed without metric loss") {
		t.Fatalf("Complete = %+v; want the three outcomes counted", c)
	}
}

// TestNoTrialSucceededFails the search, saying why.
func TestNoTrialSucceededFails(t *testing.T) {
	f := newFixture(t, optimizationJob(2, 2, random, lr))
	f.sync(engine.WaitForEvent())
	f.finish("digits-0", true, "")
	f.finish("digits-1", false, "")
	f.sync(engine.WaitForEvent())
	c := f.condition(trainer.OptimizationJobFailed)
	if c == nil || c.Reason != trainer.OptimizationJobNoTrialSucceededReason || !strings.Contains(c.Message, `objective metric "loss"`) {
		t.Fatalf("Failed = %+v; want NoTrialSucceeded naming the metric", c)
	}
	if f.job().Status.Result != nil {
		t.Errorf("result %+v without a succeeded trial", f.job().Status.Result)
	}
}

// TestGridStopsAtItsLastCombination: numTrials 10 over a grid of 2 runs 2 trials and
// completes, SearchSpaceExhausted.
func TestGridStopsAtItsLastCombination(t *testing.T) {
	f := newFixture(t, optimizationJob(10, 4, grid, hidden))
	f.sync(engine.WaitForEvent())
	f.finish("digits-0", false, "0.4")
	f.finish("digits-1", false, "0.3")
	f.sync(engine.WaitForEvent())
	if n := len(f.trials()); n != 2 {
		t.Errorf("%d trials, want the grid's 2", n)
	}
	if c := f.condition(trainer.OptimizationJobComplete); c == nil || c.Reason != trainer.OptimizationJobSearchSpaceExhaustedReason {
		t.Errorf("Complete = %+v; want SearchSpaceExhausted", c)
	}
}

// TestInvalidSpecFails with the field and the fix, and creates nothing.
func TestInvalidSpecFails(t *testing.T) {
	bad := trainer.Parameter{Name: "x", SearchSpace: trainer.SearchSpace{Uniform: &trainer.UniformSpace{Min: "2", Max: "1"}}}
	f := newFixture(t, optimizationJob(2, 1, random, bad))
	f.sync(engine.Terminal())
	c := f.condition(trainer.OptimizationJobFailed)
	if c == nil || c.Reason != trainer.OptimizationJobInvalidSpecReason || !strings.Contains(c.Message, "spec.parameters[0].searchSpace.uniform.min") {
		t.Fatalf("Failed = %+v; want InvalidSpec naming the field", c)
	}
	if f.creates != 0 {
		t.Errorf("%d trials created for an invalid search", f.creates)
	}
}

// TestMaximizeKeepsTheHighest metric.
func TestMaximizeKeepsTheHighest(t *testing.T) {
	job := optimizationJob(2, 2, random, lr)
	job.Spec.Objectives[0].Direction = trainer.ObjectiveDirectionMaximize
	f := newFixture(t, job)
	f.sync(engine.WaitForEvent())
	f.finish("digits-0", false, "0.9")
	f.finish("digits-1", false, "0.2")
	f.sync(engine.WaitForEvent())
	if res := f.job().Status.Result; res == nil || res.TrainJobName != "digits-0" {
		t.Errorf("result %+v; want digits-0 (loss 0.9 maximized)", res)
	}
}

// TestForeignTrainJobInTheWayIsReported: a TrainJob named as a trial that the
// OptimizationJob does not control (someone else's, or a trial of a deleted
// OptimizationJob of the same name) is not taken for the trial: Created=False names it
// and the fix, and the sync is retried.
func TestForeignTrainJobInTheWayIsReported(t *testing.T) {
	f := newFixture(t, optimizationJob(2, 1, random, lr))
	squatter := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "digits-0"}}
	if _, err := f.client.TrainerV1alpha1().TrainJobs("team-a").Create(context.Background(), squatter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.creates = 0
	_, err := f.stage.Sync(context.Background(), cache.ObjectName{Namespace: "team-a", Name: "digits"})
	if err == nil || !strings.Contains(err.Error(), "digits-0 exists and is not a trial") {
		t.Fatalf("Sync error %v; want one naming the TrainJob in the way", err)
	}
	c := f.condition(trainer.OptimizationJobCreated)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != trainer.OptimizationJobTrainJobsCreationFailedReason || !strings.Contains(c.Message, "delete or rename it") {
		t.Errorf("Created = %+v; want False, TrainJobsCreationFailed, with the fix", c)
	}
}

// resume clears spec.suspend of trial name, as Kueue does when it admits it.
func (f *fixture) resume(name string) {
	f.t.Helper()
	obj, ok, _ := f.tjs.GetByKey("team-a/" + name)
	if !ok {
		f.t.Fatalf("no trial %s", name)
	}
	tj := obj.(*trainer.TrainJob).DeepCopy()
	tj.Spec.Suspend = ptr.To(false)
	if err := f.tjs.Update(tj); err != nil {
		f.t.Fatal(err)
	}
}

// suspended returns the names of the cached trials whose spec.suspend is true.
func (f *fixture) suspended() []string {
	var out []string
	for _, tj := range f.trials() {
		if ptr.Deref(tj.Spec.Suspend, false) {
			out = append(out, tj.Name)
		}
	}
	return out
}

// TestSuspendedTemplateMakesSuspendedTrials (issue 26, item 3): with
// trainJobTemplate.spec.suspend true (Kueue-managed trials), every trial is created
// suspended; suspended trials are unfinished and hold parallelTrials, so passes while
// they wait create nothing more; as they are resumed and finish, the search creates
// the next trials, suspended too, and completes.
func TestSuspendedTemplateMakesSuspendedTrials(t *testing.T) {
	job := optimizationJob(4, 2, random, lr)
	job.Spec.TrainJobTemplate.Spec.Suspend = ptr.To(true)
	f := newFixture(t, job)

	f.sync(engine.WaitForEvent())
	if got := f.suspended(); !slices.Equal(got, []string{"digits-0", "digits-1"}) {
		t.Fatalf("suspended trials %v; want digits-0 and digits-1, created suspended", got)
	}
	for range 3 { // passes while they wait in the queue
		f.sync(engine.WaitForEvent())
	}
	if f.creates != 2 || len(f.trials()) != 2 {
		t.Fatalf("%d creates, %d trials while 2 suspended trials wait; parallelTrials is 2", f.creates, len(f.trials()))
	}
	if c := f.condition(trainer.OptimizationJobCreated); c == nil || c.Message != "2 of 4 trials created; 0 done (0 succeeded, 0 failed), 2 running" {
		t.Errorf("Created = %+v; want 2 of 4 trials created, 2 running", c)
	}

	f.resume("digits-0")
	f.sync(engine.WaitForEvent())
	if f.creates != 2 {
		t.Fatalf("a resumed but unfinished trial let %d more trials start", f.creates-2)
	}
	f.finish("digits-0", false, "0.4")
	f.sync(engine.WaitForEvent())
	if got := f.suspended(); !slices.Equal(got, []string{"digits-1", "digits-2"}) {
		t.Fatalf("suspended trials %v after digits-0 finished; want digits-1 still waiting and digits-2 created suspended", got)
	}
	if n := f.unfinished(); n != 2 {
		t.Fatalf("%d trials unfinished, want parallelTrials (2)", n)
	}

	for _, name := range []string{"digits-1", "digits-2", "digits-3"} {
		f.resume(name)
		f.finish(name, false, "0.3")
		f.sync(engine.WaitForEvent())
	}
	if f.creates != 4 {
		t.Errorf("%d creates, want numTrials (4)", f.creates)
	}
	if c := f.condition(trainer.OptimizationJobComplete); c == nil || c.Reason != trainer.OptimizationJobMaxTrialsReachedReason {
		t.Errorf("Complete = %+v; want MaxTrialsReached once the resumed trials finished", c)
	}
}

// TestDeletedOptimizationJobLeavesTrialsToTheGarbageCollector: every trial carries a
// controller owner reference to the OptimizationJob with blockOwnerDeletion, so the
// garbage collector deletes the trials with it (foreground deletion waits for them);
// a sync after the OptimizationJob is gone neither creates nor deletes anything.
func TestDeletedOptimizationJobLeavesTrialsToTheGarbageCollector(t *testing.T) {
	f := newFixture(t, optimizationJob(4, 2, random, lr))
	f.sync(engine.WaitForEvent())
	for _, tj := range f.trials() {
		ref := metav1.GetControllerOf(tj)
		if ref == nil || ref.UID != "digits-uid" || ref.Kind != trainer.OptimizationJobKind || ref.Name != "digits" ||
			ref.APIVersion != trainer.SchemeGroupVersion.String() || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("trial %s owner references %+v; want the OptimizationJob as controller, blockOwnerDeletion true", tj.Name, tj.OwnerReferences)
		}
	}

	if err := f.jobs.Delete(f.job()); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	f.sync(engine.WaitForEvent())
	if actions := f.client.Actions(); len(actions) != 0 {
		t.Errorf("a sync of a deleted OptimizationJob made API calls %v; want none (the garbage collector deletes the trials)", actions)
	}
	if n := len(f.trials()); n != 2 {
		t.Errorf("%d trials left, want the 2 created", n)
	}
}

// TestCollidingVariablesFailInvalidSpec: two parameters that would set one trainer
// variable (trial.EnvName) fail the search at once, InvalidSpec naming the parameter,
// instead of a create that can never succeed being retried.
func TestCollidingVariablesFailInvalidSpec(t *testing.T) {
	a := trainer.Parameter{Name: "learning-rate", SearchSpace: trainer.SearchSpace{Categorical: &trainer.CategoricalSpace{Choices: []string{"1"}}}}
	b := trainer.Parameter{Name: "learning_rate", SearchSpace: trainer.SearchSpace{Categorical: &trainer.CategoricalSpace{Choices: []string{"2"}}}}
	f := newFixture(t, optimizationJob(2, 1, random, a, b))
	f.sync(engine.Terminal())
	c := f.condition(trainer.OptimizationJobFailed)
	if c == nil || c.Reason != trainer.OptimizationJobInvalidSpecReason || !strings.Contains(c.Message, "spec.parameters[1].name") ||
		!strings.Contains(c.Message, "KUBEFLOW_TRAINER_OPT_LEARNING_RATE") {
		t.Fatalf("Failed = %+v; want InvalidSpec naming spec.parameters[1].name and the variable", c)
	}
	if f.creates != 0 {
		t.Errorf("%d trials created", f.creates)
	}
}

// TestTemplateFinalizersFailInvalidSpec (issue 41, finding 8): an OptimizationJob admitted
// without the webhook whose trainJobTemplate carries a finalizer gets no trial — each
// would carry it, and a finalizer only another controller removes keeps the trials
// (and their pods) after the OptimizationJob is deleted — but Failed, InvalidSpec,
// naming the field.
func TestTemplateFinalizersFailInvalidSpec(t *testing.T) {
	job := optimizationJob(2, 1, random, lr)
	job.Spec.TrainJobTemplate.Finalizers = []string{"example.com/cleanup"}
	f := newFixture(t, job)
	f.sync(engine.Terminal())
	c := f.condition(trainer.OptimizationJobFailed)
	if c == nil || c.Reason != trainer.OptimizationJobInvalidSpecReason || !strings.Contains(c.Message, "spec.trainJobTemplate.metadata.finalizers") {
		t.Fatalf("Failed = %+v; want InvalidSpec naming spec.trainJobTemplate.metadata.finalizers", c)
	}
	if f.creates != 0 {
		t.Errorf("%d trials created", f.creates)
	}
}
