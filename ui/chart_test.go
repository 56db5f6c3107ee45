package ui

import (
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/theme"
)

func TestNiceTicks(t *testing.T) {
	for _, r := range [][2]float64{
		{0, 1}, {0, 1000}, {-3.2, 7.9}, {0.00031, 0.00052}, {1e6, 1.3e6}, {0.1, 0.1001},
		{-50, -10}, {0, 98765}, {2.4, 2.6}, {1, 1e9},
	} {
		lo, hi := r[0], r[1]
		ticks, step := niceTicks(nil, lo, hi, 5)
		mant := step / math.Pow(10, math.Floor(math.Log10(step)+1e-9))
		if math.Abs(mant-1) > 1e-9 && math.Abs(mant-2) > 1e-9 && math.Abs(mant-5) > 1e-9 {
			t.Errorf("[%g, %g]: step %g, want 1, 2 or 5 × 10^k", lo, hi, step)
		}
		if len(ticks) < 3 || len(ticks) > 8 {
			t.Errorf("[%g, %g]: got %d ticks %v, want 3..8", lo, hi, len(ticks), ticks)
		}
		for i, v := range ticks {
			if k := v / step; math.Abs(k-math.Round(k)) > 1e-6 {
				t.Errorf("[%g, %g]: tick %g is not a multiple of step %g", lo, hi, v, step)
			}
			if v < lo-step*1e-6 || v > hi+step*1e-6 {
				t.Errorf("[%g, %g]: tick %g outside the range", lo, hi, v)
			}
			if i > 0 && v <= ticks[i-1] {
				t.Errorf("[%g, %g]: ticks not increasing: %v", lo, hi, ticks)
			}
		}
	}
	if ticks, _ := niceTicks(nil, 1, 1, 5); len(ticks) != 0 {
		t.Errorf("empty range: got ticks %v, want none", ticks)
	}
}

func TestFormatTick(t *testing.T) {
	for _, c := range []struct {
		v, step float64
		want    string
	}{
		{0, 0.1, "0"}, {1e-17, 0.1, "0"}, {0.05, 0.01, "0.05"}, {0.3000000000000001, 0.1, "0.3"},
		{1200, 100, "1.2k"}, {1500, 500, "1.5k"}, {1000, 500, "1k"}, {500, 500, "500"},
		{2e6, 1e6, "2M"}, {-0.5, 0.5, "-0.5"}, {3.4e-4, 1e-5, "3.4e-4"}, {5e-4, 5e-4, "5e-4"},
		{12000, 2000, "12k"}, {7.5, 2.5, "7.5"}, {40, 20, "40"}, {2.5e-4, 2.5e-5, "2.5e-4"}, {2.75e-4, 2.5e-5, "2.75e-4"},
	} {
		if got := formatTick(c.v, c.step); got != c.want {
			t.Errorf("formatTick(%g, %g) = %q, want %q", c.v, c.step, got, c.want)
		}
	}
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {120, "120"}, {0.5321, "0.532"}, {1234.5, "1.23k"}, {3.4217e-4, "3.42e-4"},
		{-2.5, "-2.5"}, {12345, "12345"}, {2.5e7, "25M"},
	} {
		if got := formatValue(c.v); got != c.want {
			t.Errorf("formatValue(%g) = %q, want %q", c.v, got, c.want)
		}
	}
}

// newTestChart shows a chart alone in an unpadded 640×400 test window.
func newTestChart(t testing.TB) (*LineChart, fyne.Window) {
	test.NewTempApp(t)
	c := NewLineChart("step", "loss")
	w := test.NewTempWindow(t, c)
	w.SetPadded(false)
	w.Resize(fyne.NewSize(640, 400))
	return c, w
}

func TestLineChart_AppendCreatesSeriesAndRefreshes(t *testing.T) {
	c, _ := newTestChart(t)
	c.Append("train", 0, 2)
	c.Append("train", 1, 1.5)
	c.Append("train", 2, 1.2)
	if got := c.r.nSegments; got != 2 {
		t.Fatalf("after 3 points: got %d segments, want 2", got)
	}
	c.Append("val", 2, 1.4)
	if len(c.series) != 2 || c.series[1].Name != "val" {
		t.Fatalf("got series %+v, want train then val", c.series)
	}
	if got := c.r.legend[1].name.t.Text; got != "val" || !contains(c.r.Objects(), c.r.legend[1].name.t) {
		t.Errorf("legend entry 2: got %q (shown: %v), want \"val\" shown", got, contains(c.r.Objects(), c.r.legend[1].name.t))
	}
	if c.r.nXTicks < 3 || c.r.nYTicks < 3 {
		t.Errorf("got %d x ticks and %d y ticks, want at least 3 each", c.r.nXTicks, c.r.nYTicks)
	}
	c.Clear()
	if c.r.nSegments != 0 || c.r.nDots != 0 || contains(c.r.Objects(), c.r.legend[0].name.t) {
		t.Errorf("after Clear: got %d segments, %d dots, legend shown; want none", c.r.nSegments, c.r.nDots)
	}
}

