package queue_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// A paused queue hands out nothing while enqueues go on and a running job
// finishes; the backlog says it is paused; resumed, it hands out again.
func TestPauseStopsClaimsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "a", 1)
	running, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Len(t, running, 1)

	changed, err := b.client.PauseQueue(b.ctx, b.queue)
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = b.client.PauseQueue(b.ctx, b.queue)
	require.NoError(t, err)
	require.False(t, changed, "paused already")

	queued := b.enqueue(t, "b", 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, jobs, "a paused queue hands out nothing")
	require.NoError(t, b.client.Complete(b.ctx, running[0], queue.Result{}), "a running job finishes")

	qc, err := b.client.Queue(b.ctx, b.queue)
	require.NoError(t, err)
	require.NotNil(t, qc.PausedAt)
	rows, err := b.client.Backlog(b.ctx, b.queue)
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	for _, r := range rows {
		require.True(t, r.Paused, r.Tenant)
	}

	changed, err = b.client.ResumeQueue(b.ctx, b.queue)
	require.NoError(t, err)
	require.True(t, changed)
	got := b.claimOne(t)
	require.NotNil(t, got)
	require.Equal(t, queued, got.ID)

	_, err = b.client.PauseQueue(b.ctx, "nope")
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	_, err = b.client.ResumeQueue(b.ctx, "no/such")
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
}

// A pool on a paused queue finishes what it runs and waits; with Drain it
// returns ErrQueuePaused. The job it claimed ahead goes back as soon as the
// pause's notification reaches it, not at its next look a second later.
// Resumed, a pool drains the queue.
func TestPoolOnAPausedQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	// Handlers known to be quick: the pool claims ahead from its first claim.
	queue.SetAssumedRun(b.client, time.Millisecond)
	// Its own look comes too late for the test: the notification must do it.
	queue.SetPauseCheckEvery(b.client, time.Hour)
	b.enqueueN(t, "a", 5, 1)
	release := make(chan struct{})
	var ran atomic.Int32
	handler := queue.Handler(func(ctx context.Context, j *queue.Job) (queue.Result, error) {
		if ran.Add(1) == 1 {
			select { // a test that fails early must not leave the pool waiting here
			case <-release:
			case <-ctx.Done():
				return queue.Result{}, ctx.Err()
			}
		}
		return queue.Result{}, nil
	})
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	var handedBack atomic.Int32
	onEvent := func(e queue.Event) {
		if e.Kind == queue.EventFinished && e.Outcome == "released" {
			handedBack.Add(1)
		}
	}
	// The pool keeps one job claimed ahead of its one handler. Its
	// maintenance is off, or it could requeue the job it hands back before
	// the states are read below.
	wait := b.work(ctx, queue.WorkerConfig{Queue: b.queue, Handler: handler, Concurrency: 1, BatchSize: 1,
		Drain: true, PollInterval: 10 * time.Millisecond, MaintainInterval: -1, OnEvent: onEvent})
	require.Eventually(t, func() bool { return ran.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	// The second job is claimed ahead (the claim runs beside the handler)
	// before the pause, or the pause would find nothing to hand back.
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'running'`) == 2
	}, 10*time.Second, 5*time.Millisecond)
	// The pool listens before the pause is said, or it could not hear it.
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN batchq_jobs'`) == 1
	}, 10*time.Second, 5*time.Millisecond)
	_, err := b.client.PauseQueue(b.ctx, b.queue)
	require.NoError(t, err)
	// The job claimed ahead goes back unstarted, while the running one runs.
	require.Eventually(t, func() bool { return handedBack.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	close(release)
	require.ErrorIs(t, wait(), queue.ErrQueuePaused)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`),
		"the running job finished, and nothing was claimed after the pause")
	var states string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT string_agg(state::text, ',' ORDER BY id) FROM batchq.jobs`).Scan(&states))
	// The job claimed ahead went back unstarted: it waits for maintenance
	// to requeue it, its attempt not used.
	require.Equal(t, "retrying,queued,queued,queued", states)
	require.Zero(t, b.scalar(t, `SELECT sum(attempt) FROM batchq.jobs`))

	_, err = b.client.ResumeQueue(b.ctx, b.queue)
	require.NoError(t, err)
	wait = b.work(ctx, queue.WorkerConfig{Queue: b.queue, Handler: handler, Drain: true, PollInterval: 10 * time.Millisecond})
	require.NoError(t, wait())
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
}

