package gtpcc

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The plots of DESIGN 9: the latency CDF of each destination order and
// protocol, the latency CDF of the kinds of transaction that go global
// (new-order, payment), and the throughput over the run. Each report is
// one run and keeps its colour in every plot, so that a protocol is the
// same colour across the files of a comparison.

// The files WritePlots writes, in the order it returns them; the CDF of
// kind K goes to PlotKindCDFPrefix + K + ".png".
const (
	PlotDestinationCDF = "latency-cdf.png"
	PlotKindCDFPrefix  = "latency-cdf-"
	PlotThroughput     = "throughput.png"
	PlotFirstOverTime  = "latency-first-over-time.png"
)

// ErrNothingToPlot is returned by WritePlots when no report has a latency
// sample or a call in its timeline: a run in which nothing ended has no
// plot, and the caller decides whether that is an error (errors.Is).
var ErrNothingToPlot = errors.New("gtpcc: nothing to plot")

const (
	// The figures are about 16 x 10 cm, a page's width, at a resolution
	// that prints well.
	plotWidth  = 16 * vg.Centimeter
	plotHeight = 10 * vg.Centimeter
	plotDPI    = 200
	// plotMargin is the white space around a figure; legendGap the
	// space between the plot and its legend, which stands at the right
	// of the plot, where it hides no line.
	plotMargin = 3 * vg.Millimeter
	legendGap  = 4 * vg.Millimeter
	// logRatioMin is the ratio of the largest to the smallest latency
	// from which the latency axis is logarithmic: below it a linear
	// axis reads better, above it the fast lines would be squeezed
	// into its left edge.
	logRatioMin = 20
	// logDecadesLabelled is the span, in powers of ten, up to which a
	// logarithmic axis labels 1, 2 and 5 times each power of ten;
	// wider axes label the powers only, so that labels do not overlap.
	logDecadesLabelled = 3
	// throughputHeadroom keeps the highest throughput off the frame.
	throughputHeadroom = 1.05
)

// plotKinds are the kinds of transaction with a CDF of their own: the
// ones that touch remote warehouses.
var plotKinds = [...]string{KindNewOrder, KindPayment}

// runColours tell the runs (protocols) apart: the Okabe-Ito palette,
// which colour-blind readers can tell apart too, without its yellow.
var runColours = [...]color.RGBA{
	{0x00, 0x72, 0xb2, 0xff}, // blue
	{0xd5, 0x5e, 0x00, 0xff}, // vermillion
	{0x00, 0x9e, 0x73, 0xff}, // bluish green
	{0xcc, 0x79, 0xa7, 0xff}, // reddish purple
	{0xe6, 0x9f, 0x00, 0xff}, // orange
	{0x56, 0xb4, 0xe9, 0xff}, // sky blue
	{0x00, 0x00, 0x00, 0xff}, // black
}

// orderDashes tell the destination orders apart: 1st solid, 2nd dashed,
// 3rd dotted.
var orderDashes = [destOrders][]vg.Length{
	nil,
	{vg.Points(7), vg.Points(3)},
	{vg.Points(1.5), vg.Points(2.5)},
}

// Other line styles: the runs beyond the palette's size, the error
// counts on the throughput plot and the measured window's edges.
var (
	extraRunDashes = [...][]vg.Length{
		{vg.Points(4), vg.Points(2), vg.Points(1), vg.Points(2)},
		{vg.Points(10), vg.Points(3)},
	}
	errorDashes  = []vg.Length{vg.Points(1.5), vg.Points(2.5)}
	windowDashes = []vg.Length{vg.Points(4), vg.Points(4)}
	windowColour = color.RGBA{0x80, 0x80, 0x80, 0xff}
)

