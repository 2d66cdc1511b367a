package bench

// Progress mode's figures (issue 14): the result types, and what the reports, the
// progress server and the trainerStatus writes did during the window.

import (
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/trainyard/trainyard/pkg/metrics"
	"github.com/trainyard/trainyard/pkg/progress"
)

// Progress figures (issue 14): Pods pods, numNodes for each of the N TrainJobs, each
// POSTing its progress every ReportIntervalSeconds during a window of WindowSeconds.
type Progress struct {
	Pods                  int     `json:"pods"`
	Namespaces            int     `json:"namespaces"`
	ReportIntervalSeconds float64 `json:"reportIntervalSeconds"`
	// WindowSeconds runs from the first report to the window's end (the duration
	// asked, or longer when the burst during it took longer).
	WindowSeconds float64 `json:"windowSeconds"`
	// CreateErrors are the failed creates of the N reporting TrainJobs.
	CreateErrors int `json:"createErrors"`
	// TokenSeconds is how long minting a token for every pod took.
	TokenSeconds float64      `json:"tokenMintSeconds"`
	Client       ReportClient `json:"client"`
	Server       ReportServer `json:"server"`
	Writes       StatusWrites `json:"writes"`
	// The controller's trainerStatus write limits the run had (its defaults): a
	// TrainJob at most once per WritePeriodSeconds, a namespace at most
	// WriteLimitsNSQPS writes/s, the replica WriteLimitsQPS; WriteCeiling is the writes/s
	// they allow for this run's TrainJobs per namespace.
	WritePeriodSeconds float64 `json:"writePeriodSeconds"`
	WriteLimitsQPS     float64 `json:"writeLimitsQPS"`
	WriteLimitsNSQPS   float64 `json:"writeLimitsNamespaceQPS"`
	WriteCeiling       float64 `json:"writeCeilingPerSecond"`
	// PeakRSSBeforeBytes is the controller's peak RSS (VmHWM) when the window started:
	// Controller.PeakRSSBytes above it was reached during the window.
	PeakRSSBeforeBytes int64 `json:"peakRSSBeforeWindowBytes"`
	// Cores is each process's CPU seconds during the window over its length.
	Cores map[string]float64 `json:"cores"`
	// The same burst of suspended TrainJobs before the window (no reports), during it,
	// and after it (no reports).
	WithoutReports      *Burst `json:"admissionWithoutReports,omitempty"`
	WithReports         *Burst `json:"admissionWithReports,omitempty"`
	WithoutReportsAfter *Burst `json:"admissionWithoutReportsAfter,omitempty"`
	// AdmissionRatio is admission throughput with reports over the mean of the bursts
	// without.
	AdmissionRatio float64 `json:"admissionRatio"`
}

