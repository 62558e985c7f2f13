package demo

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"

	"github.com/batchq/batchq/internal/sharechart"
)

// errNoData is returned when a run spent no tokens: there is nothing to chart.
var errNoData = errors.New("batchq: demo: no tokens were spent, nothing to chart")

// chartSeries is one line of the chart.
type chartSeries struct {
	Name   string
	Color  color.Color
	Points []sharechart.Point
}

// smallGroup names the small tenants' line.
var smallGroup = fmt.Sprintf("%d small tenants", len(smallTenants))

var seriesColors = map[string]color.Color{
	importTenant:  sharechart.Color(0),
	planTenant:    sharechart.Color(1),
	reindexTenant: sharechart.Color(2),
	digestTenant:  sharechart.Color(3),
	smallGroup:    sharechart.Color(4),
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
	c := sharechart.Chart{
		Title: fmt.Sprintf("batchq demo: each tenant's share of the tokens (sliding %s window, speed %s)",
			scale(liveWindow, rep.Speed).Round(time.Millisecond), speedText(rep.Speed)),
		XLabel: "seconds since the start",
		XMin:   0, XMax: rep.Stop.Sub(rep.Start).Seconds(),
	}
	// The weight shares among the steady tenants, as dashed references.
	var fair []sharechart.TenantShare
	for _, s := range rep.Shares {
		fair = append(fair, sharechart.TenantShare{Tenant: s.Tenant, Share: s.WeightShare})
	}
	c.Refs = sharechart.FairShares(fair)
	for _, s := range series {
		c.Series = append(c.Series, sharechart.Series{Name: s.Name, Color: s.Color, Points: s.Points})
	}

	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("batchq: demo: chart: %w", err)
	}
	if err := c.Write(f, format); err != nil {
		f.Close()
		if errors.Is(err, sharechart.ErrNoData) {
			return errNoData
		}
		return fmt.Errorf("batchq: demo: chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("batchq: demo: chart %s: %w", path, err)
	}
	return nil
}

// ticks labels about n evenly spaced round values in [lo, hi].
func ticks(lo, hi float64, n int) []plot.Tick { return sharechart.Ticks(lo, hi, n) }
