package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// testBundle is what most queue tests work with: a client on a fresh
// database and one queue.
type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	client *queue.Client
	queue  string
}

func setup(t *testing.T, qc queue.QueueConfig) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.New(t)
	client, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	if qc.Name == "" {
		qc.Name = "q"
	}
	require.NoError(t, client.CreateQueue(ctx, qc))
	return &testBundle{ctx: ctx, pool: pool, client: client, queue: qc.Name}
}

func (b *testBundle) enqueue(t testing.TB, tenant string, cost int64) int64 {
	t.Helper()
	res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: cost})
	require.NoError(t, err)
	return res.ID
}

// enqueueN inserts n jobs of one tenant and cost in one call.
func (b *testBundle) enqueueN(t testing.TB, tenant string, n int, cost int64) {
	t.Helper()
	jobs := make([]queue.NewJob, n)
	for i := range jobs {
		jobs[i] = queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: cost, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	_, err := b.client.EnqueueMany(b.ctx, jobs)
	require.NoError(t, err)
}

// claimOne claims and completes the next job, or returns nil.
func (b *testBundle) claimOne(t testing.TB) *queue.Job {
	t.Helper()
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	if len(jobs) == 0 {
		return nil
	}
	require.Len(t, jobs, 1)
	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{}))
	return jobs[0]
}

// claimHeld claims the next job and keeps it running, as a worker holds it.
func (b *testBundle) claimHeld(t testing.TB) *queue.Job {
	t.Helper()
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	return jobs[0]
}

// drainOrder claims and completes one job at a time until none is left and
// returns the tenants in claim order.
func (b *testBundle) drainOrder(t testing.TB, max int) []*queue.Job {
	t.Helper()
	var out []*queue.Job
	for len(out) < max {
		j := b.claimOne(t)
		if j == nil {
			break
		}
		out = append(out, j)
	}
	return out
}

func (b *testBundle) scalar(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

func (b *testBundle) scalarFloat(t testing.TB, sql string, args ...any) float64 {
	t.Helper()
	var f float64
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&f))
	return f
}

// cursor is the round of the queue's cursor.
func (b *testBundle) cursor(t testing.TB) int64 {
	t.Helper()
	return b.scalar(t, `SELECT round FROM batchq.queue_cursors WHERE queue = $1`, b.queue)
}

// claimInTx claims up to n jobs with the SQL API in tx, which stays open,
// and returns how many it took.
func (b *testBundle) claimInTx(t testing.TB, tx pgx.Tx, n int, worker string) int {
	t.Helper()
	var took int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT count(*) FROM batchq.claim($1, $2, $3, 1000000)`, b.queue, n, worker).Scan(&took))
	return took
}

func (b *testBundle) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, sql, args...)
	require.NoError(t, err)
}

// expire moves a job's deadline into the past, as time passing would.
func (b *testBundle) expire(t testing.TB, id int64) {
	t.Helper()
	b.exec(t, `UPDATE batchq.jobs SET deadline = now() - interval '1 second' WHERE id = $1`, id)
}

func (b *testBundle) outcome(t testing.TB, id int64) string {
	t.Helper()
	var o string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT outcome::text FROM batchq.outcomes WHERE job_id = $1`, id).Scan(&o))
	return o
}

// waitFinished waits, up to 20 s, until job id has its outcome row.
func (b *testBundle) waitFinished(t testing.TB, id int64, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1`, id) == 1
	}, 20*time.Second, 10*time.Millisecond, msgAndArgs...)
}

// waitState waits, up to 10 s, until job id is in state.
func (b *testBundle) waitState(t testing.TB, id int64, state string, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = $2`, id, state) == 1
	}, 10*time.Second, 5*time.Millisecond, msgAndArgs...)
}

func tenantsOf(jobs []*queue.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.Tenant
	}
	return out
}

var _ = time.Second

// work runs a worker pool in the background until ctx is done; wait returns
// Work's error once it has returned. Tests wait before they end, so no pool
// outlives its database.
func (b *testBundle) work(ctx context.Context, cfg queue.WorkerConfig) (wait func() error) {
	done := make(chan error, 1)
	go func() { done <- b.client.Work(ctx, cfg) }()
	return func() error { return <-done }
}
