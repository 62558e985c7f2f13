package queue_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

func TestWorkDrainsAndRecordsEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 3})
	b.enqueueN(t, "ok", 40, 10)
	b.enqueueN(t, "flaky", 10, 10)
	b.enqueueN(t, "broken", 5, 10)

	var mu sync.Mutex
	attempts := map[int64]int{}
	var events atomic.Int64
	err := b.client.Work(b.ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 4, BatchSize: 8, Drain: true,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 20 * time.Millisecond,
		OnEvent: func(queue.Event) { events.Add(1) },
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			mu.Lock()
			attempts[j.ID]++
			mu.Unlock()
			switch j.Tenant {
			case "flaky":
				if j.Attempt == 1 {
					return queue.Result{}, errors.New("503 from provider")
				}
			case "broken":
				return queue.Result{}, queue.Permanent(errors.New("400: bad request"))
			}
			return queue.Result{ActualCost: 12, Output: []byte(`{"ok":true}`)}, nil
		},
	})
	require.NoError(t, err)

	require.Equal(t, int64(50), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`))
	require.Equal(t, int64(5), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'discarded' AND attempts = 1`))
	require.Equal(t, int64(10), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE tenant = 'flaky' AND attempts = 2`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
	for id, n := range attempts {
		require.LessOrEqual(t, n, 2, "job %d ran %d times", id, n)
	}
	require.Greater(t, events.Load(), int64(55))
}

func TestGracefulShutdownHandsBackUnstartedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	// Handlers known to be quick: the pool claims ahead from its first claim.
	queue.SetAssumedRun(b.client, time.Millisecond)
	b.enqueueN(t, "t", 10, 10)

	ctx, cancel := context.WithCancel(b.ctx)
	started := make(chan int64, 10)
	release := make(chan struct{})
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 2, BatchSize: 6, PollInterval: 20 * time.Millisecond,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			started <- j.ID
			<-release
			return queue.Result{}, nil
		},
	})
	// Two handlers are busy; the rest of the claim waits for them.
	<-started
	<-started
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'running'`) == 6
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	time.Sleep(50 * time.Millisecond) // let the pool stop claiming before the handlers return
	close(release)
	require.NoError(t, wait())

	// The two that ran succeeded; the four claimed but never started went back
	// without using an attempt.
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`))
	require.Equal(t, int64(4), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'retrying' AND attempt = 0`))
	require.Equal(t, int64(4), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'running'`))
}

func TestShutdownTimeoutCancelsHandlersAndUsesTheirAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "t", 1)
	ctx, cancel := context.WithCancel(b.ctx)
	started := make(chan struct{})
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, ShutdownTimeout: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			close(started)
			<-ctx.Done()
			return queue.Result{}, ctx.Err()
		},
	})
	<-started
	cancel()
	require.NoError(t, wait())
	// The cancelled call may have reached the provider: it used its attempt,
	// so the next run sends the next attempt number, and nothing is refunded.
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'retrying' AND attempt = 1
		AND last_error LIKE '%ShutdownTimeout%'`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.outcomes`))
}

func TestLostLeaseCancelsTheHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Second})
	id := b.enqueue(t, "t", 1)
	ctx, cancel := context.WithCancel(b.ctx)
	cancelled := make(chan struct{})
	var outcomes sync.Map
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, HeartbeatInterval: 50 * time.Millisecond, MaintainInterval: -1,
		PollInterval: 20 * time.Millisecond,
		OnEvent: func(e queue.Event) {
			if e.Kind == queue.EventFinished {
				outcomes.Store(e.Job.ID, e.Outcome)
			}
		},
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			// Another process rescues the job meanwhile.
			_, err := b.pool.Exec(context.Background(), `UPDATE batchq.jobs SET lease_token = gen_random_uuid() WHERE id = $1`, j.ID)
			if err != nil {
				return queue.Result{}, err
			}
			<-ctx.Done()
			close(cancelled)
			return queue.Result{}, ctx.Err()
		},
	})
	defer func() { cancel(); require.NoError(t, wait()) }() // Work ends before the pool closes
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler of a job whose lease was lost was never cancelled")
	}
	require.Eventually(t, func() bool { o, _ := outcomes.Load(id); return o == "lease_lost" }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'running'`), "the rescuer's lease stands")
}

func TestWorkWakesOnEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	ctx, cancel := context.WithCancel(b.ctx)
	got := make(chan int64, 1)
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1,
		PollInterval: time.Hour, // only a notification can wake it
		Handler: func(hctx context.Context, j *queue.Job) (queue.Result, error) {
			select {
			case got <- j.ID:
			case <-ctx.Done():
			}
			return queue.Result{}, nil
		},
	})
	defer func() { cancel(); require.NoError(t, wait()) }() // Work ends before the pool closes
	// Enqueue until the listener is up; the first job it sees proves the wake-up.
	deadline := time.After(30 * time.Second)
	for i := 0; ; i++ {
		id := b.enqueue(t, fmt.Sprint("t", i), 1)
		select {
		case claimed := <-got:
			require.LessOrEqual(t, claimed, id)
			return
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no worker woke up for an enqueue")
		}
	}
}

