package sharechart

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// ErrNoData is returned by Write when no series has a point: there is
// nothing to chart.
var ErrNoData = errors.New("batchq: chart: no tokens were spent, nothing to chart")

// Point is one sample: X in the chart's unit (seconds, minutes…), Y a share
// in percent.
type Point struct{ X, Y float64 }

// Series is one solid line.
type Series struct {
	Name   string
	Color  color.Color
	Points []Point
}

// Ref is one dashed horizontal line: a share the weights entitle to, in
// percent.
type Ref struct {
	Label string
	Y     float64
}

// Chart is what Write draws. Its zero value draws nothing (ErrNoData).
type Chart struct {
	Title, XLabel string
	// XMin and XMax bound the time axis.
	XMin, XMax float64
	Series     []Series
	Refs       []Ref
	// Width and Height are the drawing's size; zero: 10 by 5.5 inches.
	Width, Height vg.Length
}

// Write draws the chart to w as format: "svg" or "png". The Y axis is the
// share of the tokens, 0 to 100%.
func (c Chart) Write(w io.Writer, format string) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = "share of the batch tokens (%)"
	p.X.Min, p.X.Max = c.XMin, c.XMax
	p.Y.Min, p.Y.Max = 0, 100
	p.X.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick { return Ticks(lo, hi, 6) })
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick { return Ticks(lo, hi, 5) })
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = false
	// Sans-serif text (Liberation Sans, metric-compatible with Arial and
	// Helvetica, so an SVG viewer's fallback keeps the layout); set here
	// rather than through plot.DefaultFont, which charts drawn at once share.
	p.Title.TextStyle.Font.Size = vg.Points(13)
	for _, f := range []*font.Font{
		&p.Title.TextStyle.Font, &p.Legend.TextStyle.Font,
		&p.X.Label.TextStyle.Font, &p.X.Tick.Label.Font, &p.Y.Label.TextStyle.Font, &p.Y.Tick.Label.Font,
	} {
		f.Variant = "Sans"
	}

	for _, ref := range c.Refs {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: ref.Y}, {X: p.X.Max, Y: ref.Y}})
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 110}
		l.Width = vg.Points(1)
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(4)}
		p.Add(l)
		p.Legend.Add(ref.Label, l)
	}

	drawn := 0
	for _, s := range c.Series {
		if len(s.Points) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.Points))
		for i, pt := range s.Points {
			xys[i] = plotter.XY{X: pt.X, Y: pt.Y}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = s.Color
		l.Width = vg.Points(2)
		p.Add(l)
		p.Legend.Add(s.Name, l)
		drawn++
	}
	if drawn == 0 {
		return ErrNoData
	}
	width, height := c.Width, c.Height
	if width == 0 {
		width = 10 * vg.Inch
	}
	if height == 0 {
		height = 5.5 * vg.Inch
	}
	wt, err := p.WriterTo(width, height, format)
	if err != nil {
		return fmt.Errorf("batchq: chart: %w", err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("batchq: chart: %w", err)
	}
	return nil
}

// Ticks labels about n evenly spaced round values in [lo, hi], with
// unlabelled minor ticks between them.
func Ticks(lo, hi float64, n int) []plot.Tick {
	if !(hi > lo) || n < 1 {
		return nil
	}
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600} {
		step = s
		if (hi-lo)/s <= float64(n) {
			break
		}
	}
	var out []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+1e-9; v += step {
		out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		if mid := v + step/2; mid <= hi {
			out = append(out, plot.Tick{Value: mid})
		}
	}
	return out
}

// palette holds distinguishable line colours; Color cycles through them.
var palette = []color.Color{
	color.RGBA{R: 230, G: 120, B: 20, A: 255},
	color.RGBA{R: 30, G: 100, B: 200, A: 255},
	color.RGBA{R: 40, G: 160, B: 70, A: 255},
	color.RGBA{R: 200, G: 40, B: 40, A: 255},
	color.RGBA{R: 170, G: 60, B: 170, A: 255},
	color.RGBA{R: 20, G: 160, B: 170, A: 255},
	color.RGBA{R: 140, G: 90, B: 40, A: 255},
	color.RGBA{R: 90, G: 90, B: 90, A: 255},
}

// Color is the i-th line colour of the palette the demo's chart uses.
func Color(i int) color.Color { return palette[i%len(palette)] }

// TenantShare is a tenant drawn and the share of the tokens its weight
// entitles it to, a fraction.
type TenantShare struct {
	Tenant string
	Share  float64
}

// FairShares returns the dashed reference lines of the shares the tenants'
// weights entitle them to, highest first, one line per distinct share,
// naming its tenants in the order given ("fair share of a and b: 25%"; past
// two names, "a, b and 3 more"). Tenants with no share (0) get no line.
func FairShares(shares []TenantShare) []Ref {
	var levels []float64
	byShare := map[float64][]string{}
	for _, t := range shares {
		if t.Share <= 0 {
			continue
		}
		if _, ok := byShare[t.Share]; !ok {
			levels = append(levels, t.Share)
		}
		byShare[t.Share] = append(byShare[t.Share], t.Tenant)
	}
	slices.Sort(levels)
	slices.Reverse(levels)
	refs := make([]Ref, 0, len(levels))
	for _, s := range levels {
		who := byShare[s]
		label := strings.Join(who, " and ")
		if len(who) > 2 {
			label = fmt.Sprintf("%s and %d more", strings.Join(who[:2], ", "), len(who)-2)
		}
		refs = append(refs, Ref{Label: fmt.Sprintf("fair share of %s: %.0f%%", label, 100*s), Y: 100 * s})
	}
	return refs
}
