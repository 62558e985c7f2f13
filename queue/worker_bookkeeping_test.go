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

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// A worker pool's bookkeeping: leases of the jobs it holds, the outcomes it
// reports, and the quota it claims against.

// runCounter counts handler runs per job id.
type runCounter struct {
	mu   sync.Mutex
	runs map[int64]int
}

func (r *runCounter) add(id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[int64]int{}
	}
	r.runs[id]++
	return r.runs[id]
}

func (r *runCounter) jobs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

func (r *runCounter) get(id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

// eventLog keeps the EventFinished outcomes per job, in order.
type eventLog struct {
	mu       sync.Mutex
	finished map[int64][]string
}

func (l *eventLog) on(e queue.Event) {
	if e.Kind != queue.EventFinished || e.Job == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finished == nil {
		l.finished = map[int64][]string{}
	}
	l.finished[e.Job.ID] = append(l.finished[e.Job.ID], e.Outcome)
}

func (l *eventLog) outcomes(id int64) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.finished[id]...)
}

// holdFinishWrites holds back every write of b's worker pools' completers
// until release: held receives while one waits.
func holdFinishWrites(b *testBundle) (held <-chan struct{}, release func()) {
	var hold atomic.Bool
	hold.Store(true)
	waiting := make(chan struct{}, 1)
	queue.SetBeforeFinishWrite(b.client, func() {
		for hold.Load() {
			select {
			case waiting <- struct{}{}:
			default:
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return waiting, func() { hold.Store(false) }
}

// A job whose handler has returned keeps its lease until the completer has
// written its finish: here the write is held back for three leases' worth,
// and the job, which succeeded, is not rescued and run again meanwhile.
func TestFinishedJobKeepsItsLeaseUntilItsFinishIsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Second})
	// Handlers known to be quick: the pool claims ahead from its first claim.
	queue.SetAssumedRun(b.client, time.Millisecond)
	x := b.enqueue(t, "x", 1)
	var runs runCounter
	var events eventLog
	held, release := holdFinishWrites(b)
	ctx, cancel := context.WithCancel(b.ctx)
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 2, BatchSize: 1,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, ShutdownTimeout: time.Second,
		OnEvent: events.on,
		Handler: func(context.Context, *queue.Job) (queue.Result, error) {
			runs.add(x)
			return queue.Result{}, nil
		},
	})
	defer func() { cancel(); require.NoError(t, wait()) }()
	<-held                      // x's handler returned; its completion waits
	time.Sleep(3 * time.Second) // three leases
	release()
	b.waitFinished(t, x)
	require.Equal(t, 1, runs.get(x), "x succeeded once; it must not run again")
	require.Equal(t, "succeeded", b.outcome(t, x))
	require.Eventually(t, func() bool { return len(events.outcomes(x)) > 0 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"succeeded"}, events.outcomes(x))
}

