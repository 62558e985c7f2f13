package demo

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

// at is t0 plus seconds.
func at(seconds float64) time.Time {
	return t0.Add(time.Duration(math.Round(seconds*1e6)) * time.Microsecond)
}

func secs(ss ...float64) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = time.Duration(math.Round(s*1e6)) * time.Microsecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ten := secs(10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
	for _, tc := range []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one value", secs(3), 99, 3 * time.Second},
		{"median of ten is the fifth", ten, 50, 5 * time.Second},
		{"p95 of ten is the largest", ten, 95, 10 * time.Second},
		{"p90 of ten is the ninth", ten, 90, 9 * time.Second},
		{"p10 of ten is the smallest", ten, 10, time.Second},
		{"p1 never goes below the smallest", ten, 1, time.Second},
		{"p99 of a hundred is the 99th", func() []time.Duration {
			var ds []time.Duration
			for i := 100; i >= 1; i-- {
				ds = append(ds, time.Duration(i)*time.Millisecond)
			}
			return ds
		}(), 99, 99 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.ds)
			require.Equal(t, tc.want, percentile(tc.ds, tc.p))
			require.Equal(t, in, tc.ds, "percentile must not reorder its input")
		})
	}
}

func TestSpans(t *testing.T) {
	t.Parallel()
	t.Run("union merges overlapping and touching spans", func(t *testing.T) {
		got := union([]Span{{at(5), at(6)}, {at(0), at(2)}, {at(1), at(3)}, {at(3), at(4)}})
		require.Equal(t, []Span{{at(0), at(4)}, {at(5), at(6)}}, got)
	})
	t.Run("intersect keeps what both cover", func(t *testing.T) {
		a := []Span{{at(0), at(4)}, {at(6), at(10)}}
		b := []Span{{at(1), at(7)}, {at(9), at(12)}}
		require.Equal(t, []Span{{at(1), at(4)}, {at(6), at(7)}, {at(9), at(10)}}, intersect(a, b))
		require.Empty(t, intersect(a, nil))
	})
	t.Run("longest picks the longest, the earliest of equals", func(t *testing.T) {
		s, ok := longest([]Span{{at(0), at(2)}, {at(3), at(6)}, {at(7), at(10)}})
		require.True(t, ok)
		require.Equal(t, Span{at(3), at(6)}, s)
		_, ok = longest(nil)
		require.False(t, ok)
	})
}

func TestBacklogSpans(t *testing.T) {
	t.Parallel()
	stop := at(20)
	jobs := []jobRecord{
		{ID: 1, Tenant: "a", Enqueued: at(0), Claimed: at(2), Outcome: "succeeded"},
		{ID: 2, Tenant: "a", Enqueued: at(1), Claimed: at(4), Outcome: "succeeded"},
		// Dropped at its deadline without running: waited until then.
		{ID: 3, Tenant: "a", Enqueued: at(6), Finished: at(8), Outcome: "expired"},
		// Still queued at the stop: waiting until the stop.
		{ID: 4, Tenant: "a", Enqueued: at(15)},
		{ID: 5, Tenant: "b", Enqueued: at(0)},
	}
	require.Equal(t, []Span{{at(0), at(4)}, {at(6), at(8)}, {at(15), at(20)}}, backlogSpans(jobs, "a", stop))
	require.Equal(t, []Span{{at(0), at(20)}}, backlogSpans(jobs, "b", stop))

	w, ok := allBacklogged(jobs, []string{"a", "b"}, stop)
	require.True(t, ok)
	require.Equal(t, Span{at(15), at(20)}, w, "the longest period both had work waiting")
}

