package bench

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// timeline is what the plot draws: offsets in seconds from the burst's
// start of every create returning and every arrival, and the latencies.
type timeline struct {
	created, admitted, finished []float64
	latencies                   []float64 // admission latency, seconds
	finishLatencies             []float64 // create → Complete, seconds
	// progress is what progress mode plots instead.
	progress *progressTimeline
	// kueue is what Kueue mode plots beyond the curves above.
	kueue *kueueTimeline
	// ttl is what TTL mode plots instead.
	ttl *ttlTimeline
}

func newTimeline(created burstResult, admitted, finished *arrivals, mode string) *timeline {
	tl := &timeline{}
	for i, done := range created.Done {
		if done.IsZero() {
			continue
		}
		tl.created = append(tl.created, done.Sub(created.Start).Seconds())
		name := fmt.Sprintf(trainJobNameFmt, i)
		if at, ok := admitted.At(name); ok {
			tl.admitted = append(tl.admitted, at.Sub(created.Start).Seconds())
			tl.latencies = append(tl.latencies, at.Sub(done).Seconds())
		}
		if at, ok := finished.At(name); ok && mode == ModeLifecycle {
			tl.finished = append(tl.finished, at.Sub(created.Start).Seconds())
			tl.finishLatencies = append(tl.finishLatencies, at.Sub(done).Seconds())
		}
	}
	for _, s := range [][]float64{tl.created, tl.admitted, tl.finished, tl.latencies, tl.finishLatencies} {
		sort.Float64s(s)
	}
	return tl
}

// maxPoints bounds the points drawn per curve: more are invisible at the plot's size
// and only make the file big.
const maxPoints = 1000

// stride is the step that keeps at most maxPoints of n points.
func stride(n int) int { return max(1, (n+maxPoints-1)/maxPoints) }

// cumulative turns sorted offsets into a cumulative count curve (at most maxPoints
// points, the last always kept).
func cumulative(sorted []float64) plotter.XYs {
	step := stride(len(sorted))
	xys := plotter.XYs{{X: 0, Y: 0}}
	for i := 0; i < len(sorted); i += step {
		xys = append(xys, plotter.XY{X: sorted[i], Y: float64(i + 1)})
	}
	if n := len(sorted); n > 0 && (n-1)%step != 0 {
		xys = append(xys, plotter.XY{X: sorted[n-1], Y: float64(n)})
	}
	return xys
}

// cdf turns sorted samples into an empirical CDF in percent (at most maxPoints
// points, the last always kept).
func cdf(sorted []float64) plotter.XYs {
	step, n := stride(len(sorted)), len(sorted)
	var xys plotter.XYs
	for i := 0; i < n; i += step {
		xys = append(xys, plotter.XY{X: sorted[i], Y: 100 * float64(i+1) / float64(n)})
	}
	if n > 0 && (n-1)%step != 0 {
		xys = append(xys, plotter.XY{X: sorted[n-1], Y: 100})
	}
	return xys
}

