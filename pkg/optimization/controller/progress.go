package controller

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
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
	created int   // trials created: indexes 0 to created-1 exist or, cancelled, existed
	running int   // of which unfinished
	next    []int // the indexes to create now, ascending

	succeeded, failed, noMetric int
	// cancelled counts the trials deleted (docs/compatibility.md#deleted-trials):
	// finished, neither ranked nor counted against the failure budget.
	cancelled int
	best      *trainer.OptimizationResult
	bestValue float64

	// budget is the search's failure budget; failures the failed and metric-less
	// trials, by index; budgetSpent whether they spend the budget (no trial is
	// started then, and the search ends Failed, MaxFailedTrialsReached).
	budget      search.Budget
	failures    []failedTrial
	budgetSpent bool

	// settling counts completed trials whose metric may still change
	// (trial.Unsettled): neither ranked nor unfinished, they hold the search's end
	// back for settleWait at most.
	settling   int
	settleWait time.Duration

	// ended are the trials that finished — ranked, failed or cancelled — by index,
	// for the Events that announce them (Stage.announce).
	ended []endedTrial
}

// endedTrial is a finished trial as an Event announces it.
type endedTrial struct {
	index      int
	name       string
	tj         *trainer.TrainJob // nil for a trial deleted and gone
	parameters []trainer.ParameterAssignment
	state      trial.State // Succeeded, Failed or NoMetric; "" when cancelled
	value      float64     // the objective metric's, when Succeeded
	failure    trial.Failure
}

// failedTrial is a trial that counts against the failure budget.
type failedTrial struct {
	name string
	trial.Failure
}

// missingTrials is what Stage.missing found of the trials the cache does not hold.
type missingTrials struct {
	created int          // trials created so far: indexes 0 to created-1
	gone    map[int]bool // of which deleted
	lagging int          // of which existing but not in the cache yet
}

