package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Snapshot is one scrape of the controller's /metrics, parsed.
type Snapshot struct {
	At       time.Time
	Families map[string]*dto.MetricFamily
}

// Scrape fetches and parses url (a Prometheus text endpoint). Errors: the HTTP
// request failed, the status was not 200, or the body is not the text format.
func Scrape(ctx context.Context, url string) (*Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return ParseSnapshot(resp.Body, time.Now())
}

// ParseSnapshot parses the Prometheus text exposition format.
func ParseSnapshot(r interface{ Read([]byte) (int, error) }, at time.Time) (*Snapshot, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return &Snapshot{At: at, Families: fams}, nil
}

// Labels selects series whose labels include every pair given.
type Labels map[string]string

func (l Labels) match(m *dto.Metric) bool {
	for k, v := range l {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Value sums the counter, gauge or untyped values of the series of name that
// match sel; 0 when there are none (a counter never incremented is absent).
func (s *Snapshot) Value(name string, sel Labels) float64 {
	if s == nil {
		return 0
	}
	mf := s.Families[name]
	if mf == nil {
		return 0
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		if !sel.match(m) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// ByLabel sums the counter or gauge values of name by the value of one label,
// e.g. rest_client_requests_total by "method".
func (s *Snapshot) ByLabel(name, label string, sel Labels) map[string]float64 {
	out := map[string]float64{}
	if s == nil || s.Families[name] == nil {
		return out
	}
	for _, m := range s.Families[name].GetMetric() {
		if !sel.match(m) {
			continue
		}
		key := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				key = lp.GetValue()
			}
		}
		out[key] += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return out
}

// Histogram is a cumulative histogram: Counts[i] observations ≤ Bounds[i]
// (the +Inf bucket last), as Prometheus exposes them.
type Histogram struct {
	Bounds []float64
	Counts []float64
	Count  float64
	Sum    float64
}

// Histogram merges the histogram series of name that match sel (they must
// share bucket bounds, as series of one metric do).
func (s *Snapshot) Histogram(name string, sel Labels) Histogram {
	var h Histogram
	if s == nil || s.Families[name] == nil {
		return h
	}
	for _, m := range s.Families[name].GetMetric() {
		if m.Histogram == nil || !sel.match(m) {
			continue
		}
		// The text format lists the +Inf bucket; the protobuf format may
		// leave it implicit (= the sample count).
		bounds := make([]float64, 0, len(m.GetHistogram().GetBucket())+1)
		counts := make([]float64, 0, cap(bounds))
		for _, b := range m.GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
			counts = append(counts, float64(b.GetCumulativeCount()))
		}
		if len(bounds) == 0 || !math.IsInf(bounds[len(bounds)-1], 1) {
			bounds = append(bounds, math.Inf(1))
			counts = append(counts, float64(m.GetHistogram().GetSampleCount()))
		}
		if h.Bounds == nil {
			h.Bounds, h.Counts = bounds, make([]float64, len(bounds))
		}
		for i := range min(len(counts), len(h.Counts)) {
			h.Counts[i] += counts[i]
		}
		h.Count += float64(m.GetHistogram().GetSampleCount())
		h.Sum += m.GetHistogram().GetSampleSum()
	}
	return h
}

// Sub returns h − before, the observations made between two scrapes.
// before may be empty (the series did not exist yet).
func (h Histogram) Sub(before Histogram) Histogram {
	out := Histogram{Bounds: h.Bounds, Counts: append([]float64(nil), h.Counts...), Count: h.Count - before.Count, Sum: h.Sum - before.Sum}
	if len(before.Counts) == len(h.Counts) {
		for i := range out.Counts {
			out.Counts[i] -= before.Counts[i]
		}
	}
	return out
}

// Quantile estimates the q-quantile (0 ≤ q ≤ 1) by linear interpolation
// inside the bucket that holds it, the way PromQL's histogram_quantile does;
// the lowest bucket interpolates from 0, and a quantile in the +Inf bucket
// returns the highest finite bound. NaN when the histogram is empty.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count <= 0 || len(h.Bounds) == 0 {
		return math.NaN()
	}
	rank := q * h.Count
	i := sort.Search(len(h.Counts), func(i int) bool { return h.Counts[i] >= rank })
	if i >= len(h.Bounds)-1 {
		if len(h.Bounds) < 2 {
			return math.NaN()
		}
		return h.Bounds[len(h.Bounds)-2]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.Bounds[i-1], h.Counts[i-1]
	}
	inBucket := h.Counts[i] - below
	if inBucket <= 0 {
		return h.Bounds[i]
	}
	return lower + (h.Bounds[i]-lower)*(rank-below)/inBucket
}

// LabelValues lists the values label takes across the series of name, sorted.
func (s *Snapshot) LabelValues(name, label string) []string {
	seen := map[string]bool{}
	if s != nil && s.Families[name] != nil {
		for _, m := range s.Families[name].GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					seen[lp.GetValue()] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// isWrite reports whether an HTTP method changes state on the API server.
func isWrite(method string) bool {
	switch strings.ToUpper(method) {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}