func TestLineChart_SkipsNaNAndInf(t *testing.T) {
	c, _ := newTestChart(t)
	c.Append("loss", math.NaN(), 1)
	c.Append("loss", 1, math.Inf(1))
	if len(c.series) != 0 {
		t.Fatalf("after only non-finite points: got %d series, want 0", len(c.series))
	}
	c.SetSeries(Series{Name: "loss", X: []float64{0, 1, 2, 3}, Y: []float64{1, math.NaN(), 0.5, math.Inf(-1)}})
	if got := len(c.series[0].X); got != 2 {
		t.Fatalf("got %d points kept, want 2", got)
	}
	if c.r.nSegments != 1 || c.r.y0 > 0.5 || c.r.y1 < 1 || c.r.y1 > 2 {
		t.Errorf("got %d segments and y range [%g, %g], want 1 segment and a range just around [0.5, 1]",
			c.r.nSegments, c.r.y0, c.r.y1)
	}
}

func TestLineChart_SinglePointIsDot(t *testing.T) {
	c, _ := newTestChart(t)
	c.Append("loss", 10, 0.7)
	if c.r.nDots != 1 || c.r.nSegments != 0 {
		t.Fatalf("got %d dots and %d segments, want 1 dot", c.r.nDots, c.r.nSegments)
	}
	d := c.r.dots[0]
	center := d.Position1.AddXY(chartDotRadius, chartDotRadius)
	if !inside(center, c.r.plotPos, c.r.plotEnd) {
		t.Errorf("dot at %v, want inside the plot %v–%v", center, c.r.plotPos, c.r.plotEnd)
	}
}

func TestLineChart_EmptyText(t *testing.T) {
	c, _ := newTestChart(t)
	const msg = "The loss curve appears after the first report"
	c.SetEmptyText(msg)
	if c.r.empty.t.Text != msg || !contains(c.r.Objects(), c.r.empty.t) {
		t.Fatalf("got empty text %q, want %q shown", c.r.empty.t.Text, msg)
	}
	c.Append("loss", 1, 1)
	if c.r.empty.t.Text != "" {
		t.Errorf("with a point: got empty text %q, want none", c.r.empty.t.Text)
	}
}

func TestLineChart_HoverShowsNearestPoint(t *testing.T) {
	c, w := newTestChart(t)
	c.SetSeries(
		Series{Name: "train", X: []float64{0, 1, 2, 3}, Y: []float64{2, 1.5, 1.1, 0.9}},
		Series{Name: "val", X: []float64{0, 2}, Y: []float64{2.2, 1.6}},
	)
	at := func(x, y float64) fyne.Position { return fyne.NewPos(c.r.px(x), c.r.py(y)).AddXY(3, -2) }

	test.MoveMouse(w.Canvas(), at(2, 1.6))
	if got, want := c.r.hoverText.t.Text, "val: 2, 1.6"; got != want || c.r.hoverText.t.Hidden {
		t.Errorf("near val at x=2: got %q (hidden %v), want %q shown", got, c.r.hoverText.t.Hidden, want)
	}
	test.MoveMouse(w.Canvas(), at(3, 0.9))
	if got, want := c.r.hoverText.t.Text, "train: 3, 0.9"; got != want {
		t.Errorf("near train at x=3: got %q, want %q", got, want)
	}
	box := c.r.hoverBox
	if !inside(box.Position(), fyne.NewPos(0, 0), fyne.NewPos(640, 400)) ||
		!inside(box.Position().Add(box.Size()), fyne.NewPos(0, 0), fyne.NewPos(640, 400)) {
		t.Errorf("readout box at %v size %v, want inside the chart", box.Position(), box.Size())
	}
	c.MouseOut()
	if !c.r.hoverText.t.Hidden || !c.r.hoverDot.Hidden {
		t.Errorf("after MouseOut: readout still shown")
	}
}