// While the completer cannot write outcomes (here its write is held back;
// in use, an operator's open transaction holding a row the write needs, or
// a schema migrated down under the worker), the pool claims nothing more:
// its handlers, free again, would otherwise go on calling the provider for
// jobs whose outcomes cannot be written either, and whose leases then run
// out, so they are sent again. It claims again once the write ends.
func TestPoolClaimsNothingWhileItsOutcomesCannotBeWritten(t *testing.T) {
	t.Parallel()
	// A write may take a second before claims stop (a quarter of the lease).
	b := setup(t, queue.QueueConfig{Lease: 8 * time.Second})
	queue.SetAssumedRun(b.client, time.Millisecond)
	x := b.enqueue(t, "x", 1)
	var runs runCounter
	held, release := holdFinishWrites(b)
	ctx, cancel := context.WithCancel(b.ctx)
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 2, BatchSize: 4,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond,
		ShutdownTimeout: time.Second,
		Handler: func(_ context.Context, j *queue.Job) (queue.Result, error) {
			runs.add(j.ID)
			return queue.Result{}, nil
		},
	})
	// A failed assertion below still lets the write go, so the pool can stop.
	defer func() { release(); cancel(); require.NoError(t, wait()) }()
	<-held // x's handler returned; its completion waits
	time.Sleep(1500 * time.Millisecond)
	more := make([]int64, 20)
	for i := range more {
		more[i] = b.enqueue(t, "y", 1)
	}
	time.Sleep(time.Second)
	require.Equal(t, 1, runs.jobs(), "the pool claimed and ran jobs while the outcome before them could not be written")
	require.Equal(t, int64(len(more)), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'y' AND state = 'queued'`))

	release()
	for _, id := range append(more, x) {
		b.waitFinished(t, id)
		require.Equal(t, "succeeded", b.outcome(t, id))
		require.Equal(t, 1, runs.get(id), "job %d ran once", id)
	}
}

// A heartbeat never waits for a row another transaction holds: the run is
// returned as held, its lease as it was, while every other run's lease is
// extended. Waiting for it (an operator's cancel in an open transaction, a
// finish in flight) held up the whole pool's leases until they ran out.
func TestHeartbeatPassesOverARowAnotherTransactionHolds(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Minute})
	locked, free := b.enqueue(t, "a", 1), b.enqueue(t, "b", 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 2})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	before := map[int64]time.Time{}
	for _, j := range jobs {
		before[j.ID] = j.LeaseExpiresAt
	}

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE id = $1 FOR UPDATE`, locked)
	require.NoError(t, err)

	time.Sleep(10 * time.Millisecond) // so that an extended lease ends later
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, b.client.Heartbeat(ctx, jobs...), "the heartbeat waited for the held row, or took it for lost")
	for _, j := range jobs {
		switch j.ID {
		case locked:
			require.True(t, j.LeaseExpiresAt.Equal(before[locked]), "the held run's lease is as it was")
		case free:
			require.True(t, j.LeaseExpiresAt.After(before[free]), "the other run's lease is extended")
		}
	}
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND lease_expires_at > $2`,
		free, before[free]))

	require.NoError(t, tx.Rollback(b.ctx))
	require.NoError(t, b.client.Heartbeat(b.ctx, jobs...))
	for _, j := range jobs {
		require.True(t, j.LeaseExpiresAt.After(before[j.ID]), "job %d's lease is extended once the row is free", j.ID)
	}
}

// A job the pool claimed ahead of its handlers holds its lease while it
// waits for one, but not for long: here the only handler is busy for five
// leases' worth, and the job claimed behind it goes back to its tenant's
// queue after a quarter of the lease, for any worker to run, without using
// an attempt. The pool then claims only for free handlers, so it is not
// claimed ahead and handed back again and again; it runs once, on its first
// attempt, when the handler is free.
func TestClaimedAheadJobsGoBackRatherThanWaitOutTheirLease(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Second})
	// Handlers known to be quick: the pool claims ahead from its first claim.
	queue.SetAssumedRun(b.client, time.Millisecond)
	first := b.enqueue(t, "a", 1)
	second := b.enqueue(t, "a", 1)

	var runs runCounter
	var events eventLog
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, BatchSize: 1,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 100 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		OnEvent:           events.on,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			runs.add(j.ID)
			if j.ID == first {
				close(started)
				// A long job: five leases' worth, heartbeated all along.
				select {
				case <-time.After(5 * time.Second):
				case <-ctx.Done():
					return queue.Result{}, ctx.Err()
				}
			}
			return queue.Result{}, nil
		},
	})
	<-started
	// Claimed ahead, then handed back once it waited a quarter of the lease:
	// while the first job still runs, the second is queued, held by nobody.
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'queued'`, second) == 1
	}, 4*time.Second, 10*time.Millisecond, "the claimed-ahead job was not handed back while the handler stayed busy")
	time.Sleep(time.Second)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'queued'`, second),
		"the job was claimed ahead again while the only handler was still busy")
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.outcomes`) == 2
	}, 20*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, wait())

	require.Equal(t, 1, runs.get(first))
	require.Equal(t, []string{"released", "succeeded"}, events.outcomes(second),
		"the claimed-ahead job goes back once, and runs when a handler is free")
	require.Equal(t, 1, runs.get(second), "the claimed-ahead job ran more than once")
	require.Equal(t, int64(1), b.scalar(t, `SELECT attempts FROM batchq.outcomes WHERE job_id = $1`, second),
		"handing a claimed-ahead job back used an attempt")
}

