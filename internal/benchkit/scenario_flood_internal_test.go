package benchkit

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

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
