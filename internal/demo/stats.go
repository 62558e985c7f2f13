package demo

import (
	"math"
	"slices"
	"time"

	"github.com/batchq/batchq/internal/sharechart"
)

// jobRecord is one job of a run as the final report sees it: its outcome
// row, or its row in the jobs table if it was unfinished at the stop.
type jobRecord struct {
	ID     int64
	Tenant string
	Kind   string
	// Cost is what the job cost: the provider's count if it reported one,
	// else the estimate.
	Cost int64
	// Outcome is succeeded, failed, expired, cancelled or discarded; "" for
	// a job unfinished at the stop.
	Outcome  string
	Enqueued time.Time
	Claimed  time.Time // the first claim; zero if never claimed
	Finished time.Time // zero if unfinished
}

// spent reports whether the job reached the provider and was charged:
// it finished after running, successfully or not.
func (j jobRecord) spent() bool {
	return (j.Outcome == "succeeded" || j.Outcome == "failed" || j.Outcome == "discarded") && !j.Claimed.IsZero()
}

// percentile returns the p-th percentile (0 < p ≤ 100) of ds by nearest
// rank: the smallest value with at least p% of the values at or below it.
// It returns 0 for no values. ds is not modified.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Span is the time interval [From, To).
type Span struct{ From, To time.Time }

// Length is how long the span lasts.
func (s Span) Length() time.Duration { return s.To.Sub(s.From) }

// backlogSpans returns when tenant had work waiting: the union of the
// intervals from each job's enqueue until it was claimed, dropped (expired
// or cancelled), or the stop, whichever came first; sorted and disjoint.
func backlogSpans(jobs []jobRecord, tenant string, stop time.Time) []Span {
	var ss []Span
	for _, j := range jobs {
		if j.Tenant != tenant {
			continue
		}
		end := stop
		switch {
		case !j.Claimed.IsZero():
			end = j.Claimed
		case !j.Finished.IsZero():
			end = j.Finished
		}
		if end.After(stop) {
			end = stop
		}
		if end.After(j.Enqueued) {
			ss = append(ss, Span{j.Enqueued, end})
		}
	}
	return union(ss)
}