// WritePlots writes the plots of reports, one report per run (usually
// one per protocol), into dir, which it creates if needed, and returns
// the paths it wrote:
//
//   - PlotDestinationCDF: the latency CDF of the 1st, 2nd and 3rd
//     destination to answer a global transaction, a line per report and
//     order;
//   - PlotKindCDFPrefix + kind + ".png" for new_order and payment: their
//     latency CDF, a line per report;
//   - PlotThroughput: the transactions completed in each second of the
//     run, a line per report, with the errors when there are any.
//
// Each report keeps its colour in every file; in the first, the order is
// told by the dash pattern. A line without samples is left out (a report
// read from JSON has no histograms, one built by hand no timeline; a run
// in which no call ended has a timeline of zeros), and so is a file
// without lines. When no file has a line, WritePlots writes nothing, not
// even dir, and returns ErrNothingToPlot. Errors name the file; after
// one, the paths already written are returned with it.
func WritePlots(dir string, reports []*Report) ([]string, error) {
	for i, r := range reports {
		if r == nil {
			return nil, fmt.Errorf("gtpcc: plot: report %d is nil", i)
		}
	}
	labels := runLabels(reports)
	type figure struct {
		name string
		p    *plot.Plot
	}
	var figures []figure
	if p := destinationCDFPlot(reports, labels); p != nil {
		figures = append(figures, figure{PlotDestinationCDF, p})
	}
	for _, kind := range plotKinds {
		if p := kindCDFPlot(reports, labels, kind); p != nil {
			figures = append(figures, figure{PlotKindCDFPrefix + kind + ".png", p})
		}
	}
	if p := throughputPlot(reports, labels); p != nil {
		figures = append(figures, figure{PlotThroughput, p})
	}
	if p := firstOverTimePlot(reports, labels); p != nil {
		figures = append(figures, figure{PlotFirstOverTime, p})
	}
	if len(figures) == 0 {
		return nil, fmt.Errorf("%w: %d reports without latency samples or timeline (for %s)", ErrNothingToPlot, len(reports), dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("gtpcc: plot directory %s: %w", dir, err)
	}
	paths := make([]string, 0, len(figures))
	for _, f := range figures {
		path := filepath.Join(dir, f.name)
		if err := savePNG(f.p, path); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// runLabels names each report in legends by its name (Report.Name); a
// name that an earlier report already has gets the run's number too.
func runLabels(reports []*Report) []string {
	labels := make([]string, len(reports))
	for i, r := range reports {
		labels[i] = r.Name()
		if slices.Contains(labels[:i], labels[i]) {
			labels[i] = fmt.Sprintf("%s #%d", labels[i], i+1)
		}
	}
	return labels
}

// runStyle returns the line style of report i: its colour and, beyond
// the palette's size, a dash pattern.
func runStyle(i int) draw.LineStyle {
	s := draw.LineStyle{Color: runColours[i%len(runColours)], Width: vg.Points(1.5)}
	if round := i / len(runColours); round > 0 {
		s.Dashes = extraRunDashes[(round-1)%len(extraRunDashes)]
	}
	return s
}

// cdfSeries is a line of a CDF plot.
type cdfSeries struct {
	label string
	style draw.LineStyle
	pts   plotter.XYs
}

// destinationCDFPlot returns the plot of PlotDestinationCDF, nil when no
// report has a sample of a destination order.
func destinationCDFPlot(reports []*Report, labels []string) *plot.Plot {
	var series []cdfSeries
	for i, r := range reports {
		for j, order := range destNames {
			pts := cdfPoints(r.Histogram(order))
			if pts == nil {
				continue
			}
			style := runStyle(i)
			if style.Dashes == nil {
				style.Dashes = orderDashes[j]
			}
			series = append(series, cdfSeries{labels[i] + " " + order, style, pts})
		}
	}
	return cdfPlot("gTPC-C latency by destination order", series)
}

// kindCDFPlot returns the plot of kind's latency CDF, nil when no report
// has a sample of kind.
func kindCDFPlot(reports []*Report, labels []string, kind string) *plot.Plot {
	var series []cdfSeries
	for i, r := range reports {
		if pts := cdfPoints(r.Histogram(kind)); pts != nil {
			series = append(series, cdfSeries{labels[i], runStyle(i), pts})
		}
	}
	return cdfPlot("gTPC-C "+kind+" latency", series)
}

// cdfPoints returns the CDF of h (microseconds) as points (latency ms,
// fraction of the samples at or below it), to be joined by steps: a
// point at 0 below the smallest sample, then one at the top of each
// bucket of the histogram that has samples. Nil when h is nil or empty.
func cdfPoints(h *hdrhistogram.Histogram) plotter.XYs {
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	total := float64(h.TotalCount())
	var pts plotter.XYs
	var seen int64
	for _, b := range h.Distribution() {
		if b.Count == 0 {
			continue
		}
		if pts == nil {
			pts = append(pts, plotter.XY{X: usToMs(b.From), Y: 0})
		}
		seen += b.Count
		pts = append(pts, plotter.XY{X: usToMs(b.To), Y: float64(seen) / total})
	}
	if seen != h.TotalCount() {
		panic(fmt.Sprintf("gtpcc: plot: histogram buckets hold %d samples, its total is %d", seen, h.TotalCount()))
	}
	return pts
}

func usToMs(us int64) float64 { return float64(us) / 1000 }

// cdfPlot returns a CDF plot of series, nil when there is none.
func cdfPlot(title string, series []cdfSeries) *plot.Plot {
	if len(series) == 0 {
		return nil
	}
	p := newPlot(title)
	p.Y.Label.Text = "fraction of transactions"
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		line := &plotter.Line{XYs: s.pts, StepStyle: plotter.PostStep, LineStyle: s.style}
		p.Add(line)
		p.Legend.Add(s.label, line)
		// Points are sorted by latency.
		lo, hi = min(lo, s.pts[0].X), max(hi, s.pts[len(s.pts)-1].X)
	}
	latencyAxis(&p.X, lo, hi)
	p.Y.Min, p.Y.Max = 0, 1
	return p
}

// latencyAxis sets axis a for latencies from lo to hi ms (0 < lo <= hi):
// logarithmic when they span logRatioMin or more, else linear from 0.
func latencyAxis(a *plot.Axis, lo, hi float64) {
	if !(lo > 0 && hi >= lo) {
		panic(fmt.Sprintf("gtpcc: plot: latency range %v..%v ms", lo, hi)) // histograms hold 1 µs and more
	}
	if hi/lo >= logRatioMin {
		a.Label.Text = "latency (ms, log scale)"
		a.Scale = plot.LogScale{}
		a.Tick.Marker = logTicks{}
		a.Min, a.Max = lo/1.1, hi*1.1
		return
	}
	a.Label.Text = "latency (ms)"
	a.Min, a.Max = 0, hi*1.05
}

// logTicks marks a logarithmic axis: a tick at each multiple 1..9 of
// each power of ten, labelled at 1, 2 and 5 times the power when the axis
// spans up to logDecadesLabelled powers, at the powers only beyond.
// Unlike plot.LogTicks it labels the multiples, and it never panics.
type logTicks struct{}

// Ticks returns the ticks from lo to hi: none unless 0 < lo <= hi are
// finite.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0 && hi >= lo) || math.IsInf(hi, 1) {
		return nil
	}
	labelled := []int{1, 2, 5}
	if math.Log10(hi/lo) > logDecadesLabelled {
		labelled = []int{1}
	}
	var ticks []plot.Tick
	// From the power at or below lo to the one at or above hi: at most
	// 2 + log10(MaxFloat64/SmallestNonzeroFloat64) decades, bounded.
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if slices.Contains(labelled, m) {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// throughputPlot returns the plot of PlotThroughput, nil when no report
// has a call that ended in a whole second of its run.
func throughputPlot(reports []*Report, labels []string) *plot.Plot {
	p := newPlot("gTPC-C throughput over time")
	p.X.Label.Text = "time since the start of the run (s)"
	p.Y.Label.Text = "completed transactions / s"
	var lines int
	top, end := 0.0, 0.0
	for i, r := range reports {
		txns, errs := timelinePoints(r)
		if txns == nil {
			continue
		}
		line := &plotter.Line{XYs: txns, LineStyle: runStyle(i)}
		p.Add(line)
		p.Legend.Add(labels[i], line)
		lines++
		for _, pt := range txns {
			top = max(top, pt.Y)
		}
		end = max(end, txns[len(txns)-1].X+0.5)
		if errs == nil {
			continue
		}
		errLine := &plotter.Line{XYs: errs, LineStyle: runStyle(i)}
		errLine.Dashes = errorDashes
		p.Add(errLine)
		p.Legend.Add(labels[i]+" errors", errLine)
		for _, pt := range errs {
			top = max(top, pt.Y)
		}
	}
	return finishTimePlot(p, reports, lines, top, end)
}

// timelinePoints returns r's completed transactions per second and,
// when there are any, its errors per second, each at the middle of its
// second. Only whole seconds of the run count: the timeline's last
// point, which also holds the calls that ended after the run, and a
// partial last second would show a drop that is no drop in throughput.
// A report with a timeline but no run length (RunS 0) keeps it all.
// Both are nil when no call ended in those seconds: a run that did
// nothing has no line.
func timelinePoints(r *Report) (txns, errs plotter.XYs) {
	var anyTxn, anyErr bool
	for _, pt := range r.Timeline {
		if r.Config.RunS > 0 && float64(pt.Second+1) > r.Config.RunS {
			continue
		}
		x := float64(pt.Second) + 0.5
		txns = append(txns, plotter.XY{X: x, Y: float64(pt.Txns)})
		errs = append(errs, plotter.XY{X: x, Y: float64(pt.Errors)})
		anyTxn = anyTxn || pt.Txns > 0
		anyErr = anyErr || pt.Errors > 0
	}
	switch {
	case !anyTxn && !anyErr:
		return nil, nil
	case !anyErr:
		return txns, nil
	}
	return txns, errs
}

// addWindowEdges draws a grey vertical line up to top at each edge of
// the reports' measured windows (the end of the warm-up, the start of
// the cool-down), once per distinct time, with one legend entry.
func addWindowEdges(p *plot.Plot, reports []*Report, top float64) {
	var edges []float64
	for _, r := range reports {
		c := r.Config
		for _, x := range []float64{c.RunS * c.WarmUp, c.RunS * (1 - c.CoolDown)} {
			if x > 0 && x < c.RunS && !slices.Contains(edges, x) {
				edges = append(edges, x)
			}
		}
	}
	slices.Sort(edges)
	for i, x := range edges {
		line := &plotter.Line{
			XYs:       plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}},
			LineStyle: draw.LineStyle{Color: windowColour, Width: vg.Points(1), Dashes: windowDashes},
		}
		p.Add(line)
		if i == 0 {
			p.Legend.Add("measured window", line)
		}
	}
}

