package queue_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

func TestEnqueueClaimCompleteRecordsOneOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	res, err := b.client.Enqueue(b.ctx, queue.NewJob{
		Queue: b.queue, Tenant: "acme", Kind: "summarize", Cost: 1200, Payload: json.RawMessage(`{"doc":7}`),
	})
	require.NoError(t, err)

	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 10, Worker: "w1"})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	j := jobs[0]
	require.Equal(t, res.ID, j.ID)
	require.Equal(t, "acme", j.Tenant)
	require.Equal(t, "summarize", j.Kind)
	require.JSONEq(t, `{"doc":7}`, string(j.Payload))
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, queue.DefaultMaxAttempts, j.MaxAttempts)
	require.WithinDuration(t, time.Now().Add(queue.DefaultTTL), j.Deadline, time.Minute)
	require.WithinDuration(t, time.Now().Add(queue.DefaultLease), j.LeaseExpiresAt, time.Minute)

	require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{ActualCost: 1500, Output: []byte(`{"summary":"ok"}`)}))
	require.ErrorIs(t, b.client.Complete(b.ctx, j, queue.Result{}), queue.ErrLeaseLost, "a second completion")

	var outcome, worker, result string
	var est, actual int64
	var attempts int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT outcome::text, estimated_cost, actual_cost, attempts, worker, result::text
		FROM batchq.outcomes WHERE job_id = $1`, j.ID).Scan(&outcome, &est, &actual, &attempts, &worker, &result))
	require.Equal(t, "succeeded", outcome)
	require.Equal(t, int64(1200), est)
	require.Equal(t, int64(1500), actual)
	require.Equal(t, 1, attempts)
	require.Equal(t, "w1", worker)
	require.JSONEq(t, `{"summary":"ok"}`, result)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
}

func TestQueueFullRejectsOnlyThatTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 3})
	b.enqueueN(t, "runaway", 3, 10)

	_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "runaway", Cost: 10})
	var full *queue.QueueFullError
	require.ErrorAs(t, err, &full)
	require.ErrorIs(t, err, queue.ErrQueueFull)
	require.Equal(t, queue.QueueFullError{Queue: "q", Tenant: "runaway", Bound: 3, Queued: 3, Adding: 1}, *full)
	require.Contains(t, err.Error(), `tenant "runaway"`)
	require.Contains(t, err.Error(), "bound 3")

	b.enqueue(t, "other", 10) // unaffected
	require.Equal(t, int64(4), b.scalar(t, `SELECT count(*) FROM batchq.jobs`))

	// A tenant's own bound overrides the queue's.
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "runaway", Weight: 1, MaxQueued: 5}))
	b.enqueueN(t, "runaway", 2, 10)

	// A batch that does not fit writes nothing, not even its first jobs.
	_, err = b.client.EnqueueMany(b.ctx, []queue.NewJob{
		{Queue: b.queue, Tenant: "other", Cost: 1}, {Queue: b.queue, Tenant: "runaway", Cost: 1},
	})
	require.ErrorIs(t, err, queue.ErrQueueFull)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'other'`))

	// Claiming makes room.
	b.drainOrder(t, 2)
	b.enqueue(t, "runaway", 10)
}

// The bound counts the jobs a call adds, not its lines: an import retried
// after it filled its tenant's queue gets its jobs' ids back, and a batch
// whose duplicates leave room for its new jobs is accepted.
func TestDuplicatesDoNotCountAgainstTheBound(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 3, UniqueFor: time.Hour})
	job := func(key string) queue.NewJob {
		return queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, UniqueKey: key}
	}
	first, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{job("a"), job("b")})
	require.NoError(t, err)

	res, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{job("a"), job("b"), job("c")})
	require.NoError(t, err)
	require.Equal(t, []queue.Enqueued{{ID: first[0].ID, Duplicate: true}, {ID: first[1].ID, Duplicate: true}}, res[:2])
	require.False(t, res[2].Duplicate)

	// Full now: a retry of everything is all duplicates, and no error.
	again, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{job("c"), job("a"), job("b"), job("a")})
	require.NoError(t, err)
	require.Equal(t, []queue.Enqueued{{ID: res[2].ID, Duplicate: true}, {ID: first[0].ID, Duplicate: true},
		{ID: first[1].ID, Duplicate: true}, {ID: first[0].ID, Duplicate: true}}, again)

	// One new job among the duplicates does not fit, and the error counts
	// that one.
	_, err = b.client.EnqueueMany(b.ctx, []queue.NewJob{job("a"), job("d"), job("b")})
	var full *queue.QueueFullError
	require.ErrorAs(t, err, &full)
	require.Equal(t, queue.QueueFullError{Queue: b.queue, Tenant: "t", Bound: 3, Queued: 3, Adding: 1}, *full)
	require.Equal(t, int64(3), b.scalar(t, `SELECT count(*) FROM batchq.jobs`))

	// Over a bound lowered below its queue, a retry of duplicates still
	// gets its ids.
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "t", Weight: 1, MaxQueued: 2}))
	again, err = b.client.EnqueueMany(b.ctx, []queue.NewJob{job("b"), job("a")})
	require.NoError(t, err)
	require.Equal(t, []queue.Enqueued{{ID: first[1].ID, Duplicate: true}, {ID: first[0].ID, Duplicate: true}}, again)
}

