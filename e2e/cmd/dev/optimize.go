package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard/trainyard/e2e/training"
	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// runSearch creates the digits search (examples/digits-search, `make dev OPTIMIZE=1`)
// as OptimizationJob ns/name and follows it to its end: each trial's parameters when
// it is created, its final loss when it finishes, and the winner. Errors: the search
// cannot be built or created, it Failed, or ctx ends first.
func runSearch(ctx context.Context, root string, trainers trainerclient.Interface, ns, name string, say func(string, ...any)) error {
	job, err := training.DigitsSearch(root, ns, name, training.DigitsSearchOptions{})
	if err != nil {
		return err
	}
	if _, err := trainers.TrainerV1alpha1().OptimizationJobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating OptimizationJob: %w", err)
	}
	say("OptimizationJob %s/%s created (%s): %d trials, %d at a time, minimizing %s over %s",
		ns, name, training.DigitsSearchExample, *job.Spec.NumTrials, *job.Spec.ParallelTrials, job.Spec.Objectives[0].Metric, parameterNames(job))
	seen := map[string]string{} // trial name → the last state printed
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("OptimizationJob %s/%s did not finish: %w", ns, name, ctx.Err())
		case <-tick.C:
		}
		list, err := trainers.TrainerV1alpha1().TrainJobs(ns).List(ctx, metav1.ListOptions{LabelSelector: trial.LabelOptimizationJob + "=" + trial.LabelValue(name)})
		if err != nil {
			continue
		}
		slices.SortFunc(list.Items, func(a, b trainer.TrainJob) int { return strings.Compare(a.Name, b.Name) })
		for i := range list.Items {
			if s := describeTrial(&list.Items[i], job.Spec.Objectives[0].Metric); s != seen[list.Items[i].Name] {
				say("trial %s", s)
				seen[list.Items[i].Name] = s
			}
		}
		oj, err := trainers.TrainerV1alpha1().OptimizationJobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if c := meta.FindStatusCondition(oj.Status.Conditions, trainer.OptimizationJobFailed); c != nil && c.Status == metav1.ConditionTrue {
			sayTable(ctx, trainers, ns, name, say)
			return errors.New("OptimizationJob failed: " + c.Reason + ": " + c.Message)
		}
		if c := meta.FindStatusCondition(oj.Status.Conditions, trainer.OptimizationJobComplete); c != nil && c.Status == metav1.ConditionTrue {
			say("OptimizationJob %s/%s is Complete (%s): %s", ns, name, c.Reason, c.Message)
			if r := oj.Status.Result; r != nil {
				say("best trial: %s with %s", r.TrainJobName, assignment(r.Parameters))
			}
			sayTable(ctx, trainers, ns, name, say)
			say("The cluster keeps running: export KUBECONFIG=$PWD/_output/cluster/kubeconfig; kubectl get optimizationjobs,trainjobs; kubectl describe optimizationjob %s (each trial's parameters and value under Events); make cluster-down to stop it.", name)
			return nil
		}
	}
}

// sayTable prints the OptimizationJob's `kubectl get optimizationjobs` line — its
// state, the trials' tally and the best trial with its value, from the CRD's printer
// columns as the API server renders them — or why it could not be read.
func sayTable(ctx context.Context, trainers trainerclient.Interface, ns, name string, say func(string, ...any)) {
	table, err := training.GetOptimizationJob(ctx, trainers, ns, name, time.Now())
	if err != nil {
		say("kubectl get optimizationjobs: %v", err)
		return
	}
	say("$ kubectl get optimizationjobs -n %s %s\n%s", ns, name, table)
}

// describeTrial says where trial tj stands: its parameters, then Running, Failed, or
// Complete with its objective metric from status.trainerStatus.
func describeTrial(tj *trainer.TrainJob, metric string) string {
	params := "?"
	if rec, err := trial.Read(tj); err == nil {
		params = assignment(rec.Parameters)
	}
	state, value := trial.Outcome(tj, metric)
	switch state {
	case trial.Succeeded:
		return fmt.Sprintf("%s (%s): Complete, %s %g", tj.Name, params, metric, value)
	case trial.NoMetric:
		return fmt.Sprintf("%s (%s): Complete without metric %s", tj.Name, params, metric)
	case trial.Failed:
		return fmt.Sprintf("%s (%s): Failed: %s", tj.Name, params, meta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed).Message)
	}
	return fmt.Sprintf("%s (%s): running", tj.Name, params)
}

// assignment renders parameters as "lr=0.01, hidden_size=64".
func assignment(ps []trainer.ParameterAssignment) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Name + "=" + p.Value
	}
	return strings.Join(parts, ", ")
}

func parameterNames(job *trainer.OptimizationJob) string {
	names := make([]string, len(job.Spec.Parameters))
	for i, p := range job.Spec.Parameters {
		names[i] = p.Name
	}
	return strings.Join(names, " and ")
}
