package ui

import (
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
)

// Series is one named curve. X and Y pair up by index; a point whose X or Y is NaN or ±Inf is skipped.
type Series struct {
	Name string
	X, Y []float64
}

// LineChart draws series as lines with axes, nice ticks, a legend and a hover readout. It is built from canvas
// primitives that are reused from update to update, so a training run can Append a point per report without
// re-rendering an image.
//
// Like every Fyne widget it is not safe for concurrent use: call its methods on the Fyne goroutine, and from any
// other goroutine only through fyne.Do, e.g. fyne.Do(func() { chart.Append("loss", step, loss) }). The chart
// starts no goroutines of its own.
type LineChart struct {
	widget.BaseWidget

	xLabel, yLabel string
	emptyText      string
	series         []chartSeries

	hovering bool
	mouse    fyne.Position
	r        *lineChartRenderer // set by CreateRenderer, so hovering updates only the readout
}

// chartSeries is a Series holding only finite points, with their bounds kept up to date by Append.
type chartSeries struct {
	Series
	minX, maxX, minY, maxY float64 // valid when len(X) > 0
}

func (s *chartSeries) add(x, y float64) {
	if len(s.X) == 0 {
		s.minX, s.maxX, s.minY, s.maxY = x, x, y, y
	} else {
		s.minX, s.maxX = math.Min(s.minX, x), math.Max(s.maxX, x)
		s.minY, s.maxY = math.Min(s.minY, y), math.Max(s.maxY, y)
	}
	s.X = append(s.X, x)
	s.Y = append(s.Y, y)
}

// NewLineChart returns an empty chart whose axes are titled xLabel and yLabel.
func NewLineChart(xLabel, yLabel string) *LineChart {
	c := &LineChart{xLabel: xLabel, yLabel: yLabel}
	c.ExtendBaseWidget(c)
	return c
}

// SetSeries replaces all series. The chart keeps copies of the finite points; colors follow the order given.
func (c *LineChart) SetSeries(series ...Series) {
	clear(c.series) // let the old points go
	c.series = c.series[:0]
	for _, s := range series {
		cs := chartSeries{Series: Series{Name: s.Name}}
		for i := range min(len(s.X), len(s.Y)) {
			if finite(s.X[i]) && finite(s.Y[i]) {
				cs.add(s.X[i], s.Y[i])
			}
		}
		c.series = append(c.series, cs)
	}
	c.Refresh()
}

// Append adds the point (x, y) to the named series, creating the series after the existing ones if needed.
// A point with a NaN or infinite coordinate is ignored.
func (c *LineChart) Append(series string, x, y float64) {
	if !finite(x) || !finite(y) {
		return
	}
	i := c.seriesIndex(series)
	if i < 0 {
		c.series = append(c.series, chartSeries{Series: Series{Name: series}})
		i = len(c.series) - 1
	}
	c.series[i].add(x, y)
	c.Refresh()
}

// Clear removes all series; the chart then shows its empty text.
func (c *LineChart) Clear() {
	clear(c.series)
	c.series = c.series[:0]
	c.Refresh()
}

// SetEmptyText sets the line shown in the middle of the plot while there is no point to draw.
func (c *LineChart) SetEmptyText(s string) {
	c.emptyText = s
	c.Refresh()
}

func (c *LineChart) seriesIndex(name string) int {
	for i := range c.series {
		if c.series[i].Name == name {
			return i
		}
	}
	return -1
}

// MouseIn shows the readout of the point nearest the pointer.
func (c *LineChart) MouseIn(ev *desktop.MouseEvent) { c.MouseMoved(ev) }

// MouseMoved moves the readout to the point nearest the pointer. It looks at every point: about half a
// millisecond for a hundred thousand.
func (c *LineChart) MouseMoved(ev *desktop.MouseEvent) {
	c.hovering, c.mouse = true, ev.Position
	if c.r != nil {
		c.r.layoutHover()
		canvas.Refresh(c)
	}
}

// MouseOut hides the readout.
func (c *LineChart) MouseOut() {
	c.hovering = false
	if c.r != nil {
		c.r.layoutHover()
		canvas.Refresh(c)
	}
}