// A job claimed ahead of its handlers whose deadline passes while it waits
// for one is not run: it is handed back and recorded as expired, its cost
// refunded, as any job that expires before it runs.
func TestClaimedAheadJobPastItsDeadlineIsNotRun(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	// Handlers known to be quick: the pool claims ahead from its first claim.
	queue.SetAssumedRun(b.client, time.Millisecond)
	first := b.enqueue(t, "a", 1)
	deadline := time.Now().Add(3 * time.Second)
	late, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "b", Cost: 7, Deadline: deadline})
	require.NoError(t, err)

	var runs runCounter
	var events eventLog
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, BatchSize: 1,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond,
		OnEvent: events.on,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			runs.add(j.ID)
			if j.ID == first {
				// Busy past the other job's deadline; the pool claims that
				// one ahead meanwhile.
				select {
				case <-time.After(time.Until(deadline) + 300*time.Millisecond):
				case <-ctx.Done():
					return queue.Result{}, ctx.Err()
				}
			}
			return queue.Result{}, nil
		},
	})
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1 AND outcome = 'expired'`, late.ID) == 1
	}, 20*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, wait())

	require.Equal(t, 1, runs.get(first))
	require.Equal(t, 0, runs.get(late.ID), "the job ran after its deadline")
	// Claimed before its deadline (a claim after it would have dropped it,
	// unclaimed and with no event), then handed back unstarted: never
	// served, so it has no first claim.
	require.Equal(t, []string{"released"}, events.outcomes(late.ID), "the job was not claimed ahead and handed back unstarted")
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1 AND first_claimed_at IS NULL`, late.ID),
		"a job that never ran has no first claim")
	require.Equal(t, int64(0), b.scalar(t, `SELECT attempts FROM batchq.outcomes WHERE job_id = $1`, late.ID),
		"an attempt was used")
}

// A completion the database refuses for its data costs only itself: the
// completer writes the rest of its batch in parts, so the other jobs are
// recorded at once, and run once, while the refused one is reported as
// unrecorded (not succeeded) and left running for lease expiry and rescue.
// A trigger stands in for whatever the server refuses in one row.
func TestOneRefusedCompletionCostsOnlyItself(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Minute})
	poison := b.enqueue(t, "p", 1)
	var good []int64
	for range 5 {
		good = append(good, b.enqueue(t, "g", 1))
	}
	b.exec(t, `CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.job_id = `+fmt.Sprint(poison)+` THEN
				RAISE EXCEPTION 'refused' USING ERRCODE = 'invalid_parameter_value';
			END IF;
			RETURN NEW;
		END $$`)
	b.exec(t, `CREATE TRIGGER refuse_one BEFORE INSERT ON batchq.outcomes FOR EACH ROW EXECUTE FUNCTION refuse_one()`)

	var runs runCounter
	var events eventLog
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	release := make(chan struct{})
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 6, BatchSize: 6,
		PollInterval: 20 * time.Millisecond, MaintainInterval: -1, OnEvent: events.on,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			runs.add(j.ID)
			<-release // all six finish together, into one batch as a rule
			return queue.Result{}, nil
		},
	})
	require.Eventually(t, func() bool { return runs.get(poison) == 1 && runs.jobs() == 6 }, 10*time.Second, 5*time.Millisecond)
	close(release)
	require.Eventually(t, func() bool { return len(events.outcomes(poison)) == 1 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	err := wait()
	require.ErrorIs(t, err, queue.ErrUnrecorded, "a pool that could not record an outcome does not end as if all went well")
	require.ErrorContains(t, err, "1 runs ended without their outcome written")

	require.Equal(t, []string{"unrecorded"}, events.outcomes(poison))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1`, poison))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'running'`, poison))
	require.Equal(t, int64(5), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded' AND job_id = ANY($1)`, good))
	for _, id := range good {
		require.Equal(t, []string{"succeeded"}, events.outcomes(id))
		require.Equal(t, 1, runs.get(id))
	}
}

// A throttled pool claims no more than the quota has room for, counting the
// jobs it claimed whose handlers have not asked the throttle yet: with room
// for two jobs and eight idle handlers it claims two, and none is handed
// back for want of room.
func TestThrottledPoolClaimsNoMoreThanTheHeadroom(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	th, err := b.client.Throttle("k", throttle.Config{})
	require.NoError(t, err)
	// The provider said: 10 tokens left until a reset a minute away.
	now := time.Now().Truncate(time.Microsecond)
	require.NoError(t, th.ObserveSnapshot(b.ctx, now, now, quotaheaders.Tokens,
		quotaheaders.Snapshot{Remaining: 10, Limit: 1000, HasLimit: true, Reset: time.Minute, HasReset: true}))
	b.enqueueN(t, "t", 10, 5) // room for two

	var claimed, released atomic.Int64
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	hold := make(chan struct{})
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 8, BatchSize: 8, Throttle: th,
		PollInterval: 20 * time.Millisecond, MaintainInterval: -1,
		OnEvent: func(e queue.Event) {
			switch {
			case e.Kind == queue.EventClaimed:
				claimed.Add(1)
			case e.Kind == queue.EventFinished && e.Outcome == "released":
				released.Add(1)
			}
		},
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			<-hold
			return queue.Result{}, nil
		},
	})
	require.Eventually(t, func() bool { return claimed.Load() >= 2 }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(time.Second)
	c, r := claimed.Load(), released.Load()
	close(hold)
	cancel()
	require.NoError(t, wait())
	require.Equal(t, int64(2), c, "claimed more jobs than the quota had room for")
	require.Zero(t, r, "jobs claimed past the headroom were handed back to the tail")
}