// union merges overlapping or touching spans into sorted, disjoint ones.
func union(ss []Span) []Span {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b Span) int { return a.From.Compare(b.From) })
	var out []Span
	for _, s := range ss {
		if n := len(out); n > 0 && !s.From.After(out[n-1].To) {
			if s.To.After(out[n-1].To) {
				out[n-1].To = s.To
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// intersect returns the spans covered by both a and b, each sorted and
// disjoint.
func intersect(a, b []Span) []Span {
	var out []Span
	for i, j := 0, 0; i < len(a) && j < len(b); {
		from, to := a[i].From, a[i].To
		if b[j].From.After(from) {
			from = b[j].From
		}
		if b[j].To.Before(to) {
			to = b[j].To
		}
		if to.After(from) {
			out = append(out, Span{from, to})
		}
		if a[i].To.Before(b[j].To) {
			i++
		} else {
			j++
		}
	}
	return out
}

// longest returns the longest span, the earliest of equals; false for none.
func longest(ss []Span) (Span, bool) {
	var best Span
	ok := false
	for _, s := range ss {
		if !ok || s.Length() > best.Length() {
			best, ok = s, true
		}
	}
	return best, ok
}

// allBacklogged returns the longest period in which every one of tenants
// had work waiting; false if there was none.
func allBacklogged(jobs []jobRecord, tenants []string, stop time.Time) (Span, bool) {
	if len(tenants) == 0 {
		return Span{}, false
	}
	common := backlogSpans(jobs, tenants[0], stop)
	for _, t := range tenants[1:] {
		common = intersect(common, backlogSpans(jobs, t, stop))
	}
	return longest(common)
}

// ShareRow is one tenant's part of the tokens spent in a period.
type ShareRow struct {
	Tenant      string
	Weight      float64
	Tokens      int64
	Share       float64 // of the tokens of the tenants compared
	WeightShare float64 // the tenant's weight over the sum of their weights
}

// sharesIn compares the tokens each of tenants spent on jobs claimed in w
// with its weight: shares are among those tenants only. It also returns the
// tokens other tenants spent in w.
func sharesIn(jobs []jobRecord, w Span, tenants []string, weights map[string]float64) (rows []ShareRow, others int64) {
	tokens := map[string]int64{}
	for _, j := range jobs {
		if j.spent() && !j.Claimed.Before(w.From) && j.Claimed.Before(w.To) {
			tokens[j.Tenant] += j.Cost
		}
	}
	var sum int64
	var wsum float64
	for _, t := range tenants {
		sum += tokens[t]
		wsum += weights[t]
	}
	for t, n := range tokens {
		if !slices.Contains(tenants, t) {
			others += n
		}
	}
	for _, t := range tenants {
		r := ShareRow{Tenant: t, Weight: weights[t], Tokens: tokens[t]}
		if sum > 0 {
			r.Share = float64(tokens[t]) / float64(sum)
		}
		if wsum > 0 {
			r.WeightShare = weights[t] / wsum
		}
		rows = append(rows, r)
	}
	return rows, others
}

// throughput is the tokens per second spent on jobs claimed in w.
func throughput(jobs []jobRecord, w Span) float64 {
	if w.Length() <= 0 {
		return 0
	}
	var n int64
	for _, j := range jobs {
		if j.spent() && !j.Claimed.Before(w.From) && j.Claimed.Before(w.To) {
			n += j.Cost
		}
	}
	return float64(n) / w.Length().Seconds()
}

// fifoWaits estimates how long each job of targets would have waited in one
// first-in-first-out queue served at rate tokens per second: the tokens of
// the jobs enqueued before it, less those already claimed by then, over the
// rate. Jobs that expired are left out of the work ahead, so the estimate is
// low rather than high. It returns nil when rate is not positive.
func fifoWaits(jobs []jobRecord, targets []jobRecord, rate float64) []time.Duration {
	if rate <= 0 {
		return nil
	}
	out := make([]time.Duration, 0, len(targets))
	for _, t := range targets {
		var ahead int64
		for _, j := range jobs {
			if j.ID == t.ID {
				continue
			}
			if j.Enqueued.Before(t.Enqueued) && j.Outcome != "expired" {
				ahead += j.Cost
			}
			if j.spent() && j.Claimed.Before(t.Enqueued) {
				ahead -= j.Cost
			}
		}
		out = append(out, time.Duration(float64(max(ahead, 0))/rate*float64(time.Second)))
	}
	return out
}

// waits returns how long each job waited from enqueue to its first claim.
// A job unfinished at the stop (never claimed, or claimed and handed back)
// counts with what it had waited by then, a lower bound; one dropped
// without running counts not at all.
func waits(jobs []jobRecord, stop time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(jobs))
	for _, j := range jobs {
		switch {
		case j.Outcome == "":
			out = append(out, stop.Sub(j.Enqueued))
		case !j.Claimed.IsZero():
			out = append(out, j.Claimed.Sub(j.Enqueued))
		}
	}
	return out
}

// point is one sample of a share series: seconds since the start, and a
// share in percent.
// point is one sample of the share chart.
type point = sharechart.Point

// shareSeries samples, every step from start+step to stop, the share of the
// tokens spent on jobs claimed in the trailing window that each group of
// tenants took. Samples whose window spent nothing are left out.
func shareSeries(jobs []jobRecord, groups map[string][]string, start, stop time.Time, window, step time.Duration) map[string][]point {
	group := map[string]string{}
	for g, ts := range groups {
		for _, t := range ts {
			group[t] = g
		}
	}
	out := map[string][]point{}
	if step <= 0 || window <= 0 {
		return out
	}
	for at := start.Add(step); !at.After(stop); at = at.Add(step) {
		from := at.Add(-window)
		var total int64
		by := map[string]int64{}
		for _, j := range jobs {
			if j.spent() && j.Claimed.After(from) && !j.Claimed.After(at) {
				total += j.Cost
				if g, ok := group[j.Tenant]; ok {
					by[g] += j.Cost
				}
			}
		}
		if total == 0 {
			continue
		}
		x := at.Sub(start).Seconds()
		for g := range groups {
			out[g] = append(out[g], point{X: x, Y: 100 * float64(by[g]) / float64(total)})
		}
	}
	return out
}