func TestQueueFullLeavesCallerTransactionUsable(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 1})
	b.enqueue(t, "t", 1)
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1})
		require.ErrorIs(t, err, queue.ErrQueueFull)
		_, err = tx.Exec(b.ctx, `INSERT INTO batchq.tenants (name) VALUES ('still-usable')`)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.tenants WHERE name = 'still-usable'`))
}

// Enqueue keeps its plans for calls of a few lines and plans calls of many
// lines for their arrays, changing plan settings for the call; the caller's
// transaction and session keep their own, through calls of either size and
// through the re-keying at commit.
func TestEnqueueLeavesTheCallersPlanSettings(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	jobs := make([]queue.NewJob, 400)
	for i := range jobs {
		jobs[i] = queue.NewJob{Queue: b.queue, Tenant: fmt.Sprintf("t%03d", i), Cost: 10}
	}
	// On a transaction, or on the session between transactions.
	settings := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		var s string
		require.NoError(t, q.QueryRow(b.ctx, `SELECT concat_ws(' ', current_setting('plan_cache_mode'),
			current_setting('enable_hashjoin'), current_setting('enable_mergejoin'))`).Scan(&s))
		return s
	}
	const defaults = "auto on on"

	// Settings the function does not use itself, so that a value it leaked
	// would show.
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL enable_hashjoin = off`)
	require.NoError(t, err)
	for _, batch := range [][]queue.NewJob{jobs[:1], jobs[1:100], jobs[100:101]} {
		_, err = b.client.EnqueueManyTx(b.ctx, tx, batch)
		require.NoError(t, err)
		require.Equal(t, "force_custom_plan off on", settings(tx), "after a call of %d", len(batch))
	}
	require.NoError(t, tx.Commit(b.ctx))

	for _, batch := range [][]queue.NewJob{jobs[101:300], jobs[300:301], jobs[301:]} {
		tx, err = conn.Begin(b.ctx)
		require.NoError(t, err)
		_, err = b.client.EnqueueManyTx(b.ctx, tx, batch)
		require.NoError(t, err)
		require.Equal(t, defaults, settings(tx), "after a call of %d", len(batch))
		require.NoError(t, tx.Commit(b.ctx))
	}
	require.Equal(t, defaults, settings(conn))
	require.Equal(t, int64(400), b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
}

// The pool's claims commit without waiting for the WAL flush; that must not
// reach anything else on the connection: the next transaction on it, or a
// transaction of the caller's that claims through the SQL API.
func TestClaimLeavesTheSessionsDurabilityAsItWas(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "a", 1)
	b.enqueue(t, "a", 1)
	// One connection, so the claim and the reads below share it.
	cfg := b.pool.Config().Copy()
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	syncCommit := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		var s string
		require.NoError(t, q.QueryRow(b.ctx, `SELECT current_setting('synchronous_commit')`).Scan(&s))
		return s
	}
	require.Equal(t, "on", syncCommit(pool))
	jobs, err := c.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, "on", syncCommit(pool), "after the client's claim")
	require.NoError(t, c.Complete(b.ctx, jobs[0], queue.Result{}))

	tx, err := pool.Begin(b.ctx)
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT count(*) FROM batchq.claim($1, 1, 'w', 100)`, b.queue).Scan(&n))
	require.Equal(t, 1, n)
	require.Equal(t, "on", syncCommit(tx), "in a transaction that claimed through the SQL API")
	require.NoError(t, tx.Rollback(b.ctx))
}

func TestRolledBackEnqueueLeavesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "t", 5)
	ring := func() string {
		var s string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT string_agg(format('%s/%s/%s/%s/%s', tenant, pos, join_round, cum, enq_seq), ',' ORDER BY tenant) FROM batchq.tenant_ring`).Scan(&s))
		return s
	}
	before := ring()

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 7})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))

	require.Equal(t, before, ring())
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
}

// jobs.queue has no foreign key (its per-row check cost a bulk enqueue 15%);
// a trigger and enqueue's lock on the queue's row keep what it kept.
func TestAQueueWithJobsCannotBeDeletedOrRenamed(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "empty"}))
	b.enqueue(t, "t", 5)

	var pgErr *pgconn.PgError
	_, err := b.pool.Exec(b.ctx, `DELETE FROM batchq.queues WHERE name = $1`, b.queue)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23503", pgErr.Code) // foreign_key_violation
	require.Contains(t, pgErr.Message, `queue 'q' still has jobs`)
	_, err = b.pool.Exec(b.ctx, `UPDATE batchq.queues SET name = 'renamed' WHERE name = $1`, b.queue)
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23503", pgErr.Code)
	b.exec(t, `UPDATE batchq.queues SET quantum = 7 WHERE name = $1`, b.queue)
	b.exec(t, `UPDATE batchq.queues SET name = name WHERE name = $1`, b.queue)
	b.exec(t, `DELETE FROM batchq.queues WHERE name = 'empty'`)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.queues`))

	t.Run("an open enqueue holds the queue until it commits", func(t *testing.T) {
		require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "racing"}))
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: "racing", Tenant: "t", Cost: 1})
		require.NoError(t, err)

		deleted := make(chan error, 1)
		go func() {
			_, err := b.pool.Exec(b.ctx, `DELETE FROM batchq.queues WHERE name = 'racing'`)
			deleted <- err
		}()
		// The delete waits for the enqueue's lock on the queue's row.
		require.Eventually(t, func() bool {
			return b.scalar(t, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'
				  AND query LIKE 'DELETE FROM batchq.queues%'`) == 1
		}, 10*time.Second, 10*time.Millisecond)
		require.NoError(t, tx.Commit(b.ctx))

		err = <-deleted
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "23503", pgErr.Code)
		require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'racing'`))
	})
}

func TestExpiredJobsAreRecordedAndSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	stale := b.enqueue(t, "t", 10)
	live := b.enqueue(t, "t", 10)
	b.expire(t, stale)

	order := b.drainOrder(t, 5)
	require.Len(t, order, 1)
	require.Equal(t, live, order[0].ID)
	require.Equal(t, "expired", b.outcome(t, stale))
	require.Equal(t, "succeeded", b.outcome(t, live))
}

func TestSweepExpiresDeepInBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueueN(t, "t", 10, 10)
	deep := b.scalar(t, `SELECT max(id) FROM batchq.jobs`)
	b.expire(t, deep)

	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Expired)
	require.Equal(t, "expired", b.outcome(t, deep))
	require.Equal(t, int64(9), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`))
}

func TestDeadlineInThePastIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, Deadline: time.Now().Add(-time.Second)})
	var inv *queue.InvalidJobError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "deadline", inv.Field)
	require.Contains(t, err.Error(), "must be in the future")
}

