package bench

// The targets of Run's modes (issue 9 and the issues after it): evaluateTargets states
// those of the run's mode, each mode's own beside its code.

import (
	"fmt"
	"strings"
)

// Issue 9's targets.
const (
	targetThroughputRatio = 0.8
	targetP99Seconds      = 5.0
	targetAdmissionWrites = 1.0
	targetLifecycleWrites = 3.0
	targetCPUPer1000      = 1.5
	targetRSSBytes        = 150 << 20
	targetRSSAtN          = 10000
)

// targetList is targets in the order stated.
type targetList []Target

// add states one target.
func (ts *targetList) add(name, target, measured string, met bool, note string) {
	*ts = append(*ts, Target{Name: name, Target: target, Measured: measured, Met: met, Note: note})
}

// evaluateTargets states each target that this run's mode measures: the mode's own
// (admissionTargets, lifecycleTargets, kueueTargets, progressTargets, ttlTargets,
// restartTargets),
// then those of every mode: no failed sync from cache lag, no errors, the peak RSS.
func evaluateTargets(r *Result) []Target {
	var ts targetList
	if r.Mode == ModeAdmission && r.Admission != nil && r.Limit != nil {
		admissionTargets(&ts, r)
	}
	if r.Mode == ModeLifecycle && r.Lifecycle != nil {
		lifecycleTargets(&ts, r)
	}
	if k := r.Kueue; r.Mode == ModeKueue && k != nil {
		ts = append(ts, kueueTargets(r, k)...)
	}
	if p := r.Progress; r.Mode == ModeProgress && p != nil {
		progressTargets(&ts, r, p)
	}
	if t := r.TTL; r.Mode == ModeTTL && t != nil {
		ttlTargets(&ts, r, t)
	}
	if rs := r.Restart; rs != nil {
		restartTargets(&ts, r, rs)
	}
	c := r.Controller
	ts.add("failed syncs from the controller's cache lag", "0", fmt.Sprintf("%.0f", c.CacheLagErrors), c.CacheLagErrors == 0, "stage errors with reason not_found or conflict")
	errorsTarget(&ts, r)
	if r.TTL != nil {
		return ts // ttlTargets states the peak RSS at its own N
	}
	rssNote := ""
	if r.N < targetRSSAtN {
		rssNote = fmt.Sprintf("the target is for N = %d; this run has N = %d", targetRSSAtN, r.N)
	}
	ts.add("controller peak RSS", fmt.Sprintf("≤ %d MiB at N = %d", targetRSSBytes>>20, targetRSSAtN), fmt.Sprintf("%.1f MiB at N = %d", float64(c.PeakRSSBytes)/(1<<20), r.N),
		c.PeakRSSBytes <= targetRSSBytes, rssNote)
	return ts
}

// errorsTarget states the target of no errors: failed creates and failed syncs, and
// what else fails in the run's mode (progressErrorsTarget, kueueErrorsTarget).
func errorsTarget(ts *targetList, r *Result) {
	c := r.Controller
	errs := 0
	if r.Admission != nil {
		errs = r.Admission.CreateErrors
	}
	if p := r.Progress; p != nil {
		progressErrorsTarget(ts, r, p, errs)
	} else if k := r.Kueue; k != nil {
		kueueErrorsTarget(ts, r, k, errs)
	} else {
		ts.add("errors", "0", fmt.Sprintf("%d create errors, %.0f failed syncs", errs, sum(c.Errors)), errs == 0 && sum(c.Errors) == 0, "")
	}
}

// joinNotes joins the non-empty notes with "; ".
func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}