func TestSharesIn(t *testing.T) {
	t.Parallel()
	jobs := []jobRecord{
		{Tenant: "big", Cost: 3000, Outcome: "succeeded", Claimed: at(1)},
		{Tenant: "big", Cost: 3000, Outcome: "failed", Claimed: at(2)}, // failed at the provider: charged
		{Tenant: "one", Cost: 2000, Outcome: "succeeded", Claimed: at(3)},
		{Tenant: "big", Cost: 9000, Outcome: "succeeded", Claimed: at(12)}, // after the window
		{Tenant: "one", Cost: 5000, Outcome: "expired", Finished: at(4)},   // never ran
		{Tenant: "one", Cost: 5000, Claimed: at(5)},                        // handed back unfinished
		{Tenant: "small", Cost: 1000, Outcome: "succeeded", Claimed: at(5)},
	}
	rows, others := sharesIn(jobs, Span{at(0), at(10)}, []string{"big", "one"}, map[string]float64{"big": 3, "one": 1})
	require.Equal(t, int64(1000), others)
	require.Equal(t, []ShareRow{
		{Tenant: "big", Weight: 3, Tokens: 6000, Share: 0.75, WeightShare: 0.75},
		{Tenant: "one", Weight: 1, Tokens: 2000, Share: 0.25, WeightShare: 0.25},
	}, rows)

	rows, _ = sharesIn(nil, Span{at(0), at(10)}, []string{"big"}, map[string]float64{"big": 3})
	require.Zero(t, rows[0].Share, "no tokens: no share, not NaN")
}

func TestThroughput(t *testing.T) {
	t.Parallel()
	jobs := []jobRecord{
		{Cost: 1000, Outcome: "succeeded", Claimed: at(1)},
		{Cost: 3000, Outcome: "succeeded", Claimed: at(3)},
		{Cost: 7000, Outcome: "expired"},
	}
	require.InDelta(t, 400.0, throughput(jobs, Span{at(0), at(10)}), 1e-9)
	require.Zero(t, throughput(jobs, Span{at(5), at(5)}))
}

func TestFIFOWaits(t *testing.T) {
	t.Parallel()
	jobs := []jobRecord{
		{ID: 1, Cost: 1000, Enqueued: at(0), Claimed: at(0.5), Outcome: "succeeded"},
		{ID: 2, Cost: 2000, Enqueued: at(1), Claimed: at(9), Outcome: "succeeded"},
		{ID: 3, Cost: 4000, Enqueued: at(1), Finished: at(5), Outcome: "expired"}, // not work ahead
		{ID: 4, Cost: 500, Enqueued: at(1.5), Claimed: at(2), Outcome: "succeeded"},
		{ID: 5, Cost: 300, Enqueued: at(3)},
	}
	// Job 4 arrives behind jobs 1 and 2 (3,000 tokens), of which job 1 (1,000)
	// had started: 2,000 tokens at 100 a second. Job 5 arrives behind 1, 2 and
	// 4, of which 1 and 4 had started: job 2's 2,000 tokens.
	got := fifoWaits(jobs, []jobRecord{jobs[3], jobs[4]}, 100)
	require.Equal(t, secs(20, 20), got)
	require.Nil(t, fifoWaits(jobs, jobs, 0))
}

func TestWaits(t *testing.T) {
	t.Parallel()
	jobs := []jobRecord{
		{Enqueued: at(0), Claimed: at(2), Outcome: "succeeded"},
		{Enqueued: at(5)}, // still waiting at the stop: a lower bound
		{Enqueued: at(1), Finished: at(3), Outcome: "expired"}, // never claimed, not waiting
		{Enqueued: at(4), Claimed: at(6)},                      // claimed, handed back, waiting again
	}
	require.Equal(t, secs(2, 5, 6), waits(jobs, at(10)))
}

