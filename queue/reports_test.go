package queue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/dbsqlc"
	"github.com/batchq/batchq/queue"
)

// t0 is the fixed instant the report tests place their jobs and outcomes at.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// outcomeRow is an outcome the report tests write directly, at fixed times.
type outcomeRow struct {
	id       int64
	queue    string
	tenant   string
	outcome  string
	est      int64
	actual   *int64
	attempts int
	enqueued time.Time
	claimed  *time.Time // nil: never claimed
	finished time.Time
	err      string
}

func (b *testBundle) addOutcomes(t testing.TB, rows ...outcomeRow) {
	t.Helper()
	for _, r := range rows {
		var errText *string
		if r.err != "" {
			errText = &r.err
		}
		b.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, actual_cost,
				attempts, max_attempts, deadline, enqueued_at, first_claimed_at, finished_at, worker, error, payload)
			VALUES ($1, $2, $3, 'summarize', $4, $5, $6, $7, 5, $8, $9, $10, $11, 'w1', $12, '{"doc": 1}')`,
			r.id, r.queue, r.tenant, r.outcome, r.est, r.actual, r.attempts, r.enqueued.Add(24*time.Hour),
			r.enqueued, r.claimed, r.finished, errText)
	}
}

func at(d time.Duration) *time.Time {
	t := t0.Add(d)
	return &t
}

func dur(d time.Duration) *time.Duration { return &d }

func i64(n int64) *int64 { return &n }

func TestBacklogReport(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "other"}))

	a1 := b.enqueue(t, "a", 10)
	a2 := b.enqueue(t, "a", 20)
	a3 := b.enqueue(t, "a", 30)
	bb := b.enqueue(t, "b", 5)
	_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "other", Tenant: "a", Cost: 7})
	require.NoError(t, err)
	// a1 runs; a2 waits to retry; a3 and b's job are queued. The running
	// job's deadline is the nearest, but it no longer waits.
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Equal(t, a1, jobs[0].ID)
	b.exec(t, `UPDATE batchq.jobs SET state = 'retrying', run_after = now() + interval '1 hour' WHERE id = $1`, a2)
	for id, d := range map[int64]time.Duration{a1: 0, a2: time.Minute, a3: 2 * time.Minute, bb: 3 * time.Minute} {
		b.exec(t, `UPDATE batchq.jobs SET enqueued_at = $2, deadline = $3 WHERE id = $1`, id, t0.Add(d), t0.Add(time.Hour+d))
	}

	rows, err := b.client.Backlog(b.ctx, b.queue)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	for i := range rows {
		require.NotNil(t, rows[i].OldestQueuedAge)
		require.Positive(t, *rows[i].OldestQueuedAge, "t0 is in the past")
		rows[i].OldestQueuedAge = nil
	}
	require.Equal(t, []queue.BacklogRow{
		{Queue: "q", Tenant: "a", QueuedJobs: 1, QueuedTokens: 30, OldestQueuedAt: at(2 * time.Minute),
			RunningJobs: 1, RetryingJobs: 1, NearestDeadline: at(time.Hour + time.Minute)},
		{Queue: "q", Tenant: "b", QueuedJobs: 1, QueuedTokens: 5, OldestQueuedAt: at(3 * time.Minute),
			NearestDeadline: at(time.Hour + 3*time.Minute)},
	}, utcBacklog(rows))

	all, err := b.client.Backlog(b.ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, "other", all[0].Queue, "ordered by queue, then tenant")
	require.Equal(t, int64(7), all[0].QueuedTokens)

	// A tenant with only a running job has no queued age or deadline.
	b.exec(t, `DELETE FROM batchq.jobs WHERE id <> $1`, a1)
	rows, err = b.client.Backlog(b.ctx, b.queue)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, int64(1), rows[0].RunningJobs)
	require.Nil(t, rows[0].OldestQueuedAt)
	require.Nil(t, rows[0].OldestQueuedAge)
	require.Nil(t, rows[0].NearestDeadline)
}

func utcBacklog(rows []queue.BacklogRow) []queue.BacklogRow {
	for i := range rows {
		rows[i].OldestQueuedAt = utc(rows[i].OldestQueuedAt)
		rows[i].NearestDeadline = utc(rows[i].NearestDeadline)
	}
	return rows
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func TestTenantUsageReport(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "big", Weight: 3}))
	b.addOutcomes(t,
		// small, weight 1: waits of 10s, 20s and 30s.
		outcomeRow{id: 1, queue: "q", tenant: "small", outcome: "succeeded", est: 100, actual: i64(150), attempts: 1,
			enqueued: t0, claimed: at(10 * time.Second), finished: t0.Add(time.Minute)},
		outcomeRow{id: 2, queue: "q", tenant: "small", outcome: "succeeded", est: 100, attempts: 1,
			enqueued: t0, claimed: at(20 * time.Second), finished: t0.Add(time.Minute)},
		outcomeRow{id: 3, queue: "q", tenant: "small", outcome: "failed", est: 50, attempts: 5,
			enqueued: t0, claimed: at(30 * time.Second), finished: t0.Add(time.Minute), err: "503"},
		// big, weight 3: one claimed job; an expired and a cancelled one never claimed.
		outcomeRow{id: 4, queue: "q", tenant: "big", outcome: "succeeded", est: 300, actual: i64(300), attempts: 1,
			enqueued: t0, claimed: at(5 * time.Second), finished: t0.Add(time.Minute)},
		outcomeRow{id: 5, queue: "q", tenant: "big", outcome: "expired", est: 40,
			enqueued: t0, finished: t0.Add(time.Minute)},
		outcomeRow{id: 6, queue: "q", tenant: "big", outcome: "cancelled", est: 60,
			enqueued: t0, finished: t0.Add(time.Minute)},
		// Outside the window on either side.
		outcomeRow{id: 7, queue: "q", tenant: "small", outcome: "succeeded", est: 1000, attempts: 1,
			enqueued: t0.Add(-time.Hour), claimed: at(-time.Hour), finished: t0.Add(-time.Second)},
		outcomeRow{id: 8, queue: "q", tenant: "small", outcome: "succeeded", est: 1000, attempts: 1,
			enqueued: t0, claimed: at(time.Hour), finished: t0.Add(time.Hour)},
		// Another queue: big is alone there, so all its shares are 1.
		outcomeRow{id: 9, queue: "other", tenant: "big", outcome: "succeeded", est: 10, attempts: 1,
			enqueued: t0, claimed: at(time.Second), finished: t0.Add(time.Minute)},
	)

	rows, err := b.client.TenantUsage(b.ctx, t0, t0.Add(time.Hour), "")
	require.NoError(t, err)
	require.Equal(t, []queue.TenantUsageRow{
		{Queue: "other", Tenant: "big", Jobs: 1, Succeeded: 1, SucceededTokens: 10, ServedTokens: 10,
			WaitP50: dur(time.Second), WaitP95: dur(time.Second), Weight: 3, TokenShare: 1, WeightShare: 1},
		// big: 300 for its one attempt; the expired and cancelled jobs never ran.
		{Queue: "q", Tenant: "big", Jobs: 3, Succeeded: 1, Expired: 1, Cancelled: 1,
			SucceededTokens: 300, ExpiredTokens: 40, CancelledTokens: 60, ActualTokens: 300, ServedTokens: 300,
			WaitP50: dur(5 * time.Second), WaitP95: dur(5 * time.Second), Weight: 3, TokenShare: 0.375, WeightShare: 0.75},
		// small: 150 (actual) and 100, and 50 for each of the failed job's 5 attempts.
		{Queue: "q", Tenant: "small", Jobs: 3, Succeeded: 2, Failed: 1,
			SucceededTokens: 250, FailedTokens: 50, ActualTokens: 150, ServedTokens: 500,
			WaitP50: dur(20 * time.Second), WaitP95: dur(29 * time.Second), Weight: 1, TokenShare: 0.625, WeightShare: 0.25},
	}, rows)

	one, err := b.client.TenantUsage(b.ctx, t0, t0.Add(time.Hour), "other")
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.Equal(t, "big", one[0].Tenant)

	// A window in which a queue served nothing but expired jobs: no share of
	// zero tokens, and no waits.
	b.addOutcomes(t, outcomeRow{id: 10, queue: "q", tenant: "small", outcome: "expired", est: 5,
		enqueued: t0, finished: t0.Add(2 * time.Hour)})
	rows, err = b.client.TenantUsage(b.ctx, t0.Add(90*time.Minute), t0.Add(3*time.Hour), "")
	require.NoError(t, err)
	require.Equal(t, []queue.TenantUsageRow{{Queue: "q", Tenant: "small", Jobs: 1, Expired: 1, ExpiredTokens: 5,
		Weight: 1, WeightShare: 1}}, rows)
}

// Weights at both ends of the range give shares in proportion.
func TestTenantUsageWithExtremeWeights(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "a", Weight: queue.MaxWeight}))
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "b", Weight: queue.MaxWeight}))
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "c", Weight: queue.MinWeight}))
	b.addOutcomes(t,
		outcomeRow{id: 1, queue: "q", tenant: "a", outcome: "succeeded", est: 10, attempts: 1,
			enqueued: t0, claimed: at(time.Second), finished: t0.Add(time.Minute)},
		outcomeRow{id: 2, queue: "q", tenant: "b", outcome: "succeeded", est: 10, attempts: 1,
			enqueued: t0, claimed: at(time.Second), finished: t0.Add(time.Minute)},
		outcomeRow{id: 3, queue: "q", tenant: "c", outcome: "succeeded", est: 10, attempts: 1,
			enqueued: t0, claimed: at(time.Second), finished: t0.Add(time.Minute)},
	)
	rows, err := b.client.TenantUsage(b.ctx, t0, t0.Add(time.Hour), "")
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.InDelta(t, 0.5, rows[0].WeightShare, 1e-9)
	require.InDelta(t, 0.5, rows[1].WeightShare, 1e-9)
	require.InDelta(t, 0.001/2_000_000.001, rows[2].WeightShare, 1e-18, "c weighs the least a weight may")
}

// A job given up as unfixable is counted as discarded, apart from those
// whose attempts or deadline ran out, and charged for the attempts it made.
func TestTenantUsageCountsDiscardedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.addOutcomes(t,
		outcomeRow{id: 1, queue: "q", tenant: "a", outcome: "discarded", est: 30, attempts: 1,
			enqueued: t0, claimed: at(time.Second), finished: t0.Add(time.Minute), err: "400"},
		outcomeRow{id: 2, queue: "q", tenant: "a", outcome: "failed", est: 10, attempts: 2,
			enqueued: t0, claimed: at(time.Second), finished: t0.Add(time.Minute), err: "503"},
	)
	rows, err := b.client.TenantUsage(b.ctx, t0, t0.Add(time.Hour), "")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	r := rows[0]
	require.Equal(t, [6]int64{2, 1, 30, 1, 10, 50},
		[6]int64{r.Jobs, r.Discarded, r.DiscardedTokens, r.Failed, r.FailedTokens, r.ServedTokens})
}

func TestOutcomesReport(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.addOutcomes(t,
		outcomeRow{id: 1, queue: "q", tenant: "a", outcome: "succeeded", est: 100, actual: i64(120), attempts: 2,
			enqueued: t0, claimed: at(10 * time.Second), finished: t0.Add(time.Minute)},
		outcomeRow{id: 2, queue: "q", tenant: "b", outcome: "expired", est: 40,
			enqueued: t0, finished: t0.Add(2 * time.Minute), err: "deadline passed while waiting"},
		outcomeRow{id: 3, queue: "q", tenant: "a", outcome: "failed", est: 50, attempts: 5,
			enqueued: t0, claimed: at(time.Second), finished: t0.Add(3 * time.Minute), err: "503"},
		outcomeRow{id: 4, queue: "q", tenant: "a", outcome: "succeeded", est: 10, attempts: 1,
			enqueued: t0, claimed: at(time.Second), finished: t0.Add(2 * time.Hour)},
	)
	ids := func(rows []queue.AuditRow) []int64 {
		out := make([]int64, len(rows))
		for i, r := range rows {
			out[i] = r.JobID
		}
		return out
	}

	rows, err := b.client.Outcomes(b.ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{4, 3, 2, 1}, ids(rows), "newest first")

	rows, err = b.client.Outcomes(b.ctx, &queue.OutcomesOpts{Since: t0, Until: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, []int64{3, 2, 1}, ids(rows))
	first := rows[2]
	first.EnqueuedAt, first.FinishedAt, first.Deadline = first.EnqueuedAt.UTC(), first.FinishedAt.UTC(), first.Deadline.UTC()
	first.FirstClaimedAt = utc(first.FirstClaimedAt)
	require.Equal(t, queue.AuditRow{
		JobID: 1, Queue: "q", Tenant: "a", Kind: "summarize", Outcome: "succeeded", Attempts: 2, MaxAttempts: 5,
		EstimatedCost: 100, ActualCost: i64(120), EnqueuedAt: t0, FirstClaimedAt: at(10 * time.Second),
		FinishedAt: t0.Add(time.Minute), Deadline: t0.Add(24 * time.Hour),
		Wait: dur(10 * time.Second), Run: dur(50 * time.Second), Total: time.Minute, Worker: "w1",
	}, first)
	require.Nil(t, rows[1].Wait, "never claimed")
	require.Nil(t, rows[1].Run)
	require.Equal(t, 2*time.Minute, rows[1].Total)

	rows, err = b.client.Outcomes(b.ctx, &queue.OutcomesOpts{Tenant: "a", Outcome: "succeeded"})
	require.NoError(t, err)
	require.Equal(t, []int64{4, 1}, ids(rows))

	rows, err = b.client.Outcomes(b.ctx, &queue.OutcomesOpts{Queue: "nope"})
	require.NoError(t, err)
	require.Empty(t, rows)

	rows, err = b.client.Outcomes(b.ctx, &queue.OutcomesOpts{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []int64{4, 3}, ids(rows))
}

// The audit trail shows the run-at of a job that finished while still
// scheduled, in Outcomes and in the view; a scheduled job that came due and
// ran shows none.
func TestOutcomesShowTheRunAtOfAJobFinishedWhileScheduled(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	runAt := time.Now().Add(30 * 24 * time.Hour).Truncate(time.Microsecond)
	cancelled, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "acme", Cost: 5, RunAt: runAt})
	require.NoError(t, err)
	require.NoError(t, b.client.Cancel(b.ctx, cancelled.ID, "not needed"))
	ran, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "acme", Cost: 5, Delay: time.Hour})
	require.NoError(t, err)
	b.exec(t, `UPDATE batchq.jobs SET run_after = now() WHERE id = $1`, ran.ID)
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Requeued)
	require.Equal(t, ran.ID, b.claimOne(t).ID)

	rows, err := b.client.Outcomes(b.ctx, nil)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, ran.ID, rows[0].JobID)
	require.Nil(t, rows[0].RunAt, "a scheduled job that ran has no run-at in its outcome")
	require.Equal(t, cancelled.ID, rows[1].JobID)
	require.NotNil(t, rows[1].RunAt)
	require.True(t, runAt.Equal(*rows[1].RunAt), "got %s, want %s", rows[1].RunAt, runAt)

	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.audit WHERE job_id = $1 AND run_at = $2`, cancelled.ID, runAt))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.audit WHERE job_id = $1 AND run_at IS NULL`, ran.ID))
}

func TestPruneDeletesOnlyOldOutcomesAcrossBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	// 25,000 old outcomes (more than two batches), interleaved by id with
	// 5,000 recent ones; and an old outcome with the highest id of all.
	b.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
			max_attempts, deadline, enqueued_at, finished_at)
		SELECT g, 'q', 't', 'k', 'succeeded', 1, 1, 1, $1::timestamptz, $1::timestamptz,
		       CASE WHEN g % 6 = 0 THEN $2::timestamptz ELSE $1::timestamptz END
		FROM generate_series(1, 30000) g`, t0.Add(-48*time.Hour), t0)
	b.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
			max_attempts, deadline, enqueued_at, finished_at)
		VALUES (99999, 'q', 't', 'k', 'failed', 1, 1, 1, $1, $1, $1)`, t0.Add(-48*time.Hour))

	n, err := b.client.PruneBefore(b.ctx, t0.Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(25001), n)
	require.Equal(t, int64(5000), b.scalar(t, `SELECT count(*) FROM batchq.outcomes`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE finished_at < $1`, t0.Add(-time.Hour)))

	n, err = b.client.PruneBefore(b.ctx, t0.Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to prune")

	_, err = b.client.Prune(b.ctx, -time.Hour)
	require.ErrorIs(t, err, queue.ErrInvalidSettings)
	// t0 is in the past, so everything is older than a minute.
	n, err = b.client.Prune(b.ctx, time.Minute)
	require.NoError(t, err)
	require.Equal(t, int64(5000), n)
}