// newPlot returns a plot titled title with a grid, and a legend at the
// top left of its area with room for dash patterns (drawFigure puts that
// area at the right of the plot).
func newPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(6)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.ThumbnailWidth = vg.Centimeter
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.Padding = vg.Points(2)
	p.Add(plotter.NewGrid())
	return p
}

// drawFigure draws p on c with a margin, and p's legend beside the plot
// on the right, its top level with the top of the plot's frame. Inside
// the frame a legend would hide lines whatever its corner: CDFs fill the
// right on a log axis and the left on a linear one, throughput lines
// run at the top.
func drawFigure(p *plot.Plot, c draw.Canvas) {
	c = draw.Crop(c, plotMargin, -plotMargin, plotMargin, -plotMargin)
	legend := p.Legend
	p.Legend = plot.NewLegend() // empty: plot.Draw draws no legend
	defer func() { p.Legend = legend }()
	legendWidth := legend.Rectangle(c).Size().X
	p.Draw(draw.Crop(c, 0, -(legendWidth + legendGap), 0, 0))
	titleHeight := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
	legend.Draw(draw.Crop(c, c.Size().X-legendWidth, 0, 0, -titleHeight))
}

// savePNG draws p to path as a PNG image of plotWidth x plotHeight.
func savePNG(p *plot.Plot, path string) error {
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(plotDPI))}
	drawFigure(p, draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("gtpcc: plot %s: %w", path, err)
	}
	if _, err := c.WriteTo(f); err != nil {
		_ = f.Close() // the write's error is the one to report
		return fmt.Errorf("gtpcc: plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("gtpcc: plot %s: %w", path, err)
	}
	return nil
}