func TestShareSeries(t *testing.T) {
	t.Parallel()
	jobs := []jobRecord{
		{Tenant: "a", Cost: 300, Outcome: "succeeded", Claimed: at(0.5)},
		{Tenant: "b", Cost: 100, Outcome: "succeeded", Claimed: at(0.7)},
		{Tenant: "c", Cost: 600, Outcome: "succeeded", Claimed: at(2.5)},
		{Tenant: "a", Cost: 900, Outcome: "expired", Finished: at(2.6)},
	}
	got := shareSeries(jobs, map[string][]string{"a": {"a"}, "rest": {"b", "c"}}, at(0), at(4), 2*time.Second, time.Second)
	// At 1s and 2s the window holds a's 300 and b's 100; at 3s, c's 600
	// alone; at 4s, c's 600 still. Expired jobs spent nothing.
	require.Equal(t, []point{{X: 1, Y: 75}, {X: 2, Y: 75}, {X: 3, Y: 0}, {X: 4, Y: 0}}, got["a"])
	require.Equal(t, []point{{X: 1, Y: 25}, {X: 2, Y: 25}, {X: 3, Y: 100}, {X: 4, Y: 100}}, got["rest"])

	empty := shareSeries(nil, map[string][]string{"a": {"a"}}, at(0), at(4), time.Second, time.Second)
	require.Empty(t, empty["a"], "windows that spent nothing are left out")
}

func TestBuildReport(t *testing.T) {
	t.Parallel()
	st := story{Tenants: []tenantPlan{
		{Name: importTenant, Role: roleImport, Weight: 1, Steady: true},
		{Name: planTenant, Role: rolePlan, Weight: 3, Steady: true},
		{Name: digestTenant, Role: roleDigest, Weight: 1},
		{Name: "bakery", Role: roleSmall, Weight: 1},
	}}
	jobs := []jobRecord{
		{ID: 1, Tenant: importTenant, Cost: 1000, Enqueued: at(0), Claimed: at(1), Finished: at(2), Outcome: "succeeded"},
		{ID: 2, Tenant: importTenant, Cost: 1000, Enqueued: at(0)},
		{ID: 3, Tenant: importTenant, Cost: 1000, Enqueued: at(2)},
		{ID: 4, Tenant: planTenant, Cost: 1500, Enqueued: at(0), Claimed: at(1), Finished: at(2), Outcome: "succeeded"},
		{ID: 5, Tenant: planTenant, Cost: 1500, Enqueued: at(0), Claimed: at(3), Finished: at(4), Outcome: "succeeded"},
		{ID: 6, Tenant: planTenant, Cost: 1500, Enqueued: at(0)},
		{ID: 7, Tenant: digestTenant, Cost: 800, Enqueued: at(2), Claimed: at(3), Finished: at(4), Outcome: "succeeded"},
		{ID: 8, Tenant: digestTenant, Cost: 900, Enqueued: at(2), Finished: at(5), Outcome: "expired"},
		{ID: 9, Tenant: digestTenant, Cost: 700, Enqueued: at(2), Finished: at(5), Outcome: "expired"},
		{ID: 10, Tenant: "bakery", Cost: 500, Enqueued: at(4), Claimed: at(4.5), Finished: at(5), Outcome: "succeeded"},
		{ID: 11, Tenant: "bakery", Cost: 500, Enqueued: at(8), Claimed: at(8.2), Finished: at(9), Outcome: "failed"},
	}
	calls := []call{
		{asked: at(1), sent: at(1), done: at(1.2), status: http.StatusOK},
		{asked: at(2), sent: at(2.5), done: at(2.7), status: http.StatusOK},
		{asked: at(3), done: at(5)}, // the throttle never admitted it
	}
	rep := buildReport(st, runData{
		Jobs: jobs, Start: at(0), Stop: at(10), Enqueued: len(jobs), Calls: calls, Charged: map[int64]bool{9: true},
	})

	require.True(t, rep.AllAccounted())
	require.Equal(t, map[string]int{"succeeded": 5, "failed": 1, "expired": 2}, rep.Outcomes)
	require.Equal(t, 3, rep.Unfinished)
	rep.Enqueued++
	require.False(t, rep.AllAccounted(), "a job enqueued but in neither table is a mismatch")

	imp, ok := rep.Tenant(importTenant)
	require.True(t, ok)
	require.Equal(t, TenantReport{
		Name: importTenant, Role: roleImport, Weight: 1, Enqueued: 3, Done: 1, Waiting: 2, Tokens: 1000,
		Waits: Waits{N: 1, P50: time.Second, P95: time.Second, Max: time.Second},
	}, imp)
	require.Equal(t, 2, rep.ImportQueued)
	require.Equal(t, 10*time.Second, rep.ImportOldest)

	require.Equal(t, Waits{N: 2, P50: 200 * time.Millisecond, P95: 500 * time.Millisecond, Max: 500 * time.Millisecond}, rep.Small)
	require.Equal(t, 2, rep.Expired)
	require.Equal(t, int64(1600), rep.ExpiredTokens)
	require.Equal(t, 1, rep.ExpiredCharged)
	require.Equal(t, 3, rep.Digests)
	require.Equal(t, 1, rep.DigestsInTime)

	// Both steady tenants had work waiting throughout: the import from 0 to
	// the stop (job 2), globex too (job 6).
	require.Equal(t, Span{at(0), at(10)}, rep.Backlogged)
	require.Len(t, rep.Shares, 2)
	require.Equal(t, int64(1000), rep.Shares[0].Tokens)
	require.Equal(t, int64(3000), rep.Shares[1].Tokens)
	require.InDelta(t, 0.75, rep.Shares[1].WeightShare, 1e-9)
	require.Equal(t, int64(800+500+500), rep.OtherTokens)

	require.Equal(t, InteractiveReport{
		Calls: 3, OK: 2, Failed: 1,
		WaitP50: 500 * time.Millisecond, WaitP99: 2 * time.Second,
		TotalP50: 700 * time.Millisecond, TotalP99: 2 * time.Second,
	}, rep.Interactive)
}