func TestFailRetriesWithBackoffThenFails(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 2})
	id := b.enqueue(t, "t", 10)

	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	retrying, err := b.client.Fail(b.ctx, jobs[0], errors.New("provider said 503"), &queue.FailOpts{RetryIn: time.Hour})
	require.NoError(t, err)
	require.True(t, retrying)

	// Not due yet: nothing to claim, and maintenance leaves it waiting.
	again, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Empty(t, again)
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, st.Requeued)

	b.exec(t, `UPDATE batchq.jobs SET run_after = now() WHERE id = $1`, id)
	st, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Requeued)

	jobs, err = b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, 2, jobs[0].Attempt)
	retrying, err = b.client.Fail(b.ctx, jobs[0], errors.New("503 again"), nil)
	require.NoError(t, err)
	require.False(t, retrying, "no attempts left")

	var msg string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT error FROM batchq.outcomes WHERE job_id = $1 AND outcome = 'failed'`, id).Scan(&msg))
	require.Equal(t, "503 again", msg)
}

func TestFailFinalIsDiscardedAndRetryPastDeadlineFails(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "t", 1)
	short, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, TTL: time.Minute})
	require.NoError(t, err)

	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 2})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	retrying, err := b.client.Fail(b.ctx, jobs[0], errors.New("bad request"), &queue.FailOpts{Final: true})
	require.NoError(t, err)
	require.False(t, retrying)
	require.Equal(t, short.ID, jobs[1].ID)
	retrying, err = b.client.Fail(b.ctx, jobs[1], errors.New("timeout"), &queue.FailOpts{RetryIn: time.Hour})
	require.NoError(t, err)
	require.False(t, retrying, "a retry after the deadline is pointless")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
	// Given up as final: discarded; out of time: failed.
	require.Equal(t, "discarded", b.outcome(t, jobs[0].ID))
	require.Equal(t, "failed", b.outcome(t, jobs[1].ID))
}

func TestReleaseDoesNotUseAnAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 1})
	b.enqueue(t, "t", 1)
	for range 3 {
		jobs, err := b.client.Claim(b.ctx, b.queue, nil)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, 1, jobs[0].Attempt)
		require.NoError(t, b.client.Release(b.ctx, jobs[0], 0))
		require.ErrorIs(t, b.client.Release(b.ctx, jobs[0], 0), queue.ErrLeaseLost)
		_, err = b.client.Maintain(b.ctx, b.queue)
		require.NoError(t, err)
	}
	require.NotNil(t, b.claimOne(t))
}

// A job handed back before it ran (claimed ahead, a pause, a shutdown, a
// 429) has not been served: its wait, in the audit and the reports, ends at
// the claim that runs it. One that ran an attempt before keeps its first.
func TestReleasedJobsWaitUntilAClaimRunsThem(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 3})
	id := b.enqueue(t, "t", 1)
	require.NoError(t, b.client.Release(b.ctx, b.claimHeld(t), 0))
	require.Zero(t, b.scalar(t, `SELECT count(first_claimed_at) FROM batchq.jobs WHERE id = $1`, id), "handed back unrun")
	_, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	job := b.claimHeld(t)
	var claimed time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT first_claimed_at FROM batchq.jobs WHERE id = $1`, id).Scan(&claimed))
	// It fails (an attempt ran), and is claimed and handed back again.
	retrying, err := b.client.Fail(b.ctx, job, errors.New("boom"), &queue.FailOpts{RetryIn: time.Millisecond})
	require.NoError(t, err)
	require.True(t, retrying)
	time.Sleep(10 * time.Millisecond)
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.NoError(t, b.client.Release(b.ctx, b.claimHeld(t), 0))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND first_claimed_at = $2`, id, claimed),
		"an attempt ran: the first claim that ran it stays")

	// Cancelled while claimed, before it ran: never served either.
	other := b.enqueue(t, "u", 1)
	job = b.claimHeld(t)
	require.Equal(t, other, job.ID)
	_, err = b.client.CancelJob(b.ctx, other, "stop")
	require.NoError(t, err)
	require.NoError(t, b.client.Release(b.ctx, job, 0))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.audit WHERE job_id = $1 AND outcome = 'cancelled'
		AND first_claimed_at IS NULL`, other))
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id := b.enqueue(t, "t", 1)
	require.NoError(t, b.client.Cancel(b.ctx, id, "operator asked"))
	require.Equal(t, "cancelled", b.outcome(t, id))
	require.ErrorIs(t, b.client.Cancel(b.ctx, id, ""), queue.ErrNotFound)

	running := b.enqueue(t, "t", 1)
	_, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	st, err := b.client.CancelJob(b.ctx, running, "")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Stopping: 1}, st, "a running job is asked to stop")
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'running' AND cancel_requested_at IS NOT NULL`, running))
}

// CompleteMany takes jobs in any order, a job listed twice included: each
// is finished once, with the result listed first, and one whose lease was
// lost is reported without holding up the rest.
func TestCompleteManyInAnyOrderFinishesEachJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for _, tenant := range []string{"a", "b", "c"} {
		b.enqueue(t, tenant, 10)
	}
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 3})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	slices.SortFunc(jobs, func(x, y *queue.Job) int { return cmp.Compare(y.ID, x.ID) }) // newest first
	b.exec(t, `UPDATE batchq.jobs SET lease_token = gen_random_uuid() WHERE id = $1`, jobs[1].ID)

	lost, err := b.client.CompleteMany(b.ctx, []queue.Completion{
		{Job: jobs[0], Result: queue.Result{Output: []byte(`{"first":true}`)}},
		{Job: jobs[2]},
		{Job: jobs[1]},
		{Job: jobs[0], Result: queue.Result{Output: []byte(`{"first":false}`)}},
	})
	require.NoError(t, err)
	require.Equal(t, []int64{jobs[1].ID}, lost)
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.outcomes`))
	var result string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT result::text FROM batchq.outcomes WHERE job_id = $1`, jobs[0].ID).Scan(&result))
	require.JSONEq(t, `{"first":true}`, result)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs`), "the job whose lease was lost stays")
}

// A completion of several jobs records each job's own actual cost and result,
// and none for the jobs that reported none, wherever they stand in the batch.
func TestCompleteManyRecordsEachJobsOwnCostAndResult(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for _, tenant := range []string{"a", "b", "c", "d"} {
		b.enqueue(t, tenant, 10)
	}
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 4})
	require.NoError(t, err)
	require.Len(t, jobs, 4)
	slices.SortFunc(jobs, func(x, y *queue.Job) int { return cmp.Compare(x.ID, y.ID) })
	lost, err := b.client.CompleteMany(b.ctx, []queue.Completion{
		{Job: jobs[3]},
		{Job: jobs[2], Result: queue.Result{Output: []byte(`{"c":1}`)}},
		{Job: jobs[1], Result: queue.Result{ActualCost: 77}},
		{Job: jobs[0]},
	})
	require.NoError(t, err)
	require.Empty(t, lost)
	got := map[int64]string{}
	rows, err := b.pool.Query(b.ctx, `SELECT job_id, coalesce(actual_cost::text, '-') || ' ' || coalesce(result::text, '-') FROM batchq.outcomes`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id int64
		var s string
		require.NoError(t, rows.Scan(&id, &s))
		got[id] = s
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[int64]string{
		jobs[0].ID: "- -", jobs[1].ID: "77 -", jobs[2].ID: `- {"c": 1}`, jobs[3].ID: "- -",
	}, got)
}

