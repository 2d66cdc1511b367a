package search

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainyard/trainyard/pkg/apis/trainer/v1alpha1"
)

// AnnotationFinalReportWait sets how long an OptimizationJob waits, after one of its
// trials completes, for the trainer's final report (progressPercentage 100) before it
// ranks the trial by the last report stored: a Go duration from "0s" to "1h" (e.g.
// "30s"); without it, the controller's default (5 s). A trial whose final report is
// stored is ranked at once, whatever the wait. The search does not end (Complete, or
// Failed for want of a success) while a completed trial waits. Upstream's
// OptimizationJob has no such field: KEP-3562 (trainer #3562) ranks trials by a metric
// and leaves how it is collected to the suggestion service, and trainer #3800 adds
// suspend and managedBy only — so, as AnnotationMaxFailedTrials, an annotation in
// Trainyard's namespace, checked at admission and by the controller (ValidateSpec).
// A longer wait suits trainers whose last report can be held back — a progress server
// that defers reports under its rate limits, a trainer that retries after a 429 —; 0
// ranks a completed trial as it stands, for trainers that never report 100.
const AnnotationFinalReportWait = "trainyard.dev/final-report-wait"

// MaxFinalReportWait is AnnotationFinalReportWait's largest value: a report later than
// that after the trainer exited is not coming.
const MaxFinalReportWait = time.Hour

// FinalReportWait returns job's AnnotationFinalReportWait, or def when it is absent.
// Error: a value that is not a Go duration from 0s to 1h, at
// metadata.annotations[trainyard.dev/final-report-wait], naming the fix.
func FinalReportWait(job *trainer.OptimizationJob, def time.Duration) (time.Duration, *field.Error) {
	v, ok := job.Annotations[AnnotationFinalReportWait]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxFinalReportWait {
		return 0, field.Invalid(field.NewPath("metadata", "annotations").Key(AnnotationFinalReportWait), v,
			"must be a duration from 0s to 1h, e.g. \"30s\": how long after a trial completes the search waits for its final report (progressPercentage 100) "+
				"before ranking it by the last report stored; remove it for the controller's default (5s)")
	}
	return d, nil
}
