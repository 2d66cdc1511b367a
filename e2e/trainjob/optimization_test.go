package trainjob

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard/trainyard/e2e/cluster"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
	"github.com/trainyard/trainyard/pkg/progress/wire"
)

// TestOptimizationJobFindsTheBestTrial (issue 26): an OptimizationJob of 3 trials, 2 at
// a time, over a log-uniform learning rate and a categorical hidden size. Each trial is
// a TrainJob whose trainer gets its parameters as KUBEFLOW_TRAINER_OPT_* variables; its
// pod reports a loss to the progress server, as a trainer does, and completes. Never
// more than 2 trials run at once, the third starts when one ends, and the
// OptimizationJob completes naming the trial with the lowest reported loss. Deleting it
// then deletes its trials.
func TestOptimizationJobFindsTheBestTrial(t *testing.T) {
	e := newEnv(t)
	ctrl := startController(t, e.c)
	e.createRuntime(t, "reporting", map[string]string{cluster.AnnotationCompleteDelay: "12s"})
	job := &trainer.OptimizationJob{
		ObjectMeta: metav1.ObjectMeta{Name: "digits", Namespace: e.ns},
		Spec: trainer.OptimizationJobSpec{
			Objectives:      []trainer.Objective{{Metric: "loss"}},
			SearchAlgorithm: &trainer.SearchAlgorithm{Random: &trainer.RandomAlgorithm{Seed: ptr.To[int64](7)}},
			Parameters: []trainer.Parameter{
				{Name: "lr", SearchSpace: trainer.SearchSpace{LogUniform: &trainer.LogUniformSpace{Min: "0.0001", Max: "0.1"}}},
				{Name: "hidden_size", SearchSpace: trainer.SearchSpace{Categorical: &trainer.CategoricalSpace{Choices: []string{"32", "64", "128"}}}},
			},
			NumTrials: ptr.To[int32](3), ParallelTrials: ptr.To[int32](2),
			TrainJobTemplate: trainer.TrainJobTemplateSpec{Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{
				Name: "reporting", APIGroup: ptr.To(trainer.GroupName), Kind: ptr.To(trainer.TrainingRuntimeKind)}}},
		},
	}
	if _, err := e.trainers.TrainerV1alpha1().OptimizationJobs(e.ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	losses := []string{"0.5", "0.2", "0.9"}
	for i, loss := range losses {
		name := trial.Name("digits", i)
		pod := e.waitPods(t, name, 1)[0]
		if n := e.unfinishedTrials(t); n > 2 {
			t.Fatalf("%d trials unfinished when %s started; parallelTrials is 2", n, name)
		}
		node := podContainer(t, pod, trainer.ContainerNode)
		if envOf(node, "KUBEFLOW_TRAINER_OPT_LR") == "" || envOf(node, "KUBEFLOW_TRAINER_OPT_HIDDEN_SIZE") == "" {
			t.Fatalf("trial %s's trainer lacks its parameters: env %v", name, node.Env)
		}
		url := envOf(node, wire.EnvServerURL)
		client := progressClient(t, e.progressCA(t), ctrl.progressAddr)
		report := fmt.Sprintf(`{"trainerStatus":{"progressPercentage":100,"metrics":[{"name":"loss","value":%q}],"lastUpdatedTime":%q}}`,
			loss, time.Now().UTC().Format(time.RFC3339))
		if code, body := postReport(t, client, url, e.podToken(t, pod, wire.Audience(e.ns, name)), report); code != http.StatusOK {
			t.Fatalf("trial %s's report: %d %s", name, code, body)
		}
		t.Logf("trial %s (lr %s, hidden_size %s) reported loss %s", name,
			envOf(node, "KUBEFLOW_TRAINER_OPT_LR"), envOf(node, "KUBEFLOW_TRAINER_OPT_HIDDEN_SIZE"), loss)
	}
	var done *trainer.OptimizationJob
	cluster.Eventually(t, 2*time.Minute, "the OptimizationJob complete", func(ctx context.Context) (bool, string) {
		oj, err := e.trainers.TrainerV1alpha1().OptimizationJobs(e.ns).Get(ctx, "digits", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		done = oj
		return meta.IsStatusConditionTrue(oj.Status.Conditions, trainer.OptimizationJobComplete), fmt.Sprintf("%+v", oj.Status.Conditions)
	})
	if r := done.Status.Result; r == nil || r.TrainJobName != trial.Name("digits", 1) {
		t.Errorf("result %+v; want %s, the lowest loss (0.2)", r, trial.Name("digits", 1))
	}
	t.Logf("complete: %s", meta.FindStatusCondition(done.Status.Conditions, trainer.OptimizationJobComplete).Message)

	// Deleting the OptimizationJob deletes its trials (the garbage collector follows
	// their controller ownerReference), and their JobSets with them.
	if err := e.trainers.TrainerV1alpha1().OptimizationJobs(e.ns).Delete(context.Background(), "digits", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.Eventually(t, time.Minute, "the trials garbage collected", func(ctx context.Context) (bool, string) {
		list, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).List(ctx, metav1.ListOptions{LabelSelector: trial.LabelOptimizationJob + "=digits"})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d trials left", len(list.Items))
	})
}

// unfinishedTrials counts the namespace's TrainJobs without Complete or Failed.
func (e *env) unfinishedTrials(t *testing.T) int {
	t.Helper()
	list, err := e.trainers.TrainerV1alpha1().TrainJobs(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: trial.LabelOptimizationJob + "=digits"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tj := range list.Items {
		if !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) && !meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed) {
			n++
		}
	}
	return n
}