// Cancelling a running job cancels its handler's context at the next
// heartbeat, and the job finishes as 'cancelled' on its first attempt,
// without a retry.
func TestCancelARunningJobStopsItsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 5})
	// Handlers known to be quick: the pool claims ahead from its first claim.
	queue.SetAssumedRun(b.client, time.Millisecond)
	id := b.enqueue(t, "a", 1)
	started := make(chan struct{})
	var stopped atomic.Bool
	handler := queue.Handler(func(ctx context.Context, j *queue.Job) (queue.Result, error) {
		close(started)
		<-ctx.Done()
		stopped.Store(true)
		return queue.Result{}, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	wait := b.work(ctx, queue.WorkerConfig{Queue: b.queue, Handler: handler, Concurrency: 1,
		HeartbeatInterval: 20 * time.Millisecond, Drain: true, PollInterval: 10 * time.Millisecond})
	<-started
	st, err := b.client.CancelJob(b.ctx, id, "operator stop")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Stopping: 1}, st)
	info, err := b.client.JobInfo(b.ctx, id)
	require.NoError(t, err)
	if !info.Finished {
		require.NotNil(t, info.CancelRequestedAt)
	}
	require.NoError(t, wait())
	require.True(t, stopped.Load(), "the handler's context was cancelled")
	require.Equal(t, "cancelled", b.outcome(t, id))
	require.Equal(t, int64(1), b.scalar(t, `SELECT attempts FROM batchq.outcomes WHERE job_id = $1`, id))
	var reason string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT error FROM batchq.outcomes WHERE job_id = $1`, id).Scan(&reason))
	require.Equal(t, "operator stop", reason)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`), "not retried")
}

// A job claimed ahead that an operator cancels while it waits for a
// handler never starts: it is recorded 'cancelled' and its handler is never
// called. The pool finds the cancel by its lease keeper's heartbeat
// (frequent beats, the job waiting a moment) or by looking at jobs that
// have waited a second (beats a lease's third apart, as by default).
func TestCancelAJobClaimedAheadNeverStartsIt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		heartbeat time.Duration
		hold      func(b *testBundle, second int64) // how long the first job's handler runs
	}{
		{"by a heartbeat", 20 * time.Millisecond, func(*testBundle, int64) { time.Sleep(300 * time.Millisecond) }},
		{"by looking at waiting jobs", 0, func(b *testBundle, second int64) {
			// Until the second job is recorded, which only the look can do
			// while this handler runs.
			require.Eventually(t, func() bool {
				return b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1`, second) == 1
			}, 10*time.Second, 20*time.Millisecond)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{MaxAttempts: 1, Lease: time.Minute})
			// Handlers known to be quick: the pool claims ahead from its first claim.
			queue.SetAssumedRun(b.client, time.Millisecond)
			ids := []int64{b.enqueue(t, "a", 1), b.enqueue(t, "a", 1), b.enqueue(t, "a", 1)}
			cancelled := make(chan struct{})
			var mu sync.Mutex
			var ran []int64
			handler := queue.Handler(func(ctx context.Context, j *queue.Job) (queue.Result, error) {
				mu.Lock()
				ran = append(ran, j.ID)
				mu.Unlock()
				if j.ID == ids[0] {
					<-cancelled
					c.hold(b, ids[1])
				}
				return queue.Result{}, nil
			})
			ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
			defer cancel()
			wait := b.work(ctx, queue.WorkerConfig{Queue: b.queue, Handler: handler, Concurrency: 1, BatchSize: 3,
				HeartbeatInterval: c.heartbeat, Drain: true, PollInterval: 10 * time.Millisecond})
			require.Eventually(t, func() bool {
				return b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'running'`) == 3
			}, 10*time.Second, 5*time.Millisecond, "the pool holds all three")
			_, err := b.client.CancelJob(b.ctx, ids[1], "not needed")
			require.NoError(t, err)
			close(cancelled)
			require.NoError(t, wait())
			require.Equal(t, []int64{ids[0], ids[2]}, ran, "the cancelled job was never sent")
			require.Equal(t, "succeeded", b.outcome(t, ids[0]))
			require.Equal(t, "cancelled", b.outcome(t, ids[1]))
			require.Equal(t, "succeeded", b.outcome(t, ids[2]))
			require.Zero(t, b.scalar(t, `SELECT attempts FROM batchq.outcomes WHERE job_id = $1`, ids[1]),
				"never sent: its claim is not an attempt")
		})
	}
}