// MinSize is room for five ticks per axis and a legend row.
func (c *LineChart) MinSize() fyne.Size {
	return fyne.NewSize(320, 200)
}

// CreateRenderer is called by Fyne.
func (c *LineChart) CreateRenderer() fyne.WidgetRenderer {
	c.ExtendBaseWidget(c)
	r := &lineChartRenderer{
		chart:     c,
		xAxis:     &canvas.Line{StrokeWidth: 1},
		yAxis:     &canvas.Line{StrokeWidth: 1},
		xTitle:    newChartLabel(),
		yTitle:    newChartLabel(),
		empty:     newChartLabel(),
		hoverDot:  &canvas.Circle{StrokeWidth: 2},
		hoverBox:  &canvas.Rectangle{StrokeWidth: 1, CornerRadius: 3},
		hoverText: newChartLabel(),
	}
	c.r = r
	return r
}

// Sizes in device-independent pixels.
const (
	chartTickLen     = 4
	chartLineWidth   = 2
	chartDotRadius   = 3
	chartHoverRadius = 4
	chartSwatch      = 10
	chartLegendGap   = 14 // between legend entries
	chartRightMargin = 12 // room for half of the last x tick label
)

// chartPalette holds the series colors for light and dark backgrounds, picked by order.
var chartPalette = [2][6]color.NRGBA{
	{{0x1f, 0x77, 0xb4, 0xff}, {0xe8, 0x6a, 0x10, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
		{0xd6, 0x27, 0x28, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x17, 0x9c, 0xb0, 0xff}},
	{{0x5a, 0xa9, 0xe6, 0xff}, {0xff, 0xa1, 0x4a, 0xff}, {0x6b, 0xd0, 0x6b, 0xff},
		{0xff, 0x6b, 0x6b, 0xff}, {0xc3, 0x9b, 0xf0, 0xff}, {0x4f, 0xd1, 0xdb, 0xff}},
}

// chartLabel is a canvas.Text that remembers its measured size: measuring text is most of an update's cost, and
// most labels do not change from one point to the next.
type chartLabel struct {
	t    *canvas.Text
	size fyne.Size
	font string // the theme font it was measured with
}

func newChartLabel() *chartLabel { return &chartLabel{t: &canvas.Text{}} }

// place moves the label's top-left corner to p.
func (l *chartLabel) place(p fyne.Position) {
	l.t.Move(p)
	l.t.Resize(l.size)
}

type chartTick struct {
	grid, mark *canvas.Line
	label      *chartLabel
	val, step  float64 // what label shows, so an unchanged tick is not formatted again
}

type chartLegendEntry struct {
	swatch *canvas.Rectangle
	name   *chartLabel
}

// lineChartRenderer owns pools of canvas objects that grow to the largest count needed and are reused on every
// update; objects lists only the ones in use, back to front.
type lineChartRenderer struct {
	chart   *LineChart
	objects []fyne.CanvasObject

	xAxis, yAxis          *canvas.Line
	xTicks, yTicks        []*chartTick
	nXTicks, nYTicks      int
	xTitle, yTitle, empty *chartLabel
	segments              []*canvas.Line
	dots                  []*canvas.Circle
	nSegments, nDots      int
	legend                []chartLegendEntry
	hoverDot              *canvas.Circle
	hoverBox              *canvas.Rectangle
	hoverText             *chartLabel

	plotPos, plotEnd fyne.Position // corners of the plot area, top-left and bottom-right
	x0, x1, y0, y1   float64       // data range shown in the plot area
	hasData          bool

	// From the theme at the last update.
	colors                 []color.Color // by series
	fg, muted              color.Color
	caption, pad, textSize float32
	font                   string

	xTickBuf, yTickBuf []float64
	scratch            []fyne.Position
}

func (r *lineChartRenderer) Destroy()                     {}
func (r *lineChartRenderer) MinSize() fyne.Size           { return r.chart.MinSize() }
func (r *lineChartRenderer) Objects() []fyne.CanvasObject { return r.objects }
func (r *lineChartRenderer) Layout(size fyne.Size)        { r.update(size) }

func (r *lineChartRenderer) Refresh() {
	r.update(r.chart.Size())
	canvas.Refresh(r.chart)
}

// update places every object for the chart's data at size.
func (r *lineChartRenderer) update(size fyne.Size) {
	th := r.chart.Theme()
	v := fyne.CurrentApp().Settings().ThemeVariant()
	r.fg = th.Color(theme.ColorNameForeground, v)
	r.muted = th.Color(theme.ColorNamePlaceHolder, v)
	r.caption = th.Size(theme.SizeNameCaptionText)
	r.textSize = th.Size(theme.SizeNameText)
	r.pad = th.Size(theme.SizeNamePadding)
	r.font = th.Font(fyne.TextStyle{}).Name()
	palette := &chartPalette[0]
	if isDark(th.Color(theme.ColorNameBackground, v)) {
		palette = &chartPalette[1]
	}
	series := r.chart.series
	r.colors = r.colors[:0]
	for i := range series {
		r.colors = append(r.colors, palette[i%len(palette)])
	}
	bold := fyne.TextStyle{Bold: true}

	// Header: the y title at the left, the legend in right-aligned rows at the right.
	yTitle := r.setText(r.yTitle, r.chart.yLabel, r.fg, r.caption, bold)
	r.yTitle.place(fyne.NewPos(0, 0))
	lineH := yTitle.Height
	headerH := max(r.layoutLegend(size.Width-chartRightMargin, yTitle.Width+4*r.pad, lineH), yTitle.Height)

	// Data range, padded vertically so a curve never runs along the frame.
	r.hasData = false
	for i := range series {
		s := &series[i]
		switch {
		case len(s.X) == 0:
		case !r.hasData:
			r.x0, r.x1, r.y0, r.y1 = s.minX, s.maxX, s.minY, s.maxY
			r.hasData = true
		default:
			r.x0, r.x1 = math.Min(r.x0, s.minX), math.Max(r.x1, s.maxX)
			r.y0, r.y1 = math.Min(r.y0, s.minY), math.Max(r.y1, s.maxY)
		}
	}
	if r.hasData {
		r.x0, r.x1 = widenEmpty(r.x0, r.x1)
		r.y0, r.y1 = widenEmpty(r.y0, r.y1)
		padY := 0.06 * (r.y1 - r.y0)
		r.y0, r.y1 = r.y0-padY, r.y1+padY
	}

	// Plot area: the bottom margin holds x tick labels and the x title, the left margin the widest y label.
	xTitle := r.setText(r.xTitle, r.chart.xLabel, r.fg, r.caption, bold)
	top := headerH + 2*r.pad
	bottom := size.Height - (chartTickLen + r.pad + lineH + r.pad + xTitle.Height)
	plotH := max(bottom-top, 1)
	r.nYTicks, r.nXTicks = 0, 0
	var yt []float64
	left := float32(0)
	if r.hasData {
		var step float64
		yt, step = niceTicks(r.yTickBuf[:0], r.y0, r.y1, max(2, min(6, int(plotH/30))))
		r.yTickBuf = yt
		for _, t := range yt {
			left = max(left, r.setTick(&r.yTicks, r.nYTicks, t, step).Width)
			r.nYTicks++
		}
	}
	left += chartTickLen + 2*r.pad
	right := max(size.Width-chartRightMargin, left+1)
	r.plotPos, r.plotEnd = fyne.NewPos(left, top), fyne.NewPos(right, top+plotH)

	setLine(r.xAxis, fyne.NewPos(left, r.plotEnd.Y), r.plotEnd, r.muted, 1)
	setLine(r.yAxis, r.plotPos, fyne.NewPos(left, r.plotEnd.Y), r.muted, 1)
	r.xTitle.place(fyne.NewPos(left+(right-left-xTitle.Width)/2, size.Height-xTitle.Height))

	grid := faint(r.fg) // the theme's separator is black in the dark theme, too strong for a grid
	for i, t := range yt {
		tk := r.yTicks[i]
		y := r.py(t)
		setLine(tk.grid, fyne.NewPos(left, y), fyne.NewPos(right, y), grid, 1)
		setLine(tk.mark, fyne.NewPos(left-chartTickLen, y), fyne.NewPos(left, y), r.muted, 1)
		tk.label.place(fyne.NewPos(left-chartTickLen-r.pad-tk.label.size.Width, y-tk.label.size.Height/2))
	}
	if r.hasData {
		for i, t := range r.xTicksThatFit(right - left) {
			tk := r.xTicks[i]
			x := r.px(t)
			setLine(tk.grid, fyne.NewPos(x, top), fyne.NewPos(x, r.plotEnd.Y), grid, 1)
			setLine(tk.mark, fyne.NewPos(x, r.plotEnd.Y), fyne.NewPos(x, r.plotEnd.Y+chartTickLen), r.muted, 1)
			w := tk.label.size.Width
			tk.label.place(fyne.NewPos(min(max(x-w/2, 0), size.Width-w), r.plotEnd.Y+chartTickLen+r.pad))
		}
	}

	r.layoutSeries()

	italic := fyne.TextStyle{Italic: true}
	if r.hasData {
		r.setText(r.empty, "", r.muted, r.textSize, italic)
	} else {
		es := r.setText(r.empty, r.chart.emptyText, r.muted, r.textSize, italic)
		r.empty.place(fyne.NewPos(left+(right-left-es.Width)/2, top+(plotH-es.Height)/2))
	}

	r.layoutHover()
	r.collect()
}

// setText changes a label, measuring it and asking for a redraw only when something changed: each change costs a
// new texture.
func (r *lineChartRenderer) setText(l *chartLabel, s string, c color.Color, size float32, style fyne.TextStyle) fyne.Size {
	t := l.t
	if t.Text != s || t.TextSize != size || t.TextStyle != style || l.font != r.font {
		t.Text, t.TextSize, t.TextStyle, t.Color, l.font = s, size, style, c, r.font
		l.size = t.MinSize()
		t.Refresh()
	} else if t.Color != c {
		t.Color = c
		t.Refresh()
	}
	return l.size
}

// setTick labels the i-th tick of pool with value t, growing the pool by one if needed, and returns the label's
// size.
func (r *lineChartRenderer) setTick(pool *[]*chartTick, i int, t, step float64) fyne.Size {
	if i == len(*pool) {
		*pool = append(*pool, &chartTick{grid: &canvas.Line{}, mark: &canvas.Line{}, label: newChartLabel()})
	}
	tk := (*pool)[i]
	s := tk.label.t.Text
	if tk.val != t || tk.step != step {
		s, tk.val, tk.step = formatTick(t, step), t, step
	}
	return r.setText(tk.label, s, r.fg, r.caption, fyne.TextStyle{})
}

// xTicksThatFit labels and returns x ticks for a plot width pixels wide, as many as leave a gap between labels.
func (r *lineChartRenderer) xTicksThatFit(width float32) []float64 {
	for n := max(2, min(6, int(width/64))); ; n-- {
		xt, step := niceTicks(r.xTickBuf[:0], r.x0, r.x1, n)
		r.xTickBuf = xt
		widest := float32(0)
		for i, t := range xt {
			widest = max(widest, r.setTick(&r.xTicks, i, t, step).Width)
		}
		r.nXTicks = len(xt)
		if n == 2 || float32(step/(r.x1-r.x0))*width >= widest+3*r.pad {
			return xt
		}
	}
}

// layoutLegend places one swatch and name per series in rows between x = minX and right, aligned right, and
// returns their height.
func (r *lineChartRenderer) layoutLegend(right, minX, lineH float32) float32 {
	series := r.chart.series
	for len(r.legend) < len(series) {
		r.legend = append(r.legend, chartLegendEntry{swatch: &canvas.Rectangle{CornerRadius: 2}, name: newChartLabel()})
	}
	entryW := func(i int) float32 { return chartSwatch + r.pad + r.legend[i].name.size.Width }
	for i := range series {
		r.setText(r.legend[i].name, series[i].Name, r.fg, r.caption, fyne.TextStyle{})
	}
	rowY := float32(0)
	for start := 0; start < len(series); rowY += lineH + r.pad {
		// Take entries while they fit, at least one per row.
		end, w := start+1, entryW(start)
		for end < len(series) && w+chartLegendGap+entryW(end) <= right-minX {
			w += chartLegendGap + entryW(end)
			end++
		}
		x := right - w
		for i := start; i < end; i++ {
			e := r.legend[i]
			e.swatch.FillColor = r.colors[i]
			e.swatch.Move(fyne.NewPos(x, rowY+(lineH-chartSwatch)/2))
			e.swatch.Resize(fyne.NewSquareSize(chartSwatch))
			e.name.place(fyne.NewPos(x+chartSwatch+r.pad, rowY))
			x += entryW(i) + chartLegendGap
		}
		start = end
	}
	return max(rowY-r.pad, 0)
}

// layoutSeries draws each series as segments between its points, or as a dot when it has only one.
func (r *lineChartRenderer) layoutSeries() {
	r.nSegments, r.nDots = 0, 0
	for si := range r.chart.series {
		pts := r.project(&r.chart.series[si])
		col := r.colors[si]
		if len(pts) == 1 {
			if r.nDots == len(r.dots) {
				r.dots = append(r.dots, &canvas.Circle{})
			}
			d := r.dots[r.nDots]
			r.nDots++
			d.FillColor = col
			d.Position1 = pts[0].SubtractXY(chartDotRadius, chartDotRadius)
			d.Position2 = pts[0].AddXY(chartDotRadius, chartDotRadius)
			continue
		}
		for i := 1; i < len(pts); i++ {
			if r.nSegments == len(r.segments) {
				r.segments = append(r.segments, &canvas.Line{})
			}
			setLine(r.segments[r.nSegments], pts[i-1], pts[i], col, chartLineWidth)
			r.nSegments++
		}
	}
}

// project maps a series to plot positions. When it has more points than the plot has pixel columns, only the
// lowest and highest point of each run of points in one column are kept, which draws the same picture.
func (r *lineChartRenderer) project(s *chartSeries) []fyne.Position {
	pts := r.scratch[:0]
	defer func() { r.scratch = pts[:0] }()
	if len(s.X) <= 2*int(r.plotEnd.X-r.plotPos.X)+2 {
		for i := range s.X {
			pts = append(pts, fyne.NewPos(r.px(s.X[i]), r.py(s.Y[i])))
		}
		return pts
	}
	col, lo, hi := -1, 0, 0
	flush := func() {
		a, b := min(lo, hi), max(lo, hi)
		pts = append(pts, fyne.NewPos(r.px(s.X[a]), r.py(s.Y[a])))
		if b != a {
			pts = append(pts, fyne.NewPos(r.px(s.X[b]), r.py(s.Y[b])))
		}
	}
	for i := range s.X {
		c := int(r.px(s.X[i]))
		switch {
		case c != col:
			if col >= 0 {
				flush()
			}
			col, lo, hi = c, i, i
		case s.Y[i] < s.Y[lo]:
			lo = i
		case s.Y[i] > s.Y[hi]:
			hi = i
		}
	}
	flush()
	return pts
}

// layoutHover shows the series name and "x, y" of the point nearest the pointer, while the pointer is over the
// plot area.
func (r *lineChartRenderer) layoutHover() {
	c := r.chart
	r.hoverDot.Hidden, r.hoverBox.Hidden, r.hoverText.t.Hidden = true, true, true
	// A little slack around the plot lets the pointer reach points drawn on its edges.
	const slack = 2 * chartHoverRadius
	m := c.mouse
	if !c.hovering || !r.hasData || m.X < r.plotPos.X-slack || m.X > r.plotEnd.X+slack ||
		m.Y < r.plotPos.Y-slack || m.Y > r.plotEnd.Y+slack {
		return
	}
	bestS, bestI, bestD := -1, 0, float32(math.Inf(1))
	for si := range c.series {
		s := &c.series[si]
		for i := range s.X {
			dx, dy := r.px(s.X[i])-m.X, r.py(s.Y[i])-m.Y
			if d := dx*dx + dy*dy; d < bestD {
				bestS, bestI, bestD = si, i, d
			}
		}
	}
	if bestS < 0 {
		return
	}
	s := &c.series[bestS]
	p := fyne.NewPos(r.px(s.X[bestI]), r.py(s.Y[bestI]))
	th := c.Theme()
	v := fyne.CurrentApp().Settings().ThemeVariant()

	r.hoverDot.FillColor = r.colors[bestS]
	r.hoverDot.StrokeColor = th.Color(theme.ColorNameBackground, v)
	r.hoverDot.Position1 = p.SubtractXY(chartHoverRadius, chartHoverRadius)
	r.hoverDot.Position2 = p.AddXY(chartHoverRadius, chartHoverRadius)

	text := fmt.Sprintf("%s: %s, %s", s.Name, formatValue(s.X[bestI]), formatValue(s.Y[bestI]))
	ts := r.setText(r.hoverText, text, r.fg, r.caption, fyne.TextStyle{})
	box := ts.AddWidthHeight(2*r.pad, r.pad)
	// Up and to the right of the point, flipped to stay inside the plot area.
	const off = 2 * chartHoverRadius
	bp := fyne.NewPos(p.X+off, p.Y-off-box.Height)
	if bp.X+box.Width > r.plotEnd.X {
		bp.X = max(p.X-off-box.Width, 0)
	}
	if bp.Y < r.plotPos.Y {
		bp.Y = p.Y + off
	}
	r.hoverBox.FillColor = th.Color(theme.ColorNameOverlayBackground, v)
	r.hoverBox.StrokeColor = th.Color(theme.ColorNameInputBorder, v)
	r.hoverBox.Move(bp)
	r.hoverBox.Resize(box)
	r.hoverText.place(bp.AddXY(r.pad, r.pad/2))
	r.hoverDot.Hidden, r.hoverBox.Hidden, r.hoverText.t.Hidden = false, false, false
}

// collect lists the objects in use, back to front.
func (r *lineChartRenderer) collect() {
	o := r.objects[:0]
	for _, t := range r.yTicks[:r.nYTicks] {
		o = append(o, t.grid)
	}
	for _, t := range r.xTicks[:r.nXTicks] {
		o = append(o, t.grid)
	}
	o = append(o, r.xAxis, r.yAxis, r.xTitle.t, r.yTitle.t, r.empty.t)
	for _, ticks := range [2][]*chartTick{r.yTicks[:r.nYTicks], r.xTicks[:r.nXTicks]} {
		for _, t := range ticks {
			o = append(o, t.mark, t.label.t)
		}
	}
	for _, s := range r.segments[:r.nSegments] {
		o = append(o, s)
	}
	for _, d := range r.dots[:r.nDots] {
		o = append(o, d)
	}
	for _, e := range r.legend[:len(r.chart.series)] {
		o = append(o, e.swatch, e.name.t)
	}
	r.objects = append(o, r.hoverDot, r.hoverBox, r.hoverText.t)
}

// px and py map data coordinates into the plot area.
func (r *lineChartRenderer) px(x float64) float32 {
	return r.plotPos.X + float32((x-r.x0)/(r.x1-r.x0))*(r.plotEnd.X-r.plotPos.X)
}

func (r *lineChartRenderer) py(y float64) float32 {
	return r.plotEnd.Y - float32((y-r.y0)/(r.y1-r.y0))*(r.plotEnd.Y-r.plotPos.Y)
}

func setLine(l *canvas.Line, a, b fyne.Position, c color.Color, width float32) {
	l.Position1, l.Position2, l.StrokeColor, l.StrokeWidth = a, b, c, width
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// widenEmpty gives a zero-width range some room around its value.
func widenEmpty(lo, hi float64) (float64, float64) {
	if hi > lo {
		return lo, hi
	}
	d := math.Abs(lo) * 0.1
	if d == 0 {
		d = 1
	}
	return lo - d, hi + d
}

// faint returns c at about a tenth of its opacity.
func faint(c color.Color) color.Color {
	n := color.NRGBAModel.Convert(c).(color.NRGBA)
	n.A = uint8(uint16(n.A) * 28 / 255)
	return n
}

func isDark(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return 0.299*float64(r)+0.587*float64(g)+0.114*float64(b) < 0.5*0xffff
}

// niceTicks appends to dst the multiples of step in [lo, hi], where step is 1, 2 or 5 × 10^k chosen to give at
// least two ticks and otherwise as close to n as it can, the wider step on a tie.
func niceTicks(dst []float64, lo, hi float64, n int) ([]float64, float64) {
	span := hi - lo
	if !(span > 0) || !finite(span) {
		return dst, 0
	}
	first := func(step float64) float64 { return math.Ceil(lo/step - 1e-9) }
	last := func(step float64) float64 { return math.Floor(hi/step + 1e-9) }
	count := func(step float64) int { return int(last(step)-first(step)) + 1 }
	step, best := 0.0, math.MaxInt
	mag := math.Pow(10, math.Floor(math.Log10(span/float64(max(n, 1))))+1)
	for range 3 { // with 10^e ≤ span/n < 10^(e+1): 5, 2 and 1 × 10^(e+1), then 10^e, then 10^(e-1)
		for _, m := range [3]float64{5, 2, 1} {
			s := m * mag
			if c := count(s); c >= 2 && abs(c-n) < best {
				step, best = s, abs(c-n)
			}
		}
		mag /= 10
	}
	if step == 0 {
		return dst, 0
	}
	for k := first(step); k <= last(step); k++ {
		t := k * step
		if k == 0 {
			t = 0 // not -0
		}
		dst = append(dst, t)
	}
	return dst, step
}

func abs(i int) int { return max(i, -i) }

// formatTick writes v compactly with just the digits that tell ticks step apart: 0.05, 1.5k, 3M, 3.4e-4.
func formatTick(v, step float64) string {
	if v == 0 || math.Abs(v) < step*1e-6 {
		return "0"
	}
	if step < 1e-3 || step >= 1e15 {
		return formatSci(v, max(0, exponent(math.Abs(v))-exponent(step)+decimals(step/math.Pow(10, float64(exponent(step))))))
	}
	scale, suffix := siScale(math.Abs(v))
	return trimZeros(strconv.FormatFloat(v/scale, 'f', decimals(step/scale), 64)) + suffix
}

// decimals is the number of decimal places that write step exactly, so ticks step apart read differently.
func decimals(step float64) int {
	d := max(0, -exponent(step))
	for ; d < 15; d++ {
		if f := step * math.Pow(10, float64(d)); math.Abs(f-math.Round(f)) < 1e-6*f {
			break
		}
	}
	return d
}

// formatValue writes v compactly with about three significant digits: 0.532, 1.23k, 3.42e-4; whole numbers
// below a million in full.
func formatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a < 1e6 && v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a < 1e-3 || a >= 1e15:
		return formatSci(v, 2)
	}
	scale, suffix := siScale(a)
	return trimZeros(strconv.FormatFloat(v/scale, 'f', max(0, 2-exponent(a/scale)), 64)) + suffix
}

func siScale(a float64) (float64, string) {
	switch {
	case a >= 1e12:
		return 1e12, "T"
	case a >= 1e9:
		return 1e9, "G"
	case a >= 1e6:
		return 1e6, "M"
	case a >= 1e3:
		return 1e3, "k"
	}
	return 1, ""
}

// formatSci writes v as mantissa and exponent without padding: 3.4e-4, not 3.40e-04.
func formatSci(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'e', decimals, 64)
	mant, exp, _ := strings.Cut(s, "e")
	e, _ := strconv.Atoi(exp)
	return trimZeros(mant) + "e" + strconv.Itoa(e)
}

// exponent is floor(log10(a)), robust to a being a power of ten computed in floating point.
func exponent(a float64) int { return int(math.Floor(math.Log10(a) + 1e-9)) }

func trimZeros(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}