// waitForLockWait waits until a backend running a statement like pattern
// waits on a lock.
func waitForLockWait(t *testing.T, b *testBundle, pattern string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b.scalar(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`, pattern) > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no statement like %q came to wait on a lock", pattern)
}

// A completion takes its jobs' rows in id order, as heartbeats, failures and
// releases do, whatever order the rows lie in on disk: a worker pool
// heartbeats jobs whose completions its completer is writing, and the two
// must never deadlock. Here the oldest job's row was rewritten by a
// heartbeat, so it lies after the others; a transaction holding it and then
// asking for the next job must see the completion wait on the oldest first,
// holding nothing.
func TestCompletionsAndHeartbeatsOnTheSameJobsNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for _, tenant := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		b.enqueue(t, tenant, 10)
	}
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 8})
	require.NoError(t, err)
	require.Len(t, jobs, 8)
	slices.SortFunc(jobs, func(x, y *queue.Job) int { return cmp.Compare(x.ID, y.ID) })
	older, newer := jobs[0], jobs[1]
	// The worker extends the older job's lease: its row gets a new version.
	require.NoError(t, b.client.Heartbeat(b.ctx, older))

	// A statement that locks in id order has taken the older job's row.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE id = $1 FOR UPDATE`, older.ID)
	require.NoError(t, err)

	finished := make(chan error, 1)
	go func() {
		done := make([]queue.Completion, len(jobs))
		for i, j := range jobs {
			done[i] = queue.Completion{Job: j}
		}
		_, err := b.client.CompleteMany(b.ctx, done)
		finished <- err
	}()
	waitForLockWait(t, b, "%name: Complete%")

	// ... and goes on to the newer one. Had the completion waited on the
	// older job first, it would hold nothing this waits for.
	_, lockErr := tx.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE id = $1 FOR UPDATE`, newer.ID)
	if lockErr == nil {
		require.NoError(t, tx.Commit(b.ctx))
	} else {
		tx.Rollback(context.Background())
	}
	completeErr := <-finished
	require.NoError(t, lockErr, "the transaction locking in id order")
	require.NoError(t, completeErr, "CompleteMany")
	require.Equal(t, int64(8), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`))
}

func TestRescuedJobsOldTokenIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id := b.enqueue(t, "t", 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Worker: "crashed"})
	require.NoError(t, err)
	old := jobs[0]

	b.exec(t, `UPDATE batchq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id)
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Rescued)
	require.Equal(t, 1, st.Requeued)

	jobs, err = b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Worker: "healthy"})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, 2, jobs[0].Attempt)

	require.ErrorIs(t, b.client.Complete(b.ctx, old, queue.Result{}), queue.ErrLeaseLost)
	require.ErrorIs(t, b.client.Heartbeat(b.ctx, old), queue.ErrLeaseLost)
	_, err = b.client.Fail(b.ctx, old, errors.New("late"), nil)
	require.ErrorIs(t, err, queue.ErrLeaseLost)
	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{}))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1`, id))
}

func TestHeartbeatExtendsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Minute})
	b.enqueue(t, "t", 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	b.exec(t, `UPDATE batchq.jobs SET lease_expires_at = now() + interval '1 second'`)
	require.NoError(t, b.client.Heartbeat(b.ctx, jobs...))
	require.WithinDuration(t, time.Now().Add(time.Minute), jobs[0].LeaseExpiresAt, 10*time.Second)
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, st.Rescued)
}

func TestLeaseLostWithoutAttemptsFails(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 1})
	id := b.enqueue(t, "t", 1)
	_, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	b.exec(t, `UPDATE batchq.jobs SET lease_expires_at = now() - interval '1 second'`)
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Lost)
	require.Equal(t, "failed", b.outcome(t, id))
}

func TestUniqueKeyMakesEnqueueIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{UniqueFor: time.Hour})
	job := queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, UniqueKey: "import-42/doc-7"}
	first, err := b.client.Enqueue(b.ctx, job)
	require.NoError(t, err)
	require.False(t, first.Duplicate)

	again, err := b.client.Enqueue(b.ctx, job)
	require.NoError(t, err)
	require.Equal(t, queue.Enqueued{ID: first.ID, Duplicate: true}, again)

	// Within one batch, and mixed with new jobs.
	res, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{
		{Queue: b.queue, Tenant: "t", Cost: 1, UniqueKey: "k2"}, job, {Queue: b.queue, Tenant: "t", Cost: 1, UniqueKey: "k2"},
	})
	require.NoError(t, err)
	require.False(t, res[0].Duplicate)
	require.Equal(t, queue.Enqueued{ID: first.ID, Duplicate: true}, res[1])
	require.Equal(t, queue.Enqueued{ID: res[0].ID, Duplicate: true}, res[2])

	// After it finished, within UniqueFor, still the same job.
	b.drainOrder(t, 10)
	again, err = b.client.Enqueue(b.ctx, job)
	require.NoError(t, err)
	require.Equal(t, queue.Enqueued{ID: first.ID, Duplicate: true}, again)

	// Past UniqueFor, a new job.
	b.exec(t, `UPDATE batchq.outcomes SET finished_at = now() - interval '2 hours'`)
	fresh, err := b.client.Enqueue(b.ctx, job)
	require.NoError(t, err)
	require.False(t, fresh.Duplicate)
	require.NotEqual(t, first.ID, fresh.ID)
}

