package gtpcc

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"

	"github.com/flexkv/flexkv/txn"
)

// plotCaller answers call i after advancing the clock by the call's
// fakeLatency times scale and (1 + i%5/10); every failEvery-th call
// fails (none when failEvery is 0, all when it is 1). The others answer
// with 1 + i%3 destinations, destination j after scale*(10*(j+1) + i%5)
// ms, so that a CDF has several steps. Run calls it from one goroutine.
type plotCaller struct {
	clock     *fakeClock
	scale     float64
	failEvery int
	calls     int
}

func (c *plotCaller) Call(_ context.Context, proc string, _ []byte, _ [][]byte) (*txn.Result, error) {
	i := c.calls
	c.calls++
	c.clock.Advance(time.Duration(float64(fakeLatency[proc]) * c.scale * (1 + float64(i%5)/10)))
	if c.failEvery > 0 && i%c.failEvery == c.failEvery-1 {
		return nil, fmt.Errorf("plot test failure %d", i)
	}
	res := &txn.Result{ID: fmt.Sprint(i), Succeeded: true}
	for j := range 1 + i%3 {
		ms := c.scale * float64(10*(j+1)+i%5)
		res.Destinations = append(res.Destinations, txn.DestLatency{Group: fmt.Sprint("g", j), Ms: ms})
	}
	return res, nil
}

// plotRun runs one client of protocol against a plotCaller on a fake
// clock for 60 s of fake time.
func plotRun(t *testing.T, protocol string, scale float64, failEvery int) *Report {
	t.Helper()
	clock := &fakeClock{now: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
	rep, err := Run(context.Background(), RunConfig{
		Protocol:   protocol,
		Workload:   testWorkload(3),
		Clients:    []ClientSpec{{Home: 1, Caller: &plotCaller{clock: clock, scale: scale, failEvery: failEvery}}},
		Duration:   60 * time.Second,
		Seed:       7,
		Keys:       testKeys,
		Clock:      clock.Now,
		ErrorPause: -1,
	})
	if err != nil {
		t.Fatalf("run of %s: %v", protocol, err)
	}
	return rep
}

// readPNG decodes the PNG image at path and checks its size: 16 x 10 cm
// at plotDPI.
func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: not a PNG image: %v", path, err)
	}
	wantW, wantH := int(math.Round(16/2.54*plotDPI)), int(math.Round(10/2.54*plotDPI))
	if b := img.Bounds(); abs(b.Dx()-wantW) > 1 || abs(b.Dy()-wantH) > 1 {
		t.Errorf("%s: %dx%d pixels, want %dx%d", path, b.Dx(), b.Dy(), wantW, wantH)
	}
	return img
}

func abs(x int) int { return max(x, -x) }

// hasColour reports whether img has at least 20 pixels of exactly c: the
// middle of a line drawn in c.
func hasColour(img image.Image, c color.RGBA) bool {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				n++
			}
		}
	}
	return n >= 20
}

// TestWritePlots writes the plots of two protocols' runs and checks that
// each file is a PNG of the right size with both protocols' lines.
func TestWritePlots(t *testing.T) {
	// Destination latencies of 10..34 ms and 80..272 ms make a log
	// axis; new-orders of 100..140 ms and 800..1120 ms a linear one.
	reports := []*Report{plotRun(t, "flexcast", 1, 13), plotRun(t, "skeen", 8, 0)}
	for _, r := range reports {
		if r.Latency.Get("3rd").Count == 0 || r.Latency.Get(KindPayment).Count == 0 {
			t.Fatalf("%s report has no 3rd destination or payment samples: %+v", r.Protocol, r.Latency)
		}
	}
	dir := filepath.Join(t.TempDir(), "plots", "run")
	if d := os.Getenv("GTPCC_PLOT_DIR"); d != "" { // to look at the plots
		dir = d
	}
	paths, err := WritePlots(dir, reports)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"latency-cdf.png", "latency-cdf-new_order.png", "latency-cdf-payment.png", "throughput.png", "latency-first-over-time.png"}
	for i := range want {
		want[i] = filepath.Join(dir, want[i])
	}
	if !slices.Equal(paths, want) {
		t.Fatalf("WritePlots wrote %q, want %q", paths, want)
	}
	labels := runLabels(reports)
	if _, ok := destinationCDFPlot(reports, labels).X.Scale.(plot.LogScale); !ok {
		t.Errorf("destination CDF: latency axis %T, want logarithmic", destinationCDFPlot(reports, labels).X.Scale)
	}
	if _, ok := kindCDFPlot(reports, labels, KindNewOrder).X.Scale.(plot.LinearScale); !ok {
		t.Errorf("new_order CDF: latency axis %T, want linear", kindCDFPlot(reports, labels, KindNewOrder).X.Scale)
	}
	for _, path := range paths {
		img := readPNG(t, path)
		for i, r := range reports {
			if !hasColour(img, runColours[i]) {
				t.Errorf("%s: no line in the colour of %s", path, r.Protocol)
			}
		}
	}
}

