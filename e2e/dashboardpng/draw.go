package dashboardpng

import (
	"context"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one line of a panel: its legend and its samples (NaN where the query
// had no value, such as a quantile over a window without observations).
type Series struct {
	Legend string
	Times  []time.Time
	Values []float64
}

// PanelData is a panel with the series its queries returned.
type PanelData struct {
	Panel
	Series []Series
}

// Fetch runs every query of panels as a range query over [end-scope.Range, end]
// at step, and returns the series. Errors: a query that fails, or that returns no
// sample (every one NaN or none at all), named by panel, refId and expression: an
// empty panel is a metric renamed, a label the binary never sets, or a scrape that
// never happened.
func (d *Dashboard) Fetch(ctx context.Context, api promv1.API, panels []Panel, scope Scope, end time.Time, step time.Duration) ([]PanelData, error) {
	r := promv1.Range{Start: end.Add(-scope.Range), End: end, Step: step}
	var out []PanelData
	var errs []error
	for _, p := range panels {
		pd := PanelData{Panel: p}
		for _, q := range p.Queries {
			expr, err := d.Expand(q.Expr, scope)
			if err != nil {
				errs = append(errs, fmt.Errorf("panel %q query %s: %w", p.Title, q.RefID, err))
				continue
			}
			v, _, _, err := api.QueryRange(ctx, expr, r)
			if err != nil {
				errs = append(errs, fmt.Errorf("panel %q query %s %q: %w", p.Title, q.RefID, expr, err))
				continue
			}
			matrix, ok := v.(model.Matrix)
			if !ok {
				errs = append(errs, fmt.Errorf("panel %q query %s %q: got a %s, want a matrix", p.Title, q.RefID, expr, v.Type()))
				continue
			}
			n := len(pd.Series)
			for _, s := range matrix {
				series := Series{Legend: Legend(q.Legend, s.Metric)}
				for _, sample := range s.Values {
					series.Times = append(series.Times, sample.Timestamp.Time())
					series.Values = append(series.Values, float64(sample.Value))
				}
				if slices.ContainsFunc(series.Values, func(v float64) bool { return !math.IsNaN(v) }) {
					pd.Series = append(pd.Series, series)
				}
			}
			if len(pd.Series) == n {
				errs = append(errs, fmt.Errorf("panel %q query %s returned no data over the last %s: %s", p.Title, q.RefID, model.Duration(scope.Range), expr))
			}
		}
		slices.SortStableFunc(pd.Series, func(a, b Series) int { return compareLegends(a.Legend, b.Legend) })
		out = append(out, pd)
	}
	return out, errors.Join(errs...)
}

func compareLegends(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// units are the y axis labels of Grafana's unit ids.
var units = map[string]string{
	"s": "seconds", "ops": "per second", "reqps": "requests per second",
	"bytes": "bytes", "percentunit": "share", "none": "",
}

// Picture layout: two panels a line, each panel's legend on its right.
const (
	columns     = 2
	panelWidth  = 9 * vg.Inch
	panelHeight = 4 * vg.Inch
	legendShare = 0.3 // of a panel's width
	dpi         = 96
)

// Draw draws panels into a PNG at path (its directory created), two a line, in
// order. Errors: a file that cannot be written.
func Draw(panels []PanelData, path string) error {
	rows := (len(panels) + columns - 1) / columns
	img := vgimg.NewWith(vgimg.UseWH(columns*panelWidth, vg.Length(rows)*panelHeight), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: rows, Cols: columns, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	for i, pd := range panels {
		c := tiles.At(dc, i%columns, i/columns)
		legendWidth := vg.Length(legendShare) * (c.Max.X - c.Min.X)
		p := drawPanel(pd)
		p.Draw(draw.Crop(c, 0, -legendWidth, 0, 0))
		l := legend(pd)
		l.Draw(draw.Crop(c, c.Max.X-c.Min.X-legendWidth+vg.Millimeter*2, 0, 0, -vg.Millimeter*8))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

func drawPanel(pd PanelData) *plot.Plot {
	p := plot.New()
	p.Title.Text = pd.Title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Y.Label.Text = units[pd.Unit]
	p.Y.Min = 0
	p.X.Tick.Marker = plot.TimeTicks{Format: timeFormat(pd), Time: plot.UnixTimeIn(time.UTC)}
	p.X.Label.Text = "UTC"
	p.Add(plotter.NewGrid())
	for i, s := range pd.Series {
		style := lineStyle(i)
		// NaN samples are gaps: each run of numbers is a line of its own.
		var run plotter.XYs
		flush := func() {
			if len(run) > 0 {
				l, _ := plotter.NewLine(run) // run holds no NaN or Inf
				l.LineStyle = style
				p.Add(l)
			}
			run = nil
		}
		for j, v := range s.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				flush()
				continue
			}
			run = append(run, plotter.XY{X: float64(s.Times[j].Unix()), Y: v})
		}
		flush()
	}
	// A panel of zeros (an idle queue) keeps 0 at the bottom rather than centred.
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min + 1
	}
	return p
}

// timeFormat is the x axis's tick format: with seconds for a span of minutes,
// such as a make dev run.
func timeFormat(pd PanelData) string {
	var first, last time.Time
	for _, s := range pd.Series {
		if len(s.Times) > 0 && (first.IsZero() || s.Times[0].Before(first)) {
			first = s.Times[0]
		}
		if len(s.Times) > 0 && s.Times[len(s.Times)-1].After(last) {
			last = s.Times[len(s.Times)-1]
		}
	}
	if last.Sub(first) < 10*time.Minute {
		return "15:04:05"
	}
	return "15:04"
}

func legend(pd PanelData) plot.Legend {
	l := plot.NewLegend()
	l.TextStyle.Font.Size = vg.Points(8)
	l.ThumbnailWidth = vg.Points(14)
	l.Top = true
	l.Left = true
	for i, s := range pd.Series {
		line := &plotter.Line{LineStyle: lineStyle(i)}
		l.Add(s.Legend, line)
	}
	return l
}

// lineStyle is series i's line: plotutil's colours, dashed past them.
func lineStyle(i int) draw.LineStyle {
	return draw.LineStyle{Color: plotutil.Color(i), Width: vg.Points(1.5), Dashes: plotutil.Dashes(i / len(plotutil.SoftColors))}
}