// A release the database refuses (another worker rescued and claimed the
// job meanwhile) is reported as lease_lost, not released.
func TestRefusedReleaseIsReportedAsLeaseLost(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id := b.enqueue(t, "t", 1)

	var events eventLog
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, PollInterval: 20 * time.Millisecond, MaintainInterval: -1,
		OnEvent: events.on,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			// Another process rescued and re-claimed the job meanwhile.
			if _, err := b.pool.Exec(context.Background(),
				`UPDATE batchq.jobs SET lease_token = gen_random_uuid() WHERE id = $1`, j.ID); err != nil {
				return queue.Result{}, err
			}
			return queue.Result{}, queue.ErrRateLimited
		},
	})
	require.Eventually(t, func() bool { return len(events.outcomes(id)) > 0 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, wait())
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1 AND state = 'running'`, id),
		"the other worker's lease stands")
	require.Equal(t, []string{"lease_lost"}, events.outcomes(id))
}

// A heartbeat refused for a job's previous run does not cancel its next one:
// here a beat is held back, its runs listed, while the job is handed back (a
// 429) and claimed again by the same pool under a new token, and the new run
// goes on.
func TestStaleHeartbeatDoesNotCancelTheNextRun(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	k := b.enqueue(t, "a", 1)
	j := b.enqueue(t, "b", 1)
	require.Less(t, k, j)

	kStarted, j1Started, j2Started := make(chan struct{}), make(chan struct{}), make(chan struct{})
	letJ1Return := make(chan struct{})
	j2Cancelled := make(chan struct{})
	var runs runCounter
	var holdBeat atomic.Bool
	beatHeld, letBeat := make(chan struct{}, 1), make(chan struct{})
	queue.SetBeforeHeartbeat(b.client, func() {
		if holdBeat.CompareAndSwap(true, false) {
			beatHeld <- struct{}{}
			<-letBeat
		}
	})
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 2, BatchSize: 1,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, ShutdownTimeout: 100 * time.Millisecond,
		Handler: func(hctx context.Context, job *queue.Job) (queue.Result, error) {
			switch {
			case job.ID == k:
				close(kStarted)
				<-hctx.Done()
				return queue.Result{}, hctx.Err()
			case runs.add(job.ID) == 1:
				close(j1Started)
				<-letJ1Return
				return queue.Result{}, queue.ErrRateLimited // handed back, due now
			default:
				close(j2Started)
				select {
				case <-hctx.Done():
					close(j2Cancelled)
					return queue.Result{}, hctx.Err()
				case <-ctx.Done():
					return queue.Result{}, nil
				}
			}
		},
	})
	<-kStarted
	<-j1Started

	// The next beat lists (k, j) and is held back, as a slow database
	// would hold it.
	holdBeat.Store(true)
	<-beatHeld

	// Meanwhile j is handed back and this pool claims it again.
	close(letJ1Return)
	select {
	case <-j2Started:
	case <-time.After(10 * time.Second):
		t.Fatal("j was not claimed again")
	}
	close(letBeat) // the beat goes on with j's old token

	select {
	case <-j2Cancelled:
		t.Error("a heartbeat for j's previous run cancelled its new run, whose lease is fine")
	case <-time.After(time.Second):
	}
	cancel()
	require.NoError(t, wait())
}

// A throttled pool draining a queue whose only jobs have expired, with
// maintenance off, drops them itself and returns: the throttle's look at
// the next live job finds none, and a claim is what records expired jobs.
func TestThrottledDrainDropsExpiredJobsWithoutMaintenance(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	var ids []int64
	for range 3 {
		id := b.enqueue(t, "t", 10)
		b.expire(t, id)
		ids = append(ids, id)
	}
	th, err := b.client.Throttle("k", throttle.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	err = b.client.Work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, Drain: true, Throttle: th,
		PollInterval: 20 * time.Millisecond, MaintainInterval: -1,
		Handler: func(context.Context, *queue.Job) (queue.Result, error) {
			t.Error("an expired job reached a handler")
			return queue.Result{}, nil
		},
	})
	require.NoError(t, err)
	require.NoError(t, ctx.Err(), "the drain did not return")
	for _, id := range ids {
		require.Equal(t, "expired", b.outcome(t, id))
	}
}

// A pool whose heartbeat interval follows the queue's lease follows a change
// to it: after the lease is shortened, a job keeps its lease and runs once,
// whether it was running when the lease changed (the next beat reads the
// new lease) or was claimed under the short lease before the beats read it
// (the claim makes them read it at once). The old lease's beats come 4 s
// apart; the jobs run for several of the new leases.
func TestAShortenedLeaseIsKept(t *testing.T) {
	t.Parallel()
	for _, claimedAfter := range []bool{false, true} {
		t.Run(fmt.Sprint("claimed after the change=", claimedAfter), func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{Lease: 12 * time.Second})
			var runs runCounter
			var events eventLog
			started := make(chan struct{}, 1)
			ctx, cancel := context.WithCancel(b.ctx)
			defer cancel()
			wait := b.work(ctx, queue.WorkerConfig{
				Queue: b.queue, Concurrency: 1, BatchSize: 1,
				PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond,
				OnEvent: events.on,
				Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
					if runs.add(j.ID); j.Tenant == "warm-up" {
						return queue.Result{}, nil
					}
					select {
					case started <- struct{}{}:
					default:
					}
					select {
					case <-time.After(5 * time.Second):
					case <-ctx.Done():
						return queue.Result{}, ctx.Err()
					}
					return queue.Result{}, nil
				},
			})
			var id int64
			if claimedAfter {
				// The pool is up, its beats spaced for the long lease.
				b.waitFinished(t, b.enqueue(t, "warm-up", 1))
			} else {
				id = b.enqueue(t, "a", 1)
				<-started
			}
			lease := 2 * time.Second
			_, err := b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{Lease: &lease})
			require.NoError(t, err)
			if claimedAfter {
				id = b.enqueue(t, "a", 1)
			}
			b.waitFinished(t, id)
			cancel()
			require.NoError(t, wait())
			require.Equal(t, 1, runs.get(id), "the job lost its lease and ran again")
			require.Equal(t, []string{"succeeded"}, events.outcomes(id))
		})
	}
}

// Every job the pool's maintenance finishes is reported as the jobs its
// claims finish are: each expiry of a job deep in the backlog as
// EventExpired, and a job whose worker died with no attempts left as
// EventFinished "failed". Most jobs that expire are swept, not claimed, so
// without these the expired-jobs metric sees next to none.
func TestMaintenanceReportsWhatItFinishes(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 1})
	for range 20 {
		_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "slow", Cost: 1, TTL: time.Second})
		require.NoError(t, err)
	}
	dead := b.enqueue(t, "dead", 1)
	b.exec(t, `UPDATE batchq.jobs SET state = 'running', attempt = 1, lease_token = gen_random_uuid(),
		lease_expires_at = now() - interval '1 second', worker = 'gone' WHERE id = $1`, dead)

	var mu sync.Mutex
	expired := map[int64]bool{}
	finished := map[int64]string{}
	err := b.client.Work(b.ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, BatchSize: 1, Drain: true,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 100 * time.Millisecond,
		OnEvent: func(e queue.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case queue.EventExpired:
				require.Equal(t, b.queue, e.Queue)
				require.Equal(t, "slow", e.Job.Tenant)
				require.Equal(t, int64(1), e.Job.Cost)
				expired[e.Job.ID] = true
			case queue.EventFinished:
				finished[e.Job.ID] = e.Outcome
			}
		},
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			time.Sleep(300 * time.Millisecond) // slower than the deadlines
			return queue.Result{}, nil
		},
	})
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	swept := b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'expired'`)
	require.Greater(t, swept, int64(10), "most of the backlog expired")
	require.Len(t, expired, int(swept), "every expiry reported once")
	require.Equal(t, "failed", finished[dead])
	require.Equal(t, "failed", b.outcome(t, dead))
}