// TestWritePlotsSkipsEmpty: reports without samples get no line, and a
// file without lines is not written.
func TestWritePlotsSkipsEmpty(t *testing.T) {
	failing := plotRun(t, "tree", 1, 1) // every call fails: a timeline of errors only
	if failing.TxnTotal != 0 || failing.Errors == 0 {
		t.Fatalf("failing run: %d txn, %d errors", failing.TxnTotal, failing.Errors)
	}
	dir := t.TempDir()
	paths, err := WritePlots(dir, []*Report{{Protocol: "none"}, failing})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, PlotThroughput)}; !slices.Equal(paths, want) {
		t.Fatalf("WritePlots wrote %q, want %q", paths, want)
	}
	img := readPNG(t, paths[0])
	if hasColour(img, runColours[0]) || !hasColour(img, runColours[1]) {
		t.Errorf("throughput: want the line of the failing run only")
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("dir holds %d files (%v), want the throughput plot only", len(entries), err)
	}

	// The same protocol twice gets two colours and two names.
	if labels := runLabels([]*Report{{Protocol: "skeen"}, {Protocol: "skeen"}, {}}); !slices.Equal(labels, []string{"skeen", "skeen #2", "(none)"}) {
		t.Errorf("labels %q", labels)
	}
}

// TestWritePlotsNothing: with nothing to plot, WritePlots writes nothing,
// not even its directory, and says so with ErrNothingToPlot.
func TestWritePlotsNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reports []*Report
	}{
		{"no reports", nil},
		{"empty reports", []*Report{{Protocol: "flexcast"}, {Protocol: "skeen"}}},
		{"idle timeline", []*Report{{Protocol: "flexcast", Config: ReportConfig{RunS: 3}, Timeline: make([]TimelinePoint, 4)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "plots")
			paths, err := WritePlots(dir, tc.reports)
			if !errors.Is(err, ErrNothingToPlot) || paths != nil {
				t.Fatalf("WritePlots = %q, %v; want no paths and ErrNothingToPlot", paths, err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("WritePlots made %s: %v", dir, err)
			}
		})
	}
	if _, err := WritePlots(t.TempDir(), []*Report{{}, nil}); err == nil || !strings.Contains(err.Error(), "report 1 is nil") {
		t.Errorf("a nil report gave %v", err)
	}
}

// TestWritePlotsErrorNamesFile: a file that cannot be written is named.
func TestWritePlotsErrorNamesFile(t *testing.T) {
	dir := t.TempDir()
	blocked := filepath.Join(dir, PlotDestinationCDF)
	if err := os.Mkdir(blocked, 0o755); err != nil { // a directory where the file goes
		t.Fatal(err)
	}
	_, err := WritePlots(dir, []*Report{plotRun(t, "flexcast", 1, 0)})
	if err == nil || !strings.Contains(err.Error(), blocked) {
		t.Errorf("WritePlots over a directory: %v, want an error naming %s", err, blocked)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = WritePlots(filepath.Join(file, "sub"), []*Report{plotRun(t, "flexcast", 1, 0)})
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("WritePlots under a file: %v, want an error naming %s", err, file)
	}
}

func TestCDFPoints(t *testing.T) {
	if cdfPoints(nil) != nil || cdfPoints(hdrhistogram.New(histMinUs, histMaxUs, histDigits)) != nil {
		t.Error("an empty histogram has CDF points")
	}
	h := hdrhistogram.New(histMinUs, histMaxUs, histDigits)
	for _, us := range []int64{5000, 5000, 20000, 80000} {
		if err := h.RecordValue(us); err != nil {
			t.Fatal(err)
		}
	}
	pts := cdfPoints(h)
	wantY := []float64{0, 0.5, 0.75, 1}
	if len(pts) != len(wantY) {
		t.Fatalf("CDF points %v, want %d", pts, len(wantY))
	}
	for i, pt := range pts {
		if pt.Y != wantY[i] {
			t.Errorf("point %d: fraction %v, want %v", i, pt.Y, wantY[i])
		}
		if i > 0 && pt.X < pts[i-1].X {
			t.Errorf("point %d: latency %v below the previous %v", i, pt.X, pts[i-1].X)
		}
	}
	for i, ms := range []float64{5, 5, 20, 80} {
		near(t, fmt.Sprint("point ", i, " latency"), pts[i].X, ms)
	}
}

func TestLatencyAxisAndTicks(t *testing.T) {
	p := newPlot("t")
	latencyAxis(&p.X, 10, 90)
	if p.X.Tick.Marker != (plot.DefaultTicks{}) || p.X.Min != 0 {
		t.Errorf("latencies of 10..90 ms: ticks %T from %v, want a linear axis from 0", p.X.Tick.Marker, p.X.Min)
	}
	latencyAxis(&p.X, 1, 900)
	if _, ok := p.X.Tick.Marker.(logTicks); !ok {
		t.Errorf("latencies of 1..900 ms: ticks %T, want logarithmic", p.X.Tick.Marker)
	}

	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (logTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	if got, want := labels(4, 600), []string{"5", "10", "20", "50", "100", "200", "500"}; !slices.Equal(got, want) {
		t.Errorf("labels of 4..600: %q, want %q", got, want)
	}
	if got, want := labels(0.5, 20000), []string{"1", "10", "100", "1000", "10000"}; !slices.Equal(got, want) {
		t.Errorf("labels of 0.5..20000: %q, want %q", got, want)
	}
	if n := len((logTicks{}).Ticks(4, 600)); n != 6+9+6 { // 4..9, 10..90, 100..600
		t.Errorf("4..600 has %d ticks, want 21", n)
	}
	if (logTicks{}).Ticks(0, 10) != nil || (logTicks{}).Ticks(5, 1) != nil {
		t.Error("ticks of a range that is not positive")
	}
}