// An enqueue wakes the workers waiting on its queue only for a tenant that
// had nothing queued: one with jobs queued ahead of the new ones is being
// served already, and each notifying commit holds a lock shared by the whole
// server until it is flushed. When what a tenant had queued was all claimed
// while the enqueue's transaction was open, and claims went on past the new
// jobs' round, the commit-time check wakes them. A notification sent after a
// commit arrives after any that commit sent, so each step marks where its
// own notifications end.
func TestEnqueueNotifiesOnlyForATenantThatHadNothingQueued(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(b.ctx, "LISTEN batchq_jobs")
	require.NoError(t, err)
	received := func(mark string) []string {
		b.exec(t, `SELECT pg_notify('batchq_jobs', $1)`, mark)
		var got []string
		for {
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			n, err := conn.Conn().WaitForNotification(ctx)
			cancel()
			require.NoError(t, err, "after %v", got)
			if n.Payload == mark {
				return got
			}
			got = append(got, n.Payload)
		}
	}
	wake := []string{b.queue}

	b.enqueue(t, "a", 10)
	require.Equal(t, wake, received("a joined"))
	b.enqueue(t, "a", 10)
	require.Empty(t, received("a had a job queued"))
	b.enqueueN(t, "b", 5, 10)
	require.Equal(t, wake, received("b joined beside a's jobs"))
	b.enqueueN(t, "b", 3, 10)
	require.Empty(t, received("b had jobs queued"))

	// a's two jobs fill its first two rounds; the transaction adds its third.
	// Meanwhile every committed job is claimed, b's last ones rounds later.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 10})
	require.NoError(t, err)
	for range 10 { // one at a time: the cursor follows each job
		jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 1})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
	}
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, wake, received("a's jobs were all claimed, and claims went past its new one"))
}

// A result the server refuses, for a reason batchq does not foresee, costs the
// job its result, not a second run: the completion is written without it.
// A trigger plays the server refusing one result as a data error.
func TestRefusedResultIsDroppedNotRunAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Second, MaxAttempts: 3})
	b.exec(t, `CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.result ? 'poison' THEN
				RAISE invalid_text_representation USING MESSAGE = 'this result cannot be stored';
			END IF;
			RETURN NEW;
		END $$`)
	b.exec(t, `CREATE TRIGGER refuse_poison BEFORE INSERT ON batchq.outcomes FOR EACH ROW EXECUTE FUNCTION refuse_poison()`)
	b.enqueueN(t, "t", 6, 1)
	poison := b.enqueue(t, "p", 1)

	var runs sync.Map
	err := b.client.Work(b.ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 4, BatchSize: 8, Drain: true,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			n, _ := runs.LoadOrStore(j.ID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			if j.ID == poison {
				return queue.Result{Output: []byte(`{"poison":true}`)}, nil
			}
			return queue.Result{Output: []byte(`{"ok":true}`)}, nil
		},
	})
	require.NoError(t, err)
	runs.Range(func(id, n any) bool {
		require.Equal(t, int32(1), n.(*atomic.Int32).Load(), "job %d", id)
		return true
	})
	require.Equal(t, int64(7), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`))
	require.Equal(t, int64(6), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE result = '{"ok":true}'`))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1 AND result IS NULL`, poison))
}

// A heartbeat stuck on a connection that went away without a word (a
// failover, a NAT that forgot it) gives up and tries again on another, so
// the leases of running jobs hold and no other worker runs them again.
func TestHeartbeatsOutliveASilentlyDeadConnection(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: 9 * time.Second}) // heartbeats 3 s apart
	id := b.enqueue(t, "t", 1)
	proxy, viaProxy := pgtest.NewProxy(t, b.pool.Config().ConnString())
	// Room in the pool beyond the connections the freeze kills: pgx holds a
	// dead connection's slot for up to 15 s while it closes.
	wpool := pgtest.Connect(t, viaProxy+"&pool_max_conns=12")
	worker, err := queue.NewClient(wpool, queue.Config{})
	require.NoError(t, err)

	started, finish, exited := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var finishOnce sync.Once
	var runs atomic.Int32
	var workErr error
	t.Cleanup(func() { // also when a check fails: the worker must stop before its pool closes
		finishOnce.Do(func() { close(finish) })
		proxy.Cut()
		proxy.Restore()
		<-exited
	})
	go func() {
		defer close(exited)
		workErr = worker.Work(b.ctx, queue.WorkerConfig{
			Queue: b.queue, Concurrency: 1, Drain: true, PollInterval: 50 * time.Millisecond, MaintainInterval: -1,
			Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
				if runs.Add(1) == 1 {
					close(started)
				}
				<-finish
				return queue.Result{}, nil
			},
		})
	}()
	<-started
	time.Sleep(3500 * time.Millisecond) // a heartbeat has come, on a pooled connection
	// Idle connections in the worker's pool, as a busy worker has: the next
	// heartbeat takes one.
	var conns []*pgxpool.Conn
	for range 3 {
		ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
		c, err := wpool.Acquire(ctx)
		cancel()
		if err != nil {
			break // the rest are in use
		}
		conns = append(conns, c)
	}
	require.NotEmpty(t, conns)
	for _, c := range conns {
		c.Release()
	}
	proxy.Freeze() // every connection the worker holds now hears nothing
	frozen := time.Now()
	// Past the lease, as the heartbeats last extended it before the freeze.
	time.Sleep(time.Until(frozen.Add(10 * time.Second)))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs
		WHERE id = $1 AND state = 'running' AND lease_expires_at > now()`, id), "the lease still holds")

	proxy.Cut() // the frozen connections fail now, and the worker reconnects
	proxy.Restore()
	finishOnce.Do(func() { close(finish) })
	<-exited
	require.NoError(t, workErr)
	require.Equal(t, int32(1), runs.Load())
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1 AND outcome = 'succeeded'`, id))
}

// readOnlyStore reads a quota but cannot save it: a pool can size its claims
// by the headroom, and no call is ever admitted.
type readOnlyStore struct{ throttle.MemoryStore }

func (s *readOnlyStore) Update(context.Context, string, func(*throttle.State) error) error {
	return errors.New("quota row: write failed")
}

// A throttle that cannot admit is reported, and its jobs wait in their
// places for it, holding off further claims, instead of going back at once
// to be claimed again in a loop that refunds and rewrites every job of the
// backlog, silently.
func TestThrottleErrorsHoldJobsAndAreReported(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueueN(t, "t", 200, 1)
	th, err := throttle.New(throttle.Config{Store: &readOnlyStore{}})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	defer cancel()
	var errs, released, ran atomic.Int32
	err = b.client.Work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 2, BatchSize: 4, PollInterval: 100 * time.Millisecond, MaintainInterval: -1,
		Throttle: th,
		OnEvent: func(e queue.Event) {
			switch {
			case e.Kind == queue.EventError:
				errs.Add(1)
			case e.Kind == queue.EventFinished && e.Outcome == "released":
				released.Add(1)
			}
		},
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			ran.Add(1)
			return queue.Result{}, nil
		},
	})
	require.NoError(t, err)
	require.Zero(t, ran.Load())
	require.Positive(t, errs.Load(), "the throttle's errors are reported")
	require.LessOrEqual(t, released.Load(), int32(2+4), "only the jobs held at the shutdown go back")
	require.LessOrEqual(t, b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`), int64(2+4))
}