// Every attempt that ran reports how long: failed, retrying and released
// after a 429 as well as succeeded (the duration histogram skips zeros).
func TestEveryAttemptThatRanReportsItsDuration(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 2})
	for _, tenant := range []string{"ok", "flaky", "bad", "limited"} {
		b.enqueue(t, tenant, 1)
	}
	var mu sync.Mutex
	took := map[string][]time.Duration{} // by tenant and outcome
	var limited atomic.Bool
	require.NoError(t, b.client.Work(b.ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 4, Drain: true,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 20 * time.Millisecond,
		OnEvent: func(e queue.Event) {
			if e.Kind == queue.EventFinished {
				mu.Lock()
				took[e.Job.Tenant+" "+e.Outcome] = append(took[e.Job.Tenant+" "+e.Outcome], e.Duration)
				mu.Unlock()
			}
		},
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			time.Sleep(100 * time.Millisecond)
			switch {
			case j.Tenant == "flaky" && j.Attempt == 1:
				return queue.Result{}, errors.New("503")
			case j.Tenant == "bad":
				return queue.Result{}, queue.Permanent(errors.New("400"))
			case j.Tenant == "limited" && !limited.Swap(true):
				return queue.Result{}, queue.ErrRateLimited
			}
			return queue.Result{}, nil
		},
	}))
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"ok succeeded", "flaky retrying", "flaky succeeded", "bad discarded",
		"limited released", "limited succeeded"} {
		require.Len(t, took[k], 1, "%s: %v", k, took)
		require.GreaterOrEqual(t, took[k][0], 100*time.Millisecond, k)
	}
}

