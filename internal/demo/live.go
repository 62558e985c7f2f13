package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/batchq/batchq/internal/dbsqlc"
	"github.com/batchq/batchq/throttle"
)

// liveView is one refresh of the live table.
type liveView struct {
	Elapsed, Total time.Duration
	Speed          float64
	Enqueued       int64
	Window         time.Duration // what the share column covers, wall clock
	Rows           []liveRow

	// The quota as the fleet shares it: the provider's limit, what is left
	// now (-1: not known yet), how long starts are paused.
	Limit, Left int64
	Paused      time.Duration
	TooMany     int64

	Calls, CallsOK int
	CallWait       time.Duration // p99 of the interactive calls' throttle wait

	Errors  int64
	LastErr string
}

// liveRow is one tenant's line.
type liveRow struct {
	Name, Role string
	Weight     float64
	dbsqlc.DemoProgressRow
}

// show reads the live view and draws it.
func (r *runner) show(ctx context.Context) {
	v, err := r.view(ctx)
	if err != nil {
		if ctx.Err() == nil {
			msg := err.Error()
			r.lastErr.Store(&msg)
		}
		return
	}
	r.draw(v.lines())
}

func (r *runner) view(ctx context.Context) (liveView, error) {
	now := time.Now()
	window := r.speed(liveWindow)
	rows, err := dbsqlc.New().DemoProgress(ctx, r.db, dbsqlc.DemoProgressParams{
		Since: now.Add(-window), Queue: queueName,
	})
	if err != nil {
		return liveView{}, fmt.Errorf("batchq: demo: progress: %w", err)
	}
	st, err := r.app.QuotaStore().Load(ctx, quotaKey)
	if err != nil {
		return liveView{}, err
	}
	_, left, err := r.th.Headroom(ctx, throttle.Interactive)
	if err != nil {
		return liveView{}, err
	}
	v := liveView{
		Elapsed: min(now.Sub(r.start), r.cfg.Duration), Total: r.cfg.Duration, Speed: r.cfg.Speed,
		Enqueued: r.enqueued.Load(), Window: window,
		Limit: st.Tokens.Limit, Left: left, TooMany: r.sim.Stats().TooManyRequests,
		Errors: r.workerErrors.Load(),
	}
	if !st.Tokens.Observed {
		v.Limit, v.Left = 0, -1
	}
	if left == math.MaxInt64 {
		v.Left = -1
	}
	if st.PausedUntil.After(now) {
		v.Paused = st.PausedUntil.Sub(now)
	}
	if msg := r.lastErr.Load(); msg != nil {
		v.LastErr = *msg
	}
	calls := r.calls()
	var waited []time.Duration
	for _, c := range calls {
		if c.status == 200 {
			v.CallsOK++
		}
		if !c.sent.IsZero() {
			waited = append(waited, c.sent.Sub(c.asked))
		}
	}
	v.Calls, v.CallWait = len(calls), percentile(waited, 99)

	got := map[string]dbsqlc.DemoProgressRow{}
	for _, row := range rows {
		got[row.Tenant] = row
	}
	for _, t := range r.story.Tenants {
		row := got[t.Name]
		row.Tenant = t.Name
		v.Rows = append(v.Rows, liveRow{Name: t.Name, Role: t.Role, Weight: t.Weight, DemoProgressRow: row})
	}
	return v, nil
}

// lines renders the view, one string a line, none wider than 80 columns
// for the numbers of a run of up to an hour, so that a terminal redraw
// does not wrap.
func (v liveView) lines() []string {
	var ls []string
	add := func(format string, args ...any) { ls = append(ls, fmt.Sprintf(format, args...)) }
	add("batchq demo  %s / %s  speed %s  %s jobs  shares: last %s", clock(v.Elapsed), clock(v.Total),
		speedText(v.Speed), count(v.Enqueued), dur(v.Window))
	add("  tenant    role      weight   done  queued expired     tokens  share p95 wait")
	var recent int64
	for _, r := range v.Rows {
		recent += r.RecentTokens
	}
	for _, r := range v.Rows {
		share := "-"
		if recent > 0 {
			share = fmt.Sprintf("%.0f%%", 100*float64(r.RecentTokens)/float64(recent))
		}
		wait := "-"
		if r.Done+r.Failed > 0 {
			wait = dur(time.Duration(r.WaitP95Seconds * float64(time.Second)))
		}
		add("  %-9s %-9s %6s %6s %7s %7s %10s  %5s %8s", r.Name, r.Role, weightText(r.Weight),
			count(r.Done), count(r.Waiting+r.Running), count(r.Expired), count(r.Tokens), share, wait)
	}
	left := "?"
	if v.Left >= 0 {
		left = count(v.Left)
	}
	limit := "?"
	if v.Limit > 0 {
		limit = count(v.Limit)
	}
	paused := "no"
	if v.Paused > 0 {
		paused = dur(v.Paused)
	}
	add("  quota  %s / %s tokens left · reserve %.0f%% · paused %s · 429s %s",
		left, limit, 100*reserve, paused, count(v.TooMany))
	add("  batch  %s tokens/s · interactive %d calls, %d ok, throttle wait p99 %s",
		count(int64(float64(recent)/v.Window.Seconds())), v.Calls, v.CallsOK, dur(v.CallWait))
	if v.Errors > 0 {
		add("  worker errors %s, last: %s", count(v.Errors), firstLine(v.LastErr, 48))
	}
	return ls
}

// firstLine is the first line of s, cut to n runes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "…"
	}
	return s
}

// draw shows lines: in place of the previous table on a terminal, else as
// a plain block.
func (r *runner) draw(lines []string) {
	var b strings.Builder
	if r.cfg.Terminal {
		if r.drawn > 0 {
			fmt.Fprintf(&b, "\x1b[%dA", r.drawn) // up to the table's first line
		}
		b.WriteString("\r\x1b[J") // and clear from there down
		r.drawn = len(lines)
	}
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if !r.cfg.Terminal {
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(r.cfg.Out, b.String())
}