// A unique key's window, and a queue's default TTL, count from the enqueue
// itself, not from the start of the caller's transaction. With UniqueFor 0
// a job that finished while the transaction was open is no longer a
// duplicate; and a transaction open longer than the default TTL still gets a
// job it can run.
func TestEnqueueClocksCountFromTheEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{DefaultTTL: 2 * time.Second}) // UniqueFor 0
	job := queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, UniqueKey: "doc-42"}
	first, err := b.client.Enqueue(b.ctx, job)
	require.NoError(t, err)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = tx.Exec(b.ctx, `SELECT 1`) // the transaction's clock starts
	require.NoError(t, err)
	require.Len(t, b.drainOrder(t, 1), 1) // the keyed job finishes meanwhile
	time.Sleep(2500 * time.Millisecond)   // longer than the default TTL

	again, err := b.client.EnqueueTx(b.ctx, tx, job)
	require.NoError(t, err)
	require.False(t, again.Duplicate, "the job with the key finished: only while unfinished")
	require.NotEqual(t, first.ID, again.ID)
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND deadline > now()`, again.ID),
		"the default TTL counts from the enqueue")
}

// Two transactions of different tenants enqueue the same unique key: the
// second waits on the first's insert, and when the first commits it reports
// the first's job as the one that holds the key, beside its other lines.
// The winner may even be claimed and finished before the loser looks it up
// (simulated here by a trigger that finishes it right after the loser's
// insert); its outcome still names it.
func TestUniqueKeyRaceReportsTheWinner(t *testing.T) {
	t.Parallel()
	for _, finished := range []bool{false, true} {
		t.Run(fmt.Sprintf("winner finished=%v", finished), func(t *testing.T) {
			b := setup(t, queue.QueueConfig{})
			if finished {
				b.exec(t, `CREATE FUNCTION finish_winner() RETURNS trigger LANGUAGE plpgsql AS $$
					BEGIN
						IF current_setting('batchq_test.finish_winner', true) = 'on' THEN
							WITH d AS (DELETE FROM batchq.jobs j WHERE j.tenant = 'winner' RETURNING j.*)
							INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
							                             max_attempts, deadline, enqueued_at, unique_key)
							SELECT d.id, d.queue, d.tenant, d.kind, 'succeeded', d.cost, 1, d.max_attempts, d.deadline,
							       d.enqueued_at, d.unique_key
							FROM d;
						END IF;
						RETURN NULL;
					END $$`)
				b.exec(t, `CREATE TRIGGER finish_winner AFTER INSERT ON batchq.jobs
					FOR EACH STATEMENT EXECUTE FUNCTION finish_winner()`)
			}
			winner, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			defer func() { _ = winner.Rollback(b.ctx) }()
			won, err := b.client.EnqueueTx(b.ctx, winner, queue.NewJob{Queue: b.queue, Tenant: "winner", Cost: 1, UniqueKey: "k"})
			require.NoError(t, err)
			require.False(t, won.Duplicate)

			type result struct {
				res []queue.Enqueued
				err error
			}
			lost := make(chan result, 1)
			go func() {
				var r result
				r.err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
					if finished {
						if _, err := tx.Exec(b.ctx, `SET LOCAL batchq_test.finish_winner = 'on'`); err != nil {
							return err
						}
					}
					var err error
					r.res, err = b.client.EnqueueManyTx(b.ctx, tx, []queue.NewJob{
						{Queue: b.queue, Tenant: "loser", Cost: 1, UniqueKey: "k"},
						{Queue: b.queue, Tenant: "loser", Cost: 1, UniqueKey: "other"},
					})
					return err
				})
				lost <- r
			}()
			// The loser's insert waits for the winner's transaction.
			require.Eventually(t, func() bool {
				return b.scalar(t, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 1
			}, 10*time.Second, 10*time.Millisecond)
			require.NoError(t, winner.Commit(b.ctx))

			r := <-lost
			require.NoError(t, r.err)
			require.Equal(t, queue.Enqueued{ID: won.ID, Duplicate: true}, r.res[0])
			require.False(t, r.res[1].Duplicate)
			require.NotZero(t, r.res[1].ID)
			require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'loser'`))
		})
	}
}

func TestConcurrentEnqueuersNeverExceedTheBound(t *testing.T) {
	t.Parallel()
	const bound = 50
	b := setup(t, queue.QueueConfig{MaxPerTenant: bound})
	var ok, full atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 10 {
				_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "hot", Cost: 1})
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, queue.ErrQueueFull):
					full.Add(1)
				default:
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(bound), ok.Load())
	require.Equal(t, int64(160-bound), full.Load())
	require.Equal(t, int64(bound), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'hot'`))
}

func TestOpenEnqueueTransactionNeverBlocksClaims(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueueN(t, "busy", 20, 10)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	opened := time.Now()
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "busy", Cost: 10})
	require.NoError(t, err)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "newcomer", Cost: 10})
	require.NoError(t, err)

	// A second client whose every statement fails instead of waiting for a
	// lock: if anything it does touched a row the open transaction holds,
	// it would get an error, however fast or slow the machine is.
	cfg := b.pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "200ms"
	impatient, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	defer impatient.Close()
	other, err := queue.NewClient(impatient, queue.Config{})
	require.NoError(t, err)

	_, err = other.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "third", Cost: 10})
	require.NoError(t, err)
	var got []string
	for {
		jobs, err := other.Claim(b.ctx, b.queue, nil)
		require.NoError(t, err)
		if len(jobs) == 0 {
			break
		}
		require.NoError(t, other.Complete(b.ctx, jobs[0], queue.Result{ActualCost: 50}))
		got = append(got, jobs[0].Tenant)
	}
	_, err = other.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Len(t, got, 21)
	require.Contains(t, got, "third")
	require.NotContains(t, got, "newcomer")

	// Hold the transaction open for five seconds in all, then commit: its
	// jobs appear, and the tenants it touched can be adjusted again.
	time.Sleep(time.Until(opened.Add(5 * time.Second)))
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`))
	st, err := other.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Adjusted, "busy's ledger correction waited for the transaction, then applied")
}

