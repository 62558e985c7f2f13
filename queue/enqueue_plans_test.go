package queue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// ringRowsRead is how many tenant_ring rows the current transaction has read
// so far (index and bitmap fetches and sequential reads). The counters are
// the backend's own and are not flushed within a transaction, so the
// difference around one statement is exact.
func ringRowsRead(t *testing.T, ctx context.Context, tx pgx.Tx) int64 {
	t.Helper()
	var n int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)
		FROM pg_stat_xact_user_tables WHERE relid = 'batchq.tenant_ring'::regclass`).Scan(&n))
	return n
}

// growRing puts one queued job for each of n tenants, in calls of 1,000
// lines (planned for their arrays, so they do not make the small-call plans).
func growRing(t *testing.T, b *testBundle, n int) {
	t.Helper()
	for lo := 0; lo < n; lo += 1000 {
		jobs := make([]queue.NewJob, min(1000, n-lo))
		for i := range jobs {
			jobs[i] = queue.NewJob{Queue: b.queue, Tenant: fmt.Sprintf("bulk-%05d", lo+i), Cost: 10}
		}
		_, err := b.client.EnqueueMany(b.ctx, jobs)
		require.NoError(t, err)
	}
}

// ringReads enqueues lines jobs for tenant on conn, in one call and a
// transaction of its own, and returns how many ring rows the call read.
func ringReads(t *testing.T, b *testBundle, conn *pgx.Conn, tenant string, lines int) int64 {
	t.Helper()
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	before := ringRowsRead(t, b.ctx, tx)
	start := time.Now()
	jobs := make([]queue.NewJob, lines)
	for i := range jobs {
		jobs[i] = queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: 10}
	}
	_, err = b.client.EnqueueManyTx(b.ctx, tx, jobs)
	require.NoError(t, err)
	el := time.Since(start)
	n := ringRowsRead(t, b.ctx, tx) - before
	require.NoError(t, tx.Commit(b.ctx))
	t.Logf("%d-line enqueue for %s: %d ring rows read, %s", lines, tenant, n, el)
	return n
}

// A call of a few lines runs plans its session made once, perhaps while the
// ring was small, and with autovacuum off nothing analyzes the ring since.
// It still reads only its own tenants' ring rows, one probe each, not every
// ring row of the queue: for a tenant already in the ring and for one that
// joins, in a session opened on a large ring and in one whose plans were made
// on a small ring. So does an import of many lines for one tenant, which
// keeps its plans too (lines × tenants within 64 × 64).
func TestFewLineEnqueueReadsOnlyItsTenantsRingRows(t *testing.T) {
	t.Parallel()
	for _, lines := range []int{1, 1000} {
		t.Run(fmt.Sprint(lines, " lines"), func(t *testing.T) {
			t.Parallel()
			fewLineRingReads(t, lines)
		})
	}
}

func fewLineRingReads(t *testing.T, lines int) {
	const tenants = 3000
	const bound = 50 // a handful of probes per call; a scan reads ~tenants

	t.Run("session opened on a large ring", func(t *testing.T) {
		t.Parallel()
		b := setup(t, queue.QueueConfig{})
		growRing(t, b, tenants)
		conn, err := pgx.ConnectConfig(b.ctx, b.pool.Config().ConnConfig.Copy())
		require.NoError(t, err)
		defer conn.Close(context.Background())

		require.LessOrEqual(t, ringReads(t, b, conn, "bulk-02999", lines), int64(bound), "existing tenant")
		require.LessOrEqual(t, ringReads(t, b, conn, "newcomer", lines), int64(bound), "joining tenant")
	})

	t.Run("session whose plans were made on a small ring", func(t *testing.T) {
		t.Parallel()
		b := setup(t, queue.QueueConfig{})
		conn, err := pgx.ConnectConfig(b.ctx, b.pool.Config().ConnConfig.Copy())
		require.NoError(t, err)
		defer conn.Close(context.Background())
		ringReads(t, b, conn, "early", lines) // the session's plans are made now
		growRing(t, b, tenants)

		require.LessOrEqual(t, ringReads(t, b, conn, "bulk-02999", lines), int64(bound), "existing tenant")
		require.LessOrEqual(t, ringReads(t, b, conn, "newcomer", lines), int64(bound), "joining tenant")
	})
}

// The expiry sweep of one queue reads none of another queue's expired jobs:
// the deadline index leads with the queue.
func TestExpirySweepReadsOnlyItsQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "down", MaxPerTenant: 10000}))
	jobs := make([]queue.NewJob, 3000)
	for i := range jobs {
		jobs[i] = queue.NewJob{Queue: "down", Tenant: fmt.Sprint("t", i%10), Cost: 1}
	}
	_, err := b.client.EnqueueMany(b.ctx, jobs)
	require.NoError(t, err)
	b.exec(t, `UPDATE batchq.jobs SET deadline = now() - interval '1 hour' WHERE queue = 'down'`)
	b.exec(t, `ANALYZE batchq.jobs`)

	// The sweep's selection (db/queries/maintain.sql, ExpireOverdue), for a
	// queue with nothing overdue.
	rows, err := b.pool.Query(b.ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
		SELECT o.id FROM batchq.jobs o
		WHERE o.queue = $1 AND o.state <> 'running' AND o.deadline <= now()
		ORDER BY o.deadline LIMIT 1000 FOR UPDATE SKIP LOCKED`, b.queue)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "jobs_deadline", "the sweep's index")
	require.NotContains(t, plan, "Rows Removed by Filter", "it read other queues' jobs:\n%s", plan)

	st, err := b.client.Maintain(b.ctx, "down")
	require.NoError(t, err)
	require.Equal(t, 1000, st.Expired, "the other queue's sweep still finds its own")
}