// firstOverTimePlot returns the plot of PlotFirstOverTime: each run's mean
// 1st-destination latency of its global transactions, second by second
// (a second without one has no point), nil when no run has any.
func firstOverTimePlot(reports []*Report, labels []string) *plot.Plot {
	p := newPlot("gTPC-C 1st destination over time")
	p.X.Label.Text = "time since the start of the run (s)"
	p.Y.Label.Text = "mean 1st answer of global transactions (ms)"
	var lines int
	top, end := 0.0, 0.0
	for i, r := range reports {
		var pts plotter.XYs
		for _, pt := range r.Timeline {
			if pt.Global == 0 || (r.Config.RunS > 0 && float64(pt.Second+1) > r.Config.RunS) {
				continue
			}
			y := pt.FirstMs / float64(pt.Global)
			pts = append(pts, plotter.XY{X: float64(pt.Second) + 0.5, Y: y})
			top = max(top, y)
		}
		if pts == nil {
			continue
		}
		line := &plotter.Line{XYs: pts, LineStyle: runStyle(i)}
		p.Add(line)
		p.Legend.Add(labels[i], line)
		lines++
		end = max(end, pts[len(pts)-1].X+0.5)
	}
	return finishTimePlot(p, reports, lines, top, end)
}

// finishTimePlot sets the axes of a plot over time of reports, whose lines
// reach top and end, and marks the measured windows; nil without a line.
func finishTimePlot(p *plot.Plot, reports []*Report, lines int, top, end float64) *plot.Plot {
	if lines == 0 {
		return nil
	}
	top = max(top, 1) * throughputHeadroom
	addWindowEdges(p, reports, top)
	p.Y.Min, p.Y.Max = 0, top
	p.X.Min, p.X.Max = 0, end
	return p
}
