package demo

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// errNoData is returned when a run spent no tokens: there is nothing to chart.
var errNoData = errors.New("batchq: demo: no tokens were spent, nothing to chart")

// chartSeries is one line of the chart.
type chartSeries struct {
	Name   string
	Color  color.Color
	Points []point
}

// smallGroup names the small tenants' line.
var smallGroup = fmt.Sprintf("%d small tenants", len(smallTenants))

var seriesColors = map[string]color.Color{
	importTenant:  color.RGBA{R: 230, G: 120, B: 20, A: 255},
	planTenant:    color.RGBA{R: 30, G: 100, B: 200, A: 255},
	reindexTenant: color.RGBA{R: 40, G: 160, B: 70, A: 255},
	digestTenant:  color.RGBA{R: 200, G: 40, B: 40, A: 255},
	smallGroup:    color.RGBA{R: 170, G: 60, B: 170, A: 255},
}

// chartSeries samples each tenant's share of the batch tokens over a
// sliding window, the small tenants' together.
func (r *runner) chartSeries(rep *Report, jobs []jobRecord) []chartSeries {
	groups := map[string][]string{smallGroup: smallTenants}
	var names []string
	for _, t := range r.story.Tenants {
		if t.Role != roleSmall {
			groups[t.Name] = []string{t.Name}
			names = append(names, t.Name)
		}
	}
	names = append(names, smallGroup)
	window := r.speed(liveWindow)
	pts := shareSeries(jobs, groups, rep.Start, rep.Stop, window, window/5)
	var out []chartSeries
	for _, n := range names {
		label := n
		if t, ok := r.story.tenant(n); ok {
			label = fmt.Sprintf("%s (%s, weight %s)", n, t.Role, weightText(t.Weight))
		}
		out = append(out, chartSeries{Name: label, Color: seriesColors[n], Points: pts[n]})
	}
	return out
}

// writeChart draws each series' share of the tokens over time, with the
// weight shares as dashed lines, to path: PNG if it ends in .png, else SVG.
func writeChart(path string, rep *Report, series []chartSeries) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("batchq demo: each tenant's share of the tokens (sliding %s window, speed %s)",
		scale(liveWindow, rep.Speed).Round(time.Millisecond), speedText(rep.Speed))
	p.X.Label.Text = "seconds since the start"
	p.Y.Label.Text = "share of the batch tokens (%)"
	p.X.Min, p.X.Max = 0, rep.Stop.Sub(rep.Start).Seconds()
	p.Y.Min, p.Y.Max = 0, 100
	p.X.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick { return ticks(lo, hi, 6) })
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick { return ticks(lo, hi, 5) })
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

	// The weight shares among the steady tenants, as dashed references.
	var refs []float64
	for _, s := range rep.Shares {
		if !slices.Contains(refs, s.WeightShare) {
			refs = append(refs, s.WeightShare)
		}
	}
	slices.Sort(refs)
	for i := len(refs) - 1; i >= 0; i-- {
		ref := refs[i]
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 100 * ref}, {X: p.X.Max, Y: 100 * ref}})
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 110}
		l.Width = vg.Points(1)
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(4)}
		p.Add(l)
		var who []string
		for _, s := range rep.Shares {
			if s.WeightShare == ref {
				who = append(who, s.Tenant)
			}
		}
		p.Legend.Add(fmt.Sprintf("fair share of %s: %.0f%%", strings.Join(who, " and "), 100*ref), l)
	}

	drawn := 0
	for _, s := range series {
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
		return errNoData
	}

	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	w, err := p.WriterTo(10*vg.Inch, 5.5*vg.Inch, format)
	if err != nil {
		return fmt.Errorf("batchq: demo: chart: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("batchq: demo: chart: %w", err)
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("batchq: demo: chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("batchq: demo: chart %s: %w", path, err)
	}
	return nil
}

// ticks labels about n evenly spaced round values in [lo, hi], with
// unlabelled minor ticks between them.
func ticks(lo, hi float64, n int) []plot.Tick {
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