func TestInvalidJobsNameFieldAndRule(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	valid := queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1}
	cases := []struct {
		name  string
		edit  func(*queue.NewJob)
		field string
		rule  string
	}{
		{"empty tenant", func(j *queue.NewJob) { j.Tenant = "" }, "tenant", "must not be empty"},
		{"huge tenant", func(j *queue.NewJob) { j.Tenant = strings.Repeat("x", 257) }, "tenant", "at most 256 bytes"},
		{"non-UTF-8 tenant", func(j *queue.NewJob) { j.Tenant = "\xff\xfe" }, "tenant", "valid UTF-8"},
		{"control characters", func(j *queue.NewJob) { j.Tenant = "a\x00b" }, "tenant", "control characters"},
		{"zero cost", func(j *queue.NewJob) { j.Cost = 0 }, "cost", "must be in 1..1000000000 (got 0)"},
		{"negative cost", func(j *queue.NewJob) { j.Cost = -5 }, "cost", "(got -5)"},
		{"cost too large", func(j *queue.NewJob) { j.Cost = queue.MaxCost + 1 }, "cost", "must be in 1.."},
		{"past deadline", func(j *queue.NewJob) { j.Deadline = time.Now().Add(-time.Hour) }, "deadline", "must be in the future"},
		{"deadline and ttl", func(j *queue.NewJob) { j.Deadline = time.Now().Add(time.Hour); j.TTL = time.Hour }, "deadline", "not both"},
		{"negative ttl", func(j *queue.NewJob) { j.TTL = -time.Second }, "ttl", "must be > 0"},
		{"negative attempts", func(j *queue.NewJob) { j.MaxAttempts = -1 }, "max_attempts", "must be in 1..1000"},
		{"payload not JSON", func(j *queue.NewJob) { j.Payload = []byte(`{"a":`) }, "payload", "valid JSON"},
		{"payload too large", func(j *queue.NewJob) {
			j.Payload = []byte(`"` + strings.Repeat("x", queue.DefaultMaxPayloadBytes) + `"`)
		}, "payload", "at most 1048576 bytes"},
		{"payload with NUL", func(j *queue.NewJob) { j.Payload = []byte(`{"a":"\u0000"}`) }, "payload", `\u0000`},
		{"payload not UTF-8", func(j *queue.NewJob) { j.Payload = []byte("{\"a\":\"\xff\"}") }, "payload", "valid UTF-8"},
		{"payload with a lone surrogate", func(j *queue.NewJob) { j.Payload = []byte(`{"a":"\ud800x"}`) }, "payload", "unpaired UTF-16 surrogate"},
		{"payload with a lone low surrogate", func(j *queue.NewJob) { j.Payload = []byte(`["\udc00"]`) }, "payload", "unpaired UTF-16 surrogate"},
		{"bad queue name", func(j *queue.NewJob) { j.Queue = "no spaces; DROP TABLE" }, "queue", "must name a queue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := valid
			tc.edit(&j)
			_, err := b.client.Enqueue(b.ctx, j)
			var inv *queue.InvalidJobError
			require.ErrorAs(t, err, &inv)
			require.ErrorIs(t, err, queue.ErrInvalidJob)
			require.Equal(t, tc.field, inv.Field)
			require.Contains(t, err.Error(), tc.rule)
		})
	}
	_, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{valid, {Queue: b.queue, Tenant: "t", Cost: 0}})
	require.ErrorContains(t, err, "invalid job 2: cost")

	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: "missing", Tenant: "t", Cost: 1})
	require.ErrorIs(t, err, queue.ErrUnknownQueue)

	// A surrogate pair, and an escaped backslash before a "u", are fine.
	for _, payload := range []string{`{"emoji":"\ud83d\ude00"}`, `{"path":"C:\\ud800"}`} {
		_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "ok", Cost: 1, Payload: []byte(payload)})
		require.NoError(t, err, payload)
	}
	b.exec(t, `DELETE FROM batchq.jobs`)

	// SQL metacharacters are data.
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: `'; DROP TABLE batchq.jobs; --`, Cost: 1})
	require.NoError(t, err)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
}

// Re-keying (a new quantum, a new weight, ledger corrections folded in by
// maintenance) goes on while claimers heartbeat and complete batches of
// jobs of several tenants: no two of them wait for each other in a cycle.
// Each re-keying transaction holds job rows of several tenants, and a
// recheck locks rows a claim has just taken, so any statement that waits on
// job rows in another order than id order deadlocks here within a few runs.
func TestRekeyingDuringClaimsNeverDeadlocks(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	tenants := []string{"a", "b", "c", "d"}
	for _, tenant := range tenants {
		b.enqueueN(t, tenant, 300, 50)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				jobs, err := b.client.Claim(ctx, b.queue, &queue.ClaimOpts{Limit: 5})
				if ctx.Err() != nil {
					return
				}
				if !assert.NoError(t, err) || len(jobs) == 0 {
					return
				}
				if err := b.client.Heartbeat(ctx, jobs...); ctx.Err() == nil {
					assert.NoError(t, err)
				}
				done := make([]queue.Completion, len(jobs))
				for i, j := range jobs {
					// Costs other than the estimate leave corrections for
					// maintenance to fold in.
					done[i] = queue.Completion{Job: j, Result: queue.Result{ActualCost: j.Cost + int64(w) - 1}}
				}
				_, err = b.client.CompleteMany(ctx, done)
				if ctx.Err() == nil {
					assert.NoError(t, err)
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			_, err := b.client.Maintain(ctx, b.queue)
			if ctx.Err() == nil {
				assert.NoError(t, err)
			}
		}
	})
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			err := b.client.SetTenant(ctx, queue.Tenant{Name: tenants[i%len(tenants)], Weight: float64(1 + i%3)})
			if ctx.Err() == nil {
				assert.NoError(t, err)
			}
		}
	})
	for i := range 20 {
		q := int64(50 + 25*(i%4))
		_, err := b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{Quantum: &q})
		require.NoError(t, err)
	}
	cancel()
	wg.Wait()
}

func TestMaintainRefreshesStatisticsOfAQueueThatFilledFromEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	_, err := b.pool.Exec(b.ctx, "ANALYZE batchq.jobs")
	require.NoError(t, err)
	for i := range 10 {
		b.enqueueN(t, fmt.Sprint("t", i), 300, 10)
	}

	// The server counts the new rows once the inserting session goes idle.
	var st queue.MaintainStats
	require.Eventually(t, func() bool {
		st, err = b.client.Maintain(b.ctx, b.queue)
		require.NoError(t, err)
		return len(st.Analyzed) > 0
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, []string{"jobs"}, st.Analyzed)

	var reltuples float64
	require.NoError(t, b.pool.QueryRow(b.ctx,
		"SELECT reltuples FROM pg_class WHERE oid = 'batchq.jobs'::regclass").Scan(&reltuples))
	require.Equal(t, 3000.0, reltuples)

	st, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Empty(t, st.Analyzed, "one check per interval")
}