// A job an operator cancelled while it waited is not started by a handler
// that frees up while the pool's look at waiting jobs is out asking about
// it: the look holds the jobs it asks about out of the handlers' reach.
func TestCancelAJobClaimedAheadWhileThePoolLooksAtIt(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 1, Lease: time.Minute})
	// Handlers known to be quick: the pool claims ahead from its first claim.
	queue.SetAssumedRun(b.client, time.Millisecond)
	first, second := b.enqueue(t, "a", 1), b.enqueue(t, "a", 1)
	release := make(chan struct{})
	var mu sync.Mutex
	var ran []int64
	handler := queue.Handler(func(ctx context.Context, j *queue.Job) (queue.Result, error) {
		mu.Lock()
		ran = append(ran, j.ID)
		mu.Unlock()
		if j.ID == first {
			<-release
		}
		return queue.Result{}, nil
	})
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	wait := b.work(ctx, queue.WorkerConfig{Queue: b.queue, Handler: handler, Concurrency: 1, BatchSize: 2,
		HeartbeatInterval: time.Hour, Drain: true, PollInterval: 10 * time.Millisecond})
	b.waitState(t, second, "running", "the pool claims the second job ahead")
	_, err := b.client.CancelJob(b.ctx, second, "not needed")
	require.NoError(t, err)

	// The second job's row held: the look (once the job has waited a
	// second) passes over it without waiting, sees the cancel committed
	// before, and hands the job back, and that write waits on the row. The
	// first job's handler ends then.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	// Whatever fails below, the pool can stop.
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE id = $1 FOR UPDATE`, second)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock'`) > 0
	}, 10*time.Second, 10*time.Millisecond, "the cancelled job's hand-back waits on the row")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND query LIKE '%heartbeat%'`), "a heartbeat waits on the row")
	close(release)
	time.Sleep(300 * time.Millisecond) // a free handler, the look still out
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, wait())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{first}, ran, "the cancelled job was never sent")
	require.Equal(t, "cancelled", b.outcome(t, second))
}

// A delete that waited for another delete of its queue, which made the
// queue again with a job in it before committing, judges the queue there is
// now: it holds a job, so the delete is refused (BQ203) and nothing goes.
func TestDeleteQueueLocksAQueueMadeAgainWhileItWaited(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Name: "dz"})
	first, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(b.ctx) }()
	_, err = first.Exec(b.ctx, `SELECT batchq.delete_queue('dz')`)
	require.NoError(t, err)
	_, err = first.Exec(b.ctx, `INSERT INTO batchq.queues (name) VALUES ('dz')`)
	require.NoError(t, err)
	_, err = first.Exec(b.ctx, `SELECT * FROM batchq.enqueue_job(queue => 'dz', tenant => 'acme', cost => 1)`)
	require.NoError(t, err)

	second := make(chan error, 1)
	go func() {
		_, err := b.pool.Exec(b.ctx, `SELECT batchq.delete_queue('dz')`)
		second <- err
	}()
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%delete_queue%'`) > 0
	}, 10*time.Second, time.Millisecond, "the second delete waits for the first")
	require.NoError(t, first.Commit(b.ctx))
	err = <-second
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "BQ203", pe.Code, "%v", err)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.queues WHERE name = 'dz'`))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'dz'`))
}

// Heartbeat tells a worker of its own that a job was asked to stop, and
// Fail then records it as cancelled, whatever the retries left.
func TestHeartbeatReportsACancelRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 5})
	id := b.enqueue(t, "a", 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Heartbeat(b.ctx, jobs[0]))
	require.NoError(t, b.client.Cancel(b.ctx, id, ""))
	require.ErrorIs(t, b.client.Heartbeat(b.ctx, jobs[0]), queue.ErrCancelRequested)
	retrying, err := b.client.Fail(b.ctx, jobs[0], errors.New("stopped"), nil)
	require.NoError(t, err)
	require.False(t, retrying, "a cancelled run is not retried")
	require.Equal(t, "cancelled", b.outcome(t, id))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
}