// An interactive call refused with an error that says ErrRateLimited, and
// no 429 response, pauses the fleet as a 429 does, as in a worker pool.
func TestCallInteractiveRateLimitedErrorPauses(t *testing.T) {
	t.Parallel()
	th, err := throttle.New(throttle.Config{DefaultPause: 2 * time.Second, MaxPause: 2 * time.Second})
	require.NoError(t, err)
	resp, err := queue.CallInteractive(context.Background(), th, 100, func(context.Context) (*http.Response, error) {
		return nil, fmt.Errorf("openai: %w", queue.ErrRateLimited)
	})
	require.Nil(t, resp)
	require.ErrorIs(t, err, queue.ErrRateLimited)
	d, err := th.CanStart(context.Background(), 100, throttle.Batch)
	require.NoError(t, err)
	require.False(t, d.OK, "the fleet is paused")
	require.InDelta(t, 2*time.Second, d.Wait, float64(200*time.Millisecond))
}

// A new pool knows nothing of how long its handlers run, and claims only
// for them: a job held ahead of a call that takes seconds would wait in this
// pool while another worker of the fleet sat idle.
func TestANewPoolClaimsOnlyForItsHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for i := range 4 {
		b.enqueue(t, fmt.Sprint("t", i), 1)
	}
	started := make(chan int64, 4)
	release := make(chan struct{})
	handler := func(ctx context.Context, j *queue.Job) (queue.Result, error) {
		started <- j.ID
		<-release
		return queue.Result{}, nil
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	cfg := queue.WorkerConfig{Queue: b.queue, Concurrency: 2, BatchSize: 2, PollInterval: 20 * time.Millisecond,
		MaintainInterval: -1, Handler: handler}
	waitA := b.work(ctx, cfg)
	<-started
	<-started
	time.Sleep(300 * time.Millisecond) // room for a claim ahead, which must not come
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`),
		"the first pool claimed only for its two handlers")
	// A second worker finds the other two, and runs them beside the first.
	waitB := b.work(ctx, cfg)
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the second pool did not start the jobs the first left")
		}
	}
	close(release)
	cancel()
	require.NoError(t, waitA())
	require.NoError(t, waitB())
	require.Equal(t, int64(4), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`))
}
