package benchkit

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/drr"
	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// A window in which one tenant got nothing reads as unfair, and what
// --show-windows prints for it names that tenant with 0 tokens.
func TestWindowJainShowsWhoALowWindowStarved(t *testing.T) {
	var claims []floodClaim
	add := func(tenant string) {
		claims = append(claims, floodClaim{seq: int64(len(claims) + 1), tenant: tenant, cost: 10})
	}
	for range 4 {
		add("a") // a alone first: b has arrived but is not served
	}
	for range 4 {
		add("a")
		add("b")
	}
	// Windows of 2 rounds of quantum 10 for 2 tenants: 40 tokens, moving by 20.
	got := windowJain(claims, 0, 2, 10, 2)
	jains := make([]float64, len(got))
	for i, w := range got {
		jains[i] = w.jain
	}
	require.InDeltaSlice(t, []float64{0.5, 0.8, 1, 1}, jains, 1e-9)
	require.Equal(t, map[string]int64{"a": 40}, got[0].tokens)
	require.Equal(t, "window 1 of 4 (claims 0..3): Jain 0.5000; tokens big=0 a=40 b=0",
		got[0].describe(1, len(got), []string{"big", "a", "b"}))
	require.Equal(t, "window 2 of 4 (claims 2..5): Jain 0.8000; tokens a=30 b=10",
		got[1].describe(2, len(got), []string{"a", "b"}))

	// The claims made before every tenant had arrived are not measured.
	require.Len(t, windowJain(claims, 4, 2, 10, 2), 2)
	require.Equal(t, []string{"big", "small-00", "small-01"}, tenantNames(true, 2))
	require.Equal(t, []string{"small-00"}, tenantNames(false, 1))
}

