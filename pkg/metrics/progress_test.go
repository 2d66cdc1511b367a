package metrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trainyard/trainyard/pkg/metrics"
)

func TestProgressPreinitialized(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	for name, want := range map[string]int{
		metrics.ProgressReportsTotal:          1,
		metrics.ProgressReportsRejectedTotal:  8, // too_large, too_many_requests, pending_bytes, unauthenticated, forbidden, not_found, invalid, internal
		metrics.ProgressReportDurationSeconds: 1,
		metrics.ProgressTokenReviewsTotal:     5 + 4, // every result uncached, all but error cached
		metrics.ProgressReportsCoalescedTotal: 1,
		metrics.ProgressReportsDroppedTotal:   3, // unchanged, stale, gone
		metrics.ProgressWritesTotal:           2, // success, error
		metrics.ProgressPendingReportBytes:    1,
		metrics.ProgressMaxPendingReportBytes: 1,
	} {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || got != want {
			t.Errorf("%s: got %d series (err %v), want %d", name, got, err, want)
		}
	}
}

func TestObserveProgress(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	m.ObserveProgressReport("", 40*time.Microsecond)
	m.ObserveProgressReport("", 3*time.Millisecond)
	m.ObserveProgressReport(metrics.ReasonForbidden, 2*time.Millisecond)
	m.ObserveProgressReport(metrics.ReasonTooLarge, time.Microsecond)
	m.ObserveProgressReport("bogus", time.Microsecond) // recorded as internal
	m.ObserveProgressTokenReview(metrics.TokenReviewAllowed, false)
	m.ObserveProgressTokenReview(metrics.TokenReviewAllowed, true)
	m.ObserveProgressTokenReview(metrics.TokenReviewAllowed, true)
	m.ObserveProgressTokenReview(metrics.TokenReviewForbidden, false)
	m.ObserveProgressTokenReview("bogus", false) // recorded as error
	m.ObserveProgressCoalesced()
	m.ObserveProgressCoalesced()
	m.ObserveProgressDropped(metrics.ReasonStale)
	m.ObserveProgressDropped(metrics.ReasonGone)
	m.ObserveProgressDropped("bogus") // ignored
	m.ObserveProgressWrite(nil)
	m.ObserveProgressWrite(errors.New("boom"))
	m.ObserveProgressWrite(nil)

	nonZero := func(name string, labels ...string) map[string]float64 {
		got := map[string]float64{}
		for _, s := range family(t, reg, name) {
			v := s.GetCounter().GetValue()
			if v == 0 {
				continue
			}
			var key []string
			for _, l := range labels {
				key = append(key, labelValue(s, l))
			}
			got[strings.Join(key, " ")] = v
		}
		return got
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   map[string]float64
	}{
		{metrics.ProgressReportsTotal, nil, map[string]float64{"": 5}},
		{metrics.ProgressReportsRejectedTotal, []string{metrics.LabelReason}, map[string]float64{
			metrics.ReasonForbidden: 1, metrics.ReasonTooLarge: 1, metrics.ReasonInternal: 1}},
		{metrics.ProgressTokenReviewsTotal, []string{metrics.LabelResult, metrics.LabelCached}, map[string]float64{
			"allowed false": 1, "allowed true": 2, "forbidden false": 1, "error false": 1}},
		{metrics.ProgressReportsCoalescedTotal, nil, map[string]float64{"": 2}},
		{metrics.ProgressReportsDroppedTotal, []string{metrics.LabelReason}, map[string]float64{"stale": 1, "gone": 1}},
		{metrics.ProgressWritesTotal, []string{metrics.LabelResult}, map[string]float64{"success": 2, "error": 1}},
	} {
		if diff := cmp.Diff(c.want, nonZero(c.name, c.labels...)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	// Series stay bounded: the bogus values added none.
	if n, _ := testutil.GatherAndCount(reg, metrics.ProgressTokenReviewsTotal); n != 9 {
		t.Errorf("%s: %d series, want 9", metrics.ProgressTokenReviewsTotal, n)
	}
	h := family(t, reg, metrics.ProgressReportDurationSeconds)[0].GetHistogram()
	if h.GetSampleCount() != 5 {
		t.Errorf("duration count %d, want 5", h.GetSampleCount())
	}
	if b := h.GetBucket()[0]; b.GetUpperBound() != 0.0001 || b.GetCumulativeCount() != 3 {
		t.Errorf("first bucket le=%v count=%d, want le=0.0001 count=3", b.GetUpperBound(), b.GetCumulativeCount())
	}
}

func TestSetProgressPendingReportBytes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.SetProgressMaxPendingReportBytes(32 << 20)
	m.SetProgressPendingReportBytes(41056)
	for name, want := range map[string]float64{
		metrics.ProgressPendingReportBytes:    41056,
		metrics.ProgressMaxPendingReportBytes: 32 << 20,
	} {
		if got := family(t, reg, name)[0].GetGauge().GetValue(); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