// A 429 without Retry-After pauses the fleet for the throttle's default
// pause, and the event and the job's hand-back say so.
func TestRateLimitedEventSaysTheDefaultPause(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "a", 1)
	th, err := throttle.New(throttle.Config{Store: &throttle.MemoryStore{}, Key: "k", DefaultPause: 5 * time.Second})
	require.NoError(t, err)
	waits := make(chan time.Duration, 1)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Throttle: th, Concurrency: 1,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 20 * time.Millisecond,
		OnEvent: func(e queue.Event) {
			if e.Kind == queue.EventRateLimited {
				select {
				case waits <- e.Wait:
				default:
				}
			}
		},
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			return queue.Result{Response: &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}}, nil
		},
	})
	w := <-waits
	cancel()
	require.NoError(t, wait())
	require.InDelta(t, 5*time.Second, w, float64(time.Second), "the event's wait")
	require.InDelta(t, 5, b.scalar(t, `SELECT round(extract(epoch FROM run_after - now()))::bigint FROM batchq.jobs`), 1,
		"the job waits out the pause")
}

// deadlineStore records, for every read and write of the throttle's state,
// whether its context had a deadline.
type deadlineStore struct {
	throttle.MemoryStore
	mu      sync.Mutex
	without int
	calls   int
}

func (s *deadlineStore) note(ctx context.Context) {
	_, ok := ctx.Deadline()
	s.mu.Lock()
	s.calls++
	if !ok {
		s.without++
	}
	s.mu.Unlock()
}

func (s *deadlineStore) Update(ctx context.Context, key string, fn func(*throttle.State) error) error {
	s.note(ctx)
	return s.MemoryStore.Update(ctx, key, fn)
}

func (s *deadlineStore) Load(ctx context.Context, key string) (throttle.State, error) {
	s.note(ctx)
	return s.MemoryStore.Load(ctx, key)
}

// Every call a pool makes to the shared quota is bounded, the admission of
// each job included: a quota connection that went away without a word must
// cost a call, not hold every handler of the pool and the leases of its
// jobs for as long as TCP retries.
func TestEveryThrottleCallOfAPoolIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for range 5 {
		b.enqueue(t, "a", 10)
	}
	store := &deadlineStore{}
	th, err := throttle.New(throttle.Config{Store: store, Key: "k"})
	require.NoError(t, err)
	require.NoError(t, b.client.Work(b.ctx, queue.WorkerConfig{
		Queue: b.queue, Throttle: th, Concurrency: 2, Drain: true,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 20 * time.Millisecond,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			h := http.Header{}
			h.Set("x-ratelimit-limit-tokens", "1000")
			h.Set("x-ratelimit-remaining-tokens", "900")
			h.Set("x-ratelimit-reset-tokens", "1s")
			return queue.Result{Response: &http.Response{StatusCode: http.StatusOK, Header: h}}, nil
		},
	}))
	store.mu.Lock()
	defer store.mu.Unlock()
	require.Greater(t, store.calls, 10, "headroom, admissions and responses")
	require.Zero(t, store.without, "calls without a deadline, of %d", store.calls)
}

