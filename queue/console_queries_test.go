package queue_test

import (
	"fmt"
	"math/rand/v2"
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

	// An unknown queue is refused, not shown as one without tenants; the
	// top is at least one.
	_, err = b.client.TenantShares(b.ctx, "nope", time.Now().Add(-time.Hour), time.Now(), 5)
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	_, err = b.client.TenantShares(b.ctx, b.queue, time.Now().Add(-time.Hour), time.Now(), 0)
	require.ErrorIs(t, err, queue.ErrInvalidSettings)
}

// The same, over random histories: after every step, each tenant's queued
// tokens from the ledger equal its queued jobs' costs, and its span is at
// least its queued jobs. The steps include what moves the ledger's tail
// without a queued job to show it: the last job a tenant enqueued cancelled,
// expired or released, with its refund pending or folded.
func TestConsoleBacklogFollowsRandomHistories(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0xc0de))
			b := setup(t, queue.QueueConfig{Quantum: []int64{1, 50, 1000}[rng.IntN(3)]})
			tenants := []string{"a", "b", "c", "d"}
			latest := map[string]int64{} // the last job each tenant enqueued
			var trace []string
			check := func() {
				t.Helper()
				rows, err := b.client.Backlog(b.ctx, b.queue) // the exact count, for the span's bound
				require.NoError(t, err)
				exact := map[string]queue.BacklogRow{}
				for _, r := range rows {
					exact[r.Tenant] = r
				}
				for _, tenant := range tenants {
					got, _, err := b.client.TenantBacklog(b.ctx, b.queue, tenant)
					require.NoError(t, err)
					require.Equal(t, b.scalar(t, `SELECT coalesce(sum(cost), 0) FROM batchq.jobs WHERE tenant = $1 AND state = 'queued'`, tenant),
						got.QueuedTokens, "tokens of %s after %v", tenant, trace)
					require.Equal(t, exact[tenant].QueuedJobs, got.QueuedJobs, "jobs of %s after %v", tenant, trace)
				}
				var span int64
				require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT coalesce(sum(queued_span), 0) FROM batchq.console_backlog($1, NULL)`, b.queue).Scan(&span))
				require.GreaterOrEqual(t, span, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`), "span after %v", trace)
			}
			queued := func(where string) (int64, bool) {
				var id int64
				err := b.pool.QueryRow(b.ctx, `SELECT id FROM batchq.jobs WHERE state = 'queued' `+where+` ORDER BY random() LIMIT 1`).Scan(&id)
				return id, err == nil
			}
			for range 120 {
				tenant := tenants[rng.IntN(len(tenants))]
				switch op := rng.IntN(10); {
				case op < 4:
					latest[tenant] = b.enqueue(t, tenant, 1+rng.Int64N(300))
					trace = append(trace, "enqueue "+tenant)
				case op < 6:
					jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 1 + rng.IntN(3)})
					require.NoError(t, err)
					for _, j := range jobs {
						switch rng.IntN(3) {
						case 0: // a correction of the ledger, pending until folded
							require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{ActualCost: 1 + rng.Int64N(600)}))
						case 1: // back to the end of the tenant's queue
							require.NoError(t, b.client.Release(b.ctx, j, 0))
						default:
							require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{}))
						}
					}
					trace = append(trace, fmt.Sprintf("claim %d", len(jobs)))
				case op < 7:
					// The tenant's tail if it is still queued, else any job.
					id, ok := latest[tenant], true
					if rng.IntN(2) == 0 || b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'queued'`, id) == 0 {
						id, ok = queued("")
					}
					if ok {
						require.NoError(t, b.client.Cancel(b.ctx, id, "test"))
						trace = append(trace, fmt.Sprint("cancel ", id))
					}
				case op < 8:
					if id, ok := queued(""); ok {
						b.expire(t, id)
						trace = append(trace, fmt.Sprint("expire ", id))
					}
				case op < 9:
					_, err := b.client.Maintain(b.ctx, b.queue)
					require.NoError(t, err)
					trace = append(trace, "maintain")
				default:
					w := []float64{0.5, 1, 2, 3}[rng.IntN(4)]
					require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: tenant, Weight: w}))
					trace = append(trace, fmt.Sprint("weight ", tenant, w))
				}
				check()
			}
		})
	}
}

// The overview counts each queue's queued jobs within the budget, in one
// statement for all of them, and marks each count exact.
func TestQueueSummariesCountEachQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for _, name := range []string{"other", "empty"} {
		require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: name}))
	}
	b.enqueueN(t, "a", 3, 10)
	b.enqueueN(t, "b", 2, 10)
	for range 4 {
		_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "other", Tenant: "c", Cost: 5})
		require.NoError(t, err)
	}
	last, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "other", Tenant: "c", Cost: 5})
	require.NoError(t, err)
	require.NoError(t, b.client.Cancel(b.ctx, last.ID, "test")) // the span counts it, the count does not
	qs, err := b.client.QueueSummaries(b.ctx)
	require.NoError(t, err)
	got := map[string][2]int64{}
	for _, q := range qs {
		require.True(t, q.QueuedExact, q.Name)
		got[q.Name] = [2]int64{q.QueuedJobs, q.QueuedTokens}
	}
	require.Equal(t, map[string][2]int64{"empty": {0, 0}, "other": {4, 20}, "q": {5, 50}}, got)
}

// ServedTokens puts each outcome in the step its finish falls in, counting
// from since, with the window's ends as [since, until); the tenants named
// get a row each and the rest one summed row, however often a name repeats.
func TestServedTokensBySteps(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	since := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	for _, o := range []struct {
		tenant string
		at     time.Duration // after since
		cost   int64
	}{
		{"a", 0, 1}, {"a", 9999 * time.Millisecond, 2}, {"a", 10 * time.Second, 4},
		{"b", 59999999 * time.Microsecond, 8}, {"c", 30 * time.Second, 16}, {"d", 31 * time.Second, 32},
		{"a", -time.Microsecond, 64}, {"a", time.Minute, 128}, // outside
	} {
		b.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts, max_attempts,
				deadline, enqueued_at, finished_at)
			VALUES ((SELECT coalesce(max(job_id), 0) + 1 FROM batchq.outcomes), $1, $2, 'k', 'succeeded', $3, 1, 1,
				$4::timestamptz + interval '1 day', $4, $4)`, b.queue, o.tenant, o.cost, since.Add(o.at))
	}
	got, err := b.client.ServedTokens(b.ctx, b.queue, since, since.Add(time.Minute), 10*time.Second, []string{"b", "a", "b"})
	require.NoError(t, err)
	require.Equal(t, []queue.ShareSample{
		{Step: 0, Tenant: "a", Tokens: 3}, {Step: 1, Tenant: "a", Tokens: 4},
		{Step: 3, Tenant: "", Tokens: 48}, {Step: 5, Tenant: "b", Tokens: 8},
	}, got)
	_, err = b.client.ServedTokens(b.ctx, b.queue, since, since.Add(time.Minute), 0, nil)
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
