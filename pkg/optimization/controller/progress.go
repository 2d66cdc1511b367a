package controller

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/search"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// progress is where a search stands, from its trials.
type progress struct {
	target  int   // trials the search makes in all: numTrials, or fewer when a grid has fewer combinations
	created int   // trials that exist
	running int   // of which unfinished
	next    []int // the indexes to create now, ascending

	succeeded, failed, noMetric int
	best                        *trainer.OptimizationResult
	bestValue                   float64

	// settling counts completed trials whose metric may still change
	// (trial.Unsettled): neither ranked nor unfinished, they hold the search's end
	// back for settleWait at most.
	settling   int
	settleWait time.Duration
}

// plan tallies trials (by index) at now and chooses the next indexes: the lowest ones
// below target not created yet, as many as the unfinished trials leave room for under
// parallelTrials. A completed trial is ranked once settled (trial.Unsettled with
// settle); it makes room for the next trial at once.
func plan(job *trainer.OptimizationJob, srch *search.Search, trials map[int]*trainer.TrainJob, now time.Time, settle time.Duration) *progress {
	p := &progress{target: min(numTrials(job), srch.Size()), created: len(trials)}
	objective := job.Spec.Objectives[0]
	for _, index := range slices.Sorted(maps.Keys(trials)) { // ascending: the first of equal bests wins
		tj := trials[index]
		state, value := trial.Outcome(tj, objective.Metric)
		if wait := trial.Unsettled(tj, now, settle); wait > 0 && state != trial.Running {
			p.settling++
			p.settleWait = max(p.settleWait, wait)
			continue
		}
		switch state {
		case trial.Running:
			p.running++
		case trial.Failed:
			p.failed++
		case trial.NoMetric:
			p.noMetric++
		case trial.Succeeded:
			p.succeeded++
			if p.best == nil || trial.Better(value, p.bestValue, objective.Direction) {
				rec, _ := trial.Read(tj) // it read in trials()
				p.best, p.bestValue = &trainer.OptimizationResult{TrainJobName: tj.Name, Parameters: rec.Parameters}, value
			}
		}
	}
	room := parallelTrials(job) - p.running
	for index := 0; index < p.target && len(p.next) < room; index++ {
		if _, ok := trials[index]; !ok {
			p.next = append(p.next, index)
		}
	}
	return p
}

// status returns job's status after this pass: Created, the result, and Complete or
// Failed once every trial the search makes has finished. createErr is the pass's
// failed create, if any.
func (p *progress) status(job *trainer.OptimizationJob, createErr error) *trainer.OptimizationJobStatus {
	st := job.Status.DeepCopy()
	if createErr != nil {
		setCondition(st, job, trainer.OptimizationJobCreated, trainer.OptimizationJobTrainJobsCreationFailedReason, createErr.Error())
	} else {
		setCondition(st, job, trainer.OptimizationJobCreated, trainer.OptimizationJobTrialsCreatedReason,
			fmt.Sprintf("%d of %d trials created", p.created, p.target))
	}
	if p.best != nil {
		st.Result = p.best
	}
	if p.created < p.target || p.running > 0 || p.settling > 0 {
		return st
	}
	summary := p.summary(job)
	switch {
	case p.succeeded == 0:
		setCondition(st, job, trainer.OptimizationJobFailed, trainer.OptimizationJobNoTrialSucceededReason,
			summary+": no trial reported the objective metric "+strconv.Quote(job.Spec.Objectives[0].Metric)+" before it completed")
	case p.target < numTrials(job):
		setCondition(st, job, trainer.OptimizationJobComplete, trainer.OptimizationJobSearchSpaceExhaustedReason, summary)
	default:
		setCondition(st, job, trainer.OptimizationJobComplete, trainer.OptimizationJobMaxTrialsReachedReason, summary)
	}
	return st
}

// summary says how the trials ended and which was best, e.g. "8 trials finished: 6
// succeeded, 1 failed, 1 completed without metric loss; best digits-3 (loss 0.12)".
func (p *progress) summary(job *trainer.OptimizationJob) string {
	metric := job.Spec.Objectives[0].Metric
	s := fmt.Sprintf("%d trials finished: %d succeeded, %d failed, %d completed without metric %s", p.created, p.succeeded, p.failed, p.noMetric, metric)
	if p.best != nil {
		s += fmt.Sprintf("; best %s (%s %s)", p.best.TrainJobName, metric, strconv.FormatFloat(p.bestValue, 'g', -1, 64))
	}
	return s
}

// setCondition sets condition typ True with reason and message on st, or, for
// Created with a failure reason, False.
func setCondition(st *trainer.OptimizationJobStatus, job *trainer.OptimizationJob, typ, reason, message string) {
	status := metav1.ConditionTrue
	if reason == trainer.OptimizationJobTrainJobsCreationFailedReason {
		status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: job.Generation})
}

// statusEqual compares two statuses but for the conditions' lastTransitionTime, which
// SetStatusCondition keeps when the status does not change.
func statusEqual(a, b *trainer.OptimizationJobStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}