// A job claimed on a probe's admission (its tenant's quota used up, no reset
// known) and handed back before it started takes the admission back: its
// call was not made, so the next probe need not wait for its answer. Here
// it waits for the only handler until its deadline passes, or until the
// pool shuts down.
func TestProbeNotSentIsTakenBack(t *testing.T) {
	t.Parallel()
	for _, variant := range []string{"deadline", "shutdown"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{})
			// Handlers known to be quick: the pool claims ahead from its first claim.
			queue.SetAssumedRun(b.client, time.Millisecond)
			store := &throttle.MemoryStore{}
			th, err := throttle.New(throttle.Config{Store: store, Key: "k", ProbeInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			busy := b.enqueue(t, "t", 10)
			ctx, cancel := context.WithCancel(b.ctx)
			defer cancel()
			started, release := make(chan struct{}), make(chan struct{})
			var others atomic.Int32
			wait := b.work(ctx, queue.WorkerConfig{
				Queue: b.queue, Throttle: th, Concurrency: 1, BatchSize: 1,
				PollInterval: 20 * time.Millisecond, MaintainInterval: -1,
				Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
					if j.ID == busy {
						close(started)
						<-release
					} else {
						others.Add(1)
					}
					return queue.Result{}, nil
				},
			})
			<-started
			now := time.Now().Truncate(time.Microsecond)
			require.NoError(t, store.Update(b.ctx, "k", func(s *throttle.State) error {
				s.Tokens = throttle.Quota{Observed: true, Limit: 1000, HasLimit: true, Remaining: 0, SentAt: now, ReceivedAt: now}
				s.Admitted = nil
				return nil
			}))
			deadline := time.Now().Add(1500 * time.Millisecond)
			res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 10, Deadline: deadline})
			require.NoError(t, err)
			b.waitState(t, res.ID, "running", "claimed on a probe")
			if variant == "deadline" {
				time.Sleep(time.Until(deadline) + 100*time.Millisecond)
				close(release)
				b.waitState(t, res.ID, "retrying")
				cancel()
			} else {
				cancel()
				time.Sleep(100 * time.Millisecond)
				close(release)
			}
			require.NoError(t, wait())
			require.Zero(t, others.Load(), "the probe's job never started")
			require.Equal(t, int64(0), b.scalar(t, `SELECT attempt FROM batchq.jobs WHERE id = $1`, res.ID))
			st, err := store.Load(b.ctx, "k")
			require.NoError(t, err)
			require.True(t, st.ProbeSent.IsZero(), "a probe never sent is counted as out: %v", st.ProbeSent)
			require.Empty(t, st.Admitted)
		})
	}
}

// EventClaimed (the claimed-jobs metric) counts jobs whose handler started:
// one claimed ahead and handed back when its deadline passed while it
// waited for a handler has none.
func TestJobHandedBackUnstartedIsNotReportedClaimed(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	// Handlers known to be quick: the pool claims ahead from its first claim.
	queue.SetAssumedRun(b.client, time.Millisecond)
	busy := b.enqueue(t, "t", 1)
	var mu sync.Mutex
	var claimed []int64
	started, release := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, BatchSize: 1,
		PollInterval: 20 * time.Millisecond, MaintainInterval: -1,
		OnEvent: func(e queue.Event) {
			if e.Kind == queue.EventClaimed {
				mu.Lock()
				claimed = append(claimed, e.Job.ID)
				mu.Unlock()
			}
		},
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			close(started)
			<-release
			return queue.Result{}, nil
		},
	})
	<-started
	deadline := time.Now().Add(500 * time.Millisecond)
	late, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, Deadline: deadline})
	require.NoError(t, err)
	b.waitState(t, late.ID, "running", "claimed ahead")
	time.Sleep(time.Until(deadline) + 100*time.Millisecond)
	close(release)
	b.waitState(t, late.ID, "retrying", "handed back")
	cancel()
	require.NoError(t, wait())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{busy}, claimed)
}

// slowLoadStore answers Load with the state as it was a while before, and
// saves each Update a moment after it is asked: a headroom read during
// which handlers are admitted.
type slowLoadStore struct{ throttle.MemoryStore }

func (s *slowLoadStore) Load(ctx context.Context, key string) (throttle.State, error) {
	st, err := s.MemoryStore.Load(ctx, key)
	time.Sleep(100 * time.Millisecond)
	return st, err
}

func (s *slowLoadStore) Update(ctx context.Context, key string, fn func(*throttle.State) error) error {
	time.Sleep(10 * time.Millisecond)
	return s.MemoryStore.Update(ctx, key, fn)
}