// plan tallies trials (by index) at now and chooses the next indexes: from
// m.created up, below target, as many as the unfinished trials leave room for under
// parallelTrials — none once the failed and metric-less trials spend budget. A
// deleted trial (m.gone, or in the cache with a deletionTimestamp) is cancelled: it
// is finished, counts toward the trials created, and is not created again. A trial
// not in the cache yet (m.lagging) is unfinished. A completed trial is ranked (or
// counted as failed) once settled (trial.Unsettled with settle); it makes room for
// the next trial at once.
func plan(job *trainer.OptimizationJob, srch *search.Search, trials map[int]*trainer.TrainJob, m missingTrials, now time.Time, settle time.Duration, budget search.Budget) *progress {
	p := &progress{target: min(numTrials(job), srch.Size()), created: m.created, budget: budget, cancelled: len(m.gone), running: m.lagging}
	objective := job.Spec.Objectives[0]
	for _, index := range slices.Sorted(maps.Keys(m.gone)) {
		assignment, _ := srch.Assignment(index) // the parameters it ran; ValidateSpec passed
		p.ended = append(p.ended, endedTrial{index: index, name: trial.Name(job.Name, index), parameters: assignment})
	}
	for _, index := range slices.Sorted(maps.Keys(trials)) { // ascending: the first of equal bests wins
		tj := trials[index]
		rec, _ := trial.Read(tj) // it read in trials()
		if tj.DeletionTimestamp != nil {
			p.cancelled++
			p.ended = append(p.ended, endedTrial{index: index, name: tj.Name, tj: tj, parameters: rec.Parameters})
			continue
		}
		state, value := trial.Outcome(tj, objective.Metric)
		if wait := trial.Unsettled(tj, now, settle); wait > 0 && state != trial.Running {
			p.settling++
			p.settleWait = max(p.settleWait, wait)
			continue
		}
		var failure trial.Failure
		switch state {
		case trial.Running:
			p.running++
			continue
		case trial.Failed:
			p.failed++
			failure = trial.FailureOf(tj, objective.Metric)
			p.failures = append(p.failures, failedTrial{tj.Name, failure})
		case trial.NoMetric:
			p.noMetric++
			failure = trial.FailureOf(tj, objective.Metric)
			p.failures = append(p.failures, failedTrial{tj.Name, failure})
		case trial.Succeeded:
			p.succeeded++
			if p.best == nil || trial.Better(value, p.bestValue, objective.Direction) {
				p.best, p.bestValue = &trainer.OptimizationResult{TrainJobName: tj.Name, Parameters: rec.Parameters}, value
			}
		}
		p.ended = append(p.ended, endedTrial{index: index, name: tj.Name, tj: tj, parameters: rec.Parameters, state: state, value: value, failure: failure})
	}
	// A settling trial may still succeed: the default budget, spent only while none
	// has, is not spent before it is ranked.
	if p.budgetSpent = budget.Exhausted(len(p.failures), p.succeeded+p.settling); p.budgetSpent {
		return p
	}
	room := parallelTrials(job) - p.running
	for index := p.created; index < p.target && len(p.next) < room; index++ {
		p.next = append(p.next, index)
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
		setCondition(st, job, trainer.OptimizationJobCreated, trainer.OptimizationJobTrialsCreatedReason, p.tally(job))
	}
	if p.best != nil {
		st.Result = p.best
	}
	if p.budgetSpent {
		setCondition(st, job, trainer.OptimizationJobFailed, trainer.OptimizationJobMaxFailedTrialsReachedReason, p.budgetMessage(job))
		return st
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

// tally is the Created condition's message, the search's progress at a glance (the
// TRIALS column of `kubectl get optimizationjobs`), e.g. "5 of 8 trials created; 3 done
// (2 succeeded, 1 failed), 2 running; best digits-1, loss 0.12": failed counts the
// trials that completed without the metric too; cancelled (deleted) trials are named
// when there are any; a completed trial whose metric is not settled yet counts as
// running.
func (p *progress) tally(job *trainer.OptimizationJob) string {
	failed := p.failed + p.noMetric
	done := p.succeeded + failed + p.cancelled
	s := fmt.Sprintf("%d of %d trials created; %d done (%d succeeded, %d failed", p.created, p.target, done, p.succeeded, failed)
	if p.cancelled > 0 {
		s += fmt.Sprintf(", %d cancelled", p.cancelled)
	}
	s += fmt.Sprintf("), %d running", p.running+p.settling)
	if p.best != nil {
		s += fmt.Sprintf("; best %s, %s %s", p.best.TrainJobName, job.Spec.Objectives[0].Metric, strconv.FormatFloat(p.bestValue, 'g', -1, 64))
	}
	return s
}

// summary says how the trials ended and which was best, e.g. "8 trials finished: 6
// succeeded, 1 failed, 1 completed without metric loss; best digits-3 (loss 0.12)".
func (p *progress) summary(job *trainer.OptimizationJob) string {
	metric := job.Spec.Objectives[0].Metric
	s := fmt.Sprintf("%d trials finished: %d succeeded, %d failed, %d completed without metric %s", p.created, p.succeeded, p.failed, p.noMetric, metric)
	if p.cancelled > 0 {
		s += fmt.Sprintf(", %d cancelled (deleted)", p.cancelled)
	}
	if p.best != nil {
		s += fmt.Sprintf("; best %s (%s %s)", p.best.TrainJobName, metric, strconv.FormatFloat(p.bestValue, 'g', -1, 64))
	}
	return s
}

// budgetMessage says that the failure budget is spent, what the failed trials share,
// and the fix, e.g. "3 trials failed and none succeeded: the default failure budget
// (…). All 3 completed without reporting a numeric value of metric "loss" (digits-0,
// digits-1, digits-2). 1 trial still running is left to finish; no other is started.
// Fix what fails the trials …".
func (p *progress) budgetMessage(job *trainer.OptimizationJob) string {
	var b strings.Builder
	n := len(p.failures)
	fmt.Fprintf(&b, "%d %s failed", n, plural(n, "trial", "trials"))
	if p.succeeded == 0 {
		b.WriteString(" and none succeeded")
	}
	fmt.Fprintf(&b, ": %s, is spent. ", p.budget)
	// Group by reason, in order of first appearance (the failures are by index).
	var reasons []string
	byReason := map[string][]failedTrial{}
	for _, f := range p.failures {
		if _, ok := byReason[f.Reason]; !ok {
			reasons = append(reasons, f.Reason)
		}
		byReason[f.Reason] = append(byReason[f.Reason], f)
	}
	describe := func(fs []failedTrial) string {
		names := make([]string, 0, len(fs))
		for _, f := range fs[:min(len(fs), 5)] {
			names = append(names, f.name)
		}
		if len(fs) > 5 {
			names = append(names, "…")
		}
		what := fs[0].Message
		if fs[0].Reason != string(trial.NoMetric) {
			what = "failed, reason " + fs[0].Reason
			if fs[0].Message != "" {
				what += " (" + fs[0].Message + ")"
			}
		}
		return fmt.Sprintf("%s (%s)", what, strings.Join(names, ", "))
	}
	if len(reasons) == 1 {
		fmt.Fprintf(&b, "All %d %s. ", n, describe(byReason[reasons[0]]))
	} else {
		parts := make([]string, 0, len(reasons))
		for _, r := range reasons {
			parts = append(parts, fmt.Sprintf("%d %s", len(byReason[r]), describe(byReason[r])))
		}
		fmt.Fprintf(&b, "They failed for different reasons: %s. ", strings.Join(parts, "; "))
	}
	if p.running > 0 {
		fmt.Fprintf(&b, "%d %s still running %s left to finish; no other is started. ", p.running, plural(p.running, "trial", "trials"), plural(p.running, "is", "are"))
	}
	fmt.Fprintf(&b, "Fix what fails the trials (spec.trainJobTemplate: image, command, the metric %q they report) and create a new OptimizationJob; "+
		"to let more trials fail, set annotation %s higher on it.", job.Spec.Objectives[0].Metric, search.AnnotationMaxFailedTrials)
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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