// A bulk cancel takes only the jobs its filter picks, takes their cost out
// of their tenant's ledger, so that the tenant's jobs left are re-keyed to
// where they would be without the cancelled backlog, and asks a running one
// to stop.
func TestCancelJobsInBulkRekeysTheFairOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "heavy", 2500, 100) // 2,500 rounds of backlog
	kept, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "heavy", Kind: "summarize", Cost: 100})
	require.NoError(t, err)
	b.enqueueN(t, "light", 5, 100)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil) // heavy's first job runs
	require.NoError(t, err)
	require.Equal(t, "heavy", jobs[0].Tenant)

	f := queue.JobFilter{Queue: b.queue, Tenant: "heavy", Kind: "default"}
	n, err := b.client.CountJobs(b.ctx, f)
	require.NoError(t, err)
	require.Equal(t, queue.JobCount{Queued: 2499, Running: 1, Tokens: 250000}, n)
	st, err := b.client.CancelJobs(b.ctx, f, "bad import")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Cancelled: 2499, Stopping: 1}, st)
	require.Equal(t, int64(2499), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'cancelled' AND error = 'bad import'`))
	require.Equal(t, int64(6), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`), "the jobs the filter leaves out stay")
	require.ErrorIs(t, b.client.Heartbeat(b.ctx, jobs[0]), queue.ErrCancelRequested)
	retrying, err := b.client.Fail(b.ctx, jobs[0], errors.New("stopped"), nil)
	require.NoError(t, err)
	require.False(t, retrying)

	// heavy's ledger holds what it was served and what it has queued, not
	// the cancelled backlog: its job left comes in its second round, among
	// light's, not after them.
	require.Equal(t, int64(200), b.scalar(t, `SELECT cum FROM batchq.tenant_ring WHERE tenant = 'heavy'`))
	order := b.drainOrder(t, 10)
	require.Len(t, order, 6)
	require.Equal(t, []string{"light", "heavy", "light", "light", "light", "light"}, tenantsOf(order))
	require.Equal(t, kept.ID, order[1].ID)
}

// A running job asked to stop is not asked again by a second bulk cancel
// (the same command run again): it is not counted as newly asked, and it
// keeps the first request's time and reason, which its outcome records. A
// single cancel keeps them too.
func TestCancelJobsAgainLeavesARunningJobsFirstRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueueN(t, "a", 2, 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 1})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	f := queue.JobFilter{Queue: b.queue}

	st, err := b.client.CancelJobs(b.ctx, f, "bad import")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Cancelled: 1, Stopping: 1}, st)
	requested := func() (at time.Time, reason string) {
		t.Helper()
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT cancel_requested_at, last_error FROM batchq.jobs WHERE id = $1`,
			jobs[0].ID).Scan(&at, &reason))
		return at, reason
	}
	firstAt, reason := requested()
	require.Equal(t, "bad import", reason)

	st, err = b.client.CancelJobs(b.ctx, f, "")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{}, st, "the running job was asked already")
	n, err := b.client.CountJobs(b.ctx, f)
	require.NoError(t, err)
	require.Equal(t, queue.JobCount{Running: 1, Tokens: 1}, n, "it still runs, and the count shows it")
	st, err = b.client.CancelJob(b.ctx, jobs[0].ID, "another reason")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{}, st, "asked already: not counted again")
	at, reason := requested()
	require.Equal(t, "bad import", reason)
	require.True(t, at.Equal(firstAt), "asked at %s, then at %s", firstAt, at)

	_, err = b.client.Fail(b.ctx, jobs[0], errors.New("stopped"), nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1 AND outcome = 'cancelled' AND error = 'bad import'`, jobs[0].ID))
}