// The claim counts the jobs its handlers have not yet had admitted before
// it reads the headroom: a handler admitted while the headroom is read must
// not look, in the one, like room not yet taken and, in the other, like a
// job no longer waiting for it.
func TestHeadroomReadWhileHandlersAreAdmittedClaimsNoMore(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	th, err := throttle.New(throttle.Config{Store: &slowLoadStore{}, Key: "k"})
	require.NoError(t, err)
	now := time.Now().Truncate(time.Microsecond)
	require.NoError(t, th.ObserveSnapshot(b.ctx, now, now, quotaheaders.Tokens,
		quotaheaders.Snapshot{Remaining: 10, Limit: 1000, HasLimit: true, Reset: time.Minute, HasReset: true}))
	b.enqueueN(t, "t", 10, 5) // room for two

	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	hold := make(chan struct{})
	var claims atomic.Int64
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 8, BatchSize: 8, Throttle: th,
		PollInterval: 20 * time.Millisecond, MaintainInterval: -1,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			claims.Add(1)
			<-hold
			return queue.Result{}, nil
		},
	})
	time.Sleep(time.Second)
	released := b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`) // a hand-back's refund
	close(hold)
	cancel()
	require.NoError(t, wait())
	require.Equal(t, int64(2), claims.Load())
	require.Zero(t, released, "jobs claimed past the headroom were handed back")
}

// workUntilItStops runs a pool of no-op handlers on b's queue with a client
// that gives up on refused claims after 200 ms, calls meanwhile once it
// runs, and returns what Work returned; it fails the test if the pool is
// still going after 10 s.
func workUntilItStops(t *testing.T, b *testBundle, meanwhile func()) error {
	t.Helper()
	client, err := queue.NewClient(b.pool, queue.Config{})
	require.NoError(t, err)
	queue.SetRefusedFor(client, 200*time.Millisecond)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- client.Work(ctx, queue.WorkerConfig{Queue: b.queue, PollInterval: 10 * time.Millisecond,
			MaintainInterval: -1, ShutdownTimeout: 200 * time.Millisecond,
			Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) { return queue.Result{}, nil }})
	}()
	meanwhile()
	select {
	case err = <-done:
		return err
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatal("the pool kept claiming")
		return nil
	}
}

// A pool whose role may not claim (it connects as a role the grants did not
// make a worker, or whose rights were taken back) stops after a bounded time
// with ErrNotPermitted, which keeps the database's error, instead of
// logging the refusal for ever.
func TestPoolStopsWhenItsRoleMayNotClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "a", 1)
	b.exec(t, `REVOKE EXECUTE ON FUNCTION batchq.claim(text, integer, text, bigint) FROM CURRENT_USER`)
	err := workUntilItStops(t, b, func() {})
	require.ErrorIs(t, err, queue.ErrNotPermitted)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, "the database's refusal is kept")
	require.Equal(t, "42501", pe.Code)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`))
}

// A pool whose queue is deleted while it runs stops after a bounded time
// with ErrUnknownQueue, instead of claiming nothing for ever.
func TestPoolStopsWhenItsQueueIsDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	err := workUntilItStops(t, b, func() {
		time.Sleep(50 * time.Millisecond)
		_, err := b.client.DeleteQueue(b.ctx, b.queue)
		require.NoError(t, err)
	})
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
}

// A pool whose schema is gone (dropped, or the database restored without
// it) stops claiming after a bounded time with ErrSchemaGone, even under
// Drain, instead of retrying for ever.
func TestPoolStopsWhenTheSchemaIsGone(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "a", 1)
	client, err := queue.NewClient(b.pool, queue.Config{})
	require.NoError(t, err)
	queue.SetRefusedFor(client, 200*time.Millisecond)
	release, done := workOneJobHeld(b.ctx, b, client, true)
	b.exec(t, `DROP SCHEMA batchq CASCADE`)
	release()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the pool kept going without its schema")
	}
	require.ErrorIs(t, err, queue.ErrSchemaGone)
	require.ErrorIs(t, err, queue.ErrUnrecorded, "the run that finished could not be recorded")
}

// A shutdown whose last finish write hangs (here on a row another
// transaction holds; a dead connection does the same) gives the write up
// once the shutdown has run out of time, and Work returns, saying one run
// went unrecorded: its job is left to its lease's expiry and the rescue.
// The write used to run on to its own 30 s timeout first.
func TestShutdownCutsAFinishWriteThatHangs(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id := b.enqueue(t, "a", 1)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	finish, done := workOneJobHeld(ctx, b, b.client, false)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	finish()
	waitForLockWait(t, b, "%complete%")
	cancel()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Work waited on the finish write it had no time left for")
	}
	// (The statement given up may still run on the server, and complete
	// the job once the row is free: nothing to assert about the row.)
	require.ErrorIs(t, err, queue.ErrUnrecorded)
}

// workOneJobHeld runs a pool on b's queue with c (a 200 ms
// shutdown timeout, maintenance off), and returns once its handler holds
// the queue's one job: finish lets it succeed, and done gives what Work
// returned.
func workOneJobHeld(ctx context.Context, b *testBundle, c *queue.Client, drain bool) (finish func(), done <-chan error) {
	ran, release := make(chan struct{}), make(chan struct{})
	out := make(chan error, 1)
	go func() {
		out <- c.Work(ctx, queue.WorkerConfig{Queue: b.queue, Drain: drain, PollInterval: 10 * time.Millisecond,
			MaintainInterval: -1, ShutdownTimeout: 200 * time.Millisecond,
			Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
				close(ran)
				<-release
				return queue.Result{}, nil
			}})
	}()
	<-ran
	return sync.OnceFunc(func() { close(release) }), out
}