func TestQuotaReport(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	rows, err := b.client.Quota(b.ctx)
	require.NoError(t, err)
	require.Empty(t, rows)

	b.exec(t, `INSERT INTO batchq.quota (key, tokens_limit, tokens_remaining, tokens_reset_at, paused_until, observed_at, updated_at)
		VALUES ('openai/gpt', 90000, 1200, $1, $2, $3, $3), ('anthropic/claude', NULL, NULL, NULL, NULL, NULL, $3)`,
		t0.Add(time.Minute), t0.Add(30*time.Second), t0)
	rows, err = b.client.Quota(b.ctx)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, "anthropic/claude", rows[0].Key, "by key")
	require.Nil(t, rows[0].TokensLimit)
	require.Equal(t, "openai/gpt", rows[1].Key)
	require.Equal(t, int64(90000), *rows[1].TokensLimit)
	require.Equal(t, int64(1200), *rows[1].TokensRemaining)
	require.Nil(t, rows[1].RequestsLimit)
	require.True(t, rows[1].PausedUntil.Equal(t0.Add(30*time.Second)))
	require.True(t, rows[1].UpdatedAt.Equal(t0))
}

// Pruning keeps an outcome whose unique key still deduplicates enqueues, so
// an import retried after a prune still does not pay twice; every other old
// outcome goes, keyed ones included once their window has passed.
func TestPruneKeepsOutcomesInTheirUniqueWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{UniqueFor: 24 * time.Hour})
	now := time.Now()
	b.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
			max_attempts, deadline, enqueued_at, finished_at, unique_key)
		VALUES (1, 'q', 't', 'k', 'succeeded', 1, 1, 1, $1, $1, $1, 'import-1'),
		       (2, 'q', 't', 'k', 'succeeded', 1, 1, 1, $2, $2, $2, 'import-2'),
		       (3, 'q', 't', 'k', 'succeeded', 1, 1, 1, $1, $1, $1, NULL)`,
		now.Add(-2*time.Hour), now.Add(-48*time.Hour))

	n, err := b.client.Prune(b.ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "the unkeyed outcome and the keyed one past its window")
	require.Equal(t, int64(1), b.scalar(t, `SELECT job_id FROM batchq.outcomes`))

	e, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "q", Tenant: "t", Kind: "k", Cost: 1, UniqueKey: "import-1"})
	require.NoError(t, err)
	require.Equal(t, queue.Enqueued{ID: 1, Duplicate: true}, e, "the kept outcome still deduplicates")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
}

// After a prune, the time index still bounds a window's reads when new
// outcomes reuse the pages the prune emptied: the pruned ranges' summaries
// start afresh. Without that, each reused range would span from its oldest
// pruned outcome to now, and every window since would read it.
func TestPruneKeepsTheTimeIndexNarrow(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	insert := func(from, to int, start time.Time, step time.Duration) {
		b.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
				max_attempts, deadline, enqueued_at, finished_at, error)
			SELECT g, 'q', 't', 'k', 'succeeded', 1, 1, 1, $1::timestamptz, $1::timestamptz,
			       $1::timestamptz + (g - $2) * $3::interval, repeat('x', 100)
			FROM generate_series($2::bigint, $4::bigint) g`, start, from, step, to)
	}
	old := t0.Add(-60 * 24 * time.Hour)
	insert(1, 20000, old, time.Minute) // about two weeks, a minute apart
	b.exec(t, `SELECT brin_summarize_new_values('batchq.outcomes_finished')`)

	n, err := b.client.PruneBefore(b.ctx, old.Add(7*24*time.Hour)) // the first week
	require.NoError(t, err)
	require.Equal(t, int64(7*24*60), n)
	b.exec(t, `VACUUM batchq.outcomes`) // frees the pages, and summarizes what is left of them
	insert(100001, 110000, t0.Add(-time.Hour), time.Second/4)
	b.exec(t, `SELECT brin_summarize_new_values('batchq.outcomes_finished')`)
	require.Greater(t, b.scalar(t, `SELECT count(*) FROM batchq.outcomes
		WHERE job_id > 100000 AND ctid < (SELECT max(ctid) FROM batchq.outcomes WHERE job_id <= 20000)`), int64(1000),
		"new outcomes reused the freed pages")

	// One hour of the second week, which is still there, read through the
	// time index (one tenant here, so the tenant index would serve it).
	b.exec(t, `DROP INDEX batchq.outcomes_tenant`)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = tx.Exec(b.ctx, `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	var plan []map[string]any
	require.NoError(t, tx.QueryRow(b.ctx, `EXPLAIN (ANALYZE, FORMAT JSON)
		SELECT count(*) FROM batchq.outcomes WHERE finished_at >= $1 AND finished_at < $2`,
		old.Add(10*24*time.Hour), old.Add(10*24*time.Hour+time.Hour)).Scan(&plan))
	var heap float64
	var walk func(node map[string]any)
	walk = func(node map[string]any) {
		for _, k := range []string{"Exact Heap Blocks", "Lossy Heap Blocks"} {
			if v, ok := node[k].(float64); ok {
				heap += v
			}
		}
		if kids, ok := node["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
	}
	walk(plan[0]["Plan"].(map[string]any))
	pages := b.scalar(t, `SELECT pg_relation_size('batchq.outcomes') / current_setting('block_size')::bigint`)
	require.Positive(t, heap, "the window is read through the time index")
	require.LessOrEqual(t, heap, float64(2*32), "at most two ranges of %d pages", pages)
}

// jobsRowsRead is how many batchq.jobs rows the current transaction has read
// so far, as ringRowsRead counts the ring's.
func jobsRowsRead(t *testing.T, b *testBundle, tx pgx.Tx) int64 {
	t.Helper()
	var n int64
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)
		FROM pg_stat_xact_user_tables WHERE relid = 'batchq.jobs'::regclass`).Scan(&n))
	return n
}

