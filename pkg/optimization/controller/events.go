package controller

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
	"github.com/trainyard/trainyard/pkg/optimization/trial"
)

// The reasons of the Events an OptimizationJob gets for its trials, one Event per trial
// and reason (Config.Recorder). Upstream's OptimizationJob status has the best trial
// only (status.result) and its API has no per-trial status; these Events are what
// `kubectl describe optimizationjob` shows of every trial
// (docs/compatibility.md#kubectl-describe-optimizationjob).
const (
	// ReasonTrialCreated (Normal): a trial was created, with its parameters.
	ReasonTrialCreated = "TrialCreated"
	// ReasonTrialSucceeded (Normal): a trial completed and was ranked, with its
	// parameters and its objective metric's value.
	ReasonTrialSucceeded = "TrialSucceeded"
	// ReasonTrialFailed (Warning): a trial failed, or completed without the objective
	// metric, with its parameters and why.
	ReasonTrialFailed = "TrialFailed"
	// ReasonTrialCancelled (Normal): a trial was deleted, with its parameters.
	ReasonTrialCancelled = "TrialCancelled"
)

// The Events' actions (events.k8s.io/v1 action: what the controller did).
const (
	actionCreate = "Create"
	actionRank   = "Rank"
)

// announce records an Event on job for each trial of p that ended and this controller
// run has not announced (seenTrials.announced), so each is announced once per run: a
// new leader announces again the trials that ended before it led (an Event the API
// server may still hold; identical ones within minutes are counted as a series).
func (s *Stage) announce(job *trainer.OptimizationJob, key cache.ObjectName, p *progress) {
	if s.cfg.Recorder == nil || len(p.ended) == 0 {
		return
	}
	s.mu.Lock()
	known := s.seenLocked(job, key)
	var fresh []endedTrial
	for _, e := range p.ended {
		if !known.announced[e.index] {
			known.announced[e.index] = true
			fresh = append(fresh, e)
		}
	}
	s.mu.Unlock()
	metric := job.Spec.Objectives[0].Metric
	for _, e := range fresh {
		var related runtime.Object
		if e.tj != nil {
			related = e.tj
		}
		params := formatParameters(e.parameters)
		switch e.state {
		case "":
			s.cfg.Recorder.Eventf(job, related, corev1.EventTypeNormal, ReasonTrialCancelled, actionRank, "%s",
				eventNote(fmt.Sprintf("Trial %s (%s) was deleted: cancelled, not created again", e.name, params)))
		case trial.Succeeded:
			s.cfg.Recorder.Eventf(job, related, corev1.EventTypeNormal, ReasonTrialSucceeded, actionRank, "%s",
				eventNote(fmt.Sprintf("Trial %s (%s): %s %s", e.name, params, metric, strconv.FormatFloat(e.value, 'g', -1, 64))))
		default:
			why := e.failure.Message
			if e.state == trial.Failed {
				why = "failed, reason " + e.failure.Reason
				if e.failure.Message != "" {
					why += ": " + e.failure.Message
				}
			}
			s.cfg.Recorder.Eventf(job, related, corev1.EventTypeWarning, ReasonTrialFailed, actionRank, "%s",
				eventNote(fmt.Sprintf("Trial %s (%s) %s", e.name, params, why)))
		}
	}
}

// formatParameters renders an assignment as "lr=0.01, hidden_size=64", in
// spec.parameters order.
func formatParameters(ps []trainer.ParameterAssignment) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Name + "=" + p.Value
	}
	return strings.Join(parts, ", ")
}

// maxNoteBytes is an events.k8s.io/v1 Event's note limit (the API server refuses a
// longer one).
const maxNoteBytes = 1024

// eventNote returns s cut to maxNoteBytes, at a character boundary, ending in "…" when
// cut.
func eventNote(s string) string {
	if len(s) <= maxNoteBytes {
		return s
	}
	cut := maxNoteBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
