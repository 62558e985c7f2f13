package demo

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Report is what a run showed, computed from the demo database's outcome
// and job rows at the stop, and from what the simulated provider and the
// interactive caller recorded.
type Report struct {
	Database    string
	DatabaseURL string // with any password hidden; "" when not known
	Speed       float64
	// Start and Stop bound the run; Early is set when the caller's context
	// ended it before Config.Duration.
	Start, Stop time.Time
	Early       bool

	// Enqueued is how many jobs the story committed; every one of them is
	// either finished (Outcomes, by outcome) or Unfinished.
	Enqueued   int
	Outcomes   map[string]int
	Unfinished int

	Tenants []TenantReport

	// Small is the waits of the small tenants' jobs from enqueue to first
	// claim; a job still waiting at the stop counts what it had waited.
	Small Waits
	// ImportQueued is the import's jobs still waiting at the stop, and
	// ImportOldest how long the oldest of them had waited.
	ImportQueued int
	ImportOldest time.Duration
	// FIFO estimates what the small tenants' jobs would have waited in one
	// first-in-first-out queue at the same throughput: the work queued
	// ahead of each when it arrived.
	FIFO Waits

	// Backlogged is the longest period in which every steady tenant had
	// work waiting, and Shares their tokens in it against their weights;
	// OtherTokens is what the other tenants spent in it.
	Backlogged  Span
	Shares      []ShareRow
	OtherTokens int64

	// Expired counts jobs dropped at their deadline, the tokens they would
	// have cost, and how many of them the provider charged for a call (none
	// should be).
	Expired        int
	ExpiredTokens  int64
	ExpiredCharged int
	// Digests is how many jobs with a deadline too short for all of them
	// newsroom asked for, and DigestsInTime how many of them ran in time.
	// DigestTTL is how long they had, wall clock.
	Digests, DigestsInTime int
	DigestTTL              time.Duration

	Provider ProviderReport

	Interactive InteractiveReport

	// WorkerErrors counts errors the worker pools reported (database
	// trouble), with the last one.
	WorkerErrors  int64
	LastWorkerErr string
	// ThroughputRate is the batch tokens spent per second over the run.
	ThroughputRate float64
	// Chart is the path of the chart written.
	Chart string
}

// TenantReport is one tenant's part of a run.
type TenantReport struct {
	Name     string
	Role     string
	Weight   float64
	Enqueued int
	Done     int // succeeded
	Failed   int
	Expired  int
	Waiting  int   // unfinished at the stop
	Tokens   int64 // spent at the provider
	// Waits is from enqueue to first claim, of the jobs claimed; one handed
	// back and waiting again at the stop counts what it had waited.
	Waits Waits
}

// Waits summarises a set of waits.
type Waits struct {
	N             int
	P50, P95, Max time.Duration
}

func summarise(ds []time.Duration) Waits {
	if len(ds) == 0 {
		return Waits{}
	}
	return Waits{N: len(ds), P50: percentile(ds, 50), P95: percentile(ds, 95), Max: slices.Max(ds)}
}

// ProviderReport is what the simulated provider saw.
type ProviderReport struct {
	URL             string
	Requests        int64
	OK              int64
	TooManyRequests int64
	Errors          int64
	TokensCharged   int64
	// Utilization is the tokens admitted over what the quota allowed
	// during the run.
	Utilization float64
	// FleetPauses counts the 429s the worker pools saw, each of which paused
	// the fleet until the provider's Retry-After.
	FleetPauses int64
}

// InteractiveReport is what the interactive calls saw: the wait for the
// shared throttle, and the whole call.
type InteractiveReport struct {
	Calls, OK, Failed  int
	WaitP50, WaitP99   time.Duration
	TotalP50, TotalP99 time.Duration
}

// AllAccounted reports whether every enqueued job is finished or still
// unfinished: none lost, none counted twice.
func (r *Report) AllAccounted() bool {
	n := r.Unfinished
	for _, c := range r.Outcomes {
		n += c
	}
	return n == r.Enqueued
}

// shareTolerance is how far from its weight share a tenant's token share
// may be for SharesFollowWeights.
const shareTolerance = 0.05