// A queue that drained is left with the statistics of its fuller days for
// a while: the plans made for them read its few rows by index as well, and
// an ANALYZE has every session plan its statements again. A fleet draining
// a backlog analyzed the table each time it halved (half a second of the
// server's time each, among the claims of four worker processes). Long
// after the last ANALYZE a table that shrank is analyzed: one queue may
// have grown while others drained.
func TestMaintainLeavesTheStatisticsOfADrainedQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for i := range 10 {
		b.enqueueN(t, fmt.Sprint("t", i), 300, 10)
	}
	// The server counts rows once the session that wrote them goes idle.
	liveRows := func(want int64) func() bool {
		return func() bool {
			var live int64
			require.NoError(t, b.pool.QueryRow(b.ctx,
				"SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'batchq.jobs'::regclass").Scan(&live))
			return live == want
		}
	}
	require.Eventually(t, liveRows(3000), 30*time.Second, 100*time.Millisecond)
	b.exec(t, "ANALYZE batchq.jobs")
	b.exec(t, "DELETE FROM batchq.jobs")
	require.Eventually(t, liveRows(0), 30*time.Second, 100*time.Millisecond)
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Empty(t, st.Analyzed)

	reltuples := func() float64 {
		var n float64
		require.NoError(t, b.pool.QueryRow(b.ctx,
			"SELECT reltuples FROM pg_class WHERE oid = 'batchq.jobs'::regclass").Scan(&n))
		return n
	}
	require.Equal(t, 3000.0, reltuples())

	// A client for which the last ANALYZE is long enough ago.
	later, err := queue.NewClient(b.pool, queue.Config{})
	require.NoError(t, err)
	queue.SetShrunkAnalyzeAfter(later, time.Microsecond)
	st, err = later.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, []string{"jobs"}, st.Analyzed)
	require.Zero(t, reltuples())
}

// TestJSONThatJsonbStoresIsKept: text that only looks like an escaped NUL is
// a valid payload, and a result jsonb cannot store is kept as a wrapper
// instead of failing the completion.
func TestJSONThatJsonbStoresIsKept(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, Payload: []byte(`{"a":"\\u0000"}`)})
	require.NoError(t, err, `an escaped backslash followed by "u0000" is text`)

	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Equal(t, res.ID, jobs[0].ID)
	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{Output: []byte(`{"text":"\ud800"}`)}))
	var result string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT result::text FROM batchq.outcomes WHERE job_id = $1`, res.ID).Scan(&result))
	require.Contains(t, result, `"truncated"`, "stored as a wrapper around the raw text")

	// Output that is not JSON and holds a NUL byte: the wrapper cannot carry
	// the NUL (jsonb refuses \u0000), so it shows where it was instead.
	require.Equal(t, "plain text\uFFFDtail", storedHead(t, b, b.client, []byte("plain text\x00tail")))

	// JSON whose string holds bytes that are not UTF-8 (a provider's Latin-1
	// body, say): json.Valid accepts it, the server does not. It is kept as a
	// wrapper that shows where the bytes were, and the completion counts.
	require.Equal(t, "{\"text\":\"caf\uFFFD\"}", storedHead(t, b, b.client, []byte("{\"text\":\"caf\xe9\"}")))

	// Cut to size in the middle of a character: the part before the cut
	// goes. A head of half of MaxResultBytes (51 bytes) splits the 26th é;
	// with the wrapper around it, 25 fit.
	small, err := queue.NewClient(b.pool, queue.Config{MaxResultBytes: 102})
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("é", 25), storedHead(t, b, small, []byte(strings.Repeat("é", 100))))
	// So small a bound that no head fits: the summary keeps only the size.
	tiny, err := queue.NewClient(b.pool, queue.Config{MaxResultBytes: 11})
	require.NoError(t, err)
	require.Equal(t, "", storedHead(t, b, tiny, []byte(strings.Repeat("é", 9))))
}

// storedHead enqueues a job, has c claim and complete it with output, and
// returns the head of the wrapper its outcome keeps the result in.
func storedHead(t *testing.T, b *testBundle, c *queue.Client, output []byte) string {
	t.Helper()
	id := b.enqueue(t, "t", 1)
	jobs, err := c.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Equal(t, id, jobs[0].ID)
	require.NoError(t, c.Complete(b.ctx, jobs[0], queue.Result{Output: output}))
	var head string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT result->>'head' FROM batchq.outcomes WHERE job_id = $1`, id).Scan(&head))
	return head
}

