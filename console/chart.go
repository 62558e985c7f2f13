package console

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/batchq/batchq/internal/sharechart"
	"github.com/batchq/batchq/queue"
)

// chartSteps is how many samples the chart takes over its window.
const chartSteps = 60

// chartLines is how many tenants the chart draws a line each for; the rest
// share one line.
const chartLines = 6

// chart serves a queue's share chart over ?window= as SVG.
func (s *server) chart(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("queue")
	wname, span, err := window(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := s.o.Now()
	var buf bytes.Buffer
	if err := s.drawChart(r, &buf, name, wname, now.Add(-span), now); err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(showBidiControls(buf.Bytes()))
}

// drawChart draws each tenant's share of the tokens one queue served in
// [since, until), by step, with the shares their weights entitle them to.
func (s *server) drawChart(r *http.Request, buf *bytes.Buffer, name, wname string, since, until time.Time) error {
	ctx := r.Context()
	if _, err := s.queue(r, name); err != nil {
		return err
	}
	usage, err := s.c.WindowUsage(ctx, name, since, until)
	if err != nil {
		return err
	}
	// A line each for the tenants served the most in the window.
	slices.SortFunc(usage, func(a, b queue.WindowUsageRow) int {
		return cmp.Or(cmp.Compare(b.ServedTokens, a.ServedTokens), strings.Compare(a.Tenant, b.Tenant))
	})
	var lines []string
	for _, u := range usage[:min(chartLines, len(usage))] {
		if u.ServedTokens > 0 {
			lines = append(lines, u.Tenant)
		}
	}
	step := until.Sub(since) / chartSteps
	samples, err := s.c.ServedTokens(ctx, name, since, until, step, lines)
	if err != nil {
		return err
	}
	c := shareChart(samples, usage, step, chartSteps)
	c.Title = fmt.Sprintf("queue %s: each tenant's share of the tokens, by %s, over the last %s", name, dur(step), wname)
	err = c.Write(buf, "svg")
	if errors.Is(err, sharechart.ErrNoData) {
		// An empty chart says so, rather than breaking the page's image.
		buf.Reset()
		fmt.Fprintf(buf, `<svg xmlns="http://www.w3.org/2000/svg" width="960" height="120" viewBox="0 0 960 120">`+
			`<text x="20" y="60" font-family="sans-serif" font-size="16" fill="#6b7280">queue %s served no tokens in the last %s</text></svg>`,
			template.HTMLEscapeString(name), wname)
		return nil
	}
	return err
}

// shareChart turns the served tokens by step into each line's share, in
// percent, at the end of each step that served any, with minutes before
// now on the X axis; and the weight shares of the tenants drawn as dashed
// lines.
func shareChart(samples []queue.ShareSample, rows []queue.WindowUsageRow, step time.Duration, steps int) sharechart.Chart {
	var names []string
	total := make([]int64, steps)
	by := map[string][]int64{}
	for _, sm := range samples {
		if sm.Step < 0 || sm.Step >= steps {
			continue
		}
		if _, ok := by[sm.Tenant]; !ok {
			by[sm.Tenant] = make([]int64, steps)
			names = append(names, sm.Tenant)
		}
		by[sm.Tenant][sm.Step] += sm.Tokens
		total[sm.Step] += sm.Tokens
	}
	// Named tenants by what they were served, the others last.
	sum := func(n string) (t int64) {
		for _, v := range by[n] {
			t += v
		}
		return t
	}
	slices.SortStableFunc(names, func(a, b string) int {
		switch {
		case a == "":
			return 1
		case b == "":
			return -1
		}
		if d := sum(b) - sum(a); d != 0 {
			if d > 0 {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	// Time runs in seconds, minutes or hours before now, as suits the window.
	unit, unitName := time.Second, "seconds"
	switch window := step * time.Duration(steps); {
	case window > 6*time.Hour:
		unit, unitName = time.Hour, "hours"
	case window > 5*time.Minute:
		unit, unitName = time.Minute, "minutes"
	}
	u := func(d time.Duration) float64 { return float64(d) / float64(unit) }
	span := u(step * time.Duration(steps))
	// The axis starts a step before the first sample, so a queue that
	// started serving late in the window is not squeezed to its right edge.
	first := slices.IndexFunc(total, func(t int64) bool { return t > 0 })
	c := sharechart.Chart{XLabel: unitName + " before now", XMin: -span + float64(max(first, 0))*u(step), XMax: 0}
	for i, n := range names {
		label := n
		if n == "" {
			label = "others"
		}
		sr := sharechart.Series{Name: label, Color: sharechart.Color(i)}
		for k, t := range total {
			if t == 0 {
				continue
			}
			x := -span + float64(k+1)*u(step)
			sr.Points = append(sr.Points, sharechart.Point{X: x, Y: 100 * float64(by[n][k]) / float64(t)})
		}
		// A line needs two points. When one step served all the window's
		// tokens (every finish of a 24h window in one 24-minute step), its
		// share is drawn flat across that step, from its start, rather than
		// not at all.
		if len(sr.Points) == 1 {
			p := sr.Points[0]
			sr.Points = []sharechart.Point{{X: p.X - u(step), Y: p.Y}, p}
		}
		c.Series = append(c.Series, sr)
	}
	// The fair shares of the tenants drawn, from their weights.
	var fair []sharechart.TenantShare
	for _, r := range rows {
		if r.Tenant != "" && slices.Contains(names, r.Tenant) {
			fair = append(fair, sharechart.TenantShare{Tenant: r.Tenant, Share: r.WeightShare})
		}
	}
	c.Refs = sharechart.FairShares(fair)
	return c
}