// SmallTenantsOvertook reports whether the small tenants' jobs ran well
// before the import's backlog: their p95 wait under half of what the
// import's oldest queued job had waited at the stop.
func (r *Report) SmallTenantsOvertook() bool {
	return r.Small.N > 0 && r.ImportQueued > 0 && 2*r.Small.P95 < r.ImportOldest
}

// SharesFollowWeights reports whether, while the steady tenants were all
// backlogged, each one's share of their tokens was within shareTolerance of
// its weight share.
func (r *Report) SharesFollowWeights() bool {
	if len(r.Shares) == 0 {
		return false
	}
	for _, s := range r.Shares {
		if s.Share < s.WeightShare-shareTolerance || s.Share > s.WeightShare+shareTolerance {
			return false
		}
	}
	return true
}

// ExpiredUnspent reports whether jobs expired, were recorded, and the
// provider charged none of them.
func (r *Report) ExpiredUnspent() bool { return r.Expired > 0 && r.ExpiredCharged == 0 }

func verdict(ok bool) string {
	if ok {
		return "held"
	}
	return "NOT held"
}

// Tenant returns the named tenant's report.
func (r *Report) Tenant(name string) (TenantReport, bool) {
	for _, t := range r.Tenants {
		if t.Name == name {
			return t, true
		}
	}
	return TenantReport{}, false
}