func TestNewStory(t *testing.T) {
	t.Parallel()
	length := time.Minute
	s := newStory(length, 1)
	require.Equal(t, s, newStory(length, 1), "the same seed tells the same story")
	require.NotEqual(t, s, newStory(length, 2))

	require.True(t, slices.IsSortedFunc(s.Arrivals, func(a, b arrival) int { return int(a.At - b.At) }))
	jobs := map[string]int{}
	for _, a := range s.Arrivals {
		require.GreaterOrEqual(t, a.At, time.Duration(0))
		require.Less(t, a.At, length, "everything arrives before the end")
		_, ok := s.tenant(a.Tenant)
		require.True(t, ok, "arrival of unknown tenant %s", a.Tenant)
		jobs[a.Tenant] += len(a.Jobs)
		for _, j := range a.Jobs {
			require.Positive(t, j.Cost)
			if a.Tenant == digestTenant {
				require.Equal(t, s.DigestTTL, j.TTL)
				require.Less(t, a.At+j.TTL, length, "the digests expire before the end")
			} else {
				require.Zero(t, j.TTL)
			}
		}
	}
	require.Equal(t, importJobs, jobs[importTenant])
	require.Equal(t, digestJobs, jobs[digestTenant])
	for _, name := range smallTenants {
		require.Positive(t, jobs[name])
		require.LessOrEqual(t, jobs[name], smallVisits*smallMaxJobs)
	}
	// The steady tenants' backlogs outlast the run at their fair share of
	// what the quota lets batch work spend.
	rate := float64(providerTokens) / providerWindow.Seconds() * (1 - reserve)
	require.Greater(t, float64(jobs[planTenant])*600, 0.6*rate*length.Seconds())
	require.Greater(t, float64(jobs[reindexTenant])*100, 0.2*rate*length.Seconds())
	require.Equal(t, []string{importTenant, planTenant, reindexTenant}, s.steady())
	require.Equal(t, s.jobCount(), jobs[importTenant]+jobs[planTenant]+jobs[reindexTenant]+jobs[digestTenant]+
		func() int {
			n := 0
			for _, name := range smallTenants {
				n += jobs[name]
			}
			return n
		}())
}

func TestDatabaseURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/batchq_demo?sslmode=disable",
		databaseURL("postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "batchq_demo"))
	require.Equal(t, "postgres://app:xxxxx@db:5432/batchq_demo", databaseURL("postgres://app:secret@db:5432", "batchq_demo"))
	require.Empty(t, databaseURL("host=db dbname=app", "batchq_demo"), "not a URL: nothing to show")
}

func TestLiveLinesFitEightyColumns(t *testing.T) {
	t.Parallel()
	// The widest numbers a run of up to an hour gets near.
	v := liveView{
		Elapsed: 59*time.Minute + 59*time.Second, Total: time.Hour, Speed: 12.5, Enqueued: 999_999,
		Window: 5 * time.Second, Limit: providerTokens, Left: providerTokens - 1, Paused: 59 * time.Second,
		TooMany: 99_999, Calls: 99_999, CallsOK: 99_999, CallWait: 59 * time.Second,
		Errors: 99_999, LastErr: strings.Repeat("the database went away ", 10),
	}
	v.Rows = append(v.Rows, liveRow{Name: "initech", Role: roleReindex, Weight: 2.5})
	v.Rows[0].Done, v.Rows[0].Waiting, v.Rows[0].Expired, v.Rows[0].Tokens = 99_999, 10_000, 9_999, 99_999_999
	v.Rows[0].RecentTokens, v.Rows[0].WaitP95Seconds = 1, 3599
	for _, l := range v.lines() {
		require.LessOrEqual(t, utf8.RuneCountInString(l), 80, "%q", l)
	}
}

func TestVerdicts(t *testing.T) {
	t.Parallel()
	held := Report{
		Small: Waits{N: 10, P95: 2 * time.Second}, ImportQueued: 4000, ImportOldest: 5 * time.Second,
		Shares:  []ShareRow{{Share: 0.62, WeightShare: 0.6}, {Share: 0.16, WeightShare: 0.2}, {Share: 0.22, WeightShare: 0.2}},
		Expired: 30,
	}
	require.True(t, held.SmallTenantsOvertook())
	require.True(t, held.SharesFollowWeights())
	require.True(t, held.ExpiredUnspent())

	slow := held
	slow.Small.P95 = 3 * time.Second
	require.False(t, slow.SmallTenantsOvertook(), "p95 over half the import's oldest wait")
	none := held
	none.Small = Waits{}
	require.False(t, none.SmallTenantsOvertook(), "no small job: nothing shown")

	skewed := held
	skewed.Shares = []ShareRow{{Share: 0.66, WeightShare: 0.6}, {Share: 0.14, WeightShare: 0.2}, {Share: 0.2, WeightShare: 0.2}}
	require.False(t, skewed.SharesFollowWeights())
	empty := held
	empty.Shares = nil
	require.False(t, empty.SharesFollowWeights(), "no backlogged period: nothing shown")

	charged := held
	charged.ExpiredCharged = 1
	require.False(t, charged.ExpiredUnspent())
	noneExpired := held
	noneExpired.Expired = 0
	require.False(t, noneExpired.ExpiredUnspent())
}

func TestTicks(t *testing.T) {
	t.Parallel()
	labels := func(lo, hi float64, n int) []string {
		var out []string
		for _, tk := range ticks(lo, hi, n) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	require.Equal(t, []string{"0", "10", "20", "30", "40", "50", "60"}, labels(0, 60, 6))
	require.Equal(t, []string{"0", "10", "20", "30", "40", "50"}, labels(0, 58.3, 6), "no tick past the end")
	require.Equal(t, []string{"0", "20", "40", "60", "80", "100"}, labels(0, 100, 5))
	require.Equal(t, []string{"0", "5", "10"}, labels(0, 12.4, 6))
	require.Equal(t, []string{"0", "2", "4", "6", "8", "10", "12"}, labels(0, 12, 6))
	require.Empty(t, ticks(5, 5, 6))
}