// The small tenants arrive together: each in a transaction of its own, all
// committed once every one has inserted, so no tenant is served alone while
// another's insert is still running. When one tenant's enqueue is refused,
// no tenant's jobs are committed, and the refusal is the error.
func TestFloodArrivalCommitsTogetherOrNotAtAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, err := OpenEnv(ctx, pgtest.URL(t), 4)
	require.NoError(t, err)
	t.Cleanup(env.Close)
	require.NoError(t, env.reset(ctx, queue.QueueConfig{}))
	count := func(system string) (n int) {
		table := map[string]string{SystemFair: "batchq.jobs", SystemFIFO: "batchq_fifo.jobs"}[system]
		require.NoError(t, env.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	cfg := FloodConfig{SmallTenants: 3, SmallJobs: 10, MaxCost: 10}
	rng := rand.New(rand.NewPCG(1, 2))

	require.NoError(t, env.Client.SetTenant(ctx, queue.Tenant{Name: smallTenant(1), Weight: 1, MaxQueued: 5}))
	ms, err := arrive(ctx, env, cfg, SystemFair, rng)
	require.ErrorIs(t, err, queue.ErrQueueFull)
	require.NotErrorIs(t, err, errArrivalAbandoned)
	require.Empty(t, ms)
	require.Zero(t, count(SystemFair), "no tenant's jobs are committed")

	require.NoError(t, env.Client.SetTenant(ctx, queue.Tenant{Name: smallTenant(1), Weight: 1}))
	for _, system := range []string{SystemFair, SystemFIFO} {
		ms, err := arrive(ctx, env, cfg, system, rng)
		require.NoError(t, err)
		require.Len(t, ms, 3)
		for _, v := range ms {
			require.Positive(t, v)
		}
		require.Equal(t, 30, count(system), system)
	}
}

// exactOrder replays the claims after the arrival in the exact fair order:
// from one claimer, as package drr orders them, and a fair order scores at
// least the bar in every window; with claims in flight, each claim's jobs
// stay together and come back no further than the claims in flight from
// their place, the jobs are the same, and the windows cut in that order
// can fall below the bar although the order is exact.
func TestExactOrderIsTheFairOrderAsClaimsInFlightReturnIt(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	const quantum, tenants = 1000, 21
	// Recorded claims in a shuffled order: the import's backlog first, then
	// twenty tenants of 1,000 jobs each.
	var claims []floodClaim
	add := func(tenant string) {
		claims = append(claims, floodClaim{seq: int64(len(claims)) + 1, tenant: tenant, cost: 1 + rng.Int64N(1000)})
	}
	for range 1000 {
		add(floodBig)
	}
	from := int64(len(claims))
	for range 20000 {
		add(floodBig)
	}
	for i := range 20000 {
		add(fmt.Sprintf("small-%02d", i%20))
	}
	tail := claims[from:]
	rng.Shuffle(len(tail), func(i, j int) { tail[i], tail[j] = tail[j], tail[i] })

	lowestWindow := func(claims []floodClaim) float64 {
		ws := windowJain(claims, from, tenants, quantum, 10)
		require.NotEmpty(t, ws)
		jains := make([]float64, len(ws))
		for i, w := range ws {
			jains[i] = w.jain
		}
		return lowest(jains)
	}

	alone := exactOrder(claims, from, quantum, 1, 10, rng)
	require.Len(t, alone, len(claims))
	require.Equal(t, claims[:from], alone[:from], "the claims before the arrival stay as they were")
	q, err := drr.New[struct{}](drr.Config{Quantum: quantum, MaxPerTenant: 1 << 30})
	require.NoError(t, err)
	for _, c := range tail {
		require.NoError(t, q.Enqueue(drr.Job[struct{}]{Tenant: c.tenant, Cost: c.cost}))
	}
	for i, c := range alone[from:] {
		j, ok := q.Dequeue(nil)
		require.True(t, ok)
		require.Equal(t, floodClaim{seq: from + int64(i) + 1, tenant: j.Tenant, cost: j.Cost}, c, "job %d of the exact order", i)
	}
	require.GreaterOrEqual(t, lowestWindow(alone), floodJainBar, "the exact order from one claimer")

	inFlight := exactOrder(claims, from, quantum, 8, 10, rng)
	require.Len(t, inFlight, len(claims))
	require.Equal(t, claims[:from], inFlight[:from], "the claims before the arrival stay as they were")
	// Each run of ten is a claim of the exact order, every claim comes back
	// once, and none further than the eight claims in flight from its place.
	key := func(jobs []floodClaim) string {
		var b strings.Builder
		for _, j := range jobs {
			fmt.Fprintf(&b, "%s:%d ", j.tenant, j.cost)
		}
		return b.String()
	}
	places := map[string][]int{}
	exact := alone[from:]
	for c := 0; c*10 < len(exact); c++ {
		k := key(exact[c*10 : min(c*10+10, len(exact))])
		places[k] = append(places[k], c)
	}
	got := inFlight[from:]
	moved := 0
	for c := 0; c*10 < len(got); c++ {
		require.Equal(t, from+int64(c*10)+1, got[c*10].seq, "seq follows the order")
		k := key(got[c*10 : min(c*10+10, len(got))])
		ps := places[k]
		require.NotEmpty(t, ps, "claim %d in flight is a claim of the exact order", c)
		at := slices.IndexFunc(ps, func(p int) bool { return abs(p-c) <= 8 })
		require.GreaterOrEqual(t, at, 0, "claim %d came back within 8 claims of its place (exact places %v)", c, ps)
		if ps[at] != c {
			moved++
		}
		places[k] = slices.Delete(ps, at, at+1)
	}
	require.Positive(t, moved, "claims in flight come back out of order")
	require.Less(t, lowestWindow(inFlight), floodJainBar, "eight claims of ten in flight, windows of 10 rounds")
}

func abs(n int) int { return max(n, -n) }

// A repetition that measured no window has NaN for its lowest; the lowest
// over repetitions passes over it, wherever it comes.
func TestLowestPassesOverWhatWasNotMeasured(t *testing.T) {
	nan := math.NaN()
	require.Equal(t, 0.5, lowest([]float64{0.9, nan, 0.5, nan}))
	require.Equal(t, 0.5, lowest([]float64{nan, 0.5, 0.7}))
	require.True(t, math.IsNaN(lowest([]float64{nan, nan})))
	require.True(t, math.IsNaN(lowest(nil)))
}
