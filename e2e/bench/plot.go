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

	const width, height = 28 * vg.Centimeter, 10 * vg.Centimeter
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
		tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadY: vg.Millimeter * 5, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		canvases := plot.Align([][]*plot.Plot{{over, lat}}, tiles, dc)
		over.Draw(canvases[0][0])
		lat.Draw(canvases[0][1])
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