// An enqueue of one job runs plans its session keeps: planning its
// statements again on every call took most of its time (0.5 ms of 0.6).
// The sign of a statement planned again is a constant of the rules
// (batchq.max_name_bytes and its kin), which the planner evaluates each
// time it plans a statement that names it and never when a kept plan runs.
// The server's function counters see it, and see a SQL function that runs
// as a call of its own where it should have been inlined into a statement;
// turning them on takes a superuser, as the server the tests start (or find
// on 127.0.0.1) has.
func TestOneJobEnqueueKeepsItsPlans(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	cfg, err := pgx.ParseConfig(pgtest.ServerURL(t))
	require.NoError(t, err)
	cfg.Database = b.pool.Config().ConnConfig.Database
	conn, err := pgx.ConnectConfig(b.ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var super bool
	require.NoError(t, conn.QueryRow(b.ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super))
	if !super {
		t.Skip("the function counters (track_functions) need a superuser; the test server's role is not one")
	}
	_, err = conn.Exec(b.ctx, `SET track_functions = 'all'`)
	require.NoError(t, err)
	b.enqueue(t, "acme", 10) // so later jobs take the path of a tenant with jobs queued
	joiners := 0

	for _, path := range []struct {
		name    string
		enqueue func(tx pgx.Tx) error
	}{
		{"Go client", func(tx pgx.Tx) error {
			_, err := b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "acme", Cost: 10})
			return err
		}},
		{"Go client, a tenant that joins the ring", func(tx pgx.Tx) error {
			joiners++
			_, err := b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: fmt.Sprint("joiner-", joiners), Cost: 10})
			return err
		}},
		{"enqueue_job", func(tx pgx.Tx) error {
			_, err := tx.Exec(b.ctx, `SELECT * FROM batchq.enqueue_job(queue => $1, tenant => 'acme', cost => 10)`, b.queue)
			return err
		}},
		{"enqueue_jobs", func(tx pgx.Tx) error {
			_, err := tx.Exec(b.ctx, `SELECT * FROM batchq.enqueue_jobs($1, '[{"tenant": "acme", "cost": 10}]')`, b.queue)
			return err
		}},
	} {
		t.Run(path.name, func(t *testing.T) {
			tx, err := conn.Begin(b.ctx)
			require.NoError(t, err)
			defer tx.Rollback(b.ctx) //nolint:errcheck
			calls := func(function string) int64 {
				var n int64
				require.NoError(t, tx.QueryRow(b.ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
					WHERE schemaname = 'batchq' AND funcname = $1`, function).Scan(&n))
				return n
			}
			// PostgreSQL tries custom plans for a statement's first five
			// runs before it may settle on a generic one.
			for range 6 {
				require.NoError(t, path.enqueue(tx))
			}
			rules, shares := calls("max_name_bytes"), calls("drr_share")
			for range 10 {
				require.NoError(t, path.enqueue(tx))
			}
			require.Zero(t, calls("max_name_bytes")-rules, "statements planned again in ten one-job enqueues")
			// A joining tenant's share is computed where drr_share is inlined,
			// not run as a SQL function of its own (20-34 us a call).
			require.Zero(t, calls("drr_share")-shares, "drr_share run as a function in ten one-job enqueues")
		})
	}
}

// namedQuery is the text of the sqlc query name in db/queries/file, with its
// named parameters numbered in order of first use, as sqlc numbers them.
func namedQuery(t *testing.T, file, name string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "db", "queries", file))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(src), "-- name: "+name+" ")
	require.True(t, ok, "no query %s in %s", name, file)
	_, rest, _ = strings.Cut(rest, "\n")
	body, _, _ := strings.Cut(rest, "\n-- name: ")
	params := map[string]string{}
	return regexp.MustCompile(`@[a-z_]+`).ReplaceAllStringFunc(body, func(p string) string {
		if _, ok := params[p]; !ok {
			params[p] = fmt.Sprint("$", len(params)+1)
		}
		return params[p]
	})
}

// A draining worker asks whether its queue still holds jobs on every poll
// while other workers finish the last ones. Each state's probe reads the
// index that state's own work keeps: the claim index for queued jobs, the
// due index for retrying and scheduled ones, the lease index for running
// ones. Planned when many jobs ran, the look for a running job read the
// whole table (a Seq Scan: 30 ms a poll after a drain of 50,000 jobs, per
// worker process). The look for a waiting job read the deadline index,
// which nothing reads during a drain: its first probe after one visited
// every finished row (120 ms after 200,000 jobs, per worker process).
func TestDrainedCheckReadsTheIndexOfEachState(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 10000})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "idle"}))
	for _, tenant := range []string{"a", "b", "c"} {
		b.enqueueN(t, tenant, 1000, 1)
	}
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 2900, b.claimInTx(t, tx, 2900, "w"))
	require.NoError(t, tx.Commit(b.ctx))
	b.exec(t, `ANALYZE batchq.jobs`) // statistics that show most jobs running

	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(b.ctx, `PREPARE has_jobs (text) AS `+namedQuery(t, "jobs.sql", "QueueHasJobs"))
	require.NoError(t, err)
	defer conn.Exec(context.Background(), `DEALLOCATE has_jobs`)          //nolint:errcheck
	_, err = conn.Exec(b.ctx, `SET plan_cache_mode = force_generic_plan`) // the plan a session keeps
	require.NoError(t, err)
	defer conn.Exec(context.Background(), `RESET plan_cache_mode`) //nolint:errcheck
	rows, err := conn.Query(b.ctx, `EXPLAIN (COSTS OFF) EXECUTE has_jobs('q')`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	for _, index := range []string{"jobs_claim", "jobs_due", "jobs_lease"} {
		require.Contains(t, plan, index, plan)
	}
	require.NotContains(t, plan, "jobs_deadline", plan)
	require.NotContains(t, plan, "Seq Scan", plan)

	has := func(queueName string) bool {
		var has bool
		require.NoError(t, conn.QueryRow(b.ctx, fmt.Sprintf(`EXECUTE has_jobs('%s')`, queueName)).Scan(&has)) // names of this test
		return has
	}
	require.True(t, has("q"), "jobs queued and running")
	require.False(t, has("idle"), "another queue's running jobs are not the idle queue's")
	b.exec(t, `DELETE FROM batchq.jobs WHERE queue = 'q' AND state = 'queued'`)
	require.True(t, has("q"), "jobs running")
	b.exec(t, `DELETE FROM batchq.jobs WHERE queue = 'q'`)
	require.False(t, has("q"), "nothing left")

	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "later", Cost: 1, RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, has("q"), "a job scheduled")
	b.exec(t, `UPDATE batchq.jobs SET state = 'retrying' WHERE queue = 'q'`)
	require.True(t, has("q"), "a job retrying")
	require.False(t, has("idle"), "another queue's waiting jobs are not the idle queue's")
}