// The backlog of one queue, and the metrics' gauges of one queue, read that
// queue's jobs, not those of a large import in another queue.
func TestOneQueuesBacklogReadsOnlyItsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Name: "small"})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "import"}))
	b.enqueueN(t, "a", 3, 10)
	jobs := make([]queue.NewJob, 20_000)
	for i := range jobs {
		jobs[i] = queue.NewJob{Queue: "import", Tenant: fmt.Sprint("t", i%50), Cost: 10}
	}
	_, err := b.client.EnqueueMany(b.ctx, jobs)
	require.NoError(t, err)
	_, err = b.client.Claim(b.ctx, "import", &queue.ClaimOpts{Limit: 5}) // some running too
	require.NoError(t, err)
	b.exec(t, `ANALYZE batchq.jobs`)

	q := dbsqlc.New()
	for name, read := range map[string]func(tx pgx.Tx) error{
		"backlog": func(tx pgx.Tx) error {
			rows, err := q.Backlog(b.ctx, tx, &b.queue)
			require.Len(t, rows, 1)
			return err
		},
		"gauges": func(tx pgx.Tx) error {
			_, err := q.MetricsBacklog(b.ctx, tx, dbsqlc.MetricsBacklogParams{Queues: []string{b.queue}})
			return err
		},
		"leaders": func(tx pgx.Tx) error {
			_, err := q.MetricsLeaders(b.ctx, tx, dbsqlc.MetricsLeadersParams{TopTenants: 10, Queues: []string{b.queue}})
			return err
		},
	} {
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		before := jobsRowsRead(t, b, tx)
		require.NoError(t, read(tx), name)
		n := jobsRowsRead(t, b, tx) - before
		require.NoError(t, tx.Rollback(b.ctx))
		// Its 3 waiting jobs, and the running jobs of every queue (5).
		require.LessOrEqual(t, n, int64(8), "%s read %d job rows", name, n)
	}
}