func TestLineChart_ReusesObjects(t *testing.T) {
	c, _ := newTestChart(t)
	for i := range 100 {
		c.Append("loss", float64(i), 1/float64(i+1))
	}
	first, tick := c.r.segments[0], c.r.yTicks[0].label
	allocs := testing.AllocsPerRun(50, func() {
		n := float64(len(c.series[0].X))
		c.Append("loss", n, 1/(n+1))
	})
	if c.r.segments[0] != first || c.r.yTicks[0].label != tick {
		t.Errorf("Append replaced pooled objects, want them reused")
	}
	// With 100+ points drawn, rebuilding the drawing would cost hundreds of allocations per point. What remains is
	// a few for the growing slices and Fyne shaping the tick labels that change as the x range grows.
	if allocs > 40 {
		t.Errorf("Append allocates %.0f times per point, want at most 40", allocs)
	}
}

// TestLineChart_RendersInsidePlot draws a training run in the light and dark theme and checks that series
// colors appear inside the plot area and, apart from the legend swatches, nowhere else. With INLOOP_CHART_PNG
// set to a folder it also writes the pictures there, to look at.
func TestLineChart_RendersInsidePlot(t *testing.T) {
	for _, variant := range []fyne.ThemeVariant{theme.VariantLight, theme.VariantDark} {
		a := test.NewTempApp(t)
		a.Settings().SetTheme(variantTheme{theme.DefaultTheme(), variant})
		c := NewLineChart("step", "loss")
		w := test.NewTempWindow(t, c)
		w.SetPadded(false)
		w.Resize(fyne.NewSize(640, 400))
		fillTrainingRun(c)
		test.MoveMouse(w.Canvas(), fyne.NewPos(c.r.px(400), c.r.py(c.series[0].Y[400])))
		img := w.Canvas().Capture()

		if dir := os.Getenv("INLOOP_CHART_PNG"); dir != "" {
			name := map[fyne.ThemeVariant]string{theme.VariantLight: "chart_light.png", theme.VariantDark: "chart_dark.png"}[variant]
			writePNG(t, filepath.Join(dir, name), img)
		}

		scale := w.Canvas().Scale()
		for si := range c.series {
			want := c.r.colors[si]
			sw := c.r.legend[si].swatch
			in, out := 0, 0
			b := img.Bounds()
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					if !near(img.At(x, y), want) {
						continue
					}
					p := fyne.NewPos(float32(x)/scale, float32(y)/scale)
					switch {
					case inside(p, c.r.plotPos.SubtractXY(2, 2), c.r.plotEnd.AddXY(2, 2)):
						in++
					case inside(p, sw.Position().SubtractXY(1, 1), sw.Position().Add(sw.Size()).AddXY(1, 1)):
					default:
						out++
					}
				}
			}
			if in < 200 || out > 0 {
				t.Errorf("variant %d, series %q: got %d pixels of its color in the plot and %d outside, want ≥200 and 0",
					variant, c.series[si].Name, in, out)
			}
		}
	}
	if chartPalette[0][0] == chartPalette[1][0] {
		t.Errorf("light and dark palettes share the first color")
	}
}

// fillTrainingRun appends a noisy falling train loss every step and a validation loss every 50 steps.
func fillTrainingRun(c *LineChart) {
	c.SetEmptyText("The loss curve appears after the first report")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 600 {
		loss := 0.35 + 2.2*math.Exp(-float64(i)/120) + 0.08*rng.NormFloat64()
		c.Append("train", float64(i), loss)
		if i%50 == 49 {
			c.Append("validation", float64(i), 0.45+2.2*math.Exp(-float64(i)/130))
		}
	}
}

func BenchmarkLineChartAppend(b *testing.B) {
	c, _ := newTestChart(b)
	for b.Loop() {
		c.Clear()
		for i := range 1000 {
			c.Append("loss", float64(i), 1/float64(i+1)) // Append refreshes the chart
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/append")
}

// variantTheme fixes the variant of a theme, as the test app's settings report neither light nor dark.
type variantTheme struct {
	fyne.Theme
	variant fyne.ThemeVariant
}

func (t variantTheme) Color(n fyne.ThemeColorName, _ fyne.ThemeVariant) color.Color {
	return t.Theme.Color(n, t.variant)
}

func near(a, b color.Color) bool {
	ar, ag, ab, _ := a.RGBA()
	br, bg, bb, _ := b.RGBA()
	d := func(x, y uint32) float64 { return math.Abs(float64(x>>8) - float64(y>>8)) }
	return d(ar, br)+d(ag, bg)+d(ab, bb) < 24
}

func inside(p, lo, hi fyne.Position) bool {
	return p.X >= lo.X && p.X <= hi.X && p.Y >= lo.Y && p.Y <= hi.Y
}

func contains(objs []fyne.CanvasObject, o fyne.CanvasObject) bool {
	for _, x := range objs {
		if x == o {
			return true
		}
	}
	return false
}

func writePNG(t *testing.T, path string, img image.Image) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}