// baseline is the bursts without reports averaged: throughput, CPU and the machine's
// load; the burst before alone when there is no burst after; nil with neither.
func (p *Progress) baseline() *Burst {
	bs := make([]*Burst, 0, 2)
	for _, b := range []*Burst{p.WithoutReports, p.WithoutReportsAfter} {
		if b != nil {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		return nil
	}
	out := &Burst{Components: map[string]float64{}}
	k := float64(len(bs))
	for _, b := range bs {
		out.Admission.TrainJobsPerSecond += b.Admission.TrainJobsPerSecond / k
		for name, v := range b.Components {
			out.Components[name] += v / k
		}
		out.Machine.WallSeconds += b.Machine.WallSeconds / k
		out.Machine.BusyCPUSeconds += b.Machine.BusyCPUSeconds / k
		out.Machine.Utilisation += b.Machine.Utilisation / k
	}
	return out
}

// ReportClient is what the reporting pods saw. Latency is per report, seconds, from
// sending to the end of the response, over the answered reports; the first report of
// each pod waits for its TokenReview, the later ones find it cached.
type ReportClient struct {
	Sent              int     `json:"sent"`
	SentPerSecond     float64 `json:"sentPerSecond"`
	Accepted          int     `json:"accepted"`
	AcceptedPerSecond float64 `json:"acceptedPerSecond"`
	// Refused counts the answers other than 200, by status code.
	Refused         map[string]int `json:"refused"`
	TransportErrors int            `json:"transportErrors"`
	FirstError      string         `json:"firstError,omitempty"`
	// Skipped counts the ticks a pod missed by being a whole interval late.
	Skipped         int     `json:"skipped"`
	LatencyP50      float64 `json:"latencyP50"`
	LatencyP99      float64 `json:"latencyP99"`
	LatencyMax      float64 `json:"latencyMax"`
	FirstLatencyP99 float64 `json:"firstReportLatencyP99"`
	LaterLatencyP99 float64 `json:"laterReportsLatencyP99"`
	// Connections is the connections the pods' shared transport dialled.
	Connections int `json:"connections"`
}

// ReportServer is the progress server's counters during the window.
type ReportServer struct {
	Reports  float64            `json:"reports"`
	Accepted float64            `json:"accepted"`
	Rejected map[string]float64 `json:"rejected"`
	// TokenReviews counts the decisions made by a TokenReview, by result; CachedTokens
	// those the review cache answered.
	TokenReviews  map[string]float64 `json:"tokenReviews"`
	CachedTokens  float64            `json:"cachedTokenDecisions"`
	CacheHitRatio float64            `json:"tokenCacheHitRatio"`
	Coalesced     float64            `json:"coalesced"`
	Dropped       map[string]float64 `json:"dropped"`
	// DurationP50 and DurationP99 are the handler's time per report, seconds.
	DurationP50 float64 `json:"durationP50"`
	DurationP99 float64 `json:"durationP99"`
}

// StatusWrites are the trainerStatus writes during the window: the controller's
// counters, and what the benchmark's watch of the reporting TrainJobs saw.
type StatusWrites struct {
	Succeeded float64 `json:"succeeded"`
	Failed    float64 `json:"failed"`
	PerSecond float64 `json:"perSecond"`
	// PerTrainJobPerPeriod = Succeeded / TrainJobs / (window / period). Each TrainJob's
	// first write comes at once, so over a short window this may exceed 1 with no
	// TrainJob written twice in a period: LaterPerTrainJobPerPeriod leaves the first
	// writes out, and is at most 1 when the period holds.
	PerTrainJobPerPeriod      float64 `json:"perTrainJobPerPeriod"`
	LaterPerSecond            float64 `json:"laterPerSecond"`
	LaterPerTrainJobPerPeriod float64 `json:"laterPerTrainJobPerPeriod"`
	TrainJobs                 int     `json:"trainJobs"`
	// Written TrainJobs had trainerStatus written at least once; NeverWritten none.
	Written      int `json:"written"`
	NeverWritten int `json:"neverWritten"`
	// Observed is the trainerStatus changes the watch saw; MinGapSeconds the shortest
	// time between two of one TrainJob; ShortGaps how many were shorter than the period
	// less GapToleranceSeconds: the controller starts a TrainJob's writes a period
	// apart, and the watch sees each when it lands, a round trip later (1 s for the
	// watch's delivery jitter plus the progress stage's sync p99).
	Observed            int     `json:"observed"`
	MinGapSeconds       float64 `json:"minGapSeconds"`
	ShortGaps           int     `json:"shortGaps"`
	GapToleranceSeconds float64 `json:"gapToleranceSeconds"`
	// Age of the written TrainJobs' trainerStatus.lastUpdatedTime at the window's end.
	AgeP50 float64 `json:"ageP50"`
	AgeP99 float64 `json:"ageP99"`
	AgeMax float64 `json:"ageMax"`
}

// Burst is one admission burst of progress mode: TrainJob created → JobSet exists.
type Burst struct {
	Namespace string `json:"namespace"`
	// StartSeconds is when the burst started, from the reporting window's start (0
	// for the burst without reports).
	StartSeconds float64   `json:"startSeconds,omitempty"`
	Admission    Admission `json:"admission"`
	// Components is the CPU seconds of each process from the first create to the last
	// JobSet seen.
	Components map[string]float64 `json:"componentCPUSeconds"`
	// Machine is how busy the machine was over the same span.
	Machine Machine `json:"machine"`

	start     time.Time
	latencies []float64
}

// reportClientFigures sums up the reports sent during a window of the given length.
func reportClientFigures(logs [][]reportLog, window time.Duration, skipped int, firstError string) ReportClient {
	c := ReportClient{Refused: map[string]int{}, Skipped: skipped, FirstError: firstError}
	var all, first, later []float64
	for _, pod := range logs {
		for _, l := range pod {
			c.Sent++
			switch l.Code {
			case 0:
				c.TransportErrors++
				continue
			case http.StatusOK:
				c.Accepted++
			default:
				c.Refused[strconv.Itoa(l.Code)]++
			}
			all = append(all, l.Latency)
			if l.First {
				first = append(first, l.Latency)
			} else {
				later = append(later, l.Latency)
			}
		}
	}
	for _, s := range [][]float64{all, first, later} {
		sort.Float64s(s)
	}
	c.SentPerSecond = round3(float64(c.Sent) / window.Seconds())
	c.AcceptedPerSecond = round3(float64(c.Accepted) / window.Seconds())
	c.LatencyP50, c.LatencyP99 = round4(percentile(all, 50)), round4(percentile(all, 99))
	if len(all) > 0 {
		c.LatencyMax = round4(all[len(all)-1])
	}
	c.FirstLatencyP99, c.LaterLatencyP99 = round4(percentile(first, 99)), round4(percentile(later, 99))
	return c
}

// reportServerFigures are the progress server's counters between two scrapes.
func reportServerFigures(before, after *Snapshot) ReportServer {
	d := func(name string, sel Labels) float64 { return after.Value(name, sel) - before.Value(name, sel) }
	s := ReportServer{
		Reports:      d(metrics.ProgressReportsTotal, nil),
		Rejected:     deltaByLabel(before, after, metrics.ProgressReportsRejectedTotal, metrics.LabelReason, nil),
		TokenReviews: deltaByLabel(before, after, metrics.ProgressTokenReviewsTotal, metrics.LabelResult, Labels{metrics.LabelCached: "false"}),
		CachedTokens: d(metrics.ProgressTokenReviewsTotal, Labels{metrics.LabelCached: "true"}),
		Coalesced:    d(metrics.ProgressReportsCoalescedTotal, nil),
		Dropped:      deltaByLabel(before, after, metrics.ProgressReportsDroppedTotal, metrics.LabelReason, nil),
	}
	s.Accepted = s.Reports - sum(s.Rejected)
	if decisions := s.CachedTokens + sum(s.TokenReviews); decisions > 0 {
		s.CacheHitRatio = round4(s.CachedTokens / decisions)
	}
	h := after.Histogram(metrics.ProgressReportDurationSeconds, nil).Sub(before.Histogram(metrics.ProgressReportDurationSeconds, nil))
	s.DurationP50, s.DurationP99 = round4(h.Quantile(0.5)), round4(h.Quantile(0.99))
	return s
}

// deltaByLabel is after − before of name by label, the non-zero differences only.
func deltaByLabel(before, after *Snapshot, name, label string, sel Labels) map[string]float64 {
	b := before.ByLabel(name, label, sel)
	out := map[string]float64{}
	for k, v := range after.ByLabel(name, label, sel) {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// writeRoundTrip is the progress stage's sync time p99 between two scrapes: how much
// later than its start a trainerStatus write may land.
func writeRoundTrip(before, after *Snapshot) time.Duration {
	sel := Labels{metrics.LabelStage: progress.Name}
	q := after.Histogram(metrics.StageDurationSeconds, sel).Sub(before.Histogram(metrics.StageDurationSeconds, sel)).Quantile(0.99)
	if math.IsNaN(q) {
		return 0
	}
	return time.Duration(q * float64(time.Second))
}

// writeFigures are the trainerStatus writes of a window of the given length ending at
// end: the controller's counters between two scrapes, and what the benchmark's watch
// saw per TrainJob (changes: when lastUpdatedTime changed; last: its value at the end,
// zero for a TrainJob never written). The controller starts a TrainJob's writes at
// least a period apart; a gap the watch sees shorter than period − tolerance (the
// watch's delivery jitter and a write's round trip) counts as a short gap.
func writeFigures(before, after *Snapshot, changes map[string][]time.Time, last map[string]time.Time, window, period time.Duration, end time.Time, tolerance time.Duration) StatusWrites {
	w := StatusWrites{
		Succeeded: after.Value(metrics.ProgressWritesTotal, Labels{metrics.LabelResult: metrics.ProgressWriteSuccess}) -
			before.Value(metrics.ProgressWritesTotal, Labels{metrics.LabelResult: metrics.ProgressWriteSuccess}),
		Failed: after.Value(metrics.ProgressWritesTotal, Labels{metrics.LabelResult: metrics.ProgressWriteError}) -
			before.Value(metrics.ProgressWritesTotal, Labels{metrics.LabelResult: metrics.ProgressWriteError}),
		TrainJobs:           len(last),
		GapToleranceSeconds: round3(tolerance.Seconds()),
	}
	periods := window.Seconds() / period.Seconds()
	w.PerSecond = round3(w.Succeeded / window.Seconds())
	minGap := math.Inf(1)
	for _, times := range changes {
		if len(times) == 0 {
			continue
		}
		w.Written++
		w.Observed += len(times)
		for i := 1; i < len(times); i++ {
			gap := times[i].Sub(times[i-1])
			minGap = min(minGap, gap.Seconds())
			if gap < period-tolerance {
				w.ShortGaps++
			}
		}
	}
	if !math.IsInf(minGap, 1) {
		w.MinGapSeconds = round3(minGap)
	}
	if n := float64(max(len(last), 1)); w.TrainJobs > 0 {
		w.PerTrainJobPerPeriod = round3(w.Succeeded / n / periods)
		// Each TrainJob's first write comes at once; every later one at least a period
		// after the one before, so at most window/period of them fit in the window.
		w.LaterPerSecond = round3(max(w.Succeeded-float64(w.Written), 0) / window.Seconds())
		w.LaterPerTrainJobPerPeriod = round3(max(w.Succeeded-float64(w.Written), 0) / n / periods)
	}
	var ages []float64
	for _, at := range last {
		if at.IsZero() {
			w.NeverWritten++
			continue
		}
		ages = append(ages, end.Sub(at).Seconds())
	}
	sort.Float64s(ages)
	w.AgeP50, w.AgeP99 = round3(percentile(ages, 50)), round3(percentile(ages, 99))
	if len(ages) > 0 {
		w.AgeMax = round3(ages[len(ages)-1])
	}
	return w
}