// writePlot draws two panels side by side into an SVG file and a PNG beside it: TrainJobs
// created / admitted / finished over time, and the latency distribution
// (an empirical CDF, so every percentile can be read off it) with p50 and
// p99 marked.
func writePlot(path string, r *Result, tl *timeline) error {
	if tl == nil {
		return nil
	}
	if tl.progress != nil {
		return writeProgressPlot(path, r, tl.progress)
	}
	if tl.kueue != nil {
		return writeKueuePlot(path, r, tl)
	}
	if tl.ttl != nil {
		return writeTTLPlot(path, r, tl.ttl)
	}
	over := plot.New()
	over.Title.Text = fmt.Sprintf("%d TrainJobs (%s) over time", r.N, r.Mode)
	over.X.Label.Text = "seconds since the first create"
	over.Y.Label.Text = "TrainJobs"
	over.Legend.Top, over.Legend.Left = true, true
	series := []struct {
		name string
		xs   []float64
	}{{"created", tl.created}, {"JobSet exists", tl.admitted}, {"Complete", tl.finished}}
	for i, s := range series {
		if len(s.xs) == 0 {
			continue
		}
		line, err := plotter.NewLine(cumulative(s.xs))
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		over.Add(line)
		over.Legend.Add(s.name, line)
	}
	over.Add(plotter.NewGrid())

	lat := plot.New()
	lat.Title.Text = "latency distribution"
	lat.X.Label.Text = "seconds"
	lat.Y.Label.Text = "% of TrainJobs at or below"
	lat.Legend.Top = false
	lat.Legend.Left = false
	dists := []struct {
		name string
		xs   []float64
	}{{"created → JobSet", tl.latencies}, {"created → Complete", tl.finishLatencies}}
	for i, d := range dists {
		if len(d.xs) == 0 {
			continue
		}
		line, err := plotter.NewLine(cdf(d.xs))
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i + 1)
		line.Width = vg.Points(1.5)
		lat.Add(line)
		lat.Legend.Add(fmt.Sprintf("%s (p50 %.2fs, p99 %.2fs)", d.name, percentile(d.xs, 50), percentile(d.xs, 99)), line)
		marks, err := plotter.NewScatter(plotter.XYs{{X: percentile(d.xs, 50), Y: 50}, {X: percentile(d.xs, 99), Y: 99}})
		if err != nil {
			return err
		}
		marks.Color = line.Color
		lat.Add(marks)
	}
	lat.Add(plotter.NewGrid())
	lat.Y.Min, lat.Y.Max = 0, 100

	return drawTiles(path, 28*vg.Centimeter, 10*vg.Centimeter, over, lat)
}

// drawTiles draws the plots side by side into an SVG file at path and a PNG beside it.
func drawTiles(path string, width, height vg.Length, plots ...*plot.Plot) error {
	for _, out := range []struct {
		path   string
		canvas interface {
			vg.CanvasSizer
			io.WriterTo
		}
	}{
		{path, vgsvg.New(width, height)},
		{strings.TrimSuffix(path, ".svg") + ".png", vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))}},
	} {
		dc := draw.New(out.canvas)
		tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Centimeter, PadY: vg.Millimeter * 5, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
		for i, p := range plots {
			p.Draw(canvases[0][i])
		}
		if err := writeTo(out.path, out.canvas); err != nil {
			return err
		}
	}
	return nil
}

func writeTo(path string, w io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// positive drops values ≤ 0, which a log scale cannot place.
func positive(xs []float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, x := range xs {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

// addLine adds xys to p as a line of plotutil color index color, 1.5 points wide,
// dashed or solid, with a legend entry name; nothing when xys is empty. Errors: those of
// plotter.NewLine (a NaN or infinite point).
func addLine(p *plot.Plot, name string, xys plotter.XYs, color int, dashed bool) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(color)
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// namedSeries is one distribution of a latencyPanel: its legend and its values (seconds).
type namedSeries struct {
	name string
	xs   []float64
}

// latencyPanel returns a panel of the cumulative distributions of series (seconds, log
// scale; values ≤ 0 left out, an empty series skipped), the Y axis labelled yLabel in
// percent, series i drawn in plotutil color firstColor+i, and the X axis stretched to
// legendRoom × the highest value so the legend fits right of the curves. Errors: those
// of addLine.
func latencyPanel(yLabel string, legendRoom float64, firstColor int, series []namedSeries) (*plot.Plot, error) {
	lat := plot.New()
	lat.Title.Text = "latency distribution"
	lat.X.Label.Text = "seconds (log scale)"
	lat.Y.Label.Text = yLabel
	lat.X.Scale = plot.LogScale{}
	lat.X.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.Legend.Top = false
	highest := 0.0
	for i, d := range series {
		xs := positive(d.xs)
		if len(xs) == 0 {
			continue
		}
		if err := addLine(lat, d.name, cdf(xs), firstColor+i, false); err != nil {
			return nil, err
		}
		highest = max(highest, xs[len(xs)-1])
	}
	if highest > 0 {
		lat.X.Max = highest * legendRoom
	}
	lat.Add(plotter.NewGrid())
	lat.Y.Min, lat.Y.Max = 0, 100
	return lat, nil
}