// A bulk cancel filters by kind and by when jobs were enqueued.
func TestCancelJobsFilters(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	enq := func(kind string) int64 {
		res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "a", Kind: kind, Cost: 1})
		require.NoError(t, err)
		return res.ID
	}
	old := enq("embed")
	b.exec(t, `UPDATE batchq.jobs SET enqueued_at = now() - interval '2 hours' WHERE id = $1`, old)
	newEmbed, summarize := enq("embed"), enq("summarize")

	st, err := b.client.CancelJobs(b.ctx, queue.JobFilter{Queue: b.queue, Kind: "embed", EnqueuedBefore: time.Now().Add(-time.Hour)}, "")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Cancelled: 1}, st)
	require.Equal(t, "cancelled", b.outcome(t, old))
	st, err = b.client.CancelJobs(b.ctx, queue.JobFilter{Queue: b.queue, EnqueuedAfter: time.Now().Add(-time.Hour), Kind: "summarize"}, "")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Cancelled: 1}, st)
	require.Equal(t, "cancelled", b.outcome(t, summarize))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1`, newEmbed))

	_, err = b.client.CancelJobs(b.ctx, queue.JobFilter{Queue: "nope"}, "")
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	_, err = b.client.CountJobs(b.ctx, queue.JobFilter{Queue: b.queue, Tenant: "a\x00b"})
	var bad *queue.InvalidJobError
	require.ErrorAs(t, err, &bad)
	require.Equal(t, "tenant", bad.Field)
}

// A bulk cancel holds its batch while it re-keys the jobs its refunds move,
// so it must not wait for those jobs: here one cancel (kind x) holds a's
// x jobs and waits for b's, which another cancel's transaction holds while
// it re-keys b; that transaction then cancels a's y jobs, which re-keys
// a's x jobs. Waiting for them closed a cycle, and one of the two died of
// deadlock_detected. Now the second leaves a's re-key to maintenance, and
// both commit.
func TestBulkCancelsOnOneQueueNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	var ids = map[string][]int64{}
	for _, tk := range []struct{ tenant, kind string }{{"a", "y"}, {"a", "x"}, {"b", "y"}, {"b", "x"}} {
		for range 3 {
			res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: tk.tenant, Kind: tk.kind, Cost: 100})
			require.NoError(t, err)
			ids[tk.tenant+tk.kind] = append(ids[tk.tenant+tk.kind], res.ID)
		}
	}
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	cancel := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, tenant, kind string) (n int) {
		err := q.QueryRow(b.ctx, `SELECT cancelled FROM batchq.cancel_jobs($1, p_tenant => $2, p_kind => $3)`,
			b.queue, tenant, kind).Scan(&n)
		require.NoError(t, err, "cancel %s's %s jobs", tenant, kind)
		return n
	}
	require.Equal(t, 3, cancel(tx, "b", "y"), "b's y jobs") // holds b's x jobs, re-keyed

	other := make(chan int, 1)
	go func() {
		var n int
		err := b.pool.QueryRow(b.ctx, `SELECT cancelled FROM batchq.cancel_jobs($1, p_kind => 'x')`, b.queue).Scan(&n)
		if err != nil {
			t.Errorf("cancel kind x: %v", err)
		}
		other <- n
	}()
	waitForLockWait(t, b, "%cancel_jobs%")                  // holding a's x jobs, waiting for b's
	require.Equal(t, 3, cancel(tx, "a", "y"), "a's y jobs") // a's x jobs held by the other
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, 6, <-other)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
	require.Equal(t, int64(12), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'cancelled'`))
	requireInvariants(t, b.ctx, b.pool)
}

