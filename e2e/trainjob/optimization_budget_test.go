package trainjob

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// TestBrokenTemplateSpendsTheFailureBudget (issue 42): a search whose trial template is
// broken — kwok fails each trial's pod 1 s after it starts, as a bad image or a
// crashing command would — ends Failed, reason MaxFailedTrialsReached, after the
// default failure budget's 3 trials, not after its numTrials of 10: no 4th trial is
// created. `kubectl get optimizationjobs` shows it (the API server's table from the
// CRD's printer columns), and its Events, which `kubectl describe` prints, give each
// trial's parameters and why it failed.
func TestBrokenTemplateSpendsTheFailureBudget(t *testing.T) {
	e := newEnv(t)
	startController(t, e.c)
	e.createRuntime(t, "broken", map[string]string{cluster.AnnotationFailAfter: "1s"})
	job := &trainer.OptimizationJob{
		ObjectMeta: metav1.ObjectMeta{Name: "digits", Namespace: e.ns},
		Spec: trainer.OptimizationJobSpec{
			Objectives:      []trainer.Objective{{Metric: "loss"}},
			SearchAlgorithm: &trainer.SearchAlgorithm{Random: &trainer.RandomAlgorithm{Seed: ptr.To[int64](7)}},
			Parameters: []trainer.Parameter{
				{Name: "hidden_size", SearchSpace: trainer.SearchSpace{Categorical: &trainer.CategoricalSpace{Choices: []string{"32", "64", "128", "256"}}}},
			},
			NumTrials: ptr.To[int32](10), ParallelTrials: ptr.To[int32](1),
			TrainJobTemplate: trainer.TrainJobTemplateSpec{Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{
				Name: "broken", APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.TrainingRuntimeKind)}}},
		},
	}
	start := time.Now()
	if _, err := e.trainers.TrainerV1alpha1().OptimizationJobs(e.ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var failed *metav1.Condition
	var done *trainer.OptimizationJob
	// 3 trials one after the other, each a JobSet whose pod fails after 1 s (~5 s per
	// trial when idle); 3 minutes leave a loaded 2-core machine room.
	cluster.Eventually(t, 3*time.Minute, "the OptimizationJob Failed", func(ctx context.Context) (bool, string) {
		oj, err := e.trainers.TrainerV1alpha1().OptimizationJobs(e.ns).Get(ctx, "digits", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		done, failed = oj, meta.FindStatusCondition(oj.Status.Conditions, trainer.OptimizationJobFailed)
		return failed != nil && failed.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", oj.Status.Conditions)
	})
	t.Logf("Failed %.1f s after the OptimizationJob's creation: %s: %s", time.Since(start).Seconds(), failed.Reason, failed.Message)
	if failed.Reason != trainer.OptimizationJobMaxFailedTrialsReachedReason || !strings.Contains(failed.Message, "3 trials failed and none succeeded") {
		t.Errorf("Failed = %s: %q; want %s after 3 failed trials", failed.Reason, failed.Message, trainer.OptimizationJobMaxFailedTrialsReachedReason)
	}
	if meta.IsStatusConditionTrue(done.Status.Conditions, trainer.OptimizationJobComplete) {
		t.Errorf("conditions %+v: Complete beside Failed", done.Status.Conditions)
	}
	if got := done.Annotations[trial.AnnotationTrialsCreated]; got != "3" {
		t.Errorf("annotation %s = %q, want 3 trials created of numTrials 10", trial.AnnotationTrialsCreated, got)
	}
	list, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: trial.LabelOptimizationJob + "=digits"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 {
		t.Errorf("%d trials, want 3: the budget ends the search before a 4th", len(list.Items))
	}
	for _, tj := range list.Items {
		if state, _ := trial.Outcome(&tj, "loss"); state != trial.Failed {
			t.Errorf("trial %s is %s, want Failed", tj.Name, state)
		}
	}

	line, err := training.GetOptimizationJob(context.Background(), e.trainers, e.ns, "digits", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get optimizationjobs:\n%s", line)
	for _, want := range []string{"STATE", "TRIALS", "Failed", trainer.OptimizationJobMaxFailedTrialsReachedReason, "3 of 10 trials created; 3 done (0 succeeded, 3 failed), 0 running"} {
		if !strings.Contains(line, want) {
			t.Errorf("kubectl get optimizationjobs lacks %q:\n%s", want, line)
		}
	}

	// What `kubectl describe optimizationjob digits` lists under Events: the core/v1
	// view of the controller's events.k8s.io Events, by the object they regard.
	kube := kubernetes.NewForConfigOrDie(e.c.RESTConfig())
	cluster.Eventually(t, time.Minute, "an Event per trial created and failed", func(ctx context.Context) (bool, string) {
		evs, err := kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=OptimizationJob,involvedObject.name=digits"})
		if err != nil {
			return false, err.Error()
		}
		created, failedTrials := 0, 0
		var notes []string
		for _, ev := range evs.Items {
			notes = append(notes, ev.Reason+": "+ev.Message)
			switch {
			case ev.Reason == "TrialCreated" && strings.Contains(ev.Message, "hidden_size="):
				created++
			case ev.Reason == "TrialFailed" && ev.Type == "Warning" && strings.Contains(ev.Message, "hidden_size=") && strings.Contains(ev.Message, "failed, reason"):
				failedTrials++
			}
		}
		return created == 3 && failedTrials == 3, strings.Join(notes, "\n")
	})
}