// TestPayloadNumbersJsonbCannotHoldAreInvalid: jsonb keeps numbers as
// PostgreSQL's numeric, which has a range. For numbers at each edge of it
// (and strings and escapes that only look like numbers), Enqueue refuses a
// payload with an InvalidJobError exactly when the server would refuse to
// store it, so the caller's transaction is never aborted by one; and a
// handler's result with such a number is kept as a wrapper, not lost.
func TestPayloadNumbersJsonbCannotHoldAreInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	numbers := []string{
		"1e131071", "9.9e131071", "123456e131066", "0.001e131074", "1e131072", "-1e131072", "10e131071",
		"1E+131072", "1e-16383", "1.5e-16383", "1e-16384", "0.0e-16382", "0.0e-16383", "0e999999",
		"0e1073741822", "0e1073741823", "1e-1073741823", "0.5", "-0", "1" + strings.Repeat("0", 131071),
		"1" + strings.Repeat("0", 131072), "0." + strings.Repeat("0", 16383), "0." + strings.Repeat("0", 16384),
	}
	var payloads []string
	for _, n := range numbers {
		payloads = append(payloads, `{"n":`+n+`}`, `[`+n+`]`)
	}
	payloads = append(payloads, `{"s":"1e131072"}`, `{"1e131072":1}`, `{"s":"\\\"1e999999"}`)
	for _, p := range payloads {
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, serverErr := tx.Exec(b.ctx, `SELECT $1::jsonb`, p)
		require.NoError(t, tx.Rollback(b.ctx))

		tx, err = b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, Payload: []byte(p)})
		name := p[:min(len(p), 40)]
		if serverErr != nil {
			var inv *queue.InvalidJobError
			require.ErrorAs(t, err, &inv, "%s: the server says %v", name, serverErr)
			require.Equal(t, "payload", inv.Field)
			_, err = tx.Exec(b.ctx, `SELECT 1`)
			require.NoError(t, err, "%s: the transaction is still usable", name)
		} else {
			require.NoError(t, err, name)
		}
		require.NoError(t, tx.Rollback(b.ctx))
	}

	b.enqueue(t, "t", 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{Output: []byte(`{"n":1e1000000}`)}))
	var result string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT result::text FROM batchq.outcomes WHERE job_id = $1`, jobs[0].ID).Scan(&result))
	require.Contains(t, result, `"truncated"`)
}

// aFirstOfTwoRounds enqueues a1, b1, a2, b2, one round of the quantum each,
// and claims a1, the first.
func aFirstOfTwoRounds(t *testing.T) (b *testBundle, a1, b1, a2, b2 int64, first *queue.Job) {
	t.Helper()
	b = setup(t, queue.QueueConfig{Quantum: 100})
	a1, b1 = b.enqueue(t, "a", 100), b.enqueue(t, "b", 100)
	a2, b2 = b.enqueue(t, "a", 100), b.enqueue(t, "b", 100)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Equal(t, a1, jobs[0].ID)
	return b, a1, b1, a2, b2, jobs[0]
}

func TestReleasedJobIsChargedOnce(t *testing.T) {
	t.Parallel()
	b, a1, b1, a2, b2, first := aFirstOfTwoRounds(t)
	require.NoError(t, b.client.Release(b.ctx, first, 0))
	_, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)

	// a1 never ran: a2 takes its place in round 0 and a1 follows in round 1,
	// so a still gets one job per round. Charged twice, a1 would come last.
	var order []int64
	for _, j := range b.drainOrder(t, 10) {
		order = append(order, j.ID)
	}
	require.Equal(t, []int64{a2, b1, a1, b2}, order)
	require.Equal(t, int64(200), b.scalar(t, `SELECT cum FROM batchq.tenant_ring WHERE tenant = 'a'`), "a's ledger holds each job once")
}

// A claimed job an operator cancelled before it started, handed back, is
// finished as cancelled without charging its tenant or counting an
// attempt: it never ran, as a released job never did.
func TestCancelledJobHandedBackIsNotCharged(t *testing.T) {
	t.Parallel()
	b, a1, b1, a2, b2, first := aFirstOfTwoRounds(t)
	st, err := b.client.CancelJob(b.ctx, a1, "not needed")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Stopping: 1}, st)
	require.NoError(t, b.client.Release(b.ctx, first, 0))
	require.Equal(t, "cancelled", b.outcome(t, a1))
	require.Zero(t, b.scalar(t, `SELECT attempts FROM batchq.outcomes WHERE job_id = $1`, a1))
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)

	// a2 takes a's place in round 0; charged for a1, a would come after b.
	var order []int64
	for _, j := range b.drainOrder(t, 10) {
		order = append(order, j.ID)
	}
	require.Equal(t, []int64{a2, b1, b2}, order)
	require.Equal(t, int64(100), b.scalar(t, `SELECT cum FROM batchq.tenant_ring WHERE tenant = 'a'`), "a's ledger holds a2 only")
}

// Finishing calls name their queue; jobs of several queues finished in one
// call go queue by queue in one transaction, each run by its own lease.
func TestFinishingJobsOfSeveralQueues(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Name: "b"})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "a"}))
	var jobs []*queue.Job
	for _, q := range []string{"a", "b", "a", "b"} {
		_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: q, Tenant: "t", Cost: 1})
		require.NoError(t, err)
		claimed, err := b.client.Claim(b.ctx, q, nil)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		jobs = append(jobs, claimed[0])
	}
	require.NoError(t, b.client.Heartbeat(b.ctx, jobs...))
	// One run of each queue lost its lease to a rescue.
	b.exec(t, `UPDATE batchq.jobs SET lease_token = gen_random_uuid() WHERE id = ANY ($1)`, []int64{jobs[2].ID, jobs[3].ID})
	lost, err := b.client.CompleteMany(b.ctx, []queue.Completion{{Job: jobs[0]}, {Job: jobs[1]}, {Job: jobs[2]}, {Job: jobs[3]}})
	require.NoError(t, err)
	require.Equal(t, []int64{jobs[2].ID, jobs[3].ID}, lost)
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`))
	err = b.client.Heartbeat(b.ctx, jobs[2], jobs[3])
	require.ErrorIs(t, err, queue.ErrLeaseLost)
}

// A call of many jobs for one tenant (an import) keys them on the tenant's
// ledger in line order, ids drawn in that order, and fills the tenant's
// bound exactly: the call that fits goes in whole, the one that does not
// writes nothing. The same whether the tenant joins the ring with the call
// or has jobs queued already.
func TestOneTenantImportKeysItsLinesInOrderUpToTheBound(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 10, Quantum: 100})
	lines := func(costs ...int64) []queue.NewJob {
		jobs := make([]queue.NewJob, len(costs))
		for i, c := range costs {
			jobs[i] = queue.NewJob{Queue: b.queue, Tenant: "imp", Cost: c}
		}
		return jobs
	}
	first, err := b.client.EnqueueMany(b.ctx, lines(50, 150, 100, 1, 299, 100, 30)) // joins the ring
	require.NoError(t, err)
	second, err := b.client.EnqueueMany(b.ctx, lines(70, 200, 5)) // behind its own queued jobs
	require.NoError(t, err)
	ids := append(first, second...)
	require.Len(t, ids, 10)

	// Each job's ledger is the running sum of the costs before it and its
	// own, its seq counts on, its round is drr_round of its ledger, and ids
	// follow the lines.
	rows, err := b.pool.Query(b.ctx, `SELECT j.id, j.cost, j.cum, j.seq, j.round, r.join_round, r.share
		FROM batchq.jobs j JOIN batchq.tenant_ring r ON r.queue = j.queue AND r.tenant = j.tenant
		WHERE j.queue = $1 AND j.tenant = 'imp' ORDER BY j.seq`, b.queue)
	require.NoError(t, err)
	defer rows.Close()
	var cum, i int64
	for rows.Next() {
		var id, cost, jcum, seq, round, joinRound, share int64
		require.NoError(t, rows.Scan(&id, &cost, &jcum, &seq, &round, &joinRound, &share))
		cum += cost
		require.Equal(t, ids[i].ID, id, "line %d", i+1)
		require.Equal(t, cum, jcum, "line %d's ledger", i+1)
		require.Equal(t, i+1, seq, "line %d's seq", i+1)
		require.Equal(t, joinRound+max((jcum-1)/share+1, 1)-1, round, "line %d's round", i+1)
		i++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, int64(10), i)

	// Full now: one more line, or a call of two, is refused whole.
	_, err = b.client.EnqueueMany(b.ctx, lines(1, 1))
	var full *queue.QueueFullError
	require.ErrorAs(t, err, &full)
	require.Equal(t, queue.QueueFullError{Queue: b.queue, Tenant: "imp", Bound: 10, Queued: 10, Adding: 2}, *full)
	require.Equal(t, int64(10), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'imp'`))
	require.Equal(t, int64(1)+10, b.scalar(t, `SELECT enq_seq + 1 FROM batchq.tenant_ring WHERE tenant = 'imp'`))
}