// Print writes the final report.
func (r *Report) Print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	ran := r.Stop.Sub(r.Start).Round(100 * time.Millisecond)
	how := ""
	if r.Early {
		how = ", stopped early"
	}
	p("")
	p("batchq demo: final report (%s at speed %s%s; database %s)", ran, speedText(r.Speed), how, r.Database)
	p("")
	check := "every job accounted for"
	if !r.AllAccounted() {
		check = "MISMATCH: jobs unaccounted for"
	}
	p("Jobs     %s enqueued = %s succeeded + %s failed + %s expired + %s still queued at the stop  (%s)",
		count(r.Enqueued), count(r.Outcomes["succeeded"]), count(r.Outcomes["failed"]+r.Outcomes["discarded"]), count(r.Outcomes["expired"]),
		count(r.Unfinished), check)
	p("")
	p("  tenant    role       weight  enqueued     done  expired  queued     tokens  claimed after p50 / p95")
	for _, t := range r.Tenants {
		p("  %-9s %-9s %7s %9s %8s %8s %7s %10s  %9s / %s", t.Name, t.Role, weightText(t.Weight), count(t.Enqueued),
			count(t.Done), count(t.Expired), count(t.Waiting), count(t.Tokens), dur(t.Waits.P50), dur(t.Waits.P95))
	}
	p("")

	p("1. Small tenants did not wait behind the import's backlog: %s.", verdict(r.SmallTenantsOvertook()))
	if r.Small.N == 0 {
		p("   No small tenant's job arrived before the stop.")
	} else {
		p("   %d jobs of %d small tenants waited p50 %s, p95 %s, max %s from enqueue to claim.",
			r.Small.N, len(smallTenants), dur(r.Small.P50), dur(r.Small.P95), dur(r.Small.Max))
	}
	p("   The import (%s) had %s jobs queued at the stop; its oldest had waited %s.",
		importTenant, count(r.ImportQueued), dur(r.ImportOldest))
	if r.FIFO.N > 0 {
		p("   One FIFO queue at the same throughput (%s tokens/s) would have kept them waiting",
			count(int64(r.ThroughputRate)))
		p("   p50 %s, p95 %s behind the work queued ahead of them.", dur(r.FIFO.P50), dur(r.FIFO.P95))
	}
	p("")

	p("2. Tokens followed the weights while %s were all backlogged: %s.",
		strings.Join(namesOf(r.Shares), ", "), verdict(r.SharesFollowWeights()))
	p("   From %s to %s (%s); each share within %.0f points of the weight share:",
		clock(r.Backlogged.From.Sub(r.Start)), clock(r.Backlogged.To.Sub(r.Start)), dur(r.Backlogged.Length()),
		100*shareTolerance)
	p("   tenant    weight     tokens   share  weight share")
	for _, s := range r.Shares {
		p("   %-9s %6s %10s  %5.1f%%  %5.1f%%", s.Tenant, weightText(s.Weight), count(s.Tokens), 100*s.Share, 100*s.WeightShare)
	}
	if total := r.OtherTokens + sumTokens(r.Shares); total > 0 {
		p("   (the other tenants spent %s tokens in that period, %.1f%% of all)", count(r.OtherTokens),
			100*float64(r.OtherTokens)/float64(total))
	}
	if t, ok := r.Tenant(reindexTenant); ok {
		if a, ok := r.Tenant(importTenant); ok && a.Done > 0 {
			p("   By cost, not by count: %s's jobs are about 10× smaller than %s's, so it ran %.1f× as many.",
				t.Name, a.Name, float64(t.Done)/float64(a.Done))
		}
	}
	p("")

	p("3. Jobs past their deadline were recorded and spent no quota: %s.", verdict(r.ExpiredUnspent()))
	p("   %s asked for %d digests due in %s, more than its share could run in time; %d ran in time.",
		digestTenant, r.Digests, dur(r.DigestTTL), r.DigestsInTime)
	p("   %s jobs expired and were recorded as outcomes 'expired'; the provider charged %d of them,",
		count(r.Expired), r.ExpiredCharged)
	p("   so the %s tokens they would have cost were not spent.", count(r.ExpiredTokens))
	p("")

	pv := r.Provider
	p("4. The quota: %s tokens and %s requests per %s, a token bucket; 20%% reserved for interactive calls.",
		count(int64(providerTokens)), count(int64(providerRequests)), dur(scale(providerWindow, r.Speed)))
	p("   The provider answered %s requests: %s × 200, %s × 429, %s errors; %s tokens charged,",
		count(pv.Requests), count(pv.OK), count(pv.TooManyRequests), count(pv.Errors), count(pv.TokensCharged))
	p("   %.0f%% of what the quota allowed. 429s seen by the fleet, each pausing it until the reset: %d.",
		100*pv.Utilization, pv.FleetPauses)
	p("")

	in := r.Interactive
	p("5. Interactive: %d calls through the shared throttle, %d answered 200, %d failed.", in.Calls, in.OK, in.Failed)
	p("   Waiting for the throttle: p50 %s, p99 %s; whole call: p50 %s, p99 %s.",
		dur(in.WaitP50), dur(in.WaitP99), dur(in.TotalP50), dur(in.TotalP99))
	p("")
	if r.WorkerErrors > 0 {
		p("Worker errors: %d (last: %s)", r.WorkerErrors, r.LastWorkerErr)
		p("")
	}
	if r.Chart != "" {
		p("Chart: %s (each tenant's share of the tokens over time)", r.Chart)
	}
	if r.DatabaseURL != "" {
		p("The database is kept for a look: batchq --database-url '%s' report tenants", r.DatabaseURL)
	} else {
		p("The database %s is kept for a look: batchq --database-url <its URL> report tenants", r.Database)
	}
}

func namesOf(rows []ShareRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Tenant
	}
	return out
}

func sumTokens(rows []ShareRow) int64 {
	var n int64
	for _, r := range rows {
		n += r.Tokens
	}
	return n
}

// count formats n with thousands separators.
func count[T int | int64](n T) string {
	s := fmt.Sprint(int64(n))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// dur formats a duration for people: 0.42s, 3.1s, 2m05s.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + dur(-d)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d < 100*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// clock formats an offset from the start as m:ss.s.
func clock(d time.Duration) string {
	return fmt.Sprintf("%d:%04.1f", int(d.Minutes()), d.Seconds()-60*float64(int(d.Minutes())))
}

func weightText(w float64) string { return strings.TrimSuffix(fmt.Sprintf("%.2f", w), ".00") }

func speedText(s float64) string { return strings.TrimSuffix(fmt.Sprintf("%.2f", s), ".00") + "×" }

// scale turns a story duration into wall-clock time at speed.
func scale(d time.Duration, speed float64) time.Duration {
	return time.Duration(float64(d) / speed)
}
