package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// The console's backlog comes from the fair order's ledger rather than a
// scan of the jobs: its tokens must equal the jobs' costs however the
// backlog changed (claims, a cancel and an expiry inside it, before and
// after maintenance folds their refunds, a weight change), and its job
// counts must be exact up to ExactCountLimit.
func TestConsoleBacklogMatchesTheJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	var ids []int64
	for i := range 30 {
		ids = append(ids, b.enqueue(t, []string{"a", "b", "c"}[i%3], int64(10+i*7)))
	}
	_, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 4})
	require.NoError(t, err)

	check := func(when string) {
		t.Helper()
		rows, err := b.client.TenantShares(b.ctx, b.queue, time.Now().Add(-time.Hour), time.Now().Add(time.Minute), 2)
		require.NoError(t, err)
		require.Len(t, rows, 3, when)
		var tokens, jobs int64
		for _, r := range rows {
			require.True(t, r.QueuedExact, when)
			tokens += r.QueuedTokens
			jobs += r.QueuedJobs
			if r.Tenant != "" {
				require.Equal(t, b.scalar(t, `SELECT coalesce(sum(cost), 0) FROM batchq.jobs WHERE tenant = $1 AND state = 'queued'`, r.Tenant),
					r.QueuedTokens, "%s: tokens of %s", when, r.Tenant)
				require.Equal(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = $1 AND state = 'queued'`, r.Tenant),
					r.QueuedJobs, "%s: jobs of %s", when, r.Tenant)
				require.Equal(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = $1 AND state = 'running'`, r.Tenant),
					r.RunningJobs, "%s: running jobs of %s", when, r.Tenant)
			}
		}
		require.Equal(t, b.scalar(t, `SELECT sum(cost) FROM batchq.jobs WHERE state = 'queued'`), tokens, when)
		require.Equal(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`), jobs, when)
		qs, err := b.client.QueueSummaries(b.ctx)
		require.NoError(t, err)
		require.Len(t, qs, 1)
		require.Equal(t, tokens, qs[0].QueuedTokens, when)
		require.Equal(t, jobs, qs[0].QueuedJobs, when)
		require.True(t, qs[0].QueuedExact, when)
		require.Equal(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'running'`), qs[0].RunningJobs, when)
		bl, exact, err := b.client.TenantBacklog(b.ctx, b.queue, "a")
		require.NoError(t, err)
		require.True(t, exact)
		require.Equal(t, b.scalar(t, `SELECT coalesce(sum(cost), 0) FROM batchq.jobs WHERE tenant = 'a' AND state = 'queued'`), bl.QueuedTokens, when)
		require.Equal(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'a' AND state = 'queued'`), bl.QueuedJobs, when)
	}
	check("after claims")

	// A cancel and an expiry from inside the backlogs, whose refunds wait
	// for maintenance.
	require.NoError(t, b.client.Cancel(b.ctx, ids[18], "test")) // a's
	b.expire(t, ids[22])                                        // b's
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.NoError(t, b.client.Cancel(b.ctx, ids[24], "test")) // a's, not folded yet
	require.NotZero(t, b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments WHERE tenant = 'a'`), "a refund waits to be folded")
	check("with a refund pending")
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	check("after maintenance")

	// A new weight re-keys the tenant's backlog.
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "c", Weight: 4}))
	check("after a weight change")

	// An unknown queue has no tenants; the top is at least one.
	rows, err := b.client.TenantShares(b.ctx, "nope", time.Now().Add(-time.Hour), time.Now(), 5)
	require.NoError(t, err)
	require.Empty(t, rows)
	_, err = b.client.TenantShares(b.ctx, b.queue, time.Now().Add(-time.Hour), time.Now(), 0)
	require.ErrorIs(t, err, queue.ErrInvalidSettings)
}

// Each 429 a quota key receives is counted once, however often the state
// is saved afterwards.
func TestRateLimitedCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	th, err := b.client.Throttle("p/m", throttle.Config{})
	require.NoError(t, err)
	since := time.Now().Add(-time.Minute)
	n, err := b.client.RateLimitedCounts(b.ctx, since)
	require.NoError(t, err)
	require.Empty(t, n)

	now := time.Now()
	require.NoError(t, th.TooManyRequests(b.ctx, now, now, 2*time.Second))
	require.NoError(t, th.TooManyRequests(b.ctx, now.Add(10*time.Millisecond), now.Add(10*time.Millisecond), 5*time.Second))
	// A 429 that asks for less than the pause already set moves nothing.
	require.NoError(t, th.TooManyRequests(b.ctx, now.Add(20*time.Millisecond), now.Add(20*time.Millisecond), time.Second))
	n, err = b.client.RateLimitedCounts(b.ctx, since)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"p/m": 2}, n)
	n, err = b.client.RateLimitedCounts(b.ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Empty(t, n)
}