// A queue that holds jobs is not deleted, and the error says how many, and
// how many schedules it has; an empty one is, with its settings and its
// schedules, which the result counts, and its outcomes stay.
func TestDeleteQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueueN(t, "a", 3, 1)
	_, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	_, err = b.client.UpdateQueueTenant(b.ctx, b.queue, "a", queue.TenantUpdate{Weight: ptr(2.0)})
	require.NoError(t, err)
	for _, name := range []string{"nightly", "hourly"} {
		err = b.client.CreateSchedule(b.ctx, queue.Schedule{Name: name, Queue: b.queue, Tenant: "a", Cron: "@daily", Cost: 1})
		require.NoError(t, err)
	}

	_, err = b.client.DeleteQueue(b.ctx, b.queue)
	var full *queue.QueueNotEmptyError
	require.ErrorAs(t, err, &full)
	require.Equal(t, queue.QueueNotEmptyError{Queue: b.queue, Queued: 2, Running: 1, Schedules: 2}, *full)
	require.Contains(t, err.Error(), `holds 3 unfinished jobs (2 queued, 1 running, 0 retrying, 0 scheduled): cancel them`)
	require.Contains(t, err.Error(), `; it also has 2 schedules, which may enqueue more and are deleted with it (batchq schedules list --queue `+b.queue+`)`)

	_, err = b.client.CancelJobs(b.ctx, queue.JobFilter{Queue: b.queue}, "")
	require.NoError(t, err)
	_, err = b.client.DeleteQueue(b.ctx, b.queue)
	require.ErrorAs(t, err, &full)
	require.Equal(t, int64(1), full.Running, "a running job holds the queue until it stops")
	require.Contains(t, err.Error(), `holds 1 unfinished job (0 queued, 1 running, 0 retrying, 0 scheduled): cancel it `)
	b.exec(t, `UPDATE batchq.jobs SET lease_expires_at = now() - interval '1 second'`)
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)

	del, err := b.client.DeleteQueue(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, queue.DeletedQueue{Schedules: 2}, del)
	_, err = b.client.Queue(b.ctx, b.queue)
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	require.Equal(t, int64(3), b.scalar(t, `SELECT count(*) FROM batchq.outcomes`), "outcomes stay, as history")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.queue_tenants`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.tenant_ring`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.schedules`))
	_, err = b.client.DeleteQueue(b.ctx, b.queue)
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	// The name can be used again; a queue without schedules deletes none.
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: b.queue}))
	del, err = b.client.DeleteQueue(b.ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, del.Schedules)
}

// A tenant's weight and bound for one queue apply there and nowhere else.
func TestTenantSettingsForOneQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Name: "imports", Quantum: 100})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "chat", Quantum: 100}))
	qt, err := b.client.UpdateQueueTenant(b.ctx, "imports", "a", queue.TenantUpdate{Weight: ptr(3.0), MaxQueued: ptr(2)})
	require.NoError(t, err)
	require.Equal(t, queue.QueueTenant{Queue: "imports", Tenant: "a", Weight: 3, MaxQueued: 2}, qt)

	// The bound refuses the third job in imports only.
	for range 2 {
		b.enqueue(t, "a", 100)
	}
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: "imports", Tenant: "a", Cost: 100})
	var full *queue.QueueFullError
	require.ErrorAs(t, err, &full)
	_, err = b.client.EnqueueMany(b.ctx, []queue.NewJob{{Queue: "chat", Tenant: "a", Cost: 1}, {Queue: "chat", Tenant: "a", Cost: 1}, {Queue: "chat", Tenant: "a", Cost: 1}})
	require.NoError(t, err)

	// In imports a's share of a round is 3 quanta; in chat, 1.
	require.Equal(t, int64(300), b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE queue = 'imports' AND tenant = 'a'`))
	require.Equal(t, int64(100), b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE queue = 'chat' AND tenant = 'a'`))

	// Cleared, its settings for every queue apply in imports again.
	had, err := b.client.ClearQueueTenant(b.ctx, "imports", "a")
	require.NoError(t, err)
	require.True(t, had)
	require.Equal(t, int64(100), b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE queue = 'imports' AND tenant = 'a'`))
	b.enqueue(t, "a", 100)

	qts, err := b.client.QueueTenants(b.ctx)
	require.NoError(t, err)
	require.Empty(t, qts)
	_, err = b.client.UpdateQueueTenant(b.ctx, "nope", "a", queue.TenantUpdate{Weight: ptr(2.0)})
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	_, err = b.client.UpdateQueueTenant(b.ctx, "imports", "a", queue.TenantUpdate{Weight: ptr(1e7)})
	var se *queue.SettingError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "weight", se.Field)
}

// Settings for one queue set back to zero, both of them, are removed as
// ClearQueueTenant removes them: the tenant's settings for every queue
// apply there, and QueueTenants lists no empty row for it.
func TestTenantSettingsForOneQueueBackToZeroAreRemoved(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Name: "imports", Quantum: 100})
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "a", Weight: 2}))
	b.enqueue(t, "a", 100)
	_, err := b.client.UpdateQueueTenant(b.ctx, "imports", "a", queue.TenantUpdate{Weight: ptr(3.0), MaxQueued: ptr(5)})
	require.NoError(t, err)
	require.Equal(t, int64(300), b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE queue = 'imports' AND tenant = 'a'`))

	qt, err := b.client.UpdateQueueTenant(b.ctx, "imports", "a", queue.TenantUpdate{Weight: ptr(0.0)})
	require.NoError(t, err)
	require.Equal(t, queue.QueueTenant{Queue: "imports", Tenant: "a", MaxQueued: 5}, qt, "one zero keeps the other setting")
	qt, err = b.client.UpdateQueueTenant(b.ctx, "imports", "a", queue.TenantUpdate{MaxQueued: ptr(0)})
	require.NoError(t, err)
	require.Equal(t, queue.QueueTenant{Queue: "imports", Tenant: "a"}, qt)
	qts, err := b.client.QueueTenants(b.ctx)
	require.NoError(t, err)
	require.Empty(t, qts)
	require.Equal(t, int64(200), b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE queue = 'imports' AND tenant = 'a'`),
		"the weight for every queue applies")

	// Zeros for a tenant with no settings there create none.
	_, err = b.client.UpdateQueueTenant(b.ctx, "imports", "b", queue.TenantUpdate{Weight: ptr(0.0), MaxQueued: ptr(0)})
	require.NoError(t, err)
	qts, err = b.client.QueueTenants(b.ctx)
	require.NoError(t, err)
	require.Empty(t, qts)
	had, err := b.client.ClearQueueTenant(b.ctx, "imports", "b")
	require.NoError(t, err)
	require.False(t, had)
}

func ptr[T any](v T) *T { return &v }
